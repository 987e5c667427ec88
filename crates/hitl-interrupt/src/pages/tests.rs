//! Pages: an approver's decision, a secret, a sign-in callback, each written into the
//! paused thread and taken by the client's next retry.

use std::sync::{Arc, Mutex};

use hitl_graph::payload::{ActionRequest, ApprovalBy, ReviewConfig, ToolApproval};
use hitl_graph::{START, StateGraph};
use hitl_protocol::{CallToolResponse, ClientCapabilities, ElicitRequestParams, InputRequest, InputRequiredResult};
use serde_json::{Map, Value, json};

use crate::*;
// The tests read a reply as the drivers answer it.
use crate::Answered as Reply;

fn engine() -> Engine {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    // A retry waiting for the approver is held only briefly here (the hold has its own tests).
    let hold = HoldPolicy { hold: std::time::Duration::from_millis(20), ..HoldPolicy::default() };
    Engine::new(store, clock, Secret::generate(), Lifetimes::default())
        .with_pages("https://hitl.example.com/")
        .with_hold(hold)
}

fn caps() -> ClientCapabilities {
    serde_json::from_value(json!({"elicitation": {"form": {}, "url": {}}})).unwrap()
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
}

/// `deploy` reviewed by group:sre on the page; the result says what it ran with.
fn gated() -> Agent {
    let graph = StateGraph::new()
        .add_step("review", |state, ctx| async move {
            let approval = ToolApproval {
                action_request: ActionRequest::new(
                    "deploy",
                    state.as_object().cloned().unwrap(),
                    Some("Deploy it?".into()),
                ),
                review_config: Some(ReviewConfig::new("deploy", ["approve", "edit", "reject", "respond"])),
                approval: Some(ApprovalBy {
                    approvers: vec!["group:sre".into()],
                    policy: "tools = [\"deploy\"]".into(),
                    upstream: Some("ci".into()),
                    tool_description: Some("Deploys a version.".into()),
                    annotations: serde_json::from_value(json!({"destructiveHint": true})).ok(),
                    policy_at: Some("hitl.toml:7".into()),
                    policy_digest: Some("5e0c0ffee5e0c0ffee5e0c0f".into()),
                }),
                covers: None,
            };
            Ok(json!({ "decision": ctx.interrupt(approval.to_value())? }))
        })
        .add_edge(START, "review")
        .compile()
        .unwrap();
    let schema = json!({"type": "object", "properties": {"version": {"type": "string"}}});
    Agent::new("deploy", "", schema, graph)
}

fn call(args: Value, responses: Option<Value>, state: Option<&str>, principal: &str) -> ToolCall {
    ToolCall {
        arguments: args.as_object().cloned().unwrap(),
        input_responses: responses.map(|r| serde_json::from_value(r).unwrap()),
        request_state: state.map(str::to_owned),
        capabilities: caps().into(),
        principal: Some(principal.into()),
        ..ToolCall::default()
    }
}

fn round(reply: Reply) -> InputRequiredResult {
    match reply {
        Ok(CallToolResponse::InputRequired(r)) => r,
        other => panic!("expected input_required, got {other:?}"),
    }
}

fn url_of(r: &InputRequiredResult) -> (String, String, String) {
    let (key, request) = r.input_requests.as_ref().unwrap().iter().next().unwrap();
    let InputRequest::Elicit(ElicitRequestParams::Url(url)) = request else { panic!("a URL question: {request:?}") };
    (key.clone(), url.url.clone(), url.message.clone())
}

fn decision(d: Value) -> PageInput {
    PageInput::Decision(d.as_object().cloned().unwrap())
}

fn look(key: &str) -> Value {
    json!({ key: {"action": "accept"} })
}

#[test]
fn an_approval_is_asked_by_url_and_the_retry_takes_the_approvers_decision() {
    let engine = engine();
    let agent = gated();
    let args = json!({"version": "1.2"});
    let first = round(run(engine.call(&agent, call(args.clone(), None, None, "user:ada"))).unwrap().answered());
    let (key, url, message) = url_of(&first);
    assert_eq!(message, "Waiting for approval by group:sre to run deploy");
    let id = url.strip_prefix("https://hitl.example.com/approvals/").expect("hitl's page").to_owned();
    let state = first.request_state.clone().unwrap();

    // Before the decision, the retry is asked the same URL question, same state.
    let retry = call(args.clone(), Some(look(&key)), Some(&state), "user:ada");
    let again = round(run(engine.call(&agent, retry.clone())).unwrap().answered());
    assert_eq!(url_of(&again).1, url);
    assert_eq!(again.request_state.as_deref(), Some(state.as_str()));
    // The client cannot decide for the approver.
    let forged = json!({ &key: {"action": "accept", "content": {"decision": "approve"}} });
    let err = run(engine.call(&agent, call(args.clone(), Some(forged), Some(&state), "user:ada")))
        .unwrap()
        .answered()
        .unwrap_err();
    assert_eq!(err.message, questions::ANSWERED_ON_PAGE);

    // The page shows the call; a bad edit is refused there; the approver's edit wins once.
    let view = run(engine.pages().get(&id)).unwrap().expect("the page");
    assert_eq!((view.tool.as_str(), view.principal.as_deref()), ("deploy", Some("user:ada")));
    assert_eq!(view.approvers(), ["group:sre"]);
    assert_eq!(view.review.as_ref().unwrap().args, *args.as_object().unwrap());
    let PageKind::Approval { about: Some(about), .. } = &view.page.kind else { panic!("{view:?}") };
    let About { description, upstream, tool_description, annotations, policy_at, policy_digest, covers } =
        about.as_ref();
    assert_eq!(*covers, None, "no approval_ttl: the approval is for this call only");
    assert_eq!(
        (policy_at.as_deref(), policy_digest.as_deref()),
        (Some("hitl.toml:7"), Some("5e0c0ffee5e0c0ffee5e0c0f"))
    );
    assert_eq!((description.as_deref(), upstream.as_deref()), (Some("Deploy it?"), Some("ci")), "what runs it");
    assert_eq!(tool_description.as_deref(), Some("Deploys a version."));
    assert_eq!(annotations.as_ref().and_then(|a| a.get("destructiveHint")), Some(&json!(true)));
    let bad = run(engine.pages().answer(&id, decision(json!({"decision": "edit", "args": "[1]"})), None)).unwrap();
    assert!(matches!(bad, PageAnswer::Refused(_)), "{bad:?}");
    let edit = json!({"decision": "edit", "args": "{\"version\": \"1.3\"}"});
    let taken = run(engine.pages().answer(&id, decision(edit.clone()), Some("user:bob".into()))).unwrap();
    assert!(matches!(taken, PageAnswer::Taken(_)), "{taken:?}");
    let twice =
        run(engine.pages().answer(&id, decision(json!({"decision": "approve"})), Some("user:eve".into()))).unwrap();
    let PageAnswer::AlreadyAnswered(view) = twice else { panic!("{twice:?}") };
    assert_eq!(view.page.answered_by.as_deref(), Some("user:bob"));

    let done = run(engine.call(&agent, retry)).unwrap().answered();
    let Ok(CallToolResponse::Complete(result)) = done else { panic!("{done:?}") };
    let output: Value = serde_json::from_str(result.content[0].as_text().unwrap()).unwrap();
    assert_eq!(output["decision"]["edited_action"]["args"], json!({"version": "1.3"}));
    assert!(run(engine.pages().get(&id)).unwrap().is_none(), "the page is gone once the call resumed");
    assert!(matches!(run(engine.pages().answer(&id, decision(edit), None)).unwrap(), PageAnswer::Gone));
}

#[test]
fn forged_page_ids_lead_nowhere_and_records_with_pages_are_format_2() {
    let engine = engine();
    let first = round(run(engine.call(&gated(), call(json!({}), None, None, "user:ada"))).unwrap().answered());
    let id = url_of(&first).1.rsplit('/').next().unwrap().to_owned();
    let thread_id = id.split('.').next().unwrap();
    let thread = run(engine.store().load(thread_id)).unwrap().unwrap();
    assert_eq!(thread.format, 2);
    let forged = format!("{}AAAA", &id[..id.len() - 4]);
    assert!(run(engine.pages().get(&forged)).unwrap().is_none());
    assert!(run(engine.pages().get(&format!("{thread_id}.1.1.x"))).unwrap().is_none());
    assert!(run(engine.pages().get("not-an-id")).unwrap().is_none());
    // Without pages, the agent's call ends with an error result that says why.
    let clock = Arc::new(ManualClock::new(1));
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let bare = Engine::new(store, clock, Secret::generate(), Lifetimes::default());
    let reply = run(bare.call(&gated(), call(json!({}), None, None, "user:ada"))).unwrap().answered();
    let Ok(CallToolResponse::Complete(result)) = reply else { panic!("{reply:?}") };
    assert!(result.content[0].as_text().unwrap().contains("hitl's pages"), "{result:?}");
}

#[derive(Default)]
struct Heard(Mutex<Vec<String>>);

impl Observer for Heard {
    fn observe(&self, event: &Event<'_>) {
        let said = match event {
            Event::Asked { thread } => format!("asked {}", thread.round().unwrap().n),
            Event::Answered { round, .. } => format!("answered {}", round.n),
            Event::PageAnswered { page } => format!("page {}", page.public_answer().unwrap()),
            Event::Began { step, .. } => format!("began {step}"),
            Event::Finished { result, .. } => format!("finished {}", result.is_error == Some(true)),
            Event::Refused { reason, .. } => format!("refused {reason}"),
            Event::Recorded { entry, .. } => format!("recorded {}", entry["event"]),
        };
        self.0.lock().unwrap().push(said);
    }
}

#[test]
fn a_secret_typed_on_its_page_reaches_the_agent_and_only_the_agent() {
    let heard = Arc::new(Heard::default());
    let engine = engine().with_observer(heard.clone());
    let graph = StateGraph::new()
        .add_step("connect", |_, ctx| async move {
            let token = ctx.ask_secret("GitHub token", "Enter a GitHub token on the page.")?;
            Ok(json!({ "connected": token.is_some_and(|t| t == "ghp_s3cr3t") }))
        })
        .add_edge(START, "connect")
        .compile()
        .unwrap();
    let agent = Agent::new("connect_github", "", json!({}), graph);
    let first = round(run(engine.call(&agent, call(json!({}), None, None, "user:ada"))).unwrap().answered());
    let (key, url, message) = url_of(&first);
    assert!(key.starts_with("secret-"), "{key}");
    assert_eq!(message, "Enter a GitHub token on the page.");
    let id = url.strip_prefix("https://hitl.example.com/secrets/").unwrap().to_owned();
    let taken = run(engine.pages().answer(&id, PageInput::Secret("ghp_s3cr3t".into()), None)).unwrap();
    let PageAnswer::Taken(view) = taken else { panic!() };
    assert_eq!(view.public_answer(), Some(json!({"entered": true})));
    let stored = serde_json::to_string(&run(engine.store().load(&view.thread_id)).unwrap().unwrap()).unwrap();
    assert!(!stored.contains("ghp_s3cr3t"), "the thread keeps it sealed");
    let state = first.request_state.unwrap();
    let done = run(engine.call(&agent, call(json!({}), Some(look(&key)), Some(&state), "user:ada")));
    let Ok(crate::Reply::Complete(result)) = done else { panic!("{done:?}") };
    assert_eq!(result.content[0].as_text(), Some(r#"{"connected":true}"#));
    let heard = heard.0.lock().unwrap().clone();
    assert_eq!(heard, ["asked 1", r#"page {"entered":true}"#, "answered 1", "finished false"]);
}

#[test]
fn a_sign_in_url_carries_the_page_id_as_state_and_the_callback_completes_it() {
    let engine = engine();
    let graph = StateGraph::new()
        .add_step("sign_in", |_, ctx| async move {
            let url = "https://github.com/login/oauth/authorize?client_id=x&state={state}";
            let params = ctx.sign_in("Sign in to GitHub.", url)?;
            Ok(json!({ "code": params.and_then(|p| p.get("code").cloned()) }))
        })
        .add_edge(START, "sign_in")
        .compile()
        .unwrap();
    let agent = Agent::new("sign_in", "", json!({}), graph);
    let first = round(run(engine.call(&agent, call(json!({}), None, None, "user:ada"))).unwrap().answered());
    let (key, url, _) = url_of(&first);
    let state = url.split("state=").nth(1).unwrap().to_owned();
    assert!(run(engine.pages().get(&state)).unwrap().is_some());
    let params: Map<String, Value> = serde_json::from_value(json!({"code": "c0de", "state": state})).unwrap();
    let taken = run(engine.pages().answer(&state, PageInput::Callback(params), None)).unwrap();
    assert!(matches!(taken, PageAnswer::Taken(_)), "{taken:?}");
    let rs = first.request_state.unwrap();
    let done = run(engine.call(&agent, call(json!({}), Some(look(&key)), Some(&rs), "user:ada")));
    let Ok(crate::Reply::Complete(result)) = done else { panic!("{done:?}") };
    assert_eq!(result.content[0].as_text(), Some(r#"{"code":"c0de"}"#));
}

/// A retry held while the approver decides: woken by the decision, it resumes the call
/// at once; every `progress_every` it says whom it waits for; one caller's held retries
/// are bounded.
#[test]
fn a_retry_is_held_until_the_approver_decides() {
    use std::time::Duration;
    let hold =
        HoldPolicy { hold: Duration::from_secs(600), max_per_caller: 1, progress_every: Duration::from_millis(20) };
    let engine = engine().with_hold(hold);
    let agent = gated();
    let args = json!({"version": "1.2"});
    run(async {
        let first = round(engine.call(&agent, call(args.clone(), None, None, "user:ada")).await.unwrap().answered());
        let (key, url, _) = url_of(&first);
        let id = url.rsplit('/').next().unwrap().to_owned();
        let state = first.request_state.clone().unwrap();
        let heard = Arc::new(Mutex::new(Vec::<hitl_graph::Progress>::new()));
        let mut retry = call(args.clone(), Some(look(&key)), Some(&state), "user:ada");
        let sink = heard.clone();
        retry.progress = Some(Arc::new(move |p| sink.lock().unwrap().push(p)));
        let held = tokio::spawn({
            let (engine, agent) = (engine.clone(), agent.clone());
            async move { engine.call(&agent, retry).await }
        });
        // Progress while held: increasing, naming the approvers.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while heard.lock().unwrap().len() < 2 {
            assert!(tokio::time::Instant::now() < deadline, "no progress while held");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The same caller's second retry finds no place: the question again, at once.
        let other = call(args.clone(), Some(look(&key)), Some(&state), "user:ada");
        let again = tokio::time::timeout(Duration::from_secs(30), engine.call(&agent, other)).await.expect("not held");
        assert_eq!(url_of(&round(again.unwrap().answered())).1, url);
        assert!(!held.is_finished(), "the first retry is still held");

        let approve = decision(json!({"decision": "approve"}));
        let taken = engine.pages().answer(&id, approve, Some("user:bob".into())).await.unwrap();
        assert!(matches!(taken, PageAnswer::Taken(_)), "{taken:?}");
        let done = tokio::time::timeout(Duration::from_secs(30), held).await.expect("woken by the decision");
        let crate::Reply::Complete(result) = done.unwrap().unwrap() else { panic!("the call completes") };
        assert!(result.is_error != Some(true), "{result:?}");
        // The hold's reports come first (the run's own progress follows the decision).
        let heard = heard.lock().unwrap();
        let waits: Vec<_> = heard.iter().take_while(|p| p.message.is_some()).collect();
        assert!(waits.len() >= 2, "{heard:?}");
        assert!(waits.windows(2).all(|w| w[0].progress < w[1].progress), "increasing: {heard:?}");
        assert!(waits.iter().all(|p| p.message.as_deref() == Some("waiting for approval by group:sre")), "{heard:?}");
    });
}
