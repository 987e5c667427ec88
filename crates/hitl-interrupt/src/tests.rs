//! The round rules on the in-memory store, with a manual clock.

use std::sync::Arc;
use std::time::Duration;

use hitl_graph::{START, StateGraph};
use hitl_protocol::{CallToolResponse, ClientCapabilities, ErrorCode, InputRequiredResult, InputResponses};
use serde_json::{Value, json};

use crate::*;
// The tests read a reply as the drivers answer it.
use crate::Answered as Reply;

const HOUR: u64 = 3600 * 1000;

struct Fixture {
    engine: Engine,
    clock: Arc<ManualClock>,
    store: Arc<MemoryStore<Arc<ManualClock>>>,
}

fn fixture() -> Fixture {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let engine = Engine::new(store.clone(), clock.clone(), Secret::generate(), Lifetimes::default());
    Fixture { engine, clock, store }
}

fn text_agent(name: &str, questions: &'static [&'static str]) -> Agent {
    let mut graph = StateGraph::new();
    for (i, q) in questions.iter().enumerate() {
        let step = format!("s{i}");
        graph = graph
            .add_step(
                step.clone(),
                move |_, ctx| async move { Ok(json!({ format!("a{i}"): ctx.interrupt(json!(q))? })) },
            )
            .add_edge(START, step);
    }
    Agent::new(name, "", json!({"type": "object"}), graph.compile().unwrap())
}

fn caps() -> ClientCapabilities {
    serde_json::from_value(json!({"elicitation": {}})).unwrap()
}

fn accept(text: &str) -> Value {
    json!({"action": "accept", "content": {"response": text}})
}

fn run(f: impl std::future::Future<Output = Result<crate::Reply, EngineError>>) -> Reply {
    tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f).expect("no store failure").answered()
}

fn round(answer: Reply) -> InputRequiredResult {
    match answer {
        Ok(CallToolResponse::InputRequired(r)) => r,
        other => panic!("expected input_required, got {other:?}"),
    }
}

fn text(answer: &Reply) -> (String, bool) {
    match answer {
        Ok(CallToolResponse::Complete(r)) => (r.content[0].as_text().unwrap().to_owned(), r.is_error == Some(true)),
        other => panic!("expected a result, got {other:?}"),
    }
}

fn answers(pairs: &[(&str, Value)]) -> InputResponses {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
}

fn first_key(r: &InputRequiredResult) -> String {
    r.input_requests.as_ref().unwrap().keys().next().unwrap().clone()
}

fn call(responses: Option<InputResponses>, state: Option<&str>) -> ToolCall {
    ToolCall {
        input_responses: responses,
        request_state: state.map(str::to_owned),
        capabilities: caps().into(),
        ..ToolCall::default()
    }
}

#[test]
fn pause_and_resume_a_tool_call() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region should the service deploy to?"]);
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let key = first_key(&r);
    assert!(key.starts_with("answer-") && key.len() == "answer-".len() + 16, "{key}");
    let state = r.request_state.clone().unwrap();
    let (thread, token) = state.split_once('.').unwrap();
    assert_eq!(uuid::Uuid::parse_str(thread).unwrap().get_version_num(), 7);
    assert_eq!(token.len(), 43, "32 bytes in base64url");
    let done = run(f.engine.call(&agent, call(Some(answers(&[(&key, accept("eu-west-1"))])), Some(&state))));
    assert_eq!(text(&done), (r#"{"a0":"eu-west-1"}"#.to_owned(), false));
}

#[test]
fn the_key_is_derived_from_the_question() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region should the service deploy to?"]);
    let a = round(run(f.engine.call(&agent, call(None, None))));
    let b = round(run(f.engine.call(&agent, call(None, None))));
    assert_eq!(first_key(&a), first_key(&b));
    assert_ne!(a.request_state, b.request_state);
}

#[test]
fn missing_answers_ask_the_same_round_with_the_same_state() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let state = r.request_state.clone().unwrap();
    let again = round(run(f.engine.call(&agent, call(Some(answers(&[("other", accept("x"))])), Some(&state)))));
    assert_eq!(again, r);
}

#[test]
fn answers_in_the_first_call_answer_the_first_round() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    let key = first_key(&round(run(f.engine.call(&agent, call(None, None)))));
    let done = run(f.engine.call(&agent, call(Some(answers(&[(&key, accept("us-east-1"))])), None)));
    assert_eq!(text(&done).0, r#"{"a0":"us-east-1"}"#);
}

#[test]
fn repeated_answers_get_the_same_result() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let (key, state) = (first_key(&r), r.request_state.unwrap());
    let a = answers(&[(&key, accept("eu-west-1"))]);
    let first = run(f.engine.call(&agent, call(Some(a.clone()), Some(&state))));
    let second = run(f.engine.call(&agent, call(Some(a), Some(&state))));
    assert_eq!(first, second);
    let other = run(f.engine.call(&agent, call(Some(answers(&[(&key, accept("us-east-1"))])), Some(&state))));
    assert_eq!(other.unwrap_err().message, INVALID_STATE, "other answers to a closed round");
}

#[test]
fn invalid_answers_keep_the_round_open() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let (key, state) = (first_key(&r), r.request_state.unwrap());
    let bad = run(f.engine.call(
        &agent,
        call(Some(answers(&[(&key, json!({"action": "accept", "content": {"response": 3}}))])), Some(&state)),
    ));
    let err = bad.unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (ErrorCode::INVALID_PARAMS, "Form content does not match requestedSchema")
    );
    assert_eq!(err.data.unwrap()["errors"][0]["field"], "response");
    let done = run(f.engine.call(&agent, call(Some(answers(&[(&key, accept("ok"))])), Some(&state))));
    assert!(!text(&done).1);
}

#[test]
fn invalid_answers_in_a_first_call_store_nothing() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    let key = first_key(&round(run(f.engine.call(&agent, call(None, None)))));
    let before = f.store.len();
    let bad = run(f.engine.call(&agent, call(Some(answers(&[(&key, json!(12345))])), None)));
    assert_eq!(bad.unwrap_err().code, ErrorCode::INVALID_PARAMS);
    assert_eq!(f.store.len(), before);
}

#[test]
fn invalid_state_is_rejected() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    let other = text_agent("other", &["Which region?"]);
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let (key, state) = (first_key(&r), r.request_state.unwrap());
    let a = Some(answers(&[(&key, accept("x"))]));
    let mut tampered = state.clone();
    tampered.pop();
    tampered.push(if state.ends_with('A') { 'B' } else { 'A' });
    for (agent, state, args) in [
        (&agent, tampered.as_str(), json!({})),
        (&agent, &format!("{state}-TAMPERED"), json!({})),
        (&agent, "not-a-state", json!({})),
        (&other, state.as_str(), json!({})),
        (&agent, state.as_str(), json!({"x": 1})),
    ] {
        let mut c = call(a.clone(), Some(state));
        c.arguments = args.as_object().unwrap().clone();
        let err = run(f.engine.call(agent, c)).unwrap_err();
        assert_eq!((err.code, err.message.as_str()), (ErrorCode::INVALID_PARAMS, INVALID_STATE), "{state}");
    }
}

#[test]
fn lifetime_paused_calls_expire_after_24_hours() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let (key, state) = (first_key(&r), r.request_state.unwrap());
    f.clock.advance(24 * HOUR);
    let err = run(f.engine.call(&agent, call(Some(answers(&[(&key, accept("x"))])), Some(&state)))).unwrap_err();
    assert_eq!(err.message, INVALID_STATE);
}

#[test]
fn lifetime_finished_calls_are_kept_10_minutes_for_resends() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let (key, state) = (first_key(&r), r.request_state.unwrap());
    let a = answers(&[(&key, accept("x"))]);
    run(f.engine.call(&agent, call(Some(a.clone()), Some(&state)))).unwrap();
    f.clock.advance(9 * 60 * 1000);
    assert!(run(f.engine.call(&agent, call(Some(a.clone()), Some(&state)))).is_ok());
    f.clock.advance(60 * 1000);
    assert_eq!(run(f.engine.call(&agent, call(Some(a), Some(&state)))).unwrap_err().message, INVALID_STATE);
}

#[test]
fn lifetime_finished_without_state_keeps_nothing() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    let key = first_key(&round(run(f.engine.call(&agent, call(None, None)))));
    let before = f.store.len();
    run(f.engine.call(&agent, call(Some(answers(&[(&key, accept("x"))])), None))).unwrap();
    assert_eq!(f.store.len(), before);
}

#[test]
fn default_ttl_shortens_lifetimes() {
    let l = Lifetimes::with_default_ttl(Some(Duration::from_secs(60)));
    assert_eq!((l.paused, l.finished), (Duration::from_secs(60), Duration::from_secs(60)));
    let l = Lifetimes::with_default_ttl(Some(Duration::from_secs(3600)));
    assert_eq!((l.paused, l.finished), (Duration::from_secs(3600), Duration::from_secs(600)));
}

#[test]
fn decline_and_cancel_end_the_call() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    for (action, expected) in [("decline", crate::answers::DECLINED), ("cancel", crate::answers::CANCELLED)] {
        let r = round(run(f.engine.call(&agent, call(None, None))));
        let a = answers(&[(&first_key(&r), json!({ "action": action }))]);
        let done = run(f.engine.call(&agent, call(Some(a), r.request_state.as_deref())));
        assert_eq!(text(&done), (expected.to_owned(), true));
    }
}

#[test]
fn several_questions_are_asked_in_one_round() {
    let f = fixture();
    let agent = text_agent("survey", &["What is your favorite color?", "What is your quest?"]);
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let keys: Vec<String> = r.input_requests.as_ref().unwrap().keys().cloned().collect();
    assert_eq!(keys.len(), 2);
    let a = answers(&[(&keys[0], accept("blue")), (&keys[1], accept("grail"))]);
    let done = run(f.engine.call(&agent, call(Some(a), r.request_state.as_deref())));
    assert_eq!(text(&done).0, r#"{"a0":"blue","a1":"grail"}"#);
}

#[test]
fn one_answer_resumes_twin_questions() {
    let f = fixture();
    let agent = text_agent("twins", &["Same?", "Same?"]);
    let r = round(run(f.engine.call(&agent, call(None, None))));
    assert_eq!(r.input_requests.as_ref().unwrap().len(), 1);
    let a = answers(&[(&first_key(&r), accept("yes"))]);
    let done = run(f.engine.call(&agent, call(Some(a), r.request_state.as_deref())));
    assert_eq!(text(&done).0, r#"{"a0":"yes","a1":"yes"}"#);
}

#[test]
fn clients_without_elicitation_get_32021() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    let mut c = call(None, None);
    c.capabilities = Default::default();
    let err = run(f.engine.call(&agent, c)).unwrap_err();
    assert_eq!(err.code, ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY);
    assert_eq!(err.message, "This tool asks for human input and needs form elicitation.");
    assert_eq!(err.data.unwrap(), json!({"requiredCapabilities": {"elicitation": {"form": {}}}}));
}

#[test]
fn stored_records_hold_no_usable_token() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let state = r.request_state.unwrap();
    let (id, token) = state.split_once('.').unwrap();
    let thread =
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f.store.load(id)).unwrap().unwrap();
    assert!(!serde_json::to_string(&thread).unwrap().contains(token));
}

/// An agent whose step, after its interrupt, yields `yields` times (so concurrent
/// requests interleave), moving `clock` a second per yield when given, then counts its
/// run in `runs`.
fn counting_agent_with(
    runs: Arc<std::sync::atomic::AtomicUsize>,
    yields: usize,
    clock: Option<Arc<ManualClock>>,
) -> Agent {
    let graph = StateGraph::new()
        .add_step("ask", move |_, ctx| {
            let (runs, clock) = (runs.clone(), clock.clone());
            async move {
                let answer = ctx.interrupt(json!("Go?"))?;
                for _ in 0..yields {
                    if let Some(clock) = &clock {
                        clock.advance(1000);
                    }
                    tokio::task::yield_now().await;
                }
                let n = runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                Ok(json!({ "answer": answer, "run": n }))
            }
        })
        .add_edge(START, "ask")
        .compile()
        .unwrap();
    Agent::new("count", "", json!({"type": "object"}), graph)
}

/// A counting agent paused at its question, and the answers and state that resume it.
struct PausedCount {
    f: Fixture,
    runs: Arc<std::sync::atomic::AtomicUsize>,
    agent: Agent,
    answers: InputResponses,
    state: String,
}

/// Pauses a counting agent whose step yields `yields` times, moving the fixture's clock
/// a second each time when `tick`.
fn paused_count(yields: usize, tick: bool) -> PausedCount {
    let f = fixture();
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let agent = counting_agent_with(runs.clone(), yields, tick.then(|| f.clock.clone()));
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let answers = answers(&[(&first_key(&r), accept("yes"))]);
    PausedCount { f, runs, agent, answers, state: r.request_state.unwrap() }
}

fn runs_of(p: &PausedCount) -> usize {
    p.runs.load(std::sync::atomic::Ordering::SeqCst)
}

/// `n` identical answer calls, polled concurrently on one thread.
fn concurrently(p: &PausedCount, n: usize) -> Vec<Reply> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    rt.block_on(futures_util::future::join_all(
        (0..n).map(|_| p.f.engine.call(&p.agent, call(Some(p.answers.clone()), Some(&p.state)))),
    ))
    .into_iter()
    .map(|r| r.expect("no store failure").answered())
    .collect()
}

#[test]
fn repeated_answers_at_the_same_time_resume_once_and_share_the_result() {
    let p = paused_count(5, false);
    let texts: Vec<String> = concurrently(&p, 6).iter().map(|r| text(r).0).collect();
    assert_eq!(runs_of(&p), 1, "the agent resumed once");
    assert!(texts.iter().all(|t| t == r#"{"answer":"yes","run":1}"#), "{texts:?}");
}

#[test]
fn a_lapsed_claim_lets_another_request_take_the_round_over() {
    let p = paused_count(5, false);
    let id = p.state.split_once('.').unwrap().0.to_owned();
    // A replica claimed the round and died.
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut thread = rt.block_on(p.f.store.load(&id)).unwrap().unwrap();
    let version = thread.version;
    thread.set_claim(Some(Claim { round: 1, until_ms: p.f.clock.now_ms() + 30_000 }));
    thread.version += 1;
    rt.block_on(p.f.store.save(thread, Some(version))).unwrap();
    let done = run(p.f.engine.call(&p.agent, call(Some(p.answers.clone()), Some(&p.state))));
    assert_eq!(text(&done).0, r#"{"answer":"yes","run":1}"#);
    assert!(p.f.clock.now_ms() >= 1_000_000 + 30_000, "it waited for the lease to lapse");
}

fn text_then_url_agent() -> Agent {
    let graph = StateGraph::new()
        .add_step("name", |_, ctx| async move { Ok(json!({ "name": ctx.interrupt(json!("Name?"))? })) })
        .add_step("auth", |_, ctx| async move {
            let reply = ctx.interrupt(json!({"type": "mcp_elicitation", "requests": [
                {"key": "auth", "message": "Sign in.", "mode": "url", "url": "https://example.com/start"}]}))?;
            Ok(json!({ "auth": reply["responses"]["auth"]["action"] }))
        })
        .add_edge(START, "name")
        .add_edge("name", "auth")
        .compile()
        .unwrap();
    Agent::new("signup", "", json!({"type": "object"}), graph)
}

#[test]
fn a_later_round_needing_url_waits_10_minutes_for_the_client_to_declare_it() {
    let f = fixture();
    let agent = text_then_url_agent();
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let (key, state) = (first_key(&r), r.request_state.unwrap());
    let a = answers(&[(&key, accept("Ada"))]);
    let err = run(f.engine.call(&agent, call(Some(a.clone()), Some(&state)))).unwrap_err();
    assert_eq!(err.code, ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY);
    assert_eq!(err.message, "This tool asks for human input and needs url elicitation.");
    assert_eq!(err.data.unwrap(), json!({"requiredCapabilities": {"elicitation": {"url": {}}}}));
    // Within 10 minutes, the same answers with url declared get the URL question.
    f.clock.advance(9 * 60 * 1000);
    let mut with_url = call(Some(a.clone()), Some(&state));
    with_url.capabilities =
        serde_json::from_value::<ClientCapabilities>(json!({"elicitation": {"form": {}, "url": {}}})).unwrap().into();
    let next = round(run(f.engine.call(&agent, with_url.clone())));
    assert_eq!(first_key(&next), "auth");
    // After 10 minutes the paused call is gone.
    let g = fixture();
    let r = round(run(g.engine.call(&agent, call(None, None))));
    let state = r.request_state.unwrap();
    let _ = run(g.engine.call(&agent, call(Some(a.clone()), Some(&state))));
    g.clock.advance(10 * 60 * 1000);
    let mut late = call(Some(a), Some(&state));
    late.capabilities = with_url.capabilities;
    assert_eq!(run(g.engine.call(&agent, late)).unwrap_err().message, INVALID_STATE);
}

#[test]
fn a_cancelled_resume_leaves_the_round_open() {
    let p = paused_count(5, false);
    let mut cancelled = call(Some(p.answers.clone()), Some(&p.state));
    cancelled.cancel = Some(Arc::new(std::sync::atomic::AtomicBool::new(true)));
    assert!(run(p.f.engine.call(&p.agent, cancelled)).is_err());
    assert_eq!(runs_of(&p), 0);
    // The round is as it was: no claim left to wait for, and the same answers resume it.
    let id = p.state.split_once('.').unwrap().0;
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let thread = rt.block_on(p.f.store.load(id)).unwrap().unwrap();
    assert_eq!(thread.paused().unwrap().checkpoint.interrupts.len(), 1, "the checkpoint still names its question");
    assert_eq!((thread.claim(), thread.round().map(|r| r.n)), (None, Some(1)));
    let done = run(p.f.engine.call(&p.agent, call(Some(p.answers.clone()), Some(&p.state))));
    assert_eq!(text(&done).0, r#"{"answer":"yes","run":1}"#);
}

#[test]
fn a_long_step_renews_its_lease_so_duplicates_keep_waiting() {
    // A step that takes 100 s of (manual) time, longer than the 30 s lease.
    let p = paused_count(100, true);
    let results = concurrently(&p, 3);
    assert_eq!(runs_of(&p), 1, "the agent resumed once");
    for result in &results {
        assert_eq!(text(result).0, r#"{"answer":"yes","run":1}"#);
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
}

fn load(f: &Fixture, state: &str) -> Option<Thread> {
    block_on(f.store.load(state.split_once('.').unwrap().0)).unwrap()
}

#[test]
fn a_cancelled_resume_keeps_the_steps_that_finished() {
    // The email is sent in the superstep after the answer; the client goes away as it
    // finishes. The resend continues after it and never sends it again.
    let f = fixture();
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s, c) = (sent.clone(), cancel.clone());
    let graph = StateGraph::new()
        .add_step("ask", |_, ctx| async move { Ok(json!({ "ok": ctx.interrupt(json!("Send it?"))? })) })
        .add_step("send", move |_, _| {
            let (s, c) = (s.clone(), c.clone());
            async move {
                let n = s.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                c.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(json!({ "sent": n }))
            }
        })
        .add_step("report", |state, _| async move { Ok(json!({ "report": state["sent"] })) })
        .add_edge(START, "ask")
        .add_edge("ask", "send")
        .add_edge("send", "report")
        .compile()
        .unwrap();
    let agent = Agent::new("mail", "", json!({"type": "object"}), graph);
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let (a, state) = (answers(&[(&first_key(&r), accept("yes"))]), r.request_state.unwrap());
    let mut first = call(Some(a.clone()), Some(&state));
    first.cancel = Some(cancel);
    assert!(run(f.engine.call(&agent, first)).is_err(), "the cancelled request fails");
    let thread = load(&f, &state).unwrap();
    assert_eq!(thread.claim(), None);
    assert_eq!(thread.paused().unwrap().checkpoint.next, vec!["report".to_owned()], "the finished superstep is kept");
    let done = run(f.engine.call(&agent, call(Some(a), Some(&state))));
    assert_eq!(text(&done).0, r#"{"ok":"yes","sent":1,"report":1}"#);
    assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1, "the email went once");
}

#[test]
fn answers_in_a_first_call_resolve_at_most_ten_rounds() {
    // A step that asks again, in one superstep, whatever the answer.
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = asked.clone();
    let graph = StateGraph::new()
        .add_step("nag", move |_, ctx| {
            let counter = counter.clone();
            async move {
                for _ in 0.. {
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    ctx.interrupt(json!("Really?"))?;
                }
                Ok(json!({}))
            }
        })
        .add_edge(START, "nag")
        .compile()
        .unwrap();
    let agent = Agent::new("nag", "", json!({"type": "object"}), graph);
    let f = fixture();
    let key = first_key(&round(run(f.engine.call(&agent, call(None, None)))));
    let r = round(run(f.engine.call(&agent, call(Some(answers(&[(&key, accept("yes"))])), None))));
    assert!(r.request_state.is_some(), "the call pauses after the bound");
    assert_eq!(load(&f, r.request_state.as_ref().unwrap()).unwrap().round().unwrap().n, MAX_ROUNDS_PER_REQUEST + 1);
}

#[test]
fn a_legacy_resend_gets_the_legacy_error_and_leaves_the_thread() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let (a, state) = (answers(&[(&first_key(&r), accept("eu-west-1"))]), r.request_state.unwrap());
    let before = load(&f, &state).unwrap();
    let mut legacy = call(Some(a.clone()), Some(&state));
    legacy.resumable = crate::Resumable::LEGACY;
    let answer = run(f.engine.peek(&agent, &legacy));
    let Ok(CallToolResponse::Complete(result)) = &answer else { panic!("{answer:?}") };
    assert_eq!(result.content[0].as_text(), Some(LEGACY_CANNOT_ANSWER));
    assert!(result.content[1].as_text().unwrap().contains("Which region?"));
    assert_eq!(load(&f, &state).unwrap(), before, "the thread is untouched");
    let done = run(f.engine.call(&agent, call(Some(a), Some(&state))));
    assert_eq!(text(&done), (r#"{"a0":"eu-west-1"}"#.to_owned(), false), "the modern client still resumes it");
}

#[test]
fn a_record_of_a_newer_format_is_left_untouched() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let (a, state) = (answers(&[(&first_key(&r), accept("x"))]), r.request_state.unwrap());
    let mut newer = load(&f, &state).unwrap();
    let version = newer.version;
    newer.format = THREAD_FORMAT + 1;
    newer.version += 1;
    block_on(f.store.save(newer.clone(), Some(version))).unwrap();
    let err = run(f.engine.call(&agent, call(Some(a.clone()), Some(&state)))).unwrap_err();
    assert_eq!((err.code, err.message.as_str()), (ErrorCode::INTERNAL_ERROR, NEWER_FORMAT));
    assert_eq!(load(&f, &state).unwrap(), newer);
    // A checkpoint of a newer format too.
    let mut checkpoint_newer = newer.clone();
    checkpoint_newer.format = THREAD_FORMAT;
    Arc::make_mut(&mut checkpoint_newer.paused_mut().unwrap().checkpoint).format = hitl_graph::CHECKPOINT_FORMAT + 1;
    checkpoint_newer.version += 1;
    block_on(f.store.save(checkpoint_newer.clone(), Some(newer.version))).unwrap();
    let err = run(f.engine.call(&agent, call(Some(a), Some(&state)))).unwrap_err();
    assert_eq!(err.message, NEWER_FORMAT);
    assert_eq!(load(&f, &state).unwrap(), checkpoint_newer);
}

fn limited(limits: Limits) -> Fixture {
    let f = fixture();
    Fixture { engine: f.engine.clone().with_limits(limits), ..f }
}

#[test]
fn paused_calls_are_limited_per_caller_and_in_all() {
    let paused = PausedLimits { per_owner: 2, total: 3 };
    let f = limited(Limits { paused, ..Limits::default() });
    let agent = text_agent("choose_region", &["Which region?"]);
    let from = |peer: &str| ToolCall { peer: Some(peer.to_owned()), ..call(None, None) };
    let first = round(run(f.engine.call(&agent, from("10.0.0.1"))));
    round(run(f.engine.call(&agent, from("10.0.0.1"))));
    let err = run(f.engine.call(&agent, from("10.0.0.1"))).unwrap_err();
    assert!(err.message.contains("--max-paused-per-caller"), "{}", err.message);
    assert_eq!(f.store.len(), 2, "nothing else changed");
    round(run(f.engine.call(&agent, from("10.0.0.2"))));
    let err = run(f.engine.call(&agent, from("10.0.0.3"))).unwrap_err();
    assert!(err.message.contains("--max-paused-calls"), "{}", err.message);
    // A principal is its own owner, whatever its address.
    let alice = ToolCall { principal: Some("alice".into()), ..from("10.0.0.1") };
    assert!(run(f.engine.call(&agent, alice)).unwrap_err().message.contains("--max-paused-calls"));
    // Finishing a call frees its place.
    let key = first_key(&first);
    let mut answer = from("10.0.0.1");
    (answer.input_responses, answer.request_state) =
        (Some(answers(&[(&key, accept("eu"))])), first.request_state.clone());
    assert!(!text(&run(f.engine.call(&agent, answer))).1, "the call finished without error");
    round(run(f.engine.call(&agent, from("10.0.0.1"))));
}

#[test]
fn a_record_above_the_size_limit_fails_the_call_and_stores_nothing() {
    let f = limited(Limits { max_record_bytes: 2048, ..Limits::default() });
    let agent = text_agent("choose_region", &["Which region?"]);
    let mut big = call(None, None);
    big.arguments.insert("padding".into(), json!("x".repeat(4096)));
    let err = run(f.engine.call(&agent, big)).unwrap_err();
    assert_eq!(err.code, ErrorCode::INTERNAL_ERROR);
    assert!(err.message.contains("--max-record-bytes"), "{}", err.message);
    assert!(f.store.is_empty());
    round(run(f.engine.call(&agent, call(None, None))));
}

#[test]
fn a_resume_out_of_time_leaves_the_call_paused() {
    // On the system clock: the lease is renewed while the step hangs, and a manual
    // clock, moved by each renewal's wait, would run past the call's expiry.
    let store = Arc::new(MemoryStore::default());
    let engine =
        Engine::new(store.clone(), Arc::new(hitl_thread::SystemClock), Secret::generate(), Lifetimes::default())
            .with_limits(Limits { request_timeout: Some(Duration::from_millis(50)), ..Limits::default() });
    let load = |state: &str| block_on(store.load(state.split_once('.').unwrap().0)).unwrap();
    let hang = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let h = hang.clone();
    let graph = StateGraph::new()
        .add_step("ask", move |_, ctx| {
            let h = h.clone();
            async move {
                let answer = ctx.interrupt(json!("Go?"))?;
                if h.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                Ok(json!({ "answer": answer }))
            }
        })
        .add_edge(START, "ask")
        .compile()
        .unwrap();
    let agent = Agent::new("slow", "", json!({"type": "object"}), graph);
    let r = round(block_on(engine.call(&agent, call(None, None))).unwrap().answered());
    let (a, state) = (answers(&[(&first_key(&r), accept("yes"))]), r.request_state.unwrap());
    let err = block_on(engine.call(&agent, call(Some(a.clone()), Some(&state)))).unwrap().answered().unwrap_err();
    assert!(err.message.contains("request timeout"), "{}", err.message);
    let thread = load(&state).unwrap();
    assert_eq!((thread.claim(), thread.round().map(|r| r.n)), (None, Some(1)), "the round is open, unclaimed");
    let done = block_on(engine.call(&agent, call(Some(a), Some(&state)))).unwrap().answered();
    assert_eq!(text(&done).0, r#"{"answer":"yes"}"#);
}

#[test]
fn a_rotated_secret_keeps_open_rounds_valid_and_signs_new_ones() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    let old = Secret::new(&[1; 32]).unwrap();
    let new = Secret::new(&[2; 32]).unwrap();
    let before = Engine::new(f.store.clone(), f.clock.clone(), old.clone(), Lifetimes::default());
    let r = round(run(before.call(&agent, call(None, None))));
    let key = first_key(&r);
    let (a, state) = (answers(&[(&key, accept("eu"))]), r.request_state.unwrap());
    let rotated = Engine::new(f.store.clone(), f.clock.clone(), new.clone().with_previous(old), Lifetimes::default());
    let fresh = round(run(rotated.call(&agent, call(None, None)))).request_state.unwrap();
    assert_eq!(text(&run(rotated.call(&agent, call(Some(a.clone()), Some(&state))))).0, r#"{"a0":"eu"}"#);
    // The new secret alone accepts the new round, not the old one.
    let only_new = Engine::new(f.store.clone(), f.clock.clone(), new, Lifetimes::default());
    let fresh_key = answers(&[(&key, accept("us"))]);
    assert_eq!(text(&run(only_new.call(&agent, call(Some(fresh_key), Some(&fresh))))).0, r#"{"a0":"us"}"#);
    let g = fixture();
    let r =
        round(run(Engine::new(g.store.clone(), g.clock.clone(), Secret::new(&[1; 32]).unwrap(), Lifetimes::default())
            .call(&agent, call(None, None))));
    let stranger = Engine::new(g.store.clone(), g.clock.clone(), Secret::new(&[2; 32]).unwrap(), Lifetimes::default());
    let err =
        run(stranger.call(&agent, call(Some(answers(&[(&first_key(&r), accept("x"))])), r.request_state.as_deref())));
    assert_eq!(err.unwrap_err().message, INVALID_STATE);
}

#[test]
fn the_memory_store_stays_proportional_to_what_it_holds() {
    // Paused calls answered at once leave nothing behind but their finished records;
    // the expiry queues are compacted rather than growing with every save.
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region?"]);
    for _ in 0..3000 {
        let r = round(run(f.engine.call(&agent, call(None, None))));
        let a = answers(&[(&first_key(&r), accept("eu"))]);
        text(&run(f.engine.call(&agent, call(Some(a), r.request_state.as_deref()))));
    }
    f.clock.advance(11 * 60 * 1000);
    round(run(f.engine.call(&agent, call(None, None))));
    let (threads, queued, counted, ledger_queue) = f.store.sizes();
    assert!(threads <= 3001, "{threads}");
    // Each call saved three times (paused, claimed, finished): 9,000 entries uncompacted.
    assert!(queued <= 2 * threads + 16 * 64 + 16, "the shards queue {queued} entries for {threads} threads");
    assert_eq!(counted, 1, "finished calls no longer count");
    assert!(ledger_queue <= 2 + 64 + 1, "the ledger queues {ledger_queue} entries");
}

/// An agent that asks, then begins an effect (counted) and never finishes: its
/// server "dies" mid-effect when the test drops the call.
fn effect_agent(effects: Arc<std::sync::atomic::AtomicU32>, finish: bool) -> Agent {
    let graph = StateGraph::new()
        .add_step("ask", |_, ctx| async move { Ok(json!({ "go": ctx.interrupt(json!("Go?"))? })) })
        .add_step("act", move |_, ctx| {
            let effects = effects.clone();
            async move {
                ctx.begin_effect().await?;
                effects.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if !finish {
                    std::future::pending::<()>().await;
                }
                Ok(json!({ "done": true }))
            }
        })
        .add_edge(START, "ask")
        .add_edge("ask", "act");
    Agent::new("act", "", json!({"type": "object"}), graph.compile().unwrap())
}

#[test]
fn an_effect_begun_by_a_request_that_died_is_never_run_again() {
    let mut f = fixture();
    // Were the effect run again, the resend would hang in it: fail in 5 s instead.
    let limits = Limits { request_timeout: Some(Duration::from_secs(5)), ..Limits::default() };
    f.engine = f.engine.clone().with_limits(limits);
    let effects = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let agent = effect_agent(effects.clone(), false);
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let r = round(rt.block_on(f.engine.call(&agent, call(None, None))).unwrap().answered());
    let (key, state) = (first_key(&r), r.request_state.clone().unwrap());
    let yes = answers(&[(&key, accept("yes"))]);
    rt.block_on(async {
        // The resume begins the effect and hangs; then its server "dies".
        let resume = f.engine.call(&agent, call(Some(yes.clone()), Some(&state)));
        let mut resume = std::pin::pin!(resume);
        while effects.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            let polled = std::future::poll_fn(|cx| std::task::Poll::Ready(resume.as_mut().poll(cx))).await;
            assert!(polled.is_pending(), "the effect never finishes");
        }
    });
    f.clock.advance(Lifetimes::default().lease.as_millis() as u64 + 1);
    let resend = rt.block_on(f.engine.call(&agent, call(Some(yes.clone()), Some(&state)))).unwrap().answered();
    assert_eq!(text(&resend), (crate::round::OUTCOME_UNKNOWN.to_owned(), true));
    let again = rt.block_on(f.engine.call(&agent, call(Some(yes), Some(&state)))).unwrap().answered();
    assert_eq!(text(&again), (crate::round::OUTCOME_UNKNOWN.to_owned(), true), "resends get the same");
    assert_eq!(effects.load(std::sync::atomic::Ordering::SeqCst), 1, "the effect ran once");
}

#[test]
fn an_effect_that_finishes_answers_as_usual() {
    let f = fixture();
    let effects = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let agent = effect_agent(effects.clone(), true);
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let (key, state) = (first_key(&r), r.request_state.clone().unwrap());
    let yes = answers(&[(&key, accept("yes"))]);
    let done = run(f.engine.call(&agent, call(Some(yes.clone()), Some(&state))));
    assert!(!text(&done).1, "{done:?}");
    assert_eq!(run(f.engine.call(&agent, call(Some(yes), Some(&state)))), done, "a resend replays");
    assert_eq!(effects.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn a_transient_failure_after_an_effect_keeps_the_round_and_repeats_nothing() {
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
    let f = fixture();
    let (effects, tries) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let (counted, tried) = (effects.clone(), tries.clone());
    let graph = StateGraph::new()
        .add_step("ask", |_, ctx| async move { Ok(json!({ "go": ctx.interrupt(json!("Go?"))? })) })
        .add_step("act", move |_, ctx| {
            let effects = counted.clone();
            async move {
                ctx.begin_effect().await?;
                effects.fetch_add(1, SeqCst);
                Ok(json!({ "acted": true }))
            }
        })
        // A model API that is down for the first try.
        .add_step("report", move |_, _| {
            let tries = tried.clone();
            async move {
                if tries.fetch_add(1, SeqCst) == 0 {
                    return Err(hitl_graph::StepError::transient("the model API answered 503"));
                }
                Ok(json!({ "report": "done" }))
            }
        })
        .add_edge(START, "ask")
        .add_edge("ask", "act")
        .add_edge("act", "report")
        .output_keys(["report"]);
    let agent = Agent::new("act", "", json!({"type": "object"}), graph.compile().unwrap());
    let r = round(run(f.engine.call(&agent, call(None, None))));
    let (key, state) = (first_key(&r), r.request_state.clone().unwrap());
    let yes = answers(&[(&key, accept("yes"))]);
    let failed = run(f.engine.call(&agent, call(Some(yes.clone()), Some(&state))));
    let (message, is_error) = text(&failed);
    assert!(is_error, "{failed:?}");
    assert!(message.contains("the model API answered 503") && message.contains("still paused"), "{message}");
    let done = run(f.engine.call(&agent, call(Some(yes.clone()), Some(&state))));
    assert_eq!(text(&done), ("{\"report\":\"done\"}".to_owned(), false), "the same answers try again: {done:?}");
    assert_eq!(run(f.engine.call(&agent, call(Some(yes), Some(&state)))), done, "then resends replay");
    assert_eq!((effects.load(SeqCst), tries.load(SeqCst)), (1, 2), "the effect ran once, the failed step twice");
}

#[test]
fn operators_list_show_and_cancel_paused_calls() {
    let f = fixture();
    let agent = text_agent("choose_region", &["Which region should the service deploy to?"]);
    let paused = round(run(f.engine.call(&agent, ToolCall { principal: Some("user:ada".into()), ..call(None, None) })));
    let state = paused.request_state.clone().unwrap();
    let id = state.split_once('.').unwrap().0.to_owned();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let page = rt.block_on(f.engine.admin().paused_calls(0, 10)).unwrap();
    assert_eq!((page.total, page.unreadable.len()), (1, 0));
    let listed = page.calls;
    let shown = &listed[0];
    assert_eq!(
        (shown.id.as_str(), shown.tool.as_str(), shown.principal.as_deref()),
        (id.as_str(), "choose_region", Some("user:ada"))
    );
    assert_eq!((shown.round, shown.state, shown.task), (Some(1), "waiting", false));
    assert_eq!(shown.pending, [first_key(&paused)]);
    assert!(shown.created_at_ms > 0 && shown.expires_at_ms == 1_000_000 + 24 * HOUR, "{shown:?}");
    let listing = serde_json::to_string(&listed).unwrap();
    assert!(!listing.contains(state.split_once('.').unwrap().1), "never the requestState's token");
    assert!(!listing.contains("Which region"), "never what a question asks");
    assert_eq!(rt.block_on(f.engine.admin().paused_call(&id)).unwrap().as_ref(), Some(shown));
    assert_eq!(rt.block_on(f.engine.admin().paused_call("not-a-thread")).unwrap(), None);

    assert!(rt.block_on(f.engine.admin().cancel(&id)).unwrap());
    assert!(!rt.block_on(f.engine.admin().cancel(&id)).unwrap(), "cancelled once");
    let after = rt.block_on(f.engine.admin().paused_calls(0, 10)).unwrap();
    assert_eq!((after.calls.len(), after.total), (0, 0));
    let key = first_key(&paused);
    let resend = run(f.engine.call(
        &agent,
        ToolCall { principal: Some("user:ada".into()), ..call(Some(answers(&[(&key, accept("eu"))])), Some(&state)) },
    ));
    assert_eq!(resend.unwrap_err().message, INVALID_STATE);
}

#[test]
fn the_caller_key_comes_from_who_calls_and_their_session() {
    let as_who = |principal: Option<&str>, peer: &str, session: Option<&str>, capabilities: Value| ToolCall {
        principal: principal.map(str::to_owned),
        peer: Some(peer.to_owned()),
        session: session.map(str::to_owned),
        capabilities: serde_json::from_value::<ClientCapabilities>(capabilities).unwrap().into(),
        ..ToolCall::default()
    };
    let key = |call: ToolCall| call.caller_key();
    let alice = key(as_who(Some("user:alice"), "10.0.0.1", None, json!({"elicitation": {}})));
    assert_eq!(alice.len(), 64, "a digest: {alice}");
    assert_eq!(alice, key(as_who(Some("user:alice"), "10.0.0.9", None, json!({"elicitation": {}}))), "any address");
    assert_ne!(alice, key(as_who(Some("user:bob"), "10.0.0.1", None, json!({"elicitation": {}}))));
    assert_ne!(alice, key(as_who(Some("user:alice"), "10.0.0.1", None, json!({}))), "other capabilities");
    // A 2025-era session with hitl is its own key, and only its owner's.
    let session = key(as_who(Some("user:alice"), "10.0.0.1", Some("s1"), json!({})));
    assert_ne!(session, alice);
    assert_ne!(session, key(as_who(Some("user:alice"), "10.0.0.1", Some("s2"), json!({}))));
    assert_ne!(session, key(as_who(Some("user:bob"), "10.0.0.1", Some("s1"), json!({}))), "another's session id");
    // Without a principal, the address is the caller.
    assert_ne!(key(as_who(None, "10.0.0.1", None, json!({}))), key(as_who(None, "10.0.0.2", None, json!({}))));
    let call = as_who(Some("user:alice"), "10.0.0.1", None, json!({"elicitation": {}}));
    let per_caller = text_agent("kept", &["q"]).per_caller();
    let run = call.run(&per_caller);
    assert_eq!(run.metadata.get(&run.extensions)["caller"], alice, "steps see it as the run's metadata");
    let plain = call.run(&text_agent("plain", &["q"]));
    let plain = plain.metadata.get(&plain.extensions).clone();
    assert!(plain.get("caller").is_none(), "made only for agents that keep something per caller: {plain}");
}

/// Paused calls as the build before the use cases became types (d734536) stored them
/// (`greeter`, one text question, `{"n": 1}`, alice, under the secret `[7; 32]`): a plain
/// call, then one followed as a task.
const EARLIER_RECORDS: &str = include_str!("../fixtures/records-d734536.jsonl");

fn earlier_records() -> Vec<Thread> {
    EARLIER_RECORDS.lines().map(|line| serde_json::from_str(line).expect("a record")).collect()
}

fn greeter_call() -> ToolCall {
    let mut arguments = serde_json::Map::new();
    arguments.insert("n".into(), json!(1));
    ToolCall { arguments, capabilities: caps().into(), principal: Some("alice".into()), ..ToolCall::default() }
}

#[test]
fn paused_calls_stored_by_the_earlier_build_are_answered() {
    let f = fixture();
    let engine = Engine::new(f.store.clone(), f.clock.clone(), Secret::new(&[7; 32]).unwrap(), Lifetimes::default());
    let agent = text_agent("greeter", &["What is your name?"]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let [plain, task] = <[Thread; 2]>::try_from(earlier_records()).unwrap();
    let key = plain.round().unwrap().questions[0].key.clone();
    for thread in [&plain, &task] {
        rt.block_on(f.store.create_paused(thread.clone(), "principal:alice", PausedLimits::default()))
            .unwrap()
            .unwrap();
    }
    // The plain call: its client's retry.
    let open = plain.round().unwrap();
    let state = engine.secret().request_state(&plain.id, open.n, &open.nonce);
    let answers: InputResponses = [(key.clone(), accept("Ada"))].into_iter().collect();
    let retry = ToolCall { input_responses: Some(answers), request_state: Some(state), ..greeter_call() };
    assert_eq!(text(&run(engine.call(&agent, retry))), (r#"{"n":1,"a0":"Ada"}"#.to_owned(), false));
    // The task: its update, then its result.
    let answers: InputResponses = [(format!("1:{key}"), accept("Ada"))].into_iter().collect();
    let updated = rt.block_on(engine.tasks().update(&agent, &task.id, Some("alice"), &answers)).unwrap();
    assert_eq!(updated, Ok(()));
    let view = rt.block_on(engine.tasks().get(&task.id, Some("alice"))).unwrap().expect("alice's task");
    assert_eq!(view.status, TaskStatus::Completed);
    assert_eq!(view.result.unwrap().content[0].as_text(), Some(r#"{"n":1,"a0":"Ada"}"#));
}

#[test]
fn this_build_stores_a_paused_call_as_the_earlier_build_did() {
    let f = fixture();
    let agent = text_agent("greeter", &["What is your name?"]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    for (task, earlier) in [false, true].into_iter().zip(earlier_records()) {
        let called = if task {
            run(f.engine.tasks().call(&agent, greeter_call()))
        } else {
            run(f.engine.call(&agent, greeter_call()))
        };
        let asked = round(called);
        let id = asked.request_state.unwrap().split_once('.').unwrap().0.to_owned();
        let mut now = rt.block_on(f.store.load(&id)).unwrap().expect("stored");
        // Only what is drawn at random differs: the id, the nonce and its token's proof.
        now.id.clone_from(&earlier.id);
        let (round, before) = (Arc::make_mut(&mut now.paused_mut().unwrap().round), earlier.round().unwrap());
        (round.nonce, round.proof) = (before.nonce.clone(), before.proof.clone());
        assert_eq!(serde_json::to_value(&now).unwrap(), serde_json::to_value(&earlier).unwrap(), "task: {task}");
    }
}
