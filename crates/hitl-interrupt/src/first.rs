//! A new call's first run has ended: its result, or its first round stored as a new
//! paused thread. Answers the call carried (`inputResponses` with no `requestState`)
//! answer its rounds first, through the same transitions as a retry, before anything
//! is stored: only the round left open is. Both a call ([`Engine::call`](crate::Engine::call))
//! and a task's first run that ends within the wait ([`Tasks::start`](crate::Tasks::start))
//! end here.

use hitl_graph::{Agent, Outcome, RunError};
use hitl_protocol::{CallToolResponse, InputResponses};

use crate::call::ToolCall;
use crate::round::{self, Ending, FirstAsk, Names, NewThread, Next, Settled};
use crate::shared::{Core, Deadline};
use crate::{Answered, EngineError, MAX_ROUNDS_PER_REQUEST, Thread, meter};
use hitl_thread::{SaveError, StoreError};

/// Where a first call's answers left it.
enum Unstored {
    /// A round to store and ask.
    Paused(Box<Thread>),
    /// The call's reply; nothing is stored.
    Ended(Answered),
}

/// Ends new calls' first runs over the core.
pub(crate) struct First<'a> {
    core: &'a Core,
    /// The client follows the call as a task: a pause makes a task.
    task: bool,
}

impl<'a> First<'a> {
    /// `task`: the client follows the call as a task.
    pub(crate) fn new(core: &'a Core, task: bool) -> Self {
        Self { core, task }
    }

    /// A new call's first run ended with `outcome`: its result, or its first round
    /// stored as thread `id` (answered first by answers the call carried).
    #[allow(clippy::manual_async_fn, reason = "an async fn would keep its arguments twice in its future")]
    pub(crate) fn outcome(
        &self,
        agent: &Agent,
        call: ToolCall,
        names: Names,
        outcome: Result<Outcome, RunError>,
        deadline: Deadline,
    ) -> impl Future<Output = Result<Answered, EngineError>> + Send {
        async move {
            let core = self.core;
            let asking = core.asking(&call, &names.id, 1);
            let now_ms = asking.now_ms;
            let (checkpoint, round, minted) = match round::settle(outcome, &asking, &core.secret) {
                Settled::Done(result) => return Ok(Ok(CallToolResponse::Complete(result))),
                Settled::Failed(error) => return Ok(Err(error)),
                Settled::Paused(checkpoint, round, minted) => (checkpoint, round, minted),
            };
            let new = NewThread { names, now_ms, task: self.task };
            let mut thread = round::open(*checkpoint, round, &call, new, &core.lifetimes);
            if let Some(responses) = &call.input_responses {
                thread = match Box::pin(self.answer_unstored(agent, &call, thread, responses, deadline)).await {
                    Unstored::Paused(thread) => *thread,
                    Unstored::Ended(reply) => return Ok(reply),
                };
            }
            let max_record_bytes = core.limits.max_record_bytes;
            let (thread, reply) =
                match round::first_ask(thread, &call.capabilities, max_record_bytes, &core.secret, Some(&minted)) {
                    FirstAsk::Ask(thread, reply) => (*thread, reply),
                    FirstAsk::Lacks(e) => {
                        core.meters.round(&call.bound_to(agent), meter::Outcome::RefusedCapability);
                        return Ok(Err(e));
                    }
                    FirstAsk::TooLarge(e) => return Ok(Err(e)),
                };
            let observed = core.observer.as_ref().map(|_| thread.clone());
            let tool = thread.tool.clone();
            let owner = round::owner_of(&thread, &call);
            match core.store.create_paused(thread, &owner, core.limits.paused).await {
                Ok(Ok(())) => {
                    core.meters.round(&tool, meter::Outcome::Paused);
                    if let Some(thread) = observed {
                        core.observe(crate::Event::Asked { thread: &thread });
                    }
                    // Made after the observer let go of the round, so that it moves.
                    Ok(Ok(reply.reply()))
                }
                Ok(Err(limit)) => Ok(Err(core.limit_reached(limit))),
                Err(SaveError::Store(e)) => Err(e.into()),
                Err(SaveError::Conflict(id)) => {
                    Err(StoreError::Unavailable(format!("new thread {id} already exists")).into())
                }
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
        call: &ToolCall,
        mut thread: Thread,
        responses: &InputResponses,
        deadline: Deadline,
    ) -> Unstored {
        let core = self.core;
        let binding = call.bound_to(agent);
        loop {
            let round = thread.round().expect("a thread answered unstored is paused");
            if round.n > MAX_ROUNDS_PER_REQUEST {
                return Unstored::Paused(Box::new(thread));
            }
            // The round's own token: the answers came with the call that opened it.
            let token = core.secret.token(&thread.id, round.n, &round.nonce);
            let request = round::Answering {
                binding: &binding,
                args_digest: &thread.args_digest,
                principal: call.principal.as_deref(),
                token: &token,
                responses,
                capabilities: &call.capabilities,
            };
            let now = core.clock.now_ms();
            let (mut claimed, round, values) =
                match round::decide(Some(thread.clone()), &request, now, core.lifetimes.lease, &core.secret) {
                    Next::Claim { thread, round, values } => (*thread, round, values),
                    Next::Reject(e) => return Unstored::Ended(Err(e)),
                    Next::Finish(ending) => return Unstored::Ended(Ok(CallToolResponse::Complete(ending.result))),
                    // Some answer is missing: the round is stored and asked.
                    _ => return Unstored::Paused(Box::new(thread)),
                };
            let checkpoint = claimed.paused().map(|p| (*p.checkpoint).clone()).expect("a claimed thread is paused");
            let outcome = deadline
                .run(agent.graph.resume_run(checkpoint, values, core.run_of(call, agent, (&claimed.id, &claimed.tool))))
                .await;
            claimed.set_claim(None);
            let asking = core.asking(call, &claimed.id, round.n + 1);
            let ran = round::ran(outcome, false, || core.timed_out(false), &asking, &core.secret);
            match round::end_run(claimed, ran, &core.end_of(&round, responses, call), &core.secret) {
                Ending::NextRound(next, _) => thread = *next,
                Ending::Finished(mut ended, own) => {
                    let result = own.unwrap_or_else(|| round::kept_result(ended.last.take()));
                    return Unstored::Ended(Ok(CallToolResponse::Complete(result)));
                }
                Ending::GiveBack(_, error) => return Unstored::Ended(Err(error)),
                // Not given for a call that is not stored (see `ran`): it ends.
                Ending::Retry(_, result) => return Unstored::Ended(Ok(CallToolResponse::Complete(result))),
            }
        }
    }
}
