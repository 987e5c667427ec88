//! `cargo bench -p hitl-graph`: resuming a one-step graph from a checkpoint.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use futures_util::FutureExt as _;
use hitl_graph::{END, Outcome, ResumeValues, START, StateGraph};
use serde_json::{Value, json};

fn resume(c: &mut Criterion) {
    let graph = StateGraph::new()
        .add_step("choose_region", |_, ctx| async move {
            Ok(json!({ "region": ctx.interrupt(json!("Which region should the service deploy to?"))? }))
        })
        .add_edge(START, "choose_region")
        .add_edge("choose_region", END)
        .compile()
        .unwrap();
    let Some(Ok(Outcome::Paused { interrupts, checkpoint })) = graph.invoke(json!({}), Value::Null).now_or_never()
    else {
        panic!("expected a pause")
    };
    let values: ResumeValues = [(interrupts[0].id.clone(), json!("eu-west-1"))].into_iter().collect();
    c.bench_function("resume one-step graph", |b| {
        b.iter(|| {
            let outcome = graph.resume(black_box(checkpoint.clone()), black_box(values.clone()), Value::Null);
            outcome.now_or_never().unwrap().unwrap()
        })
    });
    let text = serde_json::to_string(&checkpoint).unwrap();
    c.bench_function("resume one-step graph, checkpoint from JSON", |b| {
        b.iter(|| {
            let checkpoint = serde_json::from_str(black_box(&text)).unwrap();
            graph.resume(checkpoint, values.clone(), Value::Null).now_or_never().unwrap().unwrap()
        })
    });
}

criterion_group!(benches, resume);
criterion_main!(benches);
