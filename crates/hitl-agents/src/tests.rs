//! Each example driven through its pauses with the runtime alone.

use hitl_graph::{Outcome, ResumeValues};
use serde_json::{Value, json};

use super::*;

async fn drive(agent: &Agent, answers: &[Value], context: Value) -> Value {
    let mut outcome = agent.graph.invoke(json!({}), Value::Null).await.unwrap();
    let mut answers = answers.iter();
    loop {
        match outcome {
            Outcome::Done(output) => return output,
            Outcome::Paused { interrupts, checkpoint } => {
                let values: ResumeValues =
                    interrupts.iter().map(|i| (i.id.clone(), answers.next().expect("an answer").clone())).collect();
                outcome = agent.graph.resume(checkpoint, values, context.clone()).await.unwrap();
            }
            Outcome::Breakpoint { .. } => panic!("no breakpoint expected"),
        }
    }
}

#[tokio::test]
async fn choose_region_returns_the_region() {
    assert_eq!(drive(&choose_region(), &[json!("eu-west-1")], Value::Null).await, json!({"region": "eu-west-1"}));
}

#[tokio::test]
async fn survey_asks_both_in_one_pause() {
    let agent = survey();
    let Outcome::Paused { interrupts, .. } = agent.graph.invoke(json!({}), Value::Null).await.unwrap() else {
        panic!("expected a pause")
    };
    assert_eq!(interrupts.len(), 2);
    let out = drive(&agent, &[json!("blue"), json!("grail")], Value::Null).await;
    assert_eq!(out, json!({"color": "blue", "quest": "grail"}));
}

#[tokio::test]
async fn twin_questions_ask_the_same_text() {
    let agent = twin_questions();
    let Outcome::Paused { interrupts, .. } = agent.graph.invoke(json!({}), Value::Null).await.unwrap() else {
        panic!("expected a pause")
    };
    assert_eq!(interrupts[0].value, interrupts[1].value);
}

#[tokio::test]
async fn echo_context_returns_the_resuming_context() {
    let out = drive(&echo_context(), &[json!("hi")], json!({"k": 1})).await;
    assert_eq!(out, json!({"answer": "hi", "context": {"k": 1}}));
}

#[test]
fn names_are_unique() {
    let names: std::collections::BTreeSet<String> = examples().into_iter().map(|a| a.name).collect();
    assert_eq!(names.len(), examples().len());
}
