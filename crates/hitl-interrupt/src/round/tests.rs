//! Table tests of the round's transitions: one row per transition of [`decide`], each
//! on a thread written by hand, with no runtime and no store.

use std::sync::Arc;
use std::time::Duration;

use hitl_graph::{CHECKPOINT_FORMAT, Checkpoint, Interrupt};
use hitl_protocol::{CallToolResponse, CallToolResult, ClientCapabilities, InputResponses};
use serde_json::{Value, json};

use super::{Answering, Next, decide};
use crate::state::Secret;
use crate::{Claim, LastOutcome, Round, THREAD_FORMAT, Thread, ThreadState, questions};

const NOW: u64 = 1_000_000;
const LEASE: Duration = Duration::from_secs(30);

fn secret() -> Secret {
    Secret::new(&[7; 32]).unwrap()
}

/// Round `n` asking one text question.
fn round(n: u32, question: &str) -> Round {
    let interrupt =
        Interrupt { id: format!("{n}:ask:0"), step: "ask".into(), value: json!(question), response_schema: None };
    Round {
        n,
        nonce: format!("nonce-{n}"),
        questions: questions::build(&[interrupt]).unwrap(),
        asked_at_ms: 0,
        proof: String::new(),
    }
}

/// A thread paused at round 1, version 3.
fn paused() -> Thread {
    // A graph paused before its first step, `ask`.
    let checkpoint = Checkpoint::before(json!({}), &["ask"]);
    Thread {
        format: THREAD_FORMAT,
        id: "01a22f1a-68fb-738c-b3ca-9f64075178aa".into(),
        version: 3,
        tool: "choose_region".into(),
        args_digest: "digest".into(),
        principal: Some("alice".into()),
        owner: None,
        state: ThreadState::paused(checkpoint, round(1, "Which region?")),
        last: None,
        task: None,
        expires_at_ms: NOW + 3_600_000,
    }
}

/// The paused state of `thread`, to change.
fn paused_of(thread: &mut Thread) -> &mut crate::Paused {
    thread.paused_mut().expect("paused")
}

/// `thread` as read from a record that says its run began an effect in round `n`.
fn begun_in(thread: &Thread, n: u32) -> Thread {
    let mut record = serde_json::to_value(thread).unwrap();
    record["begun"] = json!(n);
    serde_json::from_value(record).unwrap()
}

/// A copy of the agent's state in paused `thread`.
fn checkpoint_of(thread: &Thread) -> Checkpoint {
    (*thread.paused().expect("paused").checkpoint).clone()
}

fn token(thread: &Thread, n: u32) -> String {
    let state = secret().request_state(&thread.id, n, &format!("nonce-{n}"));
    state.split_once('.').unwrap().1.to_owned()
}

fn key(thread: &Thread) -> String {
    thread.round().map_or_else(|| round(1, "Which region?"), Clone::clone).questions[0].key.clone()
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
            format!("claim v{} until {}", thread.version, thread.claim().unwrap().until_ms)
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
                with(|t| Arc::make_mut(&mut paused_of(t).checkpoint).format = CHECKPOINT_FORMAT + 1),
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
            run(with(|t| t.set_claim(Some(Claim { round: 1, until_ms: NOW + 1 }))), alice, &good, &yes, &elicits()),
            "wait".into(),
        ),
        (
            "answered after that request's lease lapsed",
            run(with(|t| t.set_claim(Some(Claim { round: 1, until_ms: NOW }))), alice, &good, &yes, &elicits()),
            format!("claim v4 until {claimed_until}"),
        ),
        (
            "answered while the request that began the round's effect still holds it",
            run(
                with(|t| {
                    (paused_of(t).claim, paused_of(t).begun) = (Some(Claim { round: 1, until_ms: NOW + 1 }), true)
                }),
                alice,
                &good,
                &yes,
                &elicits(),
            ),
            "wait".into(),
        ),
        (
            "answered after the request that began the round's effect died",
            run(
                with(|t| (paused_of(t).claim, paused_of(t).begun) = (Some(Claim { round: 1, until_ms: NOW }), true)),
                alice,
                &good,
                &yes,
                &elicits(),
            ),
            "finish error=true".into(),
        ),
        (
            "an effect begun in an earlier round (as a record says) does not stop this one",
            run(with(|t| *t = begun_in(t, 0)), alice, &good, &yes, &elicits()),
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
    let last = crate::resend::last(answered.round().unwrap(), &yes, LastOutcome::NextRound);
    // Round 1 led to round 2, still open.
    let mut next_round = paused();
    next_round.last = Some(Arc::new(last.clone()));
    paused_of(&mut next_round).round = Arc::new(round(2, "How many replicas?"));
    let t1 = token(&next_round, 1);
    let next = run(Some(next_round.clone()), Some("alice"), &t1, &yes, &elicits());
    let Next::Replay(Ok(CallToolResponse::InputRequired(result))) = &next else { panic!("{}", name(&next)) };
    assert_eq!(result.request_state.as_deref(), Some(secret().request_state(&next_round.id, 2, "nonce-2").as_str()));
    // Round 1 finished the call.
    let mut finished = paused();
    finished.state = ThreadState::Finished;
    let outcome = LastOutcome::Result { result: CallToolResult::json(&json!({"region": "eu-west-1"})) };
    finished.last = Some(Arc::new(crate::resend::last(answered.round().unwrap(), &yes, outcome)));
    assert_eq!(name(&run(Some(finished.clone()), Some("alice"), &t1, &yes, &elicits())), "replay result");
    // Other answers with the old token, or the old answers with a forged one: invalid.
    let other = answers(&answered, json!({"action": "accept", "content": {"response": "us-east-1"}}));
    assert_eq!(name(&run(Some(finished.clone()), Some("alice"), &t1, &other, &elicits())), "invalid");
    assert_eq!(name(&run(Some(finished), Some("alice"), "AAAA", &yes, &elicits())), "invalid");
}

#[test]
fn a_round_whose_effect_began_and_died_ends_unknown_and_replays_so() {
    let mut died = paused();
    (paused_of(&mut died).claim, paused_of(&mut died).begun) = (Some(Claim { round: 1, until_ms: NOW }), true);
    let yes = answers(&died, accept());
    let next = run(Some(died), Some("alice"), &token(&paused(), 1), &yes, &elicits());
    let Next::Finish(ending) = next else { panic!("{}", name(&next)) };
    assert_eq!(ending.result.content[0].as_text(), Some(super::OUTCOME_UNKNOWN));
    assert_eq!(ending.last.outcome, LastOutcome::Result { result: ending.result.clone() }, "resends get the same");
    let lifetimes = crate::Lifetimes::default();
    let finished = super::finished(ending.thread, ending.last, NOW, &lifetimes, usize::MAX);
    assert_eq!(finished.state, ThreadState::Finished);
}

#[test]
fn a_claim_keeps_the_thread_and_bumps_its_version() {
    let next = run(Some(paused()), Some("alice"), &token(&paused(), 1), &answers(&paused(), accept()), &elicits());
    let Next::Claim { thread, round, values } = next else { panic!("a claim") };
    let mut expected = paused();
    expected.version = 4;
    expected.set_claim(Some(Claim { round: 1, until_ms: NOW + 30_000 }));
    assert_eq!(*thread, expected, "only the claim and the version change");
    assert_eq!(round.n, 1);
    assert_eq!(values.values().next(), Some(&json!("eu-west-1")));
}

/// A claimed round 1 of `paused()`, claim released, as `end_run` gets it.
fn claimed() -> Thread {
    let mut thread = paused();
    thread.version = 5;
    thread
}

fn end_run(ran: super::Ran, capabilities: &ClientCapabilities, max_record_bytes: usize) -> super::Ending {
    let thread = claimed();
    let round = thread.round().unwrap().clone();
    let responses = answers(&thread, accept());
    let lifetimes = crate::Lifetimes::default();
    let end = super::EndOf {
        round: &round,
        responses: &responses,
        capabilities,
        now_ms: NOW,
        lifetimes: &lifetimes,
        max_record_bytes,
        began_in: None,
    };
    super::end_run(thread, ran, &end, &secret())
}

fn moved(superstep: u32) -> Box<Checkpoint> {
    let mut checkpoint = checkpoint_of(&paused());
    checkpoint.superstep = superstep;
    checkpoint.next = vec!["report".into()];
    Box::new(checkpoint)
}

#[test]
fn every_end_of_a_claimed_run() {
    use super::{Ending, Ran};
    let big = usize::MAX;
    let hours = |h: u64| NOW + h * 3_600_000;

    // Out of time: the round as it was, version bumped.
    let Ending::GiveBack(thread, error) =
        end_run(Ran::TimedOut(hitl_protocol::ErrorObject::internal("late")), &elicits(), big)
    else {
        panic!("a timeout gives the round back")
    };
    assert_eq!((thread.version, thread.round(), checkpoint_of(&thread).superstep), (6, paused().round(), 0));
    assert_eq!(error.message, "late");

    // Cancelled before a superstep finished: the old checkpoint; after: the new one.
    let Ending::GiveBack(thread, _) = end_run(Ran::Cancelled(moved(0)), &elicits(), big) else { panic!() };
    assert_eq!(checkpoint_of(&thread).next, vec!["ask".to_owned()]);
    let Ending::GiveBack(thread, error) = end_run(Ran::Cancelled(moved(1)), &elicits(), big) else { panic!() };
    assert_eq!(checkpoint_of(&thread).next, vec!["report".to_owned()], "finished supersteps are kept");
    assert_eq!((thread.round().unwrap().n, error.message.as_str()), (1, "the request was cancelled"));

    // Done: finished, kept 10 minutes with the result for resends.
    let result = CallToolResult::json(&json!({"region": "eu-west-1"}));
    let Ending::Finished(thread, own) = end_run(Ran::Done(result.clone()), &elicits(), big) else { panic!() };
    assert_eq!((thread.version, &thread.state), (6, &ThreadState::Finished));
    assert_eq!(thread.expires_at_ms, NOW + 600_000);
    assert_eq!(thread.last.as_ref().unwrap().outcome, LastOutcome::Result { result: result.clone() });
    assert_eq!(own, None, "the reply is the record's result, not a copy of it");
    let shared = thread.last.clone();
    assert_eq!(super::kept_result(thread.last.clone()), result, "copied while the record still holds it");
    drop(thread);
    assert_eq!(super::kept_result(shared), result, "moved out once the record is stored");
    // Too large to keep: the caller gets it, resends get why not.
    let Ending::Finished(thread, own) = end_run(Ran::Done(result.clone()), &elicits(), 200) else { panic!() };
    let LastOutcome::Result { result: kept } = &thread.last.as_deref().unwrap().outcome else { panic!() };
    assert!(kept.content[0].as_text().unwrap().contains("--max-record-bytes"), "{kept:?}");
    assert_eq!(own, Some(result));

    // Paused again: the next round, 24 hours more.
    let next = round(2, "How many replicas?");
    let Ending::NextRound(thread, reply) = end_run(Ran::Paused(moved(1), next.clone(), None), &elicits(), big) else {
        panic!()
    };
    assert_eq!((thread.version, thread.round(), thread.expires_at_ms), (6, Some(&next), hours(24)));
    assert_eq!(thread.last.unwrap().outcome, LastOutcome::NextRound);
    let Ok(CallToolResponse::InputRequired(asked)) = reply else { panic!("the next round is asked") };
    assert_eq!(asked.request_state.unwrap(), secret().request_state(&paused().id, 2, "nonce-2"));
    // ... which a client without elicitation cannot answer: -32021, 10 minutes to come back.
    let Ending::NextRound(thread, reply) = end_run(Ran::Paused(moved(1), next.clone(), None), &Default::default(), big)
    else {
        panic!()
    };
    assert_eq!((reply.unwrap_err().code.0, thread.expires_at_ms), (-32021, NOW + 600_000));
    // The next round starts with no effect begun.
    let mut begun = claimed();
    paused_of(&mut begun).begun = true;
    let round = begun.round().unwrap().clone();
    let responses = answers(&begun, accept());
    let lifetimes = crate::Lifetimes::default();
    let end = super::EndOf {
        round: &round,
        responses: &responses,
        capabilities: &elicits(),
        now_ms: NOW,
        lifetimes: &lifetimes,
        max_record_bytes: big,
        began_in: None,
    };
    let Ending::NextRound(thread, _) =
        super::end_run(begun.clone(), Ran::Paused(moved(1), next.clone(), None), &end, &secret())
    else {
        panic!()
    };
    assert!(!thread.paused().unwrap().begun);
    // ... but a round given back (out of time) keeps its mark: it never runs again.
    let late = Ran::TimedOut(hitl_protocol::ErrorObject::internal("late"));
    let Ending::GiveBack(thread, _) = super::end_run(begun, late, &end, &secret()) else { panic!() };
    assert!(thread.paused().unwrap().begun);
    // A next round too large to keep: the round given back as it was.
    let Ending::GiveBack(thread, error) = end_run(Ran::Paused(moved(1), next, None), &elicits(), 600) else { panic!() };
    assert_eq!((thread.version, thread.round().unwrap().n), (6, 1));
    assert!(error.message.contains("--max-record-bytes"), "{}", error.message);
}

const THREAD: &str = "01a22f1a-68fb-738c-b3ca-9f64075178aa";

/// What makes round 2 of `THREAD` now.
fn asking(unresumable: Option<&'static str>, can_elicit: bool) -> super::Asking<'static> {
    super::Asking {
        thread_id: THREAD,
        n: 2,
        now_ms: NOW,
        nonce: "nonce-2".into(),
        pages: None,
        unresumable,
        can_elicit,
    }
}

fn paused_at(question: Value) -> hitl_graph::Outcome {
    let interrupt = Interrupt { id: "1:ask:0".into(), step: "ask".into(), value: question, response_schema: None };
    hitl_graph::Outcome::Paused { interrupts: vec![interrupt], checkpoint: checkpoint_of(&paused()) }
}

/// How a run's outcome settled, for the table.
fn settled(settled: &super::Settled) -> String {
    match settled {
        super::Settled::Done(result) if result.is_error == Some(true) => {
            format!("error: {}", result.content[0].as_text().unwrap_or_default())
        }
        super::Settled::Done(result) => format!("done: {}", result.content[0].as_text().unwrap_or_default()),
        super::Settled::Failed(e) => format!("failed {}", e.code.0),
        super::Settled::Paused(_, round, _) => format!("round {} asked at {}", round.n, round.asked_at_ms),
    }
}

#[test]
fn every_way_a_run_settles_the_call() {
    use hitl_graph::{Outcome, RunError};
    let breakpoint = || Outcome::Breakpoint { state: json!({"n": 1}), checkpoint: checkpoint_of(&paused()) };
    let failed = RunError::StepFailed { step: "ask".into(), message: "boom".into() };
    let rows: Vec<(&str, Result<Outcome, RunError>, super::Asking<'_>, String)> = vec![
        ("done", Ok(Outcome::Done(json!({"region": "eu"}))), asking(None, true), r#"done: {"region":"eu"}"#.into()),
        ("failed", Err(failed), asking(None, true), "error: The agent failed: step ask failed: boom".into()),
        (
            "an agent's error",
            Ok(Outcome::Done(json!({"type": "mcp_error", "error": {"code": -32042, "message": "go"}}))),
            asking(None, true),
            "failed -32042".into(),
        ),
        ("a breakpoint, eliciting", Ok(breakpoint()), asking(None, true), format!("error: {}", crate::BREAKPOINT)),
        ("a breakpoint, not eliciting", Ok(breakpoint()), asking(None, false), r#"done: {"n":1}"#.into()),
        ("paused", Ok(paused_at(json!("Which region?"))), asking(None, true), format!("round 2 asked at {NOW}")),
        (
            "paused, for a client that can't answer",
            Ok(paused_at(json!("Which region?"))),
            asking(Some(crate::LEGACY_CANNOT_ANSWER), true),
            format!("error: {}", crate::LEGACY_CANNOT_ANSWER),
        ),
        (
            "paused on a question that can't be asked",
            Ok(paused_at(json!({"not": "a question"}))),
            asking(None, true),
            "error: This tool needs input that can't be asked over MCP: the interrupt of step ask is not a string \
             and has no response schema"
                .into(),
        ),
    ];
    for (case, outcome, asking, expected) in rows {
        assert_eq!(settled(&super::settle(outcome, &asking, &secret())), expected, "{case}");
    }
}

#[test]
fn a_round_is_made_of_what_is_passed_in() {
    let make = || super::settle(Ok(paused_at(json!("Which region?"))), &asking(None, true), &secret());
    let (super::Settled::Paused(_, first, _), super::Settled::Paused(_, again, _)) = (make(), make()) else { panic!() };
    assert_eq!(first, again, "no clock and no random source of its own");
    assert_eq!((first.n, first.nonce.as_str(), first.asked_at_ms), (2, "nonce-2", NOW));
    assert_eq!(first.proof, crate::state::proof(&token(&paused(), 2)));
}

#[test]
fn a_new_call_opens_its_thread_at_its_first_round() {
    let lifetimes = crate::Lifetimes::default();
    let call =
        crate::ToolCall { principal: Some("alice".into()), capabilities: elicits().into(), ..Default::default() };
    let new = |task| super::NewThread {
        names: super::Names { id: THREAD.into(), binding: "choose_region".into(), args_digest: "digest".into() },
        now_ms: NOW,
        task,
    };
    let open_as = |call: &crate::ToolCall, task| {
        super::open(checkpoint_of(&paused()), round(1, "Which region?"), call, new(task), &lifetimes)
    };
    let open = |call: &crate::ToolCall| open_as(call, false);
    let thread = open(&call);
    let mut expected = paused();
    (expected.version, expected.owner, expected.expires_at_ms) =
        (1, Some("principal:alice".into()), NOW + 24 * 3_600_000);
    assert_eq!(thread, expected);
    let task = open_as(&call, true).task.expect("a task");
    assert_eq!((task.created_at_ms, task.updated_at_ms, task.capabilities), (NOW, NOW, elicits()));

    // Asked: its requestState, or why not (nothing is stored then).
    let asked = |caps: &ClientCapabilities, max: usize| match super::first_ask(open(&call), caps, max, &secret(), None)
    {
        super::FirstAsk::Ask(_, unsent) => match unsent.reply() {
            CallToolResponse::InputRequired(r) => r.request_state.unwrap(),
            CallToolResponse::Complete(_) => "a result".into(),
        },
        super::FirstAsk::Lacks(e) => format!("lacks {}", e.code.0),
        super::FirstAsk::TooLarge(e) => format!("too large {}", e.message.contains("--max-record-bytes")),
    };
    assert_eq!(asked(&elicits(), usize::MAX), secret().request_state(THREAD, 1, "nonce-1"));
    assert_eq!(asked(&Default::default(), usize::MAX), "lacks -32021");
    assert_eq!(asked(&elicits(), 200), "too large true");
}

#[test]
fn how_a_resumed_run_ended() {
    use hitl_graph::RunError;
    let transient = || RunError::Transient { step: "ask".into(), message: "down".into(), kept: moved(1) };
    let late = || hitl_protocol::ErrorObject::internal("late");
    let ran = |outcome, paused| super::ran(outcome, paused, late, &asking(None, true), &secret());
    let name = |ran: super::Ran| match ran {
        super::Ran::TimedOut(e) => format!("timed out: {}", e.message),
        super::Ran::Cancelled(kept) => format!("cancelled at {}", kept.superstep),
        super::Ran::Retry(kept, _) => format!("retry from {}", kept.superstep),
        super::Ran::Done(result) => format!("done error={}", result.is_error == Some(true)),
        super::Ran::Paused(_, round, _) => format!("round {}", round.n),
    };
    let rows = [
        ("out of time", name(ran(None, true)), "timed out: late"),
        ("cancelled", name(ran(Some(Err(RunError::Cancelled(moved(1)))), true)), "cancelled at 1"),
        ("a transient failure, stored", name(ran(Some(Err(transient())), true)), "retry from 1"),
        ("a transient failure, not stored", name(ran(Some(Err(transient())), false)), "done error=true"),
        ("paused again", name(ran(Some(Ok(paused_at(json!("How many?")))), true)), "round 2"),
        (
            "an agent's error",
            name(ran(
                Some(Ok(hitl_graph::Outcome::Done(
                    json!({"type": "mcp_error", "error": {"code": -32042, "message": "go"}}),
                ))),
                true,
            )),
            "done error=true",
        ),
    ];
    for (case, got, expected) in rows {
        assert_eq!(got, expected, "{case}");
    }
}
