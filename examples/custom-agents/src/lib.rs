//! An example crate of agents: it depends on `hitl-graph` (and `serde_json`) only, and
//! exports an [`Agent`] any hitl server can serve.
//!
//! ```
//! let agent = custom_agents::order_coffee();
//! assert_eq!(agent.name, "order_coffee");
//! ```

use hitl_graph::{Agent, END, START, StateGraph};
use serde_json::json;

/// `order_coffee`: asks which size, then confirms the order of the drink it was given.
pub fn order_coffee() -> Agent {
    let graph = StateGraph::new()
        .add_step("size", |state, ctx| async move {
            let drink = state["drink"].as_str().unwrap_or("coffee").to_owned();
            let size = ctx.interrupt(json!(format!("Which size of {drink}: small, medium or large?")))?;
            Ok(json!({ "order": format!("one {} {drink}", size.as_str().unwrap_or("medium")) }))
        })
        .add_edge(START, "size")
        .add_edge("size", END)
        .output_keys(["order"]);
    let input = json!({
        "type": "object",
        "properties": {"drink": {"type": "string"}},
        "required": ["drink"],
        "additionalProperties": false
    });
    Agent::new("order_coffee", "Orders a drink after asking its size.", input, graph.compile().expect("compiles"))
}
