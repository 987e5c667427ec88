//! The core every use case of the engine shares: the store, the clock, the secret, the
//! lifetimes and limits, the observer, and the state of this process (its running
//! tasks, its held retries, its unsaved outcomes). One [`Core`] behind one `Arc`;
//! [`Engine`](crate::Engine), [`Tasks`](crate::Tasks), [`PageAnswers`](crate::PageAnswers)
//! and [`Admin`](crate::Admin) are views of it.

use std::sync::Arc;
use std::time::Duration;

use hitl_protocol::{ErrorObject, InputResponses};

use crate::call::{Resumable, ToolCall};
use crate::round::{Asking, EndOf};
use crate::running::Running;
use crate::state::{self, Secret};
use crate::unsaved::Saver;
use crate::unsaved::Unsaved;
use crate::waiting::{HoldPolicy, Waiting};
use crate::{Clock, Lifetimes, LimitReached, Limits, Observer, PausedLedger, Round};

/// What the use cases share. Cloned only while an engine is built (each `with_*`);
/// the state of the process (`running`, `waiting`, `unsaved`) is shared by the clones.
#[derive(Clone)]
pub(crate) struct Core {
    pub(crate) store: Arc<dyn PausedLedger>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) secret: Secret,
    pub(crate) lifetimes: Lifetimes,
    pub(crate) limits: Limits,
    /// The base URL of hitl's pages (`https://hitl.example.com`), when it serves them.
    pub(crate) pages: Option<Arc<str>>,
    pub(crate) observer: Option<Arc<dyn Observer>>,
    /// The tasks this process runs on without a request, so `tasks/cancel` can stop them.
    pub(crate) running: Running,
    /// How retries of calls waiting for an approver are held, and those held now.
    pub(crate) hold: HoldPolicy,
    pub(crate) waiting: Arc<Waiting>,
    /// Outcomes this process holds but could not save yet (the store was down).
    pub(crate) unsaved: Arc<Unsaved>,
    /// The engine's metric handles, per tool.
    pub(crate) meters: Arc<crate::meter::Meters>,
}

impl Core {
    pub(crate) fn new(
        store: Arc<dyn PausedLedger>,
        clock: Arc<dyn Clock>,
        secret: Secret,
        lifetimes: Lifetimes,
    ) -> Self {
        Self {
            store,
            clock,
            secret,
            lifetimes,
            limits: Limits::default(),
            pages: None,
            observer: None,
            running: Running::default(),
            hold: HoldPolicy::default(),
            waiting: Arc::default(),
            unsaved: Arc::default(),
            meters: Arc::default(),
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// `lifetime` from now, in ms since the epoch.
    pub(crate) fn expiry(&self, lifetime: Duration) -> u64 {
        self.now_ms().saturating_add(lifetime.as_millis() as u64)
    }

    pub(crate) fn observing(&self) -> bool {
        self.observer.is_some()
    }

    pub(crate) fn observe(&self, event: crate::Event<'_>) {
        if let Some(observer) = &self.observer {
            observer.observe(&event);
        }
    }

    /// The graph run of `call` of `agent` ([`ToolCall::run`]) in thread `thread_id`
    /// (its [`hitl_graph::CallThread`]), bound to `tool` (the thread's, or a new call's
    /// binding), with an [`hitl_graph::AuditSink`] that hands its steps' entries to the
    /// observer, when there is one.
    pub(crate) fn run_of(
        &self,
        call: &ToolCall,
        agent: &hitl_graph::Agent,
        (thread_id, tool): (&Arc<str>, &Arc<str>),
    ) -> hitl_graph::Run {
        let mut run = call.run(agent);
        run.extensions.insert(hitl_graph::CallThread(thread_id.to_string()));
        if let Some(observer) = &self.observer {
            let (observer, tool, principal) = (observer.clone(), tool.clone(), call.principal.clone());
            let thread_id = thread_id.clone();
            run.extensions.insert(hitl_graph::AuditSink::new(move |entry| {
                let principal = principal.as_deref();
                observer.observe(&crate::Event::Recorded {
                    thread_id: &thread_id,
                    tool: &tool,
                    principal,
                    entry: &entry,
                });
            }));
        }
        run
    }

    /// What makes round `n` of `call`'s thread `thread_id`, now: the clock read and a
    /// fresh nonce drawn here, so the round logic stays pure.
    pub(crate) fn asking<'a>(&'a self, call: &ToolCall, thread_id: &'a str, n: u32) -> Asking<'a> {
        let unresumable = match call.resumable {
            Resumable::Yes => None,
            Resumable::No(why) => Some(why),
        };
        Asking {
            thread_id,
            n,
            now_ms: self.now_ms(),
            nonce: state::nonce(),
            pages: self.pages.as_deref(),
            unresumable,
            can_elicit: call.resumable != Resumable::LEGACY
                && (call.capabilities.elicits_form() || call.capabilities.elicits_url()),
        }
    }

    /// What [`round::end_run`](crate::round::end_run) needs to know of this call and
    /// now.
    pub(crate) fn end_of<'a>(
        &'a self,
        round: &'a Round,
        responses: &'a InputResponses,
        call: &'a ToolCall,
    ) -> EndOf<'a> {
        EndOf {
            round,
            responses,
            capabilities: &call.capabilities,
            now_ms: self.now_ms(),
            lifetimes: &self.lifetimes,
            max_record_bytes: self.limits.max_record_bytes,
            began_in: None,
        }
    }

    /// What saving an outcome kept unsaved takes.
    pub(crate) fn saver(&self) -> Saver {
        Saver {
            store: self.store.clone(),
            clock: self.clock.clone(),
            observer: self.observer.clone(),
            paused: self.limits.paused,
            unsaved: self.unsaved.clone(),
            meters: self.meters.clone(),
        }
    }

    pub(crate) fn limit_reached(&self, limit: LimitReached) -> ErrorObject {
        ErrorObject::internal(match limit {
            LimitReached::PerOwner => format!(
                "too many paused calls from this caller: the limit is {} (--max-paused-per-caller); \
                 answer or let some expire first",
                self.limits.paused.per_owner
            ),
            LimitReached::Total => format!(
                "too many paused calls on this server: the limit is {} (--max-paused-calls)",
                self.limits.paused.total
            ),
        })
    }

    /// The error of a request whose agent ran out of its time; `paused`: the call stays
    /// paused (it was stored).
    pub(crate) fn timed_out(&self, paused: bool) -> ErrorObject {
        let secs = self.limits.request_timeout.map_or(0, |t| t.as_secs_f64().ceil() as u64);
        let tail = if paused { "; the call stays paused, send the same answers again to resume it" } else { "" };
        ErrorObject::internal(format!("the agent did not finish within the request timeout of {secs} s{tail}"))
    }
}

/// When the request's agent work must end.
#[derive(Clone, Copy)]
pub(crate) struct Deadline(pub(crate) Option<tokio::time::Instant>);

impl Deadline {
    /// `timeout` from now (`None`: never).
    pub(crate) fn after(timeout: Option<Duration>) -> Self {
        Self(timeout.map(|t| tokio::time::Instant::now() + t))
    }

    /// `fut`'s output, or `None` when the deadline passed first (`fut` is dropped).
    /// Not an `async fn`: one place for `fut` with a deadline or without (an `async fn`
    /// matching on the deadline kept one for each, and a round's future doubled with it).
    pub(crate) fn run<F: std::future::Future>(self, fut: F) -> impl std::future::Future<Output = Option<F::Output>> {
        use futures_util::FutureExt as _;
        use futures_util::future::Either;
        match self.0 {
            None => Either::Left(fut.map(Some)),
            Some(at) => Either::Right(tokio::time::timeout_at(at, fut).map(|r| r.ok())),
        }
    }

    pub(crate) fn passed(self) -> bool {
        self.0.is_some_and(|at| tokio::time::Instant::now() >= at)
    }
}
