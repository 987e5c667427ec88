//! The round state machine of hitl: what happens when an agent exposed as an MCP tool
//! calls `interrupt`, and when the client answers.
//!
//! A `tools/call` without `requestState` starts the agent on a new thread. When it
//! pauses, its interrupts become questions (one `elicitation/create` each, keyed by a
//! digest of the question), the thread is stored, and the call answers
//! `input_required` with a `requestState` of `<thread id>.<token>`. A call with that
//! state and the answers resumes the agent once; the result is the next round or the
//! tool result. Threads live behind the [`ThreadStore`] and [`PausedLedger`] ports of
//! `hitl-thread` (re-exported here with the record); [`MemoryStore`] is the in-process
//! default and `hitl-store-redis` the shared one. [`Engine`] serves calls; the other use
//! cases share its core and are handed out by it: [`Engine::tasks`] ([`Tasks`], calls
//! followed as tasks), [`Engine::pages`] ([`PageAnswers`], questions answered on hitl's
//! pages) and [`Engine::admin`] ([`Admin`], paused calls as operators see them).
//!
//! ```
//! use std::sync::Arc;
//! use hitl_graph::{START, StateGraph};
//! use hitl_interrupt::{Agent, ToolCall, Engine, Lifetimes, MemoryStore, Reply, Secret, SystemClock};
//! use hitl_protocol::ClientCapabilities;
//! use serde_json::json;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let graph = StateGraph::new()
//!     .add_step("choose_region", |_, ctx| async move {
//!         Ok(json!({ "region": ctx.interrupt(json!("Which region should the service deploy to?"))? }))
//!     })
//!     .add_edge(START, "choose_region")
//!     .compile()
//!     .unwrap();
//! let agent = Agent::new("choose_region", "", json!({"type": "object"}), graph);
//! let engine = Engine::new(Arc::new(MemoryStore::default()), Arc::new(SystemClock), Secret::generate(), Lifetimes::default());
//! let capabilities: Arc<ClientCapabilities> = Arc::new(serde_json::from_value(json!({"elicitation": {}})).unwrap());
//!
//! let first = engine.call(&agent, ToolCall { capabilities: capabilities.clone(), ..ToolCall::default() }).await.unwrap();
//! let Reply::Paused { round, .. } = first else { panic!() };
//! let key = round.input_requests.unwrap().keys().next().unwrap().clone();
//! let answers = [(key, json!({"action": "accept", "content": {"response": "eu-west-1"}}))].into_iter().collect();
//! let call = ToolCall { input_responses: Some(answers), request_state: round.request_state, capabilities, ..ToolCall::default() };
//! let Reply::Complete(result) = engine.call(&agent, call).await.unwrap() else { panic!() };
//! assert_eq!(result.content[0].as_text(), Some(r#"{"region":"eu-west-1"}"#));
//! # });
//! ```

mod admin;
mod answers;
mod ask;
mod call;
mod engine;
mod first;
mod lease;
mod lifetimes;
mod meter;
mod page_answers;
mod pages;
mod questions;
mod resend;
mod resume;
mod review;
mod round;
mod running;
mod shared;
mod size;
mod state;
mod task_runs;
mod tasks;
mod unsaved;
mod update;
mod waiting;

/// An agent: defined in `hitl-graph`, so that a crate of agents needs nothing else.
pub use hitl_graph::Agent;
/// The store conformance suite, now `hitl_thread::conformance`.
#[cfg(feature = "test-support")]
pub use hitl_thread::conformance;
/// The record, its ports and the memory store: defined in `hitl-thread`, so that a store
/// needs nothing else.
pub use hitl_thread::{
    AUDIT_KEPT, AUDIT_KEPT_IN_MEMORY, About, AuditLine, BoundCall, CLAIM_BESIDE_FORMAT, Claim, ClaimAttempt, Clock,
    FinishedLimits, Last, LastOutcome, LimitReached, Loaded, ManualClock, MemoryStore, MeteredStore, Notes, Page,
    PageKind, Paused, PausedLedger, PausedLimits, Question, QuestionKind, Records, Round, SaveError, Sleep, Store,
    StoreError, SystemClock, THREAD_FORMAT, TaskState, Thread, ThreadState, ThreadStore, binding_digest, canonical,
    create_paused_in_steps, digest_hex, format_of, hex, save_finished_in_steps, short_digest,
};

pub use admin::{Admin, PausedCall, PausedCalls};
pub(crate) use call::Answered;
pub use call::{
    BREAKPOINT, Binding, CANNOT_RESUME, EngineError, INVALID_STATE, LEGACY_CANNOT_ANSWER, NEWER_FORMAT, Reply,
    Resumable, ToolCall,
};
pub use engine::Engine;
pub use lifetimes::{Lifetimes, Limits, MAX_ROUNDS_PER_REQUEST};
pub use page_answers::PageAnswers;
pub use pages::{Event, Observer, PageAnswer, PageInput, PageView};
pub use state::{PageId, Secret, WeakSecret};
pub use task_runs::TaskStart;
pub use tasks::{TaskStatus, TaskView, Tasks, unknown_task};
pub use unsaved::{MAX_UNSAVED, OUTCOME_KEPT};
pub use waiting::{HoldPolicy, Relay};

#[cfg(test)]
mod tests;
