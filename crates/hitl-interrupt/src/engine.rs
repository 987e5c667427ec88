//! The engine: runs an agent for one `tools/call`, stores its thread between rounds and
//! resumes it once per round.

use std::sync::Arc;
use std::time::Duration;

use hitl_graph::{Agent, Checkpoint, Outcome};
use hitl_protocol::version::Era;
use hitl_protocol::{CallToolResponse, CallToolResult, ClientCapabilities, ErrorObject, InputResponses};
use serde_json::{Map, Value};

use crate::lease::{Held, Marks};
use crate::round::{self, Ending, Next, Ran};
use crate::state::{self, Secret};
use crate::unsaved::{self, Kept};
use crate::{Last, Round, THREAD_FORMAT, Thread};
use crate::{meter, questions};
use hitl_thread::{ClaimAttempt, Clock, LimitReached, Loaded, PausedLedger, PausedLimits, SaveError, StoreError};

/// The message of every `requestState` that does not verify.
pub const INVALID_STATE: &str = "Invalid or expired requestState";

/// How long threads live. `default_ttl` (the deployment's thread TTL) shortens all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    /// A paused call, from its latest round.
    pub paused: Duration,
    /// A call finished by a request with a `requestState`, for resends.
    pub finished: Duration,
    /// A paused call whose round needs a mode the client did not declare.
    pub waiting_for_capability: Duration,
    /// How long a request that resumes an agent holds its round before another may
    /// take over (when the first died mid-run). Code before an `interrupt` may then
    /// run again, as in LangGraph.
    pub lease: Duration,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Self {
            paused: Duration::from_secs(24 * 3600),
            finished: Duration::from_secs(600),
            waiting_for_capability: Duration::from_secs(600),
            lease: Duration::from_secs(30),
        }
    }
}

impl Lifetimes {
    /// The defaults, each shortened to `default_ttl` when that is shorter.
    pub fn with_default_ttl(default_ttl: Option<Duration>) -> Self {
        let d = Self::default();
        let cap = |x: Duration| default_ttl.map_or(x, |t| x.min(t));
        Self {
            paused: cap(d.paused),
            finished: cap(d.finished),
            waiting_for_capability: cap(d.waiting_for_capability),
            lease: d.lease,
        }
    }
}

/// How much one caller, and everyone, may make the engine hold and do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Paused calls per owner and in all.
    pub paused: PausedLimits,
    /// The largest thread record stored, as JSON bytes.
    pub max_record_bytes: usize,
    /// How long one request may run agents (`None`: no limit). A paused call whose
    /// resume runs out of time stays paused.
    pub request_timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Self { paused: PausedLimits::default(), max_record_bytes: 1024 * 1024, request_timeout: None }
    }
}

/// How many rounds one request may resolve with answers it carried (a first call's
/// `inputResponses`): past it the call answers `input_required` as usual, so an agent
/// that keeps asking cannot hold a request for ever (rmcp's bound).
pub const MAX_ROUNDS_PER_REQUEST: u32 = 10;

/// The message of a call whose thread was saved by a newer build.
pub const NEWER_FORMAT: &str = "this paused call was saved by a newer hitl";

/// One `tools/call` as the engine sees it.
#[derive(Clone, Default)]
pub struct Call {
    /// The arguments (an object).
    pub arguments: Map<String, Value>,
    /// Answers, by question key.
    pub input_responses: Option<InputResponses>,
    /// The `requestState` echoed by the client.
    pub request_state: Option<String>,
    /// The runtime context for the run.
    pub context: Option<Value>,
    /// What the client declared it can do.
    pub capabilities: ClientCapabilities,
    /// Who is calling, when an auth layer said so.
    pub principal: Option<String>,
    /// The caller's network address, which paused calls count against when there is no
    /// principal.
    pub peer: Option<String>,
    /// The era of the client: a legacy client cannot answer a round.
    pub era: Era,
    /// `true` for `prompts/get`: the call is bound to the prompt, not a tool of the
    /// same name.
    pub prompt: bool,
    /// Called as the agent's supersteps finish (for `notifications/progress`).
    pub progress: Option<hitl_graph::ProgressFn>,
    /// Set when the client went away: the run stops before its next superstep and the
    /// round stays as it was.
    pub cancel: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// The client follows the call as a task (the Tasks extension) if it pauses: its
    /// rounds are then answered with [`Engine::update_task`], in parts.
    pub task: bool,
    /// A 2025-era client's session with hitl (its `Mcp-Session-Id`, which hitl issued
    /// and checked): state an agent keeps per caller is kept per session.
    pub session: Option<String>,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("arguments", &self.arguments)
            .field("input_responses", &self.input_responses)
            .field("request_state", &self.request_state.as_ref().map(|_| ".."))
            .field("context", &self.context)
            .field("capabilities", &self.capabilities)
            .field("principal", &self.principal)
            .field("peer", &self.peer)
            .field("era", &self.era)
            .field("prompt", &self.prompt)
            .field("session", &self.session.as_ref().map(|_| ".."))
            .finish_non_exhaustive()
    }
}

impl Call {
    /// The graph run options of this call: its runtime context, the client's
    /// capabilities as metadata (so an agent can ask only for what the client takes)
    /// with the caller's key ([`Call::caller_key`]), progress and cancellation (effects
    /// are marked only on a stored thread).
    pub(crate) fn run(&self, agent: &Agent) -> hitl_graph::Run {
        let mut metadata = serde_json::json!({ "clientCapabilities": self.capabilities });
        // A 2025-era client (the only kind with a session, pushed to or not) may be
        // answered otherwise than a 2026-07-28 one (the gateway relays an upstream's
        // `-32042` to it as that error).
        if self.era == Era::Legacy || self.session.is_some() {
            metadata["legacyClient"] = Value::Bool(true);
        }
        if agent.per_caller {
            metadata["caller"] = self.caller_key().into();
        }
        hitl_graph::Run {
            context: self.context.clone().unwrap_or(Value::Null),
            metadata,
            progress: self.progress.clone(),
            cancel: self.cancel.clone(),
            effects: None,
        }
    }

    /// The name a thread is bound to.
    pub(crate) fn binding(&self, agent: &Agent) -> String {
        if self.prompt { format!("prompt:{}", agent.name) } else { agent.name.clone() }
    }

    /// Who the call is made for, as an opaque key (a digest) for what an agent keeps
    /// per caller (the gateway: an upstream session): the owner (principal, else
    /// address) with its 2025-era session with hitl, or else with the capabilities it
    /// declared. It comes from the server's view of the caller, so no caller can name
    /// another's key; a different session or capabilities give a different key.
    pub fn caller_key(&self) -> String {
        let who = match &self.session {
            Some(session) => serde_json::json!({"owner": self.owner(), "session": session}),
            None => serde_json::json!({"owner": self.owner(), "capabilities": self.capabilities}),
        };
        crate::digest_hex(&who)
    }

    /// Whose paused calls this call's thread counts among.
    pub(crate) fn owner(&self) -> String {
        match (&self.principal, &self.peer) {
            (Some(principal), _) => format!("principal:{principal}"),
            (None, Some(peer)) => format!("peer:{peer}"),
            (None, None) => "anonymous".to_owned(),
        }
    }
}

/// The first text block of the error result a legacy client gets when a tool pauses.
pub const LEGACY_CANNOT_ANSWER: &str = "This tool paused to ask for human input, and this client can't answer it.";
/// The first text block of the error result when the call cannot keep a thread.
pub const CANNOT_RESUME: &str = "This tool paused to ask for human input, and this call can't be resumed.";
/// The error result of a graph that stopped at a static breakpoint, for clients that
/// can elicit (others get the state at the breakpoint as the result).
pub const BREAKPOINT: &str =
    "This tool stopped at a static breakpoint (interrupt_before or interrupt_after), which can't be resumed over MCP.";

/// An infrastructure failure (the store), as opposed to a protocol error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a call gets: a response, or a JSON-RPC error.
pub type Reply = Result<CallToolResponse, ErrorObject>;

/// Runs agents round by round over a store of threads that counts paused calls (a
/// [`PausedLedger`], whose supertrait is [`ThreadStore`](crate::ThreadStore)).
#[derive(Clone)]
pub struct Engine {
    pub(crate) store: Arc<dyn PausedLedger>,
    pub(crate) clock: Arc<dyn Clock>,
    secret: Secret,
    pub(crate) lifetimes: Lifetimes,
    pub(crate) limits: Limits,
    threads: bool,
    /// The base URL of hitl's pages (`https://hitl.example.com`), when it serves them.
    pages: Option<Arc<str>>,
    observer: Option<Arc<dyn crate::Observer>>,
    /// The tasks this process runs on without a request, so `tasks/cancel` can stop them.
    pub(crate) running: crate::task_runs::Running,
    /// How retries of calls waiting for an approver are held, and those held now.
    pub(crate) hold: crate::HoldPolicy,
    pub(crate) waiting: Arc<crate::waiting::Waiting>,
    /// Outcomes this process holds but could not save yet (the store was down).
    pub(crate) unsaved: Arc<crate::unsaved::Unsaved>,
}

/// When the request's agent work must end.
#[derive(Clone, Copy)]
pub(crate) struct Deadline(Option<tokio::time::Instant>);

impl Deadline {
    /// `timeout` from now (`None`: never).
    pub(crate) fn after(timeout: Option<Duration>) -> Self {
        Self(timeout.map(|t| tokio::time::Instant::now() + t))
    }

    /// `fut`'s output, or `None` when the deadline passed first (`fut` is dropped).
    async fn run<F: std::future::Future>(self, fut: F) -> Option<F::Output> {
        match self.0 {
            None => Some(fut.await),
            Some(at) => tokio::time::timeout_at(at, fut).await.ok(),
        }
    }

    fn passed(self) -> bool {
        self.0.is_some_and(|at| tokio::time::Instant::now() >= at)
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("lifetimes", &self.lifetimes).finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine over `store`, reading time from `clock`.
    pub fn new(store: Arc<dyn PausedLedger>, clock: Arc<dyn Clock>, secret: Secret, lifetimes: Lifetimes) -> Self {
        Self {
            store,
            clock,
            secret,
            lifetimes,
            limits: Limits::default(),
            threads: true,
            pages: None,
            observer: None,
            running: Default::default(),
            hold: crate::HoldPolicy::default(),
            waiting: Arc::default(),
            unsaved: Default::default(),
        }
    }

    /// Serves questions answered on hitl's pages (approvals, secrets, sign-ins) under
    /// `base_url`: their URLs are `<base_url>/approvals/<id>` and `<base_url>/secrets/<id>`.
    /// Without it, an agent that asks such a question ends with an error result.
    #[must_use]
    pub fn with_pages(mut self, base_url: &str) -> Self {
        self.pages = Some(base_url.trim_end_matches('/').into());
        self
    }

    /// Tells `observer` what happens to rounds (for audit trails, notifications,
    /// metrics).
    #[must_use]
    pub fn with_observer(mut self, observer: Arc<dyn crate::Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The store the engine keeps its threads in and counts paused calls in.
    pub fn store(&self) -> &Arc<dyn PausedLedger> {
        &self.store
    }

    /// The server secret (pages seal and verify with it).
    pub fn secret(&self) -> &Secret {
        &self.secret
    }

    /// Now, by the engine's clock.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    pub(crate) fn observing(&self) -> bool {
        self.observer.is_some()
    }

    pub(crate) fn observe(&self, event: crate::Event<'_>) {
        if let Some(observer) = &self.observer {
            observer.observe(&event);
        }
    }

    /// Sets the limits on paused calls, records and request time.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Turns threads off (a deployment that keeps none): a pause then ends the call
    /// with an error result that says it can't be resumed.
    #[must_use]
    pub fn without_threads(mut self) -> Self {
        self.threads = false;
        self
    }

    /// Serves one `tools/call` of `agent`.
    pub async fn call(&self, agent: &Agent, call: Call) -> Result<Reply, EngineError> {
        let (arguments, args_digest) = match checked_arguments(agent, &call) {
            Ok(checked) => checked,
            Err(error) => return Ok(Err(error)),
        };
        let deadline = Deadline::after(self.limits.request_timeout);
        // One span per round, with its thread's id (a new call's is made here).
        let span = |thread_id: &str| tracing::info_span!("round", tool = %call.binding(agent), thread_id);
        let answer = match call.request_state.clone() {
            None => {
                let id = uuid::Uuid::now_v7().to_string();
                let span = span(&id);
                // Each branch boxed: the future of a call stays small (it is moved into a box
                // per request), and each request allocates only the branch it takes.
                let started = Box::pin(self.start(agent, call, id, args_digest, arguments, deadline));
                tracing::Instrument::instrument(started, span).await
            }
            Some(request_state) => {
                let span = span(state::split(&request_state).map_or("", |(id, _)| id));
                let answered = async {
                    // A client that can't answer rounds learns that the call is paused;
                    // the thread stays as it is for the client that can.
                    if call.era == Era::Legacy {
                        self.legacy_resend(agent, &call, &args_digest, &request_state).await
                    } else {
                        Box::pin(self.answer_round(agent, call, args_digest, &request_state, deadline)).await
                    }
                };
                tracing::Instrument::instrument(answered, span).await
            }
        };
        match answer {
            Err(EngineError::Store(StoreError::NewerFormat { .. })) => Ok(Err(ErrorObject::internal(NEWER_FORMAT))),
            other => other,
        }
    }

    /// A call without `requestState`: a new thread. Answers sent with it answer its
    /// rounds before anything is stored, through the same transitions as a resend.
    async fn start(
        &self,
        agent: &Agent,
        call: Call,
        id: String,
        args_digest: String,
        arguments: Value,
        deadline: Deadline,
    ) -> Result<Reply, EngineError> {
        let started = std::time::Instant::now();
        let span = tracing::info_span!("agent_run", tool = %agent.name, thread_id = %id);
        let run = tracing::Instrument::instrument(agent.graph.invoke_run(arguments, call.run(agent)), span);
        let outcome = deadline.run(run).await;
        meter::ran(&agent.name, started);
        let Some(outcome) = outcome else {
            return Ok(Err(self.timed_out(false)));
        };
        Box::pin(self.first_outcome(agent, call, id, args_digest, outcome, deadline)).await
    }

    /// A new call's first run ended with `outcome`: its result, or its first round
    /// stored as thread `id` (answered first by answers the call carried).
    pub(crate) async fn first_outcome(
        &self,
        agent: &Agent,
        call: Call,
        id: String,
        args_digest: String,
        outcome: Result<Outcome, hitl_graph::RunError>,
        deadline: Deadline,
    ) -> Result<Reply, EngineError> {
        let (checkpoint, round) = match self.settle(outcome, 1, &call, &id) {
            Settled::Done(answer) => return Ok(Ok(answer)),
            Settled::Failed(error) => return Ok(Err(error)),
            Settled::Paused(cp, round) => (cp, round),
        };
        let owner = call.owner();
        let mut thread = Thread {
            format: THREAD_FORMAT,
            id,
            version: 1,
            tool: call.binding(agent),
            args_digest,
            principal: call.principal.clone(),
            owner: Some(owner.clone()),
            checkpoint: Some(checkpoint),
            round: Some(round),
            last: None,
            claim: None,
            begun: None,
            task: call.task.then(|| hitl_thread::TaskState::new(self.clock.now_ms(), call.capabilities.clone())),
            expires_at_ms: self.expiry(self.lifetimes.paused),
        };
        if let Some(responses) = &call.input_responses {
            thread = match Box::pin(self.answer_unstored(agent, &call, thread, responses, deadline)).await {
                Unstored::Paused(thread) => *thread,
                Unstored::Ended(reply) => return Ok(reply),
            };
        }
        thread.format = hitl_thread::format_of(&thread);
        let round = thread.round.as_ref().expect("a paused thread has its round");
        if let Some(e) = crate::ask::missing_capability(round, &call.capabilities) {
            meter::round(&thread.tool, meter::Outcome::RefusedCapability);
            return Ok(Err(e));
        }
        if let Err(e) = round::fits(&thread, self.limits.max_record_bytes) {
            return Ok(Err(e));
        }
        let reply = crate::ask::render(&thread.id, round, &self.secret);
        let observed = self.observer.as_ref().map(|_| thread.summary());
        let tool = thread.tool.clone();
        match self.store.create_paused(thread, &owner, self.limits.paused).await {
            Ok(Ok(())) => {
                meter::round(&tool, meter::Outcome::Paused);
                if let Some(thread) = &observed {
                    self.observe(crate::Event::Asked { thread });
                }
                Ok(Ok(reply))
            }
            Ok(Err(limit)) => Ok(Err(self.limit_reached(limit))),
            Err(SaveError::Store(e)) => Err(e.into()),
            Err(SaveError::Conflict(id)) => {
                Err(StoreError::Unavailable(format!("new thread {id} already exists")).into())
            }
        }
    }

    /// A first call's answers resolve its rounds (and the rounds after them that they
    /// also answer) as [`round::decide`] and [`round::end_run`] say, up to
    /// [`MAX_ROUNDS_PER_REQUEST`]; the thread is not stored, so an error or a result ends
    /// it.
    async fn answer_unstored(
        &self,
        agent: &Agent,
        call: &Call,
        mut thread: Thread,
        responses: &InputResponses,
        deadline: Deadline,
    ) -> Unstored {
        let binding = call.binding(agent);
        loop {
            let round = thread.round.as_ref().expect("a paused thread has its round");
            if round.n > MAX_ROUNDS_PER_REQUEST {
                return Unstored::Paused(Box::new(thread));
            }
            // The round's own token: the answers came with the call that opened it.
            let token = self.secret.token(&thread.id, round.n, &round.nonce);
            let request = round::Answering {
                binding: &binding,
                args_digest: &thread.args_digest,
                principal: call.principal.as_deref(),
                token: &token,
                responses,
                capabilities: &call.capabilities,
            };
            let now = self.clock.now_ms();
            let (mut claimed, round, values) =
                match round::decide(Some(thread.clone()), &request, now, self.lifetimes.lease, &self.secret) {
                    Next::Claim { thread, round, values } => (*thread, round, values),
                    Next::Reject(e) => return Unstored::Ended(Err(e)),
                    Next::Finish(ending) => return Unstored::Ended(Ok(CallToolResponse::Complete(ending.result))),
                    // Some answer is missing: the round is stored and asked.
                    _ => return Unstored::Paused(Box::new(thread)),
                };
            let checkpoint = claimed.checkpoint.clone().expect("a paused thread has its checkpoint");
            let outcome = deadline.run(agent.graph.resume_run(checkpoint, values, call.run(agent))).await;
            claimed.claim = None;
            let ran = self.ran(outcome, round.n + 1, call, false, &claimed.id);
            match round::end_run(claimed, ran, &self.end_of(&round, responses, call), &self.secret) {
                Ending::NextRound(next, _) => thread = *next,
                Ending::Finished(_, result) => return Unstored::Ended(Ok(CallToolResponse::Complete(result))),
                Ending::GiveBack(_, error) => return Unstored::Ended(Err(error)),
                // Not given for a call that is not stored (see `ran`): it ends.
                Ending::Retry(_, result) => return Unstored::Ended(Ok(CallToolResponse::Complete(result))),
            }
        }
    }

    /// A client that can't answer rounds sent a paused call's `requestState`: it gets the
    /// error result it gets for any pause, and the thread is not touched.
    async fn legacy_resend(
        &self,
        agent: &Agent,
        call: &Call,
        args_digest: &str,
        request_state: &str,
    ) -> Result<Reply, EngineError> {
        let Some((thread_id, token)) = state::split(request_state) else { return Ok(invalid_state()) };
        let Some(thread) = self.store.load(thread_id).await? else { return Ok(invalid_state()) };
        if !round::bound(&thread, &call.binding(agent), args_digest, call.principal.as_deref()) {
            return Ok(invalid_state());
        }
        let open = thread.round.as_ref().filter(|r| self.secret.verify(&thread.id, r.n, &r.nonce, token));
        match (open, &thread.checkpoint) {
            (Some(_), Some(checkpoint)) => Ok(Ok(CallToolResponse::Complete(CallToolResult::error([
                LEGACY_CANNOT_ANSWER.to_owned(),
                pending(&checkpoint.interrupts),
            ])))),
            _ => Ok(invalid_state()),
        }
    }

    /// A call with `requestState`: answer the open round, or resend the last answers.
    /// The transitions are [`round::decide`]'s; this carries them out.
    pub(crate) async fn answer_round(
        &self,
        agent: &Agent,
        call: Call,
        args_digest: String,
        request_state: &str,
        deadline: Deadline,
    ) -> Result<Reply, EngineError> {
        let binding = call.binding(agent);
        let Some((thread_id, token)) = state::split(request_state) else {
            meter::round(&binding, meter::Outcome::InvalidState);
            return Ok(invalid_state());
        };
        let responses = call.input_responses.clone().unwrap_or_default();
        let request = round::Answering {
            binding: &binding,
            args_digest: &args_digest,
            principal: call.principal.as_deref(),
            token,
            responses: &responses,
            capabilities: &call.capabilities,
        };
        let mut backoff = Duration::from_millis(2);
        // Claim in the step that loads, until a claim so made goes unused.
        let mut claiming = true;
        let bound = crate::binding_digest(&binding, &args_digest, call.principal.as_deref());
        // Set while this retry waits for an approver's decision (`waiting`).
        let mut holding: Option<crate::waiting::Holding> = None;
        // Since when this request waits for an outcome this process keeps unsaved.
        let mut kept_since = None;
        loop {
            // Listening for the decision before the thread is read, so none is missed.
            let notify = holding.as_ref().map(|h| h.held.notify.clone());
            let mut woken = notify.as_deref().map(|n| Box::pin(n.notified()));
            if let Some(woken) = woken.as_mut() {
                woken.as_mut().enable();
            }
            let now = self.clock.now_ms();
            // The store has not got this round's outcome yet, this process has: wait for
            // its save (as for a live claim), a lease's time at most.
            if self.unsaved.holds(thread_id) {
                let since = *kept_since.get_or_insert(now);
                if deadline.passed() {
                    return Ok(Err(self.timed_out(true)));
                }
                if now.saturating_sub(since) >= self.lifetimes.lease.as_millis() as u64 {
                    return Ok(Err(ErrorObject::internal(crate::OUTCOME_KEPT)));
                }
                self.clock.sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(100));
                continue;
            }
            let (loaded, claimed) = if claiming {
                let until_ms = now.saturating_add(self.lifetimes.lease.as_millis() as u64);
                let attempt = ClaimAttempt { token, binding: &bound, now_ms: now, until_ms };
                let Loaded { thread, claimed } = self.store.load_claiming(thread_id, attempt).await?;
                (thread, claimed)
            } else {
                (self.store.load(thread_id).await?, false)
            };
            let loaded_version = loaded.as_ref().map_or(0, |t| t.version);
            // Who a refusal is about, for the observer.
            let whose = self.observer.as_ref().and(loaded.as_ref()).map(|t| (t.tool.clone(), t.principal.clone()));
            let gone = loaded.is_none();
            let awaited = if self.hold.hold.is_zero() || call.task {
                None
            } else {
                loaded.as_ref().and_then(crate::waiting::awaited_approvers)
            };
            let next = round::decide(loaded, &request, now, self.lifetimes.lease, &self.secret);
            if claimed && !matches!(next, Next::Claim { .. }) {
                // The store claimed a round these answers do not resume (refused, or
                // ending the call): give it back, and decide again on the thread as it
                // is then, claiming the usual way.
                self.store.release_claim(thread_id, loaded_version + 1).await?;
                claiming = false;
                continue;
            }
            match next {
                Next::Invalid => {
                    let outcome = if gone { meter::Outcome::Expired } else { meter::Outcome::InvalidState };
                    meter::round(&binding, outcome);
                    return Ok(invalid_state());
                }
                Next::Newer => return Ok(Err(ErrorObject::internal(NEWER_FORMAT))),
                Next::Replay(reply) => {
                    meter::round(&binding, meter::Outcome::Replayed);
                    return Ok(reply);
                }
                Next::Reask(reply) => {
                    // Nothing but an approver can move the call on: wait for them a while.
                    if let (Ok(_), Some(approvers)) = (&reply, &awaited) {
                        match (holding.as_mut(), woken.as_mut()) {
                            (Some(held), Some(woken)) => {
                                let progress = call.progress.as_ref();
                                match self.wait_held(held, woken.as_mut(), approvers, progress).await {
                                    crate::waiting::Woken::Look => continue,
                                    crate::waiting::Woken::Over => {}
                                }
                            }
                            _ => {
                                holding = self.begin_hold(&call.owner(), thread_id, deadline.0);
                                if holding.is_some() {
                                    continue;
                                }
                            }
                        }
                    }
                    return Ok(reply);
                }
                Next::Reject(e) => {
                    meter::round(&binding, refusal(&e));
                    if let Some((tool, principal)) = &whose {
                        let principal = principal.as_deref();
                        self.observe(crate::Event::Refused { thread_id, tool, principal, reason: &e.message });
                    }
                    return Ok(Err(e));
                }
                Next::Finish(ending) => {
                    let round::Finishing { thread, last, result } = *ending;
                    return self.finish(thread, last, CallToolResponse::Complete(result), token, &call).await;
                }
                // The claimer's outcome (or its lapsed lease, if it died) comes next.
                Next::Wait => {
                    if deadline.passed() {
                        return Ok(Err(self.timed_out(true)));
                    }
                    self.clock.sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(100));
                }
                Next::Claim { thread, round, values } => {
                    let saved =
                        if claimed { Ok(()) } else { self.store.save((*thread).clone(), Some(loaded_version)).await };
                    match saved {
                        Ok(()) => {
                            meter::round(&binding, meter::Outcome::Resumed);
                            meter::answered(&binding, round.asked_at_ms, now);
                            self.observe(crate::Event::Answered { thread: &thread, round: &round });
                        }
                        Err(SaveError::Conflict(_)) => continue,
                        Err(SaveError::Store(e)) => return Err(e.into()),
                    }
                    let answered = Answered { round, values, responses: &responses, token };
                    return Box::pin(self.resume_claimed(agent, &call, *thread, answered, deadline)).await;
                }
            }
        }
    }

    /// Waits while this process keeps thread `id`'s outcome unsaved (a short store
    /// outage), until the request's `deadline` or a lease's time: whether it is no
    /// longer kept (saved, or given up to what the store holds), so the request that
    /// ran the call can answer with its outcome rather than an error.
    async fn await_kept(&self, id: &str, deadline: Deadline) -> bool {
        let until = self.clock.now_ms().saturating_add(self.lifetimes.lease.as_millis() as u64);
        let mut backoff = Duration::from_millis(10);
        while self.unsaved.holds(id) {
            if deadline.passed() || self.clock.now_ms() >= until {
                return false;
            }
            self.clock.sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(100));
        }
        true
    }

    /// Runs the agent for a claimed round and stores what [`round::end_run`] says it
    /// led to. While it runs, the claim's lease is renewed and effects the agent begins
    /// are marked on the thread (both saves go through one [`Held`] thread).
    async fn resume_claimed(
        &self,
        agent: &Agent,
        call: &Call,
        thread: Thread,
        answered: Answered<'_>,
        deadline: Deadline,
    ) -> Result<Reply, EngineError> {
        let Answered { round, values, responses, token } = answered;
        let Some(checkpoint) = thread.checkpoint.clone() else {
            let reason = "a paused thread has no checkpoint".to_owned();
            return Err(StoreError::Corrupt { id: thread.id.clone(), reason }.into());
        };
        let span = tracing::info_span!("agent_run", tool = %agent.name, thread_id = %thread.id);
        let held = Arc::new(Held {
            store: self.store.clone(),
            thread: tokio::sync::Mutex::new(thread),
            round: round.n,
            observer: self.observer.clone(),
            begun_in: std::sync::Mutex::new(None),
        });
        let mut run = call.run(agent);
        run.effects = Some(Arc::new(Marks(held.clone())));
        let run = deadline.run(tracing::Instrument::instrument(agent.graph.resume_run(checkpoint, values, run), span));
        let started = std::time::Instant::now();
        let outcome = held.run_renewing(run, self.clock.as_ref(), self.lifetimes.lease).await;
        meter::ran(&agent.name, started);
        let begun_in = *held.begun_in.lock().unwrap_or_else(|p| p.into_inner());
        // The run is over, so the marks it held are dropped: take the thread back
        // without a copy (unless a step kept its context alive).
        let mut thread = match Arc::try_unwrap(held) {
            Ok(held) => held.thread.into_inner(),
            Err(held) => held.thread.lock().await.clone(),
        };
        thread.claim = None;
        let expected = thread.version;
        // Until when the store keeps the call as it stands: an outcome kept unsaved is
        // saved again until then.
        let stored_until = thread.expires_at_ms;
        let ran = self.ran(outcome, round.n + 1, call, true, &thread.id);
        let end = round::EndOf { began_in: begun_in, ..self.end_of(&round, responses, call) };
        let (saved, reply) = match round::end_run(thread, ran, &end, &self.secret) {
            Ending::GiveBack(thread, error) => {
                return match self.store.save(*thread, Some(expected)).await {
                    Ok(()) | Err(SaveError::Conflict(_)) => Ok(Err(error)),
                    Err(SaveError::Store(e)) => Err(e.into()),
                };
            }
            Ending::Retry(thread, result) => {
                return match self.store.save(*thread, Some(expected)).await {
                    Ok(()) | Err(SaveError::Conflict(_)) => Ok(Ok(CallToolResponse::Complete(result))),
                    Err(SaveError::Store(e)) => Err(e.into()),
                };
            }
            Ending::Finished(thread, result) => {
                let owner = thread.owner.clone();
                let (id, tool, principal) = (thread.id.clone(), thread.tool.clone(), thread.principal.clone());
                let copy = self.store.can_be_unreachable().then(|| (*thread).clone());
                let saved = self.store.save_finished(*thread, expected, owner.as_deref()).await;
                let saved = match (saved, copy) {
                    (Err(SaveError::Store(e)), Some(thread)) => {
                        let outcome =
                            unsaved::Outcome { kind: Kept::Finished, thread, expected, until_ms: stored_until };
                        let kept = self.keep_unsaved(outcome, e)?;
                        // The call did end: the trail says so now, not once it is saved.
                        let principal = principal.as_deref();
                        self.observe(crate::Event::Finished {
                            thread_id: &id,
                            tool: &tool,
                            principal,
                            result: &result,
                        });
                        if self.await_kept(&id, deadline).await {
                            return Ok(Ok(CallToolResponse::Complete(result)));
                        }
                        return Ok(Err(kept));
                    }
                    (saved, _) => saved,
                };
                if saved.is_ok() {
                    let principal = principal.as_deref();
                    self.observe(crate::Event::Finished { thread_id: &id, tool: &tool, principal, result: &result });
                }
                (saved, Ok(CallToolResponse::Complete(result)))
            }
            Ending::NextRound(thread, reply) => {
                let (id, owner, until) = (thread.id.clone(), thread.owner.clone(), thread.expires_at_ms);
                let tool = thread.tool.clone();
                let observed = self.observer.as_ref().map(|_| thread.summary());
                let copy = self.store.can_be_unreachable().then(|| (*thread).clone());
                let saved = match (self.store.save(*thread, Some(expected)).await, copy) {
                    (Err(SaveError::Store(e)), Some(thread)) => {
                        let outcome =
                            unsaved::Outcome { kind: Kept::NextRound, thread, expected, until_ms: stored_until };
                        let kept = self.keep_unsaved(outcome, e)?;
                        if self.await_kept(&id, deadline).await {
                            return Ok(reply);
                        }
                        return Ok(Err(kept));
                    }
                    (saved, _) => saved,
                };
                if saved.is_ok() {
                    meter::round(&tool, meter::Outcome::Paused);
                }
                if saved.is_ok()
                    && let Some(thread) = &observed
                {
                    self.observe(crate::Event::Asked { thread });
                }
                if saved.is_ok()
                    && let Some(owner) = &owner
                {
                    // The call lives on to its new expiry; a failure here only makes it
                    // stop counting at its old one.
                    let _ = self.store.count_paused(owner, &id, &tool, until, self.limits.paused).await;
                }
                (saved, reply)
            }
        };
        match saved {
            Ok(()) => Ok(reply),
            Err(SaveError::Store(e)) => Err(e.into()),
            Err(SaveError::Conflict(id)) => self.after_conflict(&id, responses, token, call).await,
        }
    }

    /// Ends the thread with `last` (kept for resends) and answers `response`.
    async fn finish(
        &self,
        thread: Thread,
        last: Last,
        response: CallToolResponse,
        token: &str,
        call: &Call,
    ) -> Result<Reply, EngineError> {
        let expected = thread.version;
        let now = self.clock.now_ms();
        let thread = round::finished(thread, last, now, &self.lifetimes, self.limits.max_record_bytes);
        let owner = thread.owner.clone();
        let (id, tool, principal) = (thread.id.clone(), thread.tool.clone(), thread.principal.clone());
        match self.store.save_finished(thread, expected, owner.as_deref()).await {
            Ok(()) => {
                if let CallToolResponse::Complete(result) = &response {
                    let principal = principal.as_deref();
                    self.observe(crate::Event::Finished { thread_id: &id, tool: &tool, principal, result });
                }
                Ok(Ok(response))
            }
            Err(SaveError::Store(e)) => Err(e.into()),
            Err(SaveError::Conflict(id)) => {
                let responses = call.input_responses.clone().unwrap_or_default();
                self.after_conflict(&id, &responses, token, call).await
            }
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

    fn timed_out(&self, paused: bool) -> ErrorObject {
        let secs = self.limits.request_timeout.map_or(0, |t| t.as_secs_f64().ceil() as u64);
        let tail = if paused { "; the call stays paused, send the same answers again to resume it" } else { "" };
        ErrorObject::internal(format!("the agent did not finish within the request timeout of {secs} s{tail}"))
    }

    /// Another request answered the same round first: when it sent the same answers,
    /// its outcome is the answer; otherwise the state is stale.
    async fn after_conflict(
        &self,
        thread_id: &str,
        responses: &InputResponses,
        token: &str,
        call: &Call,
    ) -> Result<Reply, EngineError> {
        Ok(match self.store.load(thread_id).await? {
            Some(current) => crate::resend::replay(&current, responses, token, &call.capabilities, &self.secret)
                .unwrap_or_else(invalid_state),
            None => invalid_state(),
        })
    }

    /// How a resumed run ended (`None`: out of time), its next round numbered `n`.
    /// `paused` says whether the call stays paused past a timeout (it was stored).
    fn ran(
        &self,
        outcome: Option<Result<Outcome, hitl_graph::RunError>>,
        n: u32,
        call: &Call,
        paused: bool,
        thread_id: &str,
    ) -> Ran {
        match outcome {
            None => Ran::TimedOut(self.timed_out(paused)),
            Some(Err(hitl_graph::RunError::Cancelled(kept))) => Ran::Cancelled(kept),
            Some(Err(e @ hitl_graph::RunError::Transient { .. })) if paused => {
                let message = format!(
                    "The agent failed: {e}. The call is still paused after what it finished: send the same answers again to try again (what was decided and done stands)."
                );
                let hitl_graph::RunError::Transient { kept, .. } = e else { unreachable!("matched above") };
                Ran::Retry(kept, CallToolResult::error([message]))
            }
            Some(outcome) => match self.settle(outcome, n, call, thread_id) {
                Settled::Done(CallToolResponse::Complete(result)) => Ran::Done(result),
                Settled::Done(CallToolResponse::InputRequired(_)) => unreachable!("settle finishes with a result"),
                // A resumed round stores a result: the error becomes one, its data (say,
                // the pages of a `-32042`) as JSON text after its message.
                Settled::Failed(error) => {
                    let data = error.data.as_ref().map(Value::to_string);
                    Ran::Done(CallToolResult::error([error.message].into_iter().chain(data)))
                }
                Settled::Paused(checkpoint, next) => Ran::Paused(Box::new(checkpoint), next),
            },
        }
    }

    /// What [`round::end_run`] needs to know of this call and now.
    fn end_of<'a>(&'a self, round: &'a Round, responses: &'a InputResponses, call: &'a Call) -> round::EndOf<'a> {
        round::EndOf {
            round,
            responses,
            capabilities: &call.capabilities,
            now_ms: self.clock.now_ms(),
            lifetimes: &self.lifetimes,
            max_record_bytes: self.limits.max_record_bytes,
            began_in: None,
        }
    }

    /// Turns a run's outcome into a final answer or the next round.
    pub(crate) fn settle(
        &self,
        outcome: Result<Outcome, hitl_graph::RunError>,
        n: u32,
        call: &Call,
        thread_id: &str,
    ) -> Settled {
        let done = |result: CallToolResult| Settled::Done(CallToolResponse::Complete(result));
        let can_elicit =
            call.era == Era::Modern && (call.capabilities.elicits_form() || call.capabilities.elicits_url());
        match outcome {
            Err(e) => done(CallToolResult::error([format!("The agent failed: {e}")])),
            Ok(Outcome::Done(output)) => match hitl_graph::payload::ErrorReply::parse(&output) {
                Some(hitl_graph::payload::ErrorReply(error)) => {
                    Settled::Failed(serde_json::from_value(Value::Object(error)).unwrap_or_else(|e| {
                        ErrorObject::internal(format!("the agent answered an error that is not valid: {e}"))
                    }))
                }
                None => done(tool_result(&output)),
            },
            Ok(Outcome::Breakpoint { .. }) if can_elicit => done(CallToolResult::error([BREAKPOINT.to_owned()])),
            Ok(Outcome::Breakpoint { state, .. }) => done(CallToolResult::json(&state)),
            Ok(Outcome::Paused { interrupts, .. }) if call.era == Era::Legacy => {
                done(CallToolResult::error([LEGACY_CANNOT_ANSWER.to_owned(), pending(&interrupts)]))
            }
            Ok(Outcome::Paused { interrupts, .. }) if !self.threads => {
                done(CallToolResult::error([CANNOT_RESUME.to_owned(), pending(&interrupts)]))
            }
            Ok(Outcome::Paused { interrupts, checkpoint }) => {
                let built = questions::build(&interrupts).and_then(|questions| {
                    let nonce = state::nonce();
                    let proof = state::proof(&self.secret.token(thread_id, n, &nonce));
                    let mut round = Round { n, nonce, questions, asked_at_ms: self.clock.now_ms(), proof };
                    self.place_pages(thread_id, &mut round)?;
                    Ok(round)
                });
                match built {
                    Err(cannot) => done(cannot.to_result()),
                    Ok(round) => Settled::Paused(checkpoint, round),
                }
            }
        }
    }

    /// Gives each page question of `round` its id and URL.
    fn place_pages(&self, thread_id: &str, round: &mut Round) -> Result<(), crate::answers::NotAskable> {
        let now = self.clock.now_ms();
        for (index, question) in round.questions.iter_mut().enumerate() {
            let Some(page) = &mut question.page else { continue };
            let Some(base) = &self.pages else {
                return Err(crate::answers::NotAskable(format!(
                    "question {} is answered on hitl's pages, which this server does not serve",
                    question.key
                )));
            };
            page.id = self.secret.page_id(thread_id, round.n, index);
            page.asked_at_ms = now;
            let hitl_protocol::InputRequest::Elicit(hitl_protocol::ElicitRequestParams::Url(url)) =
                &mut question.request
            else {
                continue;
            };
            url.url = match &page.kind {
                crate::PageKind::Approval { .. } => format!("{base}/approvals/{}", page.id),
                crate::PageKind::Secret { .. } => format!("{base}/secrets/{}", page.id),
                crate::PageKind::SignIn => url.url.replace("{state}", &page.id),
            };
            hitl_schema::check_url(&url.url).map_err(|e| {
                crate::answers::NotAskable(format!(
                    "the page of question {} cannot be asked: {}",
                    question.key, e.reason
                ))
            })?;
        }
        Ok(())
    }

    pub(crate) fn expiry(&self, lifetime: Duration) -> u64 {
        self.clock.now_ms().saturating_add(lifetime.as_millis() as u64)
    }
}

/// The call's arguments as one JSON value, checked against the agent's input schema,
/// and their digest (what a thread is bound to).
pub(crate) fn checked_arguments(agent: &Agent, call: &Call) -> Result<(Value, String), ErrorObject> {
    if let Some(reserved) = reserved_argument(agent, &call.arguments) {
        let message = format!("{reserved}: argument names beginning with {RESERVED_PREFIX} are reserved");
        return Err(ErrorObject::invalid_params(format!("Invalid arguments for tool {}: {message}", agent.name))
            .with_data(serde_json::json!({ "errors": [{ "path": reserved, "message": message }] })));
    }
    let arguments = Value::Object(call.arguments.clone());
    if let Err(violations) = hitl_schema::validate_value(&agent.input_schema, &arguments) {
        let details: Vec<String> = violations
            .iter()
            .map(|v| if v.field.is_empty() { v.message.clone() } else { format!("{}: {}", v.field, v.message) })
            .collect();
        let errors: Vec<Value> =
            violations.iter().map(|v| serde_json::json!({ "path": v.field, "message": v.message })).collect();
        let error =
            ErrorObject::invalid_params(format!("Invalid arguments for tool {}: {}", agent.name, details.join("; ")))
                .with_data(serde_json::json!({ "errors": errors }));
        return Err(error);
    }
    let digest = hitl_thread::digest_hex(&arguments);
    Ok((arguments, digest))
}

/// The prefix of the state keys agents and the gateway keep beside a call's arguments
/// (a review's decision, a relayed round): a caller may not send them.
const RESERVED_PREFIX: &str = "hitl:";

/// The first argument that names a reserved state key the agent's input schema does not
/// itself declare: sent by a caller, it would stand in for a reviewer's decision.
fn reserved_argument<'a>(agent: &Agent, arguments: &'a serde_json::Map<String, Value>) -> Option<&'a str> {
    let declared = agent.input_schema.get("properties").and_then(Value::as_object);
    arguments
        .keys()
        .find(|name| name.starts_with(RESERVED_PREFIX) && !declared.is_some_and(|p| p.contains_key(name.as_str())))
        .map(String::as_str)
}

/// An agent's output as the call's result: an MCP result it returns as is
/// ([`hitl_graph::payload::ToolResult`]), or its output as JSON.
fn tool_result(output: &Value) -> CallToolResult {
    let Some(hitl_graph::payload::ToolResult(result)) = hitl_graph::payload::ToolResult::parse(output) else {
        return CallToolResult::json(output);
    };
    serde_json::from_value(Value::Object(result)).unwrap_or_else(|e: serde_json::Error| {
        CallToolResult::error([format!("The agent returned a tool result that is not valid: {e}")])
    })
}

/// The pending interrupts as JSON text, the second block of the error results of calls
/// that can't be resumed.
fn pending(interrupts: &[hitl_graph::Interrupt]) -> String {
    let list: Vec<Value> = interrupts.iter().map(|i| serde_json::json!({ "id": i.id, "value": i.value })).collect();
    Value::Array(list).to_string()
}

/// A round with the answers that resume it.
struct Answered<'a> {
    round: Round,
    values: hitl_graph::ResumeValues,
    responses: &'a InputResponses,
    token: &'a str,
}

/// How a refused answer is counted: a round the client cannot answer, or answers that
/// do not fit.
fn refusal(e: &ErrorObject) -> meter::Outcome {
    if e.code == hitl_protocol::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY {
        meter::Outcome::RefusedCapability
    } else {
        meter::Outcome::InvalidAnswer
    }
}

fn invalid_state() -> Reply {
    Err(ErrorObject::invalid_params(INVALID_STATE))
}

/// Where a first call's answers left it.
enum Unstored {
    /// A round to store and ask.
    Paused(Box<Thread>),
    /// The call's reply; nothing is stored.
    Ended(Reply),
}

pub(crate) enum Settled {
    Done(CallToolResponse),
    /// The call is answered with a JSON-RPC error (an agent's [`hitl_graph::payload::ErrorReply`]).
    Failed(ErrorObject),
    Paused(Checkpoint, Round),
}
