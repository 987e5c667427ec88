//! Built-in agents: the example agents of `docs/examples.md`, served by `hitl serve`
//! unless `--no-examples` is given. Their names, questions and outputs are a contract
//! that the end-to-end tests rely on.
//!
//! ```
//! let agents = hitl_agents::examples();
//! assert_eq!(agents[0].name, "choose_region");
//! ```

use hitl_graph::{END, START, StateGraph};
use hitl_interrupt::Agent;
use serde_json::{Value, json};

/// Every example agent, in the order `tools/list` shows them.
pub fn examples() -> Vec<Agent> {
    vec![choose_region(), survey(), twin_questions(), echo_context()]
}

fn no_arguments() -> Value {
    json!({"type": "object", "properties": {}})
}

fn agent(name: &str, description: &str, input_schema: Value, graph: StateGraph) -> Agent {
    Agent {
        name: name.into(),
        description: description.into(),
        input_schema,
        graph: graph.compile().unwrap_or_else(|e| panic!("example agent {name} does not compile: {e}")),
    }
}

/// A one-step graph whose step asks `question` as text and stores the answer in `key`.
fn ask_text(graph: StateGraph, step: &str, question: &'static str, key: &'static str) -> StateGraph {
    graph
        .add_step(step, move |_, ctx| async move { Ok(json!({ key: ctx.interrupt(json!(question))? })) })
        .add_edge(START, step)
        .add_edge(step, END)
}

/// `choose_region`: a text question; output `{"region": <answer>}`.
pub fn choose_region() -> Agent {
    let graph = ask_text(StateGraph::new(), "choose_region", "Which region should the service deploy to?", "region");
    agent("choose_region", "Asks which region the service should deploy to.", no_arguments(), graph)
}

/// `survey`: two parallel steps, asked in one round.
pub fn survey() -> Agent {
    let graph = ask_text(StateGraph::new(), "ask_color", "What is your favorite color?", "color");
    let graph = ask_text(graph, "ask_quest", "What is your quest?", "quest");
    agent("survey", "Asks two questions at once.", no_arguments(), graph)
}

/// `twin_questions`: two parallel steps that ask the same text; one answer resumes both.
pub fn twin_questions() -> Agent {
    let graph = ask_text(StateGraph::new(), "primary", "Which region should the service deploy to?", "primary");
    let graph = ask_text(graph, "secondary", "Which region should the service deploy to?", "secondary");
    agent("twin_questions", "Asks the same question from two steps.", no_arguments(), graph)
}

/// `echo_context`: asks `Say something.` and returns the answer with the runtime
/// context of the request that resumed it.
pub fn echo_context() -> Agent {
    let graph = StateGraph::new()
        .add_step("echo", |_, ctx| async move {
            let answer = ctx.interrupt(json!("Say something."))?;
            Ok(json!({ "answer": answer, "context": ctx.runtime_context().clone() }))
        })
        .add_edge(START, "echo")
        .add_edge("echo", END);
    agent("echo_context", "Echoes an answer and the runtime context.", no_arguments(), graph)
}

#[cfg(test)]
mod tests;
