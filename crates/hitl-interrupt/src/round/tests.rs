//! Table tests of the round's transitions: one row per transition of [`decide`], each
//! on a thread written by hand, with no runtime and no store.

use std::time::Duration;

use hitl_graph::{CHECKPOINT_FORMAT, Checkpoint, Interrupt};
use hitl_protocol::{CallToolResponse, CallToolResult, ClientCapabilities, InputResponses};
use serde_json::{Value, json};

use super::{Answering, Next, decide};
use crate::state::Secret;
use crate::{Claim, LastOutcome, Round, THREAD_FORMAT, Thread, questions};

const NOW: u64 = 1_000_000;
const LEASE: Duration = Duration::from_secs(30);

fn secret() -> Secret {
    Secret::new(&[7; 32]).unwrap()
}

/// Round `n` asking one text question.
fn round(n: u32, question: &str) -> Round {
    let interrupt =
        Interrupt { id: format!("{n}:ask:0"), step: "ask".into(), value: json!(question), response_schema: None };
    Round { n, nonce: format!("nonce-{n}"), questions: questions::build(&[interrupt]).unwrap() }
}

/// A thread paused at round 1, version 3.
fn paused() -> Thread {
    let checkpoint = Checkpoint {
        format: CHECKPOINT_FORMAT,
        state: json!({}),
        next: vec!["ask".into()],
        superstep: 0,
        writes: Default::default(),
        resume: Default::default(),
        interrupts: Vec::new(),
        passed_breakpoints: Default::default(),
    };
    Thread {
        format: THREAD_FORMAT,
        id: "01a22f1a-68fb-738c-b3ca-9f64075178aa".into(),
        version: 3,
        tool: "choose_region".into(),
        args_digest: "digest".into(),
        principal: Some("alice".into()),
        owner: None,
        checkpoint: Some(checkpoint),
        round: Some(round(1, "Which region?")),
        last: None,
        claim: None,
        expires_at_ms: NOW + 3_600_000,
    }
}

fn token(thread: &Thread, n: u32) -> String {
    let state = secret().request_state(&thread.id, n, &format!("nonce-{n}"));
    state.split_once('.').unwrap().1.to_owned()
}

fn key(thread: &Thread) -> String {
    thread.round.as_ref().map_or_else(|| round(1, "Which region?"), Clone::clone).questions[0].key.clone()
}

fn answers(thread: &Thread, answer: Value) -> InputResponses {
    [(key(thread), answer)].into_iter().collect()
}

fn accept() -> Value {
    json!({"action": "accept", "content": {"response": "eu-west-1"}})
}

fn elicits() -> ClientCapabilities {
    serde_json::from_value(json!({"elicitation": {}})).unwrap()
}

/// `decide` for `thread` with these request fields (the rest: the thread's own).
fn run(
    thread: Option<Thread>,
    principal: Option<&str>,
    token: &str,
    responses: &InputResponses,
    caps: &ClientCapabilities,
) -> Next {
    let request =
        Answering { binding: "choose_region", args_digest: "digest", principal, token, responses, capabilities: caps };
    decide(thread, &request, NOW, LEASE, &secret())
}

/// The transition's name, for the table.
fn name(next: &Next) -> String {
    match next {
        Next::Invalid => "invalid".into(),
        Next::Newer => "newer".into(),
        Next::Replay(Ok(CallToolResponse::Complete(_))) => "replay result".into(),
        Next::Replay(Ok(CallToolResponse::InputRequired(_))) => "replay next round".into(),
        Next::Replay(Err(e)) => format!("replay error {}", e.code.0),
        Next::Reask(Ok(_)) => "reask".into(),
        Next::Reask(Err(e)) => format!("reask error {}", e.code.0),
        Next::Reject(e) => format!("reject {}", e.code.0),
        Next::Wait => "wait".into(),
        Next::Finish(ending) => format!("finish error={}", ending.result.is_error == Some(true)),
        Next::Claim { thread, .. } => {
            format!("claim v{} until {}", thread.version, thread.claim.as_ref().unwrap().until_ms)
        }
    }
}

#[test]
fn every_transition_of_a_paused_thread() {
    let base = paused();
    let good = token(&base, 1);
    let yes = answers(&base, accept());
    let none = InputResponses::new();
    let alice = Some("alice");
    let with = |f: fn(&mut Thread)| {
        let mut t = paused();
        f(&mut t);
        Some(t)
    };
    let claimed_until = NOW + 30_000;
    let rows: Vec<(&str, Next, String)> = vec![
        ("no thread", run(None, alice, &good, &yes, &elicits()), "invalid".into()),
        ("another tool", run(with(|t| t.tool = "other".into()), alice, &good, &yes, &elicits()), "invalid".into()),
        (
            "other arguments",
            run(with(|t| t.args_digest = "x".into()), alice, &good, &yes, &elicits()),
            "invalid".into(),
        ),
        ("another caller", run(Some(paused()), Some("bob"), &good, &yes, &elicits()), "invalid".into()),
        ("no caller", run(Some(paused()), None, &good, &yes, &elicits()), "invalid".into()),
        ("a forged token", run(Some(paused()), alice, "AAAA", &yes, &elicits()), "invalid".into()),
        ("a newer record", run(with(|t| t.format = THREAD_FORMAT + 1), alice, &good, &yes, &elicits()), "newer".into()),
        (
            "a newer checkpoint",
            run(
                with(|t| t.checkpoint.as_mut().unwrap().format = CHECKPOINT_FORMAT + 1),
                alice,
                &good,
                &yes,
                &elicits(),
            ),
            "newer".into(),
        ),
        ("no answers", run(Some(paused()), alice, &good, &none, &elicits()), "reask".into()),
        (
            "no answers, no elicitation",
            run(Some(paused()), alice, &good, &none, &Default::default()),
            "reask error -32021".into(),
        ),
        (
            "an answer of the wrong shape",
            run(
                Some(paused()),
                alice,
                &good,
                &answers(&base, json!({"action": "accept", "content": {"response": 7}})),
                &elicits(),
            ),
            "reject -32602".into(),
        ),
        (
            "declined",
            run(Some(paused()), alice, &good, &answers(&base, json!({"action": "decline"})), &elicits()),
            "finish error=true".into(),
        ),
        ("answered", run(Some(paused()), alice, &good, &yes, &elicits()), format!("claim v4 until {claimed_until}")),
        (
            "answered while another request resumes it",
            run(with(|t| t.claim = Some(Claim { round: 1, until_ms: NOW + 1 })), alice, &good, &yes, &elicits()),
            "wait".into(),
        ),
        (
            "answered after that request's lease lapsed",
            run(with(|t| t.claim = Some(Claim { round: 1, until_ms: NOW })), alice, &good, &yes, &elicits()),
            format!("claim v4 until {claimed_until}"),
        ),
    ];
    for (case, next, expected) in rows {
        assert_eq!(name(&next), expected, "{case}");
    }
}

#[test]
fn resends_of_an_answered_round_replay_what_it_led_to() {
    let answered = paused();
    let yes = answers(&answered, accept());
    let last = super::last(answered.round.as_ref().unwrap(), &yes, LastOutcome::NextRound);
    // Round 1 led to round 2, still open.
    let mut next_round = paused();
    next_round.last = Some(last.clone());
    next_round.round = Some(round(2, "How many replicas?"));
    let t1 = token(&next_round, 1);
    let next = run(Some(next_round.clone()), Some("alice"), &t1, &yes, &elicits());
    let Next::Replay(Ok(CallToolResponse::InputRequired(result))) = &next else { panic!("{}", name(&next)) };
    assert_eq!(result.request_state.as_deref(), Some(secret().request_state(&next_round.id, 2, "nonce-2").as_str()));
    // Round 1 finished the call.
    let mut finished = paused();
    finished.round = None;
    finished.checkpoint = None;
    let outcome = LastOutcome::Result { result: CallToolResult::json(&json!({"region": "eu-west-1"})) };
    finished.last = Some(super::last(answered.round.as_ref().unwrap(), &yes, outcome));
    assert_eq!(name(&run(Some(finished.clone()), Some("alice"), &t1, &yes, &elicits())), "replay result");
    // Other answers with the old token, or the old answers with a forged one: invalid.
    let other = answers(&answered, json!({"action": "accept", "content": {"response": "us-east-1"}}));
    assert_eq!(name(&run(Some(finished.clone()), Some("alice"), &t1, &other, &elicits())), "invalid");
    assert_eq!(name(&run(Some(finished), Some("alice"), "AAAA", &yes, &elicits())), "invalid");
}

#[test]
fn a_claim_keeps_the_thread_and_bumps_its_version() {
    let next = run(Some(paused()), Some("alice"), &token(&paused(), 1), &answers(&paused(), accept()), &elicits());
    let Next::Claim { thread, round, values } = next else { panic!("a claim") };
    let mut expected = paused();
    expected.version = 4;
    expected.claim = Some(Claim { round: 1, until_ms: NOW + 30_000 });
    assert_eq!(*thread, expected, "only the claim and the version change");
    assert_eq!(round.n, 1);
    assert_eq!(values.values().next(), Some(&json!("eu-west-1")));
}
