//! Outcomes kept while the store is down: saved when it is back, answered to resends,
//! never run twice. The store is the memory store behind a switch that makes every
//! operation fail as an unreachable store does; the clock is manual.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};

use async_trait::async_trait;
use hitl_graph::{START, StateGraph};
use hitl_protocol::{CallToolResponse, ClientCapabilities, InputResponses};
use serde_json::{Value, json};

use crate::*;
// The tests read a reply as the drivers answer it.
use crate::Answered as Reply;
use hitl_thread::{ClaimAttempt, LimitReached, Loaded, PausedLedger, PausedLimits, SaveError, StoreError, ThreadStore};

/// The memory store, out of reach while `down` is set.
struct Flaky {
    inner: MemoryStore<Arc<ManualClock>>,
    down: Arc<AtomicBool>,
}

impl Flaky {
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(SeqCst) { Err(StoreError::Unavailable("broken pipe".into())) } else { Ok(()) }
    }
}

#[async_trait]
impl ThreadStore for Flaky {
    async fn load(&self, id: &str) -> Result<Option<Thread>, StoreError> {
        self.check()?;
        self.inner.load(id).await
    }
    async fn load_claiming(&self, id: &str, attempt: ClaimAttempt<'_>) -> Result<Loaded, StoreError> {
        self.check()?;
        self.inner.load_claiming(id, attempt).await
    }
    async fn release_claim(&self, id: &str, claimed_version: u64) -> Result<bool, StoreError> {
        self.check()?;
        self.inner.release_claim(id, claimed_version).await
    }
    async fn save(&self, thread: Thread, expected: Option<u64>) -> Result<(), SaveError> {
        self.check()?;
        self.inner.save(thread, expected).await
    }
    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        self.check()?;
        self.inner.delete(id).await
    }
}

#[async_trait]
impl PausedLedger for Flaky {
    async fn count_paused(
        &self,
        owner: &str,
        id: &str,
        tool: &str,
        until_ms: u64,
        limits: PausedLimits,
    ) -> Result<Result<(), LimitReached>, StoreError> {
        self.check()?;
        self.inner.count_paused(owner, id, tool, until_ms, limits).await
    }
    async fn paused(&self, offset: usize, limit: usize) -> Result<(Vec<String>, u64), StoreError> {
        self.check()?;
        self.inner.paused(offset, limit).await
    }
    async fn paused_by_tool(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.check()?;
        self.inner.paused_by_tool().await
    }
    async fn uncount_paused(&self, owner: &str, id: &str, tool: &str) -> Result<(), StoreError> {
        self.check()?;
        self.inner.uncount_paused(owner, id, tool).await
    }
}

struct Fixture {
    engine: Engine,
    clock: Arc<ManualClock>,
    down: Arc<AtomicBool>,
    rt: tokio::runtime::Runtime,
}

fn fixture() -> Fixture {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let down = Arc::new(AtomicBool::new(false));
    let store = Arc::new(Flaky { inner: MemoryStore::with_clock(clock.clone()), down: down.clone() });
    let engine = Engine::new(store, clock.clone(), Secret::generate(), Lifetimes::default());
    // One runtime for the whole test: the task saving a kept outcome lives in it.
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    Fixture { engine, clock, down, rt }
}

impl Fixture {
    fn call(&self, agent: &Agent, responses: Option<InputResponses>, state: Option<&str>) -> Reply {
        let capabilities: ClientCapabilities = serde_json::from_value(json!({"elicitation": {}})).unwrap();
        let call = ToolCall {
            input_responses: responses,
            request_state: state.map(str::to_owned),
            capabilities: capabilities.into(),
            ..ToolCall::default()
        };
        self.rt.block_on(self.engine.call(agent, call)).expect("no store failure reaches the caller as one").answered()
    }

    /// The paused call's first round: its answers (`yes` to its question) and state.
    fn paused(&self, agent: &Agent) -> (InputResponses, String) {
        let Ok(CallToolResponse::InputRequired(round)) = self.call(agent, None, None) else { panic!("a round") };
        let key = round.input_requests.as_ref().unwrap().keys().next().unwrap().clone();
        let yes = [(key, json!({"action": "accept", "content": {"response": "yes"}}))].into_iter().collect();
        (yes, round.request_state.unwrap())
    }
}

/// Asks, then begins an effect (counted) during which the store goes down; then asks
/// again when `again`, else finishes.
fn outage_agent(effects: Arc<AtomicU32>, down: Arc<AtomicBool>, again: bool) -> Agent {
    let mut graph = StateGraph::new()
        .add_step("ask", |_, ctx| async move { Ok(json!({ "go": ctx.interrupt(json!("Go?"))? })) })
        .add_step("act", move |_, ctx| {
            let (effects, down) = (effects.clone(), down.clone());
            async move {
                ctx.begin_effect().await?;
                effects.fetch_add(1, SeqCst);
                down.store(true, SeqCst);
                Ok(json!({ "done": true }))
            }
        })
        .add_edge(START, "ask")
        .add_edge("ask", "act");
    if again {
        graph = graph
            .add_step("confirm", |_, ctx| async move { Ok(json!({ "confirmed": ctx.interrupt(json!("Sure?"))? })) })
            .add_edge("act", "confirm");
    }
    Agent::new("act", "", json!({"type": "object"}), graph.compile().unwrap())
}

fn kept(reply: &Reply) -> bool {
    matches!(reply, Err(e) if e.message == OUTCOME_KEPT)
}

fn result_text(reply: &Reply) -> String {
    match reply {
        Ok(CallToolResponse::Complete(r)) => r.content[0].as_text().unwrap().to_owned(),
        other => panic!("expected a result, got {other:?}"),
    }
}

#[test]
fn an_outcome_the_store_missed_is_kept_and_a_resend_gets_it_once_the_store_is_back() {
    let f = fixture();
    let effects = Arc::new(AtomicU32::new(0));
    let agent = outage_agent(effects.clone(), f.down.clone(), false);
    let (yes, state) = f.paused(&agent);
    let thread_id = state.split_once('.').unwrap().0.to_owned();

    let first = f.call(&agent, Some(yes.clone()), Some(&state));
    assert!(kept(&first), "the call learns its outcome is kept: {first:?}");
    assert!(f.engine.core.unsaved.holds(&thread_id));
    // An outage longer than the claim's lease: a resend meanwhile waits a lease's time
    // for the kept outcome, then says so again; it never reads the round as abandoned.
    let during = f.call(&agent, Some(yes.clone()), Some(&state));
    assert!(kept(&during), "{during:?}");
    f.clock.advance(45_000);
    let during = f.call(&agent, Some(yes.clone()), Some(&state));
    assert!(kept(&during), "{during:?}");

    f.down.store(false, SeqCst);
    let after = f.call(&agent, Some(yes.clone()), Some(&state));
    assert_eq!(result_text(&after), r#"{"go":"yes","done":true}"#, "the real result, not an unknown outcome");
    assert!(!f.engine.core.unsaved.holds(&thread_id), "saved, so no longer kept");
    assert_eq!(f.call(&agent, Some(yes), Some(&state)), after, "resends replay the stored result");
    assert_eq!(effects.load(SeqCst), 1, "the effect ran once");
}

#[test]
fn a_next_round_the_store_missed_is_asked_once_the_store_is_back() {
    let f = fixture();
    let effects = Arc::new(AtomicU32::new(0));
    let agent = outage_agent(effects.clone(), f.down.clone(), true);
    let (yes, state) = f.paused(&agent);
    assert!(kept(&f.call(&agent, Some(yes.clone()), Some(&state))));
    f.clock.advance(5_000);
    f.down.store(false, SeqCst);
    let Ok(CallToolResponse::InputRequired(next)) = f.call(&agent, Some(yes.clone()), Some(&state)) else {
        panic!("the next round")
    };
    let key = next.input_requests.as_ref().unwrap().keys().next().unwrap().clone();
    let sure: InputResponses =
        [(key, json!({"action": "accept", "content": {"response": "sure"}}))].into_iter().collect();
    let done = f.call(&agent, Some(sure), next.request_state.as_deref());
    let output: Value = serde_json::from_str(&result_text(&done)).unwrap();
    assert_eq!(output["confirmed"], "sure", "{output}");
    assert_eq!(effects.load(SeqCst), 1);
}

#[test]
fn a_kept_outcome_whose_call_was_taken_over_is_dropped_and_the_store_decides() {
    let f = fixture();
    let effects = Arc::new(AtomicU32::new(0));
    let agent = outage_agent(effects.clone(), f.down.clone(), false);
    let (yes, state) = f.paused(&agent);
    let thread_id = state.split_once('.').unwrap().0.to_owned();
    assert!(kept(&f.call(&agent, Some(yes.clone()), Some(&state))));
    // Another replica, once the store is back and the lease lapsed, ended the round as
    // unknown first (the store itself is shared; this engine's map is its own).
    f.clock.advance(Lifetimes::default().lease.as_millis() as u64 + 1);
    f.down.store(false, SeqCst);
    let other = Engine::new(f.engine.store().clone(), f.clock.clone(), f.engine.secret().clone(), Lifetimes::default());
    let capabilities: ClientCapabilities = serde_json::from_value(json!({"elicitation": {}})).unwrap();
    let resend = ToolCall {
        input_responses: Some(yes.clone()),
        request_state: Some(state.clone()),
        capabilities: capabilities.into(),
        ..ToolCall::default()
    };
    let elsewhere = f.rt.block_on(other.call(&agent, resend)).unwrap().answered();
    // The race is the store's to settle: whichever saved first is what every resend gets.
    let here = f.call(&agent, Some(yes), Some(&state));
    assert_eq!(here, elsewhere, "one outcome for the call");
    assert!(!f.engine.core.unsaved.holds(&thread_id));
    assert_eq!(effects.load(SeqCst), 1);
}

#[test]
fn at_most_max_unsaved_outcomes_are_kept() {
    let unsaved = super::Unsaved::default();
    for n in 0..MAX_UNSAVED {
        assert!(unsaved.insert(&n.to_string()));
    }
    assert!(!unsaved.insert("one more"), "past the bound, an outcome is dropped as before");
    assert!(unsaved.holds("0") && !unsaved.holds("one more"));
    unsaved.remove("0");
    assert!(unsaved.insert("one more"), "room again once one is saved");
}
