//! Calls that run on as tasks, on the in-memory store and the system clock (their runs
//! sleep for real, briefly).

use std::sync::Arc;
use std::time::Duration;

use hitl_graph::{END, START, StateGraph};
use hitl_protocol::{ClientCapabilities, ErrorCode};
use serde_json::{Value, json};

use crate::*;

fn engine() -> Engine {
    let store = Arc::new(MemoryStore::default());
    Engine::new(store, Arc::new(SystemClock), Secret::generate(), Lifetimes::default())
}

/// An agent whose one step sleeps `ms`, then asks "Proceed?" when `asks`, then ends.
fn sleeper(ms: u64, asks: bool) -> Agent {
    let graph = StateGraph::new()
        .add_step("work", move |_, ctx| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let answer = if asks { ctx.interrupt(json!("Proceed?"))? } else { Value::Null };
            Ok(json!({ "done": true, "answer": answer }))
        })
        .add_edge(START, "work")
        .add_edge("work", END);
    Agent::new("sleeper", "", json!({"type": "object"}), graph.compile().unwrap())
}

fn crasher() -> Agent {
    let graph = StateGraph::new()
        .add_step("crash", |_, _| async move {
            if std::hint::black_box(true) {
                panic!("boom");
            }
            Ok(Value::Null)
        })
        .add_edge(START, "crash")
        .add_edge("crash", END);
    Agent::new("crasher", "", json!({"type": "object"}), graph.compile().unwrap())
}

fn call(principal: &str) -> ToolCall {
    let capabilities: ClientCapabilities = serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
    ToolCall { capabilities: capabilities.into(), principal: Some(principal.into()), ..ToolCall::default() }
}

async fn started(engine: &Engine, agent: &Agent, wait: Duration) -> TaskStart {
    engine.tasks().start(agent, call("alice"), wait).await.unwrap()
}

fn task_id(start: TaskStart) -> String {
    match start {
        TaskStart::Task(id) => id,
        other => panic!("expected a task, got {other:?}"),
    }
}

/// Polls task `id` until it is no longer `working`.
async fn settled(engine: &Engine, id: &str) -> TaskView {
    for _ in 0..500 {
        let view = engine.tasks().get(id, Some("alice")).await.unwrap().expect("alice's task");
        if view.status != TaskStatus::Working {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("task {id} still works after 5 s");
}

#[tokio::test]
async fn a_quick_call_is_answered_at_once_and_a_quick_pause_is_a_task_with_its_round() {
    let engine = engine();
    let TaskStart::Complete(result) = started(&engine, &sleeper(0, false), Duration::from_secs(5)).await else {
        panic!("a quick result is answered at once");
    };
    assert_eq!(result.structured_content.unwrap()["done"], true);

    let id = task_id(started(&engine, &sleeper(0, true), Duration::from_secs(5)).await);
    let view = engine.tasks().get(&id, Some("alice")).await.unwrap().unwrap();
    assert_eq!(view.status, TaskStatus::InputRequired, "stored with its round before it is answered");
}

#[tokio::test]
async fn a_slow_call_runs_on_as_a_working_task_then_pauses_and_completes() {
    let engine = engine();
    let agent = sleeper(150, true);
    let id = task_id(started(&engine, &agent, Duration::from_millis(1)).await);
    let working = engine.tasks().get(&id, Some("alice")).await.unwrap().expect("stored before it is answered");
    assert_eq!(working.status, TaskStatus::Working);
    assert_eq!(engine.tasks().get(&id, Some("bob")).await.unwrap(), None, "another principal sees no task");

    let paused = settled(&engine, &id).await;
    assert_eq!(paused.status, TaskStatus::InputRequired, "{paused:?}");
    let key = paused.input_requests.unwrap().keys().next().unwrap().clone();
    assert!(key.starts_with("1:"), "{key}");
    let answer = json!({"action": "accept", "content": {"response": "yes"}});
    let responses = serde_json::from_value(json!({ key: answer })).unwrap();
    engine.tasks().update(&agent, &id, Some("alice"), &responses).await.unwrap().unwrap();
    let done = settled(&engine, &id).await;
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(done.result.unwrap().structured_content.unwrap()["answer"], "yes");
    assert!(engine.core.running.is_empty(), "the run is over");
}

#[tokio::test]
async fn a_panic_fails_the_task_with_a_json_rpc_error() {
    let engine = engine();
    let id = task_id(started(&engine, &crasher(), Duration::ZERO).await);
    let failed = settled(&engine, &id).await;
    assert_eq!(failed.status, TaskStatus::Failed);
    let error = failed.error.unwrap();
    assert_eq!(error.code, ErrorCode::INTERNAL_ERROR);
    assert!(error.message.contains("panicked: boom"), "{}", error.message);
    assert!(failed.result.is_none());
}

#[tokio::test]
async fn cancel_stops_a_working_run_and_the_task_stays_cancelled() {
    let engine = engine();
    let id = task_id(started(&engine, &sleeper(60_000, false), Duration::ZERO).await);
    engine.tasks().cancel(&id, Some("alice")).await.unwrap().unwrap();
    assert_eq!(engine.tasks().get(&id, Some("alice")).await.unwrap().unwrap().status, TaskStatus::Cancelled);
    for _ in 0..500 {
        if engine.core.running.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(engine.core.running.is_empty(), "the run was stopped");
    engine.tasks().cancel(&id, Some("alice")).await.unwrap().expect("cancelling again is acknowledged");
    assert_eq!(engine.tasks().get(&id, Some("alice")).await.unwrap().unwrap().status, TaskStatus::Cancelled);
}

#[tokio::test]
async fn a_working_task_whose_claim_lapsed_shows_failed() {
    let engine = engine();
    let id = uuid::Uuid::now_v7().to_string();
    let now = engine.now_ms();
    let thread = Thread {
        format: THREAD_FORMAT,
        id: id.as_str().into(),
        version: 1,
        tool: "sleeper".into(),
        args_digest: "d".into(),
        principal: Some("alice".into()),
        owner: None,
        state: ThreadState::Working { claim: Some(Claim { round: 0, until_ms: now - 1 }) },
        last: None,
        task: Some(Box::new(TaskState::new(now - 60_000, ClientCapabilities::default()))),
        expires_at_ms: now + 60_000,
    };
    engine.store().save(thread, None).await.unwrap();
    let view = engine.tasks().get(&id, Some("alice")).await.unwrap().unwrap();
    assert_eq!(view.status, TaskStatus::Failed);
    assert!(view.error.unwrap().message.contains("stopped before it finished"));
}

#[tokio::test]
async fn a_task_counts_as_a_paused_call() {
    let limits = Limits { paused: PausedLimits { per_owner: 1, total: 10 }, ..Limits::default() };
    let engine = engine().with_limits(limits);
    let agent = sleeper(60_000, false);
    let first = task_id(started(&engine, &agent, Duration::ZERO).await);
    let TaskStart::Refused(refused) = engine.tasks().start(&agent, call("alice"), Duration::ZERO).await.unwrap() else {
        panic!("refused")
    };
    assert!(refused.message.contains("too many paused calls from this caller"), "{}", refused.message);
    engine.tasks().cancel(&first, Some("alice")).await.unwrap().unwrap();
}
