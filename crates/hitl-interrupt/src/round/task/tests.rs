//! Table tests of a task's transitions, on threads written by hand: no runtime, no
//! store, no clock.

use hitl_graph::{Checkpoint, Interrupt};
use hitl_protocol::{CallToolResult, ClientCapabilities, ErrorObject, InputResponses};
use serde_json::{Value, json};

use super::{TaskEnd, TaskNext, cancelled, task_answers, task_ended, task_key, working};
use crate::round::{Names, NewThread};
use crate::{Claim, Lifetimes, Round, TaskState, Thread, ThreadState, questions};

const NOW: u64 = 1_000_000;
const HOUR: u64 = 3_600_000;

fn checkpoint() -> Checkpoint {
    Checkpoint::before(json!({}), &["ask"])
}

/// Round `n` asking two text questions.
fn round(n: u32) -> Round {
    let ask = |i: usize, q: &str| Interrupt {
        id: format!("{n}:ask:{i}"),
        step: "ask".into(),
        value: json!(q),
        response_schema: None,
    };
    Round {
        n,
        nonce: format!("nonce-{n}"),
        questions: questions::build(&[ask(0, "Which region?"), ask(1, "How many?")]).unwrap(),
        asked_at_ms: 0,
        proof: String::new(),
    }
}

fn elicits() -> ClientCapabilities {
    serde_json::from_value(json!({"elicitation": {}})).unwrap()
}

/// A task of alice's paused at round 1, version 3, no answer kept yet.
fn task() -> Thread {
    Thread {
        format: crate::THREAD_FORMAT,
        id: "01a22f1a-68fb-738c-b3ca-9f64075178aa".into(),
        version: 3,
        tool: "choose_region".into(),
        args_digest: "digest".into(),
        principal: Some("alice".into()),
        owner: Some("principal:alice".into()),
        state: ThreadState::paused(checkpoint(), round(1)),
        last: None,
        task: Some(Box::new(TaskState::new(0, elicits()))),
        expires_at_ms: NOW + 24 * HOUR,
    }
}

/// `thread` as a store gives it back: its record, read.
fn stored(thread: &Thread) -> Thread {
    serde_json::from_str(&serde_json::to_string(thread).unwrap()).unwrap()
}

fn key(i: usize) -> String {
    round(1).questions[i].key.clone()
}

fn accept(text: &str) -> Value {
    json!({"action": "accept", "content": {"response": text}})
}

/// Answers by task key.
fn sent(answers: &[(usize, &str)]) -> InputResponses {
    answers.iter().map(|(i, text)| (task_key(1, &key(*i)), accept(text))).collect()
}

fn name(next: &TaskNext) -> String {
    match next {
        TaskNext::Idle => "idle".into(),
        TaskNext::TooLarge(_) => "too large".into(),
        TaskNext::Answer => "answer".into(),
        TaskNext::Keep { thread, fresh, ready } => {
            let kept = thread.task.as_ref().unwrap().partial.len();
            format!("keep v{} {} new, {kept} kept, ready={ready}", thread.version, fresh.len())
        }
    }
}

#[test]
fn every_way_answers_reach_a_task() {
    let with = |f: fn(&mut Thread)| {
        let mut t = task();
        f(&mut t);
        t
    };
    let first_kept = |t: &mut Thread| {
        t.task.as_mut().unwrap().partial.insert(key(0), accept("eu"));
    };
    let rows: Vec<(&str, Thread, InputResponses, usize, &str)> = vec![
        ("one of two answers", task(), sent(&[(0, "eu")]), usize::MAX, "keep v4 1 new, 1 kept, ready=false"),
        ("both answers", task(), sent(&[(0, "eu"), (1, "3")]), usize::MAX, "keep v4 2 new, 2 kept, ready=true"),
        (
            "the last answer",
            with(first_kept),
            sent(&[(0, "us"), (1, "3")]),
            usize::MAX,
            "keep v4 1 new, 2 kept, ready=true",
        ),
        ("an answer kept already", with(first_kept), sent(&[(0, "us")]), usize::MAX, "idle"),
        (
            "an answer under a question's own key",
            task(),
            [(key(0), accept("eu"))].into_iter().collect(),
            usize::MAX,
            "idle",
        ),
        (
            "an answer to another round",
            task(),
            [(task_key(2, &key(0)), accept("eu"))].into_iter().collect(),
            usize::MAX,
            "idle",
        ),
        ("answers too large to keep", task(), sent(&[(0, "eu")]), 300, "too large"),
        (
            "nothing new, every answer in",
            with(|t| {
                let partial = &mut t.task.as_mut().unwrap().partial;
                partial.insert(key(0), accept("eu"));
                partial.insert(key(1), accept("3"));
            }),
            InputResponses::new(),
            usize::MAX,
            "answer",
        ),
        (
            "nothing new, every answer in, a request running the round",
            with(|t| {
                let partial = &mut t.task.as_mut().unwrap().partial;
                partial.insert(key(0), accept("eu"));
                partial.insert(key(1), accept("3"));
                t.set_claim(Some(Claim { round: 1, until_ms: NOW + 1 }));
            }),
            InputResponses::new(),
            usize::MAX,
            "idle",
        ),
        (
            "a cancelled task",
            with(|t| t.task.as_mut().unwrap().cancelled = true),
            sent(&[(0, "eu")]),
            usize::MAX,
            "idle",
        ),
        (
            "a task whose first run goes on",
            with(|t| t.state = ThreadState::Working { claim: None }),
            sent(&[(0, "eu")]),
            usize::MAX,
            "idle",
        ),
        ("not a task", with(|t| t.task = None), sent(&[(0, "eu")]), usize::MAX, "idle"),
    ];
    for (case, thread, responses, max, expected) in rows {
        assert_eq!(name(&task_answers(&thread, &responses, NOW, max)), expected, "{case}");
    }
    // What is kept: the answer under its question's key, updated now.
    let TaskNext::Keep { thread, .. } = task_answers(&task(), &sent(&[(0, "eu")]), NOW, usize::MAX) else { panic!() };
    let kept = thread.task.unwrap();
    assert_eq!((kept.partial.get(&key(0)), kept.updated_at_ms), (Some(&accept("eu")), NOW));
}

#[test]
fn a_working_task_and_how_its_first_run_ends() {
    let lifetimes = Lifetimes::default();
    let call =
        crate::ToolCall { principal: Some("alice".into()), capabilities: elicits().into(), ..Default::default() };
    let names = Names { id: task().id, binding: "choose_region".into(), args_digest: "digest".into() };
    let new = NewThread { names, now_ms: NOW, task: true };
    let working = working(&call, new, &lifetimes);
    let lease = Claim { round: 0, until_ms: NOW + 30_000 };
    assert_eq!((working.version, &working.state), (1, &ThreadState::Working { claim: Some(lease) }), "its run's lease");
    assert_eq!(stored(&working), working, "a working task's record reads back as working");
    assert_eq!((working.expires_at_ms, working.owner.as_deref()), (NOW + 24 * HOUR, Some("principal:alice")));
    assert!(working.working(NOW));

    let later = NOW + 5_000;
    let end = |ended: &TaskEnd, max: usize| task_ended(&working, ended, later, &lifetimes, max);
    // A result: kept for `tasks/get` for the finished lifetime.
    let result = CallToolResult::json(&json!({"region": "eu"}));
    let done = end(&TaskEnd::Result(result.clone()), usize::MAX);
    assert_eq!((done.version, &done.state, done.expires_at_ms), (2, &ThreadState::Finished, later + 600_000));
    assert_eq!(stored(&done), done, "as its record reads");
    assert_eq!(done.last.unwrap().outcome, crate::LastOutcome::Result { result });
    // Its first round: paused, 24 hours.
    let paused = end(&TaskEnd::Paused(Box::new(checkpoint()), round(1)), usize::MAX);
    assert_eq!((paused.round(), paused.expires_at_ms, paused.claim()), (Some(&round(1)), later + 24 * HOUR, None));
    assert_eq!(stored(&paused), paused, "as its record reads");
    assert_eq!(paused.task.unwrap().updated_at_ms, later);
    // ... too large to keep: failed, with why.
    let large = end(&TaskEnd::Paused(Box::new(checkpoint()), round(1)), 400);
    assert_eq!((&large.state, stored(&large)), (&ThreadState::Finished, large.clone()));
    assert!(large.task.unwrap().error.unwrap().message.contains("--max-record-bytes"));
    // An error: failed, kept for the finished lifetime.
    let failed = end(&TaskEnd::Failed(ErrorObject::internal("boom")), usize::MAX);
    assert_eq!((&failed.state, stored(&failed)), (&ThreadState::Finished, failed.clone()));
    assert_eq!((failed.task.unwrap().error.unwrap().message, failed.expires_at_ms), ("boom".into(), later + 600_000));
}

#[test]
fn a_cancelled_task_never_runs_on() {
    let mut thread = task();
    thread.task.as_mut().unwrap().partial.insert(key(0), accept("eu"));
    let paused = thread.paused_mut().unwrap();
    (paused.claim, paused.begun) = (Some(Claim { round: 1, until_ms: NOW }), true);
    let ended = cancelled(thread, NOW, &Lifetimes::default());
    assert_eq!((ended.version, ended.expires_at_ms), (4, NOW + 600_000));
    assert_eq!((&ended.state, stored(&ended)), (&ThreadState::Finished, ended.clone()));
    let task = ended.task.unwrap();
    assert_eq!((task.cancelled, task.updated_at_ms, task.partial.len()), (true, NOW, 0));
}
