//! Answering a stored round: the request's answers resume the agent exactly once. The
//! transitions are [`round::decide`]'s and [`round::end_run`]'s; [`Resume`] carries
//! them out: it claims the round as it loads (or compare-and-set), waits while another
//! request runs it (or while this process keeps its outcome unsaved), holds a retry
//! that waits only on an approver, runs the agent under the claim's lease, and stores
//! what the run led to. A client's retry ([`Engine::call`](crate::Engine::call)) and a
//! task's complete round ([`Tasks::update`](crate::Tasks::update)) both answer here.

use std::sync::Arc;
use std::time::Duration;

use hitl_graph::Agent;
use hitl_protocol::{CallToolResponse, CallToolResult, ErrorObject, InputResponses};

use crate::call::{ToolCall, invalid_state};
use crate::lease::{Held, Marks};
use crate::round::{self, Ending, Next};
use crate::shared::{Core, Deadline};
use crate::unsaved::{self, Kept};
use crate::waiting::{Holding, Woken, awaited_approvers};
use crate::{Answered, EngineError, Last, NEWER_FORMAT, Round, Thread, meter, resend};
use hitl_thread::{ClaimAttempt, Loaded, SaveError, StoreError};

/// A request's answers to a stored round.
#[derive(Clone, Copy)]
pub(crate) struct Answer<'a> {
    /// The agent the round resumes.
    pub(crate) agent: &'a Agent,
    /// The call the run is made for: its caller, capabilities and run options.
    pub(crate) call: &'a ToolCall,
    /// The tool (or `prompt:<name>`) the call is made to.
    pub(crate) binding: &'a str,
    /// Digest of the call's arguments.
    pub(crate) args_digest: &'a str,
    /// The thread.
    pub(crate) thread_id: &'a str,
    /// The round's token (from the `requestState`, or the task's own round).
    pub(crate) token: &'a str,
    /// The answers, by question key.
    pub(crate) responses: &'a InputResponses,
    /// A retry that can only wait for an approver may be held (not a task's).
    pub(crate) hold: bool,
}

/// Answers stored rounds over the core.
pub(crate) struct Resume<'a> {
    core: &'a Arc<Core>,
}

impl<'a> Resume<'a> {
    pub(crate) fn new(core: &'a Arc<Core>) -> Self {
        Self { core }
    }

    /// Answers the round of `answer` (or replays the last answers), as
    /// [`round::decide`] says.
    pub(crate) async fn answer(&self, answer: Answer<'_>, deadline: Deadline) -> Result<Answered, EngineError> {
        let core = self.core;
        let Answer { call, binding, args_digest, thread_id, token, responses, .. } = answer;
        let request = round::Answering {
            binding,
            args_digest,
            principal: call.principal.as_deref(),
            token,
            responses,
            capabilities: &call.capabilities,
        };
        let mut backoff = Duration::from_millis(2);
        // Claim in the step that loads, until a claim so made goes unused.
        let mut claiming = true;
        let bound = hitl_thread::BoundCall::new(binding, args_digest, call.principal.as_deref());
        // Set while this retry waits for an approver's decision (`waiting`).
        let mut holding: Option<Holding> = None;
        // Since when this request waits for an outcome this process keeps unsaved.
        let mut kept_since = None;
        loop {
            // Listening for the decision before the thread is read, so none is missed.
            let notify = holding.as_ref().map(|h| h.held.notify.clone());
            let mut woken = notify.as_deref().map(|n| Box::pin(n.notified()));
            if let Some(woken) = woken.as_mut() {
                woken.as_mut().enable();
            }
            let now = core.clock.now_ms();
            // The store has not got this round's outcome yet, this process has: wait for
            // its save (as for a live claim), a lease's time at most.
            if core.unsaved.holds(thread_id) {
                let since = *kept_since.get_or_insert(now);
                if deadline.passed() {
                    return Ok(Err(core.timed_out(true)));
                }
                if now.saturating_sub(since) >= core.lifetimes.lease.as_millis() as u64 {
                    return Ok(Err(ErrorObject::internal(crate::OUTCOME_KEPT)));
                }
                core.clock.sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(100));
                continue;
            }
            let (loaded, claimed) = if claiming {
                let until_ms = now.saturating_add(core.lifetimes.lease.as_millis() as u64);
                let attempt = ClaimAttempt { token, binding: &bound, now_ms: now, until_ms };
                let Loaded { thread, claimed } = core.store.load_claiming(thread_id, attempt).await?;
                (thread, claimed)
            } else {
                (core.store.load(thread_id).await?, false)
            };
            let loaded_version = loaded.as_ref().map_or(0, |t| t.version);
            // Who a refusal is about, for the observer.
            let whose = core.observer.as_ref().and(loaded.as_ref()).map(|t| (t.tool.clone(), t.principal.clone()));
            let gone = loaded.is_none();
            let awaited = if core.hold.hold.is_zero() || !answer.hold {
                None
            } else {
                loaded.as_ref().and_then(awaited_approvers)
            };
            let next = round::decide(loaded, &request, now, core.lifetimes.lease, &core.secret);
            if claimed && !matches!(next, Next::Claim { .. }) {
                // The store claimed a round these answers do not resume (refused, or
                // ending the call): give it back, and decide again on the thread as it
                // is then, claiming the usual way.
                core.store.release_claim(thread_id, loaded_version + 1).await?;
                claiming = false;
                continue;
            }
            match next {
                Next::Invalid => {
                    let outcome = if gone { meter::Outcome::Expired } else { meter::Outcome::InvalidState };
                    core.meters.round(binding, outcome);
                    return Ok(invalid_state());
                }
                Next::Newer => return Ok(Err(ErrorObject::internal(NEWER_FORMAT))),
                Next::Replay(reply) => {
                    core.meters.round(binding, meter::Outcome::Replayed);
                    return Ok(reply);
                }
                Next::Reask(reply) => {
                    // Nothing but an approver can move the call on: wait for them a while.
                    if let (Ok(_), Some(approvers)) = (&reply, &awaited) {
                        match (holding.as_mut(), woken.as_mut()) {
                            (Some(held), Some(woken)) => {
                                let progress = call.progress.as_ref();
                                match held.wait(woken.as_mut(), approvers, progress).await {
                                    Woken::Look => continue,
                                    Woken::Over => {}
                                }
                            }
                            _ => {
                                holding = core.waiting.hold(&core.hold, &call.owner(), thread_id, deadline.0);
                                if holding.is_some() {
                                    continue;
                                }
                            }
                        }
                    }
                    return Ok(reply);
                }
                Next::Reject(e) => {
                    core.meters.round(binding, refusal(&e));
                    if let Some((tool, principal)) = &whose {
                        let principal = principal.as_deref();
                        core.observe(crate::Event::Refused { thread_id, tool, principal, reason: &e.message });
                    }
                    return Ok(Err(e));
                }
                Next::Finish(ending) => {
                    let round::Finishing { thread, last, result } = *ending;
                    // Boxed: a round that ends without a run (declined, or its answers
                    // finish the call) is not the hot path, and its future is large.
                    let finished = self.finish(thread, last, CallToolResponse::Complete(result), &answer);
                    return Box::pin(finished).await;
                }
                // The claimer's outcome (or its lapsed lease, if it died) comes next.
                Next::Wait => {
                    if deadline.passed() {
                        return Ok(Err(core.timed_out(true)));
                    }
                    core.clock.sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(100));
                }
                Next::Claim { thread, round, values } => {
                    let saved =
                        if claimed { Ok(()) } else { core.store.save((*thread).clone(), Some(loaded_version)).await };
                    match saved {
                        Ok(()) => {
                            core.meters.round(binding, meter::Outcome::Resumed);
                            core.meters.answered(binding, round.asked_at_ms, now);
                            core.observe(crate::Event::Answered { thread: &thread, round: &round });
                        }
                        Err(SaveError::Conflict(_)) => continue,
                        Err(SaveError::Store(e)) => return Err(e.into()),
                    }
                    return Box::pin(self.resume_claimed(&answer, *thread, round, values, deadline)).await;
                }
            }
        }
    }

    /// Waits while this process keeps thread `id`'s outcome unsaved (a short store
    /// outage), until the request's `deadline` or a lease's time: whether it is no
    /// longer kept (saved, or given up to what the store holds), so the request that
    /// ran the call can answer with its outcome rather than an error.
    async fn await_kept(&self, id: &str, deadline: Deadline) -> bool {
        let core = self.core;
        let until = core.clock.now_ms().saturating_add(core.lifetimes.lease.as_millis() as u64);
        let mut backoff = Duration::from_millis(10);
        while core.unsaved.holds(id) {
            if deadline.passed() || core.clock.now_ms() >= until {
                return false;
            }
            core.clock.sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(100));
        }
        true
    }

    /// The claimed round's run, from `checkpoint` with the answers `values`, its lease
    /// renewed while it goes on: the run's outcome, the thread as the run left it (its
    /// claim still in), and the last superstep in which it began an effect. A future of
    /// its own, so the run's large state is not kept beside the state of the round's end.
    fn run_claimed<'b>(
        &'b self,
        agent: &'b Agent,
        call: &'b ToolCall,
        thread: Thread,
        round: u32,
        (checkpoint, values): (hitl_graph::Checkpoint, hitl_graph::ResumeValues),
        deadline: Deadline,
    ) -> impl Future<Output = (Option<Result<hitl_graph::Outcome, hitl_graph::RunError>>, Thread, Option<u32>)> + Send + 'b
    {
        let core = self.core;
        let span = tracing::info_span!("agent_run", tool = %agent.name, thread_id = %thread.id);
        let base = core.run_of(call, agent, (&thread.id, &thread.tool));
        let held = Arc::new(Held {
            store: core.store.clone(),
            thread: tokio::sync::Mutex::new(thread),
            round,
            observer: core.observer.clone(),
            begun_in: std::sync::Mutex::new(None),
        });
        let run = hitl_graph::Run { effects: Some(Arc::new(Marks(held.clone()))), ..base };
        async move {
            let started = std::time::Instant::now();
            let outcome = {
                // Made and pinned in place, dropped as it ends (its span closes with it).
                let graph_run = agent.graph.resume_run(checkpoint, values, run);
                let run = std::pin::pin!(deadline.run(tracing::Instrument::instrument(graph_run, span)));
                held.run_renewing(run, core.clock.as_ref(), core.lifetimes.lease).await
            };
            core.meters.ran(&agent.name, started);
            let begun_in = *held.begun_in.lock().unwrap_or_else(|p| p.into_inner());
            // The run is over, so the marks it held are dropped: take the thread back
            // without a copy (unless a step kept its context alive).
            let thread = match Arc::try_unwrap(held) {
                Ok(held) => held.thread.into_inner(),
                Err(held) => held.thread.lock().await.clone(),
            };
            (outcome, thread, begun_in)
        }
    }

    /// Runs the agent for a claimed round and stores what [`round::end_run`] says it
    /// led to. While it runs, the claim's lease is renewed and effects the agent begins
    /// are marked on the thread (both saves go through one [`Held`] thread).
    #[allow(clippy::manual_async_fn, reason = "an async fn would keep its arguments twice in its future")]
    fn resume_claimed(
        &self,
        answer: &Answer<'_>,
        thread: Thread,
        round: std::sync::Arc<Round>,
        values: hitl_graph::ResumeValues,
        deadline: Deadline,
    ) -> impl Future<Output = Result<Answered, EngineError>> + Send {
        async move {
            let Answer { agent, call, .. } = *answer;
            let Some(checkpoint) = thread.paused().map(|p| (*p.checkpoint).clone()) else {
                let reason = "a claimed thread is not paused".to_owned();
                return Err(StoreError::Corrupt { id: thread.id.to_string(), reason }.into());
            };
            let (outcome, mut thread, begun_in) =
                self.run_claimed(agent, call, thread, round.n, (checkpoint, values), deadline).await;
            thread.set_claim(None);
            self.end_claimed(answer, thread, &round, (outcome, begun_in), deadline).await
        }
    }

    /// Stores what [`round::end_run`] says a claimed round's run led to, and answers.
    /// A future of its own, as the run's is: the states of the two are not laid out
    /// side by side in one future.
    #[allow(clippy::manual_async_fn, reason = "an async fn would keep its arguments twice in its future")]
    fn end_claimed(
        &self,
        answer: &Answer<'_>,
        thread: Thread,
        round: &Round,
        (outcome, begun_in): (Option<Result<hitl_graph::Outcome, hitl_graph::RunError>>, Option<u32>),
        deadline: Deadline,
    ) -> impl Future<Output = Result<Answered, EngineError>> + Send {
        async move {
            let core = self.core;
            let Answer { call, responses, .. } = *answer;
            let expected = thread.version;
            // Until when the store keeps the call as it stands: an outcome kept unsaved is
            // saved again until then.
            let stored_until = thread.expires_at_ms;
            let asking = core.asking(call, &thread.id, round.n + 1);
            let ran = round::ran(outcome, true, || core.timed_out(true), &asking, &core.secret);
            let end = round::EndOf { began_in: begun_in, ..core.end_of(round, responses, call) };
            let (saved, reply) = match round::end_run(thread, ran, &end, &core.secret) {
                Ending::GiveBack(thread, error) => {
                    return match core.store.save(*thread, Some(expected)).await {
                        Ok(()) | Err(SaveError::Conflict(_)) => Ok(Err(error)),
                        Err(SaveError::Store(e)) => Err(e.into()),
                    };
                }
                Ending::Retry(thread, result) => {
                    return match core.store.save(*thread, Some(expected)).await {
                        Ok(()) | Err(SaveError::Conflict(_)) => Ok(Ok(CallToolResponse::Complete(result))),
                        Err(SaveError::Store(e)) => Err(e.into()),
                    };
                }
                Ending::Finished(thread, own) => {
                    let owner = thread.owner.clone();
                    let last = if own.is_none() { thread.last.clone() } else { None };
                    let (id, tool, principal) = (thread.id.clone(), thread.tool.clone(), thread.principal.clone());
                    let finished = |result: &CallToolResult| {
                        let principal = principal.as_deref();
                        core.observe(crate::Event::Finished { thread_id: &id, tool: &tool, principal, result });
                    };
                    let copy = core.store.can_be_unreachable().then(|| (*thread).clone());
                    let saved = core.store.save_finished(*thread, expected, owner.as_deref()).await;
                    let result = own.unwrap_or_else(|| round::kept_result(last));
                    let saved = match (saved, copy) {
                        (Err(SaveError::Store(e)), Some(thread)) => {
                            let outcome =
                                unsaved::Outcome { kind: Kept::Finished, thread, expected, until_ms: stored_until };
                            let kept = core.saver().keep(outcome, e)?;
                            // The call did end: the trail says so now, not once it is saved.
                            finished(&result);
                            if self.await_kept(&id, deadline).await {
                                return Ok(Ok(CallToolResponse::Complete(result)));
                            }
                            return Ok(Err(kept));
                        }
                        (saved, _) => saved,
                    };
                    if saved.is_ok() {
                        finished(&result);
                    }
                    (saved, Ok(CallToolResponse::Complete(result)))
                }
                Ending::NextRound(thread, reply) => {
                    let (id, owner, until) = (thread.id.clone(), thread.owner.clone(), thread.expires_at_ms);
                    let tool = thread.tool.clone();
                    let observed = core.observer.as_ref().map(|_| (*thread).clone());
                    let copy = core.store.can_be_unreachable().then(|| (*thread).clone());
                    let saved = match (core.store.save(*thread, Some(expected)).await, copy) {
                        (Err(SaveError::Store(e)), Some(thread)) => {
                            let outcome =
                                unsaved::Outcome { kind: Kept::NextRound, thread, expected, until_ms: stored_until };
                            let kept = core.saver().keep(outcome, e)?;
                            if self.await_kept(&id, deadline).await {
                                return Ok(reply);
                            }
                            return Ok(Err(kept));
                        }
                        (saved, _) => saved,
                    };
                    if saved.is_ok() {
                        core.meters.round(&tool, meter::Outcome::Paused);
                    }
                    if saved.is_ok()
                        && let Some(thread) = &observed
                    {
                        core.observe(crate::Event::Asked { thread });
                    }
                    if saved.is_ok()
                        && let Some(owner) = &owner
                    {
                        // The call lives on to its new expiry; a failure here only makes it
                        // stop counting at its old one.
                        let _ = core.store.count_paused(owner, &id, &tool, until, core.limits.paused).await;
                    }
                    (saved, reply)
                }
            };
            match saved {
                Ok(()) => Ok(reply),
                Err(SaveError::Store(e)) => Err(e.into()),
                Err(SaveError::Conflict(id)) => self.after_conflict(&id, answer).await,
            }
        }
    }

    /// Ends the thread with `last` (kept for resends) and answers `response`.
    async fn finish(
        &self,
        thread: Thread,
        last: Last,
        response: CallToolResponse,
        answer: &Answer<'_>,
    ) -> Result<Answered, EngineError> {
        let core = self.core;
        let expected = thread.version;
        let now = core.clock.now_ms();
        let thread = round::finished(thread, last, now, &core.lifetimes, core.limits.max_record_bytes);
        let owner = thread.owner.clone();
        let (id, tool, principal) = (thread.id.clone(), thread.tool.clone(), thread.principal.clone());
        match core.store.save_finished(thread, expected, owner.as_deref()).await {
            Ok(()) => {
                if let CallToolResponse::Complete(result) = &response {
                    let principal = principal.as_deref();
                    core.observe(crate::Event::Finished { thread_id: &id, tool: &tool, principal, result });
                }
                Ok(Ok(response))
            }
            Err(SaveError::Store(e)) => Err(e.into()),
            Err(SaveError::Conflict(id)) => self.after_conflict(&id, answer).await,
        }
    }

    /// Another request answered the same round first: when it sent the same answers,
    /// its outcome is the answer; otherwise the state is stale.
    async fn after_conflict(&self, thread_id: &str, answer: &Answer<'_>) -> Result<Answered, EngineError> {
        let (core, capabilities) = (self.core, &answer.call.capabilities);
        Ok(match core.store.load(thread_id).await? {
            Some(current) => resend::replay(&current, answer.responses, answer.token, capabilities, &core.secret)
                .unwrap_or_else(invalid_state),
            None => invalid_state(),
        })
    }
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
