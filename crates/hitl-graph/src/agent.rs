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
    /// Whether a call may run on as a task for a client that follows tasks.
    pub tasks: TaskSupport,
    /// Whether its steps keep something per caller (the gateway: an upstream session
    /// each): its runs then carry the caller's key in their metadata (`caller`), made
    /// only for such agents.
    pub per_caller: bool,
}

/// Whether calls of an agent run as tasks (the MCP Tasks extension) for clients that
/// declare it: a task outlives its request, so a long run or a pause is followed by
/// polling instead of a held connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskSupport {
    /// Never a task: the call answers in its request (a quick tool, or one whose
    /// rounds must be answered by retrying the call).
    Forbidden,
    /// A task when the call pauses or runs past a short wait; a quick result is
    /// answered at once.
    #[default]
    Optional,
    /// Always a task; a client that does not follow tasks cannot call it.
    Required,
}

impl Agent {
    /// An agent named `name` running `graph`.
    pub fn new(name: impl Into<String>, description: impl Into<String>, input_schema: Value, graph: Graph) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            input_schema,
            graph,
            tasks: TaskSupport::default(),
            per_caller: false,
        }
    }

    /// The agent with the caller's key in its runs' metadata (`caller`).
    #[must_use]
    pub fn per_caller(mut self) -> Self {
        self.per_caller = true;
        self
    }

    /// The agent with calls run as tasks as `tasks` says.
    #[must_use]
    pub fn with_tasks(mut self, tasks: TaskSupport) -> Self {
        self.tasks = tasks;
        self
    }
}
