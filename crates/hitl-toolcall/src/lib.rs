//! A tool-calling agent with human review of its tool calls, reusable by any crate of
//! agents: [`tool_agent`] (a model proposes calls; calls under review pause for one
//! review question each, batched or per call; approve, edit, respond or reject) and
//! [`ChatModel`], the model that asks an LLM API (`hitl-model`) for the next turn. The
//! declared agents of `hitl.toml` (`hitl-declared`) and the email assistant of the
//! examples are built on it.
//!
//! ```
//! use hitl_toolcall::tool_agent::{ToolReview, python_repr};
//! use serde_json::json;
//!
//! // The decisions a reviewer may take on a call, as LangChain's middleware names them.
//! assert_eq!(ToolReview::all_decisions().decisions.len(), 4);
//! // Arguments are shown to reviewers as Python literals, as LangChain shows them.
//! assert_eq!(python_repr(&json!({"table": "tmp", "force": true})), "{'table': 'tmp', 'force': True}");
//! ```

mod chat_model;
pub mod tool_agent;

pub use chat_model::ChatModel;

use hitl_graph::{Agent, StateGraph};
use serde_json::Value;

/// `graph` compiled into an agent; a graph of this crate that does not compile is a bug.
fn agent(name: &str, description: &str, input_schema: Value, graph: StateGraph) -> Agent {
    let graph = graph.compile().unwrap_or_else(|e| panic!("tool-calling agent {name} does not compile: {e}"));
    Agent::new(name, description, input_schema, graph)
}
