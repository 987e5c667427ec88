//! The engine: runs an agent for one `tools/call`, stores its thread between rounds and
//! resumes it once per round. [`Engine`] is the `call` use case and the one place the
//! core is built; the other use cases ([`Tasks`], [`PageAnswers`], [`Admin`]) are views
//! of the same core that it hands out.

use std::sync::Arc;

use hitl_graph::Agent;
use hitl_protocol::{CallToolResponse, CallToolResult, ErrorObject, InputResponses};
use serde_json::Value;

use crate::call::{ToolCall, checked_arguments, invalid_state};
use crate::first::First;
use crate::resume::{Answer, Resume};
use crate::round::{self, Names};
use crate::shared::{Core, Deadline};
use crate::state::{self, Secret};
use crate::waiting::{HoldPolicy, Relay};
use crate::{
    Admin, Answered, EngineError, LEGACY_CANNOT_ANSWER, Lifetimes, Limits, NEWER_FORMAT, Observer, PageAnswers, Reply,
    Tasks, meter,
};
use hitl_thread::{Clock, PausedLedger, StoreError};

/// Runs agents round by round over a store of threads that counts paused calls (a
/// [`PausedLedger`], whose supertrait is [`ThreadStore`](crate::ThreadStore)). Clones
/// share the store and this process's state (running tasks, held retries, unsaved
/// outcomes); [`Engine::tasks`], [`Engine::pages`] and [`Engine::admin`] hand out the
/// other use cases over the same core.
#[derive(Clone)]
pub struct Engine {
    pub(crate) core: Arc<Core>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("lifetimes", &self.core.lifetimes).finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine over `store`, reading time from `clock`.
    pub fn new(store: Arc<dyn PausedLedger>, clock: Arc<dyn Clock>, secret: Secret, lifetimes: Lifetimes) -> Self {
        Self { core: Arc::new(Core::new(store, clock, secret, lifetimes)) }
    }

    /// The core to change while the engine is built (a copy when it is shared already:
    /// the clones keep theirs, and share this process's state as before).
    fn core_mut(&mut self) -> &mut Core {
        Arc::make_mut(&mut self.core)
    }

    /// Serves questions answered on hitl's pages (approvals, secrets, sign-ins) under
    /// `base_url`: their URLs are `<base_url>/approvals/<id>` and `<base_url>/secrets/<id>`.
    /// Without it, an agent that asks such a question ends with an error result.
    #[must_use]
    pub fn with_pages(mut self, base_url: &str) -> Self {
        self.core_mut().pages = Some(base_url.trim_end_matches('/').into());
        self
    }

    /// Tells `observer` what happens to rounds (for audit trails, notifications,
    /// metrics).
    #[must_use]
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.core_mut().observer = Some(observer);
        self
    }

    /// Sets the limits on paused calls, records and request time.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.core_mut().limits = limits;
        self
    }

    /// Holds retries of calls waiting for an approver as `policy` says.
    #[must_use]
    pub fn with_hold(mut self, policy: HoldPolicy) -> Self {
        self.core_mut().hold = policy;
        self
    }

    /// Calls `relay` with the thread's id whenever a page answer is stored in this
    /// process, so other replicas [`wake`](Engine::wake) the retries they hold on it.
    /// Set once; later calls are ignored.
    pub fn relay_decisions(&self, relay: Relay) {
        self.core.waiting.relay(relay);
    }

    /// Wakes the retries this process holds on `thread_id` (a page answer was stored,
    /// here or on another replica).
    pub fn wake(&self, thread_id: &str) {
        self.core.waiting.wake(thread_id);
    }

    /// The store the engine keeps its threads in and counts paused calls in.
    pub fn store(&self) -> &Arc<dyn PausedLedger> {
        &self.core.store
    }

    /// The server secret (pages seal and verify with it).
    pub fn secret(&self) -> &Secret {
        &self.core.secret
    }

    /// Now, by the engine's clock.
    pub fn now_ms(&self) -> u64 {
        self.core.now_ms()
    }

    /// Calls followed as tasks (the Tasks extension): start, look, answer, cancel.
    pub fn tasks(&self) -> Tasks {
        Tasks::new(self.core.clone())
    }

    /// Questions answered on hitl's pages: read one, answer it.
    pub fn pages(&self) -> PageAnswers {
        PageAnswers::new(self.core.clone())
    }

    /// What operators see of paused calls, and cancel.
    pub fn admin(&self) -> Admin {
        Admin::new(self.core.clone())
    }

    /// Serves one `tools/call` (or `prompts/get`) of `agent`. A pause is answered as a
    /// round when the call is [`Resumable::Yes`](crate::Resumable), else it ends the
    /// call with an error result; a `requestState` answers the round it names.
    pub fn call<'a>(
        &'a self,
        agent: &'a Agent,
        call: ToolCall,
    ) -> impl Future<Output = Result<Reply, EngineError>> + Send + 'a {
        self.serve(agent, call, false)
    }

    /// Serves `call` (see [`Engine::call`]); `task`: the client follows it as a task,
    /// so a new call that pauses makes a task.
    #[allow(clippy::manual_async_fn, reason = "an async fn would keep its arguments twice in its future")]
    pub(crate) fn serve<'a>(
        &'a self,
        agent: &'a Agent,
        mut call: ToolCall,
        task: bool,
    ) -> impl Future<Output = Result<Reply, EngineError>> + Send + 'a {
        async move {
            // The arguments are read only here: taken out of the call, not copied.
            let (arguments, args_digest) = match checked_arguments(agent, std::mem::take(&mut call.arguments)) {
                Ok(checked) => checked,
                Err(error) => return Ok(Reply::Refused(error)),
            };
            let deadline = Deadline::after(self.core.limits.request_timeout);
            // Read only here: taken, not copied.
            let request_state = call.request_state.take();
            // One span per round, with its thread's id (a new call's is made here).
            let span = |thread_id: &str| tracing::info_span!("round", tool = %call.bound_to(agent), thread_id);
            // Every round a call is answered is of one thread: a new call's (made here), or
            // the one its `requestState` names.
            let (answer, thread_id) = match request_state {
                None => {
                    let id = Names::new_id();
                    let span = span(&id);
                    // Each branch boxed: the future of a call stays small (it is moved into a box
                    // per request), and each request allocates only the branch it takes.
                    let started =
                        Box::pin(self.start(agent, call, id.clone(), (arguments, args_digest), deadline, task));
                    (tracing::Instrument::instrument(started, span).await, id)
                }
                Some(request_state) => {
                    let id: Arc<str> = Arc::from(state::split(&request_state).map_or("", |(id, _)| id));
                    let span = span(&id);
                    // The answers are read only here: taken, not copied.
                    let responses = call.input_responses.take().unwrap_or_default();
                    let answered =
                        Box::pin(self.answer(agent, &call, &args_digest, &request_state, responses, deadline));
                    (tracing::Instrument::instrument(answered, span).await, id)
                }
            };
            Ok(Reply::of(newer_format(answer)?, &thread_id))
        }
    }

    /// What a client that can't answer rounds gets when it sends a paused call's
    /// `requestState` (the endpoint asks this instead of [`Engine::call`]): the error
    /// result it gets for any pause while the round is open, else `Invalid or expired
    /// requestState`. Read only: the thread stays as it is for a client that can answer.
    pub async fn peek(&self, agent: &Agent, call: &ToolCall) -> Result<Reply, EngineError> {
        let (_, args_digest) = match checked_arguments(agent, call.arguments.clone()) {
            Ok(checked) => checked,
            Err(error) => return Ok(Reply::Refused(error)),
        };
        let Some(request_state) = call.request_state.as_deref() else { return Ok(Reply::of(invalid_state(), "")) };
        let thread_id = state::split(request_state).map_or("", |(id, _)| id);
        let span = tracing::info_span!("round", tool = %call.bound_to(agent), thread_id);
        let peeked = self.legacy_resend(agent, call, &args_digest, request_state);
        Ok(Reply::of(newer_format(tracing::Instrument::instrument(peeked, span).await)?, thread_id))
    }

    /// A call without `requestState`: a new thread. Answers sent with it answer its
    /// rounds before anything is stored, through the same transitions as a resend.
    #[allow(clippy::manual_async_fn, reason = "an async fn would keep its arguments twice in its future")]
    fn start<'a>(
        &'a self,
        agent: &'a Agent,
        call: ToolCall,
        id: Arc<str>,
        (arguments, args_digest): (Value, Arc<str>),
        deadline: Deadline,
        task: bool,
    ) -> impl Future<Output = Result<Answered, EngineError>> + Send + 'a {
        async move {
            let started = std::time::Instant::now();
            let span = tracing::info_span!("agent_run", tool = %agent.name, thread_id = %id);
            let binding: Arc<str> = Arc::from(&*call.bound_to(agent));
            let run = tracing::Instrument::instrument(
                agent.graph.invoke_run(arguments, self.core.run_of(&call, agent, (&id, &binding))),
                span,
            );
            let outcome = deadline.run(run).await;
            self.core.meters.ran(&agent.name, started);
            let Some(outcome) = outcome else {
                return Ok(Err(self.core.timed_out(false)));
            };
            // Not boxed: this future is in a box of its own, and the run's state is gone
            // by now, so the outcome's state takes its place (one allocation, not two).
            let names = Names { id, binding, args_digest };
            First::new(&self.core, task).outcome(agent, call, names, outcome, deadline).await
        }
    }

    /// A call with `requestState`: answer the open round, or resend the last answers.
    async fn answer(
        &self,
        agent: &Agent,
        call: &ToolCall,
        args_digest: &str,
        request_state: &str,
        responses: InputResponses,
        deadline: Deadline,
    ) -> Result<Answered, EngineError> {
        let binding = call.bound_to(agent);
        let Some((thread_id, token)) = state::split(request_state) else {
            self.core.meters.round(&binding, meter::Outcome::InvalidState);
            return Ok(invalid_state());
        };
        let answer =
            Answer { agent, call, binding: &binding, args_digest, thread_id, token, responses: &responses, hold: true };
        Resume::new(&self.core).answer(answer, deadline).await
    }

    /// A client that can't answer rounds sent a paused call's `requestState`: it gets the
    /// error result it gets for any pause, and the thread is not touched.
    async fn legacy_resend(
        &self,
        agent: &Agent,
        call: &ToolCall,
        args_digest: &str,
        request_state: &str,
    ) -> Result<Answered, EngineError> {
        let core = &self.core;
        let Some((thread_id, token)) = state::split(request_state) else { return Ok(invalid_state()) };
        let Some(thread) = core.store.load(thread_id).await? else { return Ok(invalid_state()) };
        if !round::bound(&thread, &call.bound_to(agent), args_digest, call.principal.as_deref()) {
            return Ok(invalid_state());
        }
        let open = thread.paused().filter(|p| core.secret.verify(&thread.id, p.round.n, &p.round.nonce, token));
        match open {
            Some(paused) => Ok(Ok(CallToolResponse::Complete(CallToolResult::error([
                LEGACY_CANNOT_ANSWER.to_owned(),
                round::pending(&paused.checkpoint.interrupts),
            ])))),
            None => Ok(invalid_state()),
        }
    }
}

/// A thread saved by a newer build is answered as an error, not a store failure.
fn newer_format(answer: Result<Answered, EngineError>) -> Result<Answered, EngineError> {
    match answer {
        Err(EngineError::Store(StoreError::NewerFormat { .. })) => Ok(Err(ErrorObject::internal(NEWER_FORMAT))),
        other => other,
    }
}
