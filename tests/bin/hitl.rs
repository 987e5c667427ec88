//! The `hitl` program, built for the end-to-end tests, with two agents of their own
//! that no example has: one that keeps asking, and one whose side effect is counted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hitl_graph::{Agent, END, START, StateGraph};
use serde_json::json;

/// How many times `test_send_once`'s send step ran in this process.
static SENT: AtomicUsize = AtomicUsize::new(0);

fn main() -> anyhow::Result<()> {
    hitl_server::main_with(vec![nag(), send_once()])
}

fn no_arguments() -> serde_json::Value {
    json!({"type": "object", "properties": {}, "additionalProperties": false})
}

/// Asks "Are you sure?" again, in the same step, whatever the answer: answers sent with
/// a first call would resolve its rounds for ever without a bound.
fn nag() -> Agent {
    let graph = StateGraph::new()
        .add_step("nag", |_, ctx| async move {
            loop {
                ctx.interrupt(json!("Are you sure?"))?;
            }
        })
        .add_edge(START, "nag")
        .compile()
        .expect("compiles");
    Agent::new("test_nag", "Keeps asking.", no_arguments(), graph)
}

/// Asks "Send it?", then sends (counted; 500 ms, so a client can go away meanwhile),
/// then reports how many sends this process made.
fn send_once() -> Agent {
    let graph = StateGraph::new()
        .add_step("ask", |_, ctx| async move { Ok(json!({ "ok": ctx.interrupt(json!("Send it?"))? })) })
        .add_step("send", |_, _| async move {
            SENT.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(500)).await;
            Ok(json!({}))
        })
        .add_step("report", |_, _| async move { Ok(json!({ "sends": SENT.load(Ordering::SeqCst) })) })
        .add_edge(START, "ask")
        .add_edge("ask", "send")
        .add_edge("send", "report")
        .add_edge("report", END)
        .output_keys(["sends"])
        .compile()
        .expect("compiles");
    Agent::new("test_send_once", "Sends once.", no_arguments(), graph)
}
