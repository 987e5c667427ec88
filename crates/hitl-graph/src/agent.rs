//! An agent: a graph with the name, description and input schema it is served under.

use serde_json::Value;

use crate::Graph;

/// A graph served as a tool (or a prompt): what a crate that defines agents exports.
/// It needs this crate only; the server turns it into an MCP tool.
///
/// ```
/// use hitl_graph::{Agent, START, StateGraph};
/// use serde_json::json;
///
/// let graph = StateGraph::new()
///     .add_step("ask", |_, ctx| async move { Ok(json!({ "answer": ctx.interrupt(json!("Proceed?"))? })) })
///     .add_edge(START, "ask")
///     .compile()
///     .unwrap();
/// let agent = Agent::new("proceed", "Asks before it proceeds.", json!({"type": "object"}), graph);
/// assert_eq!(agent.name, "proceed");
/// ```
#[derive(Debug, Clone)]
pub struct Agent {
    /// The tool name.
    pub name: String,
    /// What the tool does, for `tools/list`.
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
    /// The graph that runs.
    pub graph: Graph,
}

impl Agent {
    /// An agent named `name` running `graph`.
    pub fn new(name: impl Into<String>, description: impl Into<String>, input_schema: Value, graph: Graph) -> Self {
        Self { name: name.into(), description: description.into(), input_schema, graph }
    }
}
