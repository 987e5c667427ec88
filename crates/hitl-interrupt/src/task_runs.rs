//! Tasks that run on after their request (the Tasks extension lets the server decide):
//! a new call from a client that follows tasks runs on its own; when it has not ended
//! within a short wait, it is stored as a `working` task and the request answers with
//! the task, while this process runs it on and stores how it ended in the task (its
//! result, its first round of questions, or the JSON-RPC error of a failed run).
//!
//! The run holds the task the way a resuming request holds a round: by a claim whose
//! lease it renews, so a task whose process died shows `failed` once the lease lapses
//! instead of `working` for ever. Nothing is run twice: a run that did not end is never
//! started again. `tasks/cancel` stops a run of this process at once, and one of
//! another replica when it next renews its claim.

use std::sync::Arc;
use std::time::Duration;

use hitl_graph::{Outcome, RunError};
use hitl_protocol::{CallToolResponse, CallToolResult, ErrorObject};
use tokio::task::{JoinError, JoinHandle};

use crate::ask::missing_capability;
use crate::call::{ToolCall, checked_arguments};
use crate::first::First;
use crate::round::{self, Names, NewThread, Settled, TaskEnd};
use crate::shared::Deadline;
use crate::update::{Step, update_from};
use crate::{Agent, EngineError, Reply, Tasks, Thread};
use hitl_thread::{Claim, SaveError, StoreError};

/// How a call made for a client that follows tasks began.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskStart {
    /// It ended within the wait: its result, answered as any call's.
    Complete(CallToolResult),
    /// It is a task (it paused, or it runs on): its id.
    Task(String),
    /// It is answered with a JSON-RPC error (its arguments do not fit, a limit was
    /// reached, the round can't be asked); nothing runs on.
    Refused(ErrorObject),
}

/// What the observer and the ledger learn once a working task's end is stored.
struct Stored {
    id: Arc<str>,
    tool: Arc<str>,
    principal: Option<Arc<str>>,
    owner: Option<Arc<str>>,
    /// The new expiry: a round's, which the call now counts to.
    until: u64,
    /// The round asked, as the observer is shown it (no checkpoint).
    asked: Option<Thread>,
    paused: bool,
}

impl Tasks {
    /// Serves a new call of `agent` that carries answers (`inputResponses`, no
    /// `requestState`) for a client that follows tasks: answered as
    /// [`Engine::call`](crate::Engine::call) answers it, but a round left open is a
    /// task's, answered with [`Tasks::update`].
    pub async fn call(&self, agent: &Agent, call: ToolCall) -> Result<Reply, EngineError> {
        crate::Engine { core: self.core.clone() }.serve(agent, call, true).await
    }

    /// Serves a new call of `agent` (no `requestState`, no answers) for a client that
    /// follows tasks. The agent runs on its own; if its run ends within `wait` the call
    /// is answered as [`Engine::call`](crate::Engine::call) answers it (a pause is a
    /// task with its first round); otherwise the call is stored as a `working` task,
    /// answered as [`TaskStart::Task`], and runs on in this process. A zero `wait`
    /// always makes a task. A call refused (its arguments, a limit, a round the client
    /// can't answer) is [`TaskStart::Refused`]; only a store failure is an error.
    pub async fn start(&self, agent: &Agent, mut call: ToolCall, wait: Duration) -> Result<TaskStart, EngineError> {
        let core = &self.core;
        let (arguments, args_digest) = match checked_arguments(agent, std::mem::take(&mut call.arguments)) {
            Ok(checked) => checked,
            Err(error) => return Ok(TaskStart::Refused(error)),
        };
        // The run may outlive the request: its client going away does not stop it, and
        // there is no stream for progress once it has.
        (call.cancel, call.progress) = (None, None);
        let (graph, tool) = (agent.graph.clone(), agent.name.clone());
        let id = Names::new_id();
        let binding: Arc<str> = Arc::from(&*call.bound_to(agent));
        let run = core.run_of(&call, agent, (&id, &binding));
        let meters = core.meters.clone();
        let mut handle = tokio::spawn(async move {
            let started = std::time::Instant::now();
            let outcome = graph.invoke_run(arguments, run).await;
            meters.ran(&tool, started);
            outcome
        });
        if !wait.is_zero()
            && let Ok(joined) = tokio::time::timeout(wait, &mut handle).await
        {
            let outcome = joined.unwrap_or_else(|e| Err(lost(&e)));
            let deadline = Deadline::after(core.limits.request_timeout);
            let names = Names { id: id.clone(), binding, args_digest };
            let reply = First::new(core, true).outcome(agent, call, names, outcome, deadline).await?;
            return Ok(match reply {
                Ok(CallToolResponse::Complete(result)) => TaskStart::Complete(result),
                Ok(CallToolResponse::InputRequired(_)) => TaskStart::Task(id.to_string()),
                Err(error) => TaskStart::Refused(error),
            });
        }
        let names = Names { id: id.clone(), binding, args_digest };
        let new = NewThread { names, now_ms: core.now_ms(), task: true };
        let thread = round::working(&call, new, &core.lifetimes);
        // The task is stored before its id is answered, and counts as a paused call.
        let created =
            core.store.create_paused(thread.clone(), &round::owner_of(&thread, &call), core.limits.paused).await;
        if !matches!(created, Ok(Ok(()))) {
            handle.abort();
        }
        match created {
            Ok(Ok(())) => {}
            Ok(Err(limit)) => return Ok(TaskStart::Refused(core.limit_reached(limit))),
            Err(SaveError::Store(e)) => return Err(e.into()),
            Err(SaveError::Conflict(id)) => {
                return Err(StoreError::Unavailable(format!("new thread {id} already exists")).into());
            }
        }
        core.running.insert(&id, handle.abort_handle());
        let tasks = self.clone();
        tokio::spawn(async move { tasks.run_on(thread, handle, call).await });
        Ok(TaskStart::Task(id.to_string()))
    }

    /// Waits for a working task's run, renewing its claim, and stores how it ended.
    async fn run_on(self, mut thread: Thread, mut handle: JoinHandle<Result<Outcome, RunError>>, call: ToolCall) {
        let core = &self.core;
        let joined = loop {
            let tick = core.clock.sleep(core.lifetimes.lease / 3);
            match futures_util::future::select(&mut handle, tick).await {
                futures_util::future::Either::Left((joined, _)) => break Some(joined),
                futures_util::future::Either::Right(((), _)) => {
                    if !self.renew_working(&mut thread).await {
                        handle.abort();
                        break None;
                    }
                }
            }
        };
        core.running.remove(&thread.id);
        let outcome = match joined {
            // Cancelled (here by `tasks/cancel`, or found cancelled): the task says so.
            None => return,
            Some(Err(e)) if e.is_cancelled() => return,
            Some(joined) => joined.unwrap_or_else(|e| Err(lost(&e))),
        };
        // A store that fails here leaves the claim to lapse: the task then shows failed.
        let _ = self.store_run(thread, outcome, &call).await;
    }

    /// Moves a working task's claim on. `false` when the task is no longer this run's
    /// to finish (cancelled, or gone).
    async fn renew_working(&self, thread: &mut Thread) -> bool {
        let core = &self.core;
        let until = core.expiry(core.lifetimes.lease);
        let mut renewed = thread.clone();
        renewed.set_claim(Some(Claim { round: 0, until_ms: until }));
        renewed.version += 1;
        match core.store.save(renewed.clone(), Some(thread.version)).await {
            Ok(()) => {
                *thread = renewed;
                true
            }
            // The lease has time left: the next tick tries again.
            Err(SaveError::Store(_)) => true,
            // Only a cancellation changes a working task under its run.
            Err(SaveError::Conflict(_)) => match core.store.load(&thread.id).await {
                Ok(Some(current)) if current.task.as_ref().is_some_and(|t| !t.cancelled) => {
                    *thread = current;
                    true
                }
                Ok(_) => false,
                Err(_) => true,
            },
        }
    }

    /// Stores how a working task's run ended, unless the task was cancelled meanwhile.
    async fn store_run(
        &self,
        thread: Thread,
        outcome: Result<Outcome, RunError>,
        call: &ToolCall,
    ) -> Result<(), EngineError> {
        let core = &self.core;
        let ended = match outcome {
            // A panic is the server's failure, not the tool's: a JSON-RPC error.
            Err(RunError::StepPanicked { step, message }) => {
                TaskEnd::Failed(ErrorObject::internal(format!("Internal error: step {step} panicked: {message}")))
            }
            outcome => match round::settle(outcome, &core.asking(call, &thread.id, 1), &core.secret) {
                Settled::Done(result) => TaskEnd::Result(result),
                Settled::Failed(error) => TaskEnd::Failed(error),
                Settled::Paused(checkpoint, round, _) => match missing_capability(&round, &call.capabilities) {
                    Some(missing) => TaskEnd::Failed(missing),
                    None => TaskEnd::Paused(checkpoint, round),
                },
            },
        };
        let max_record_bytes = core.limits.max_record_bytes;
        let stored = update_from(core.store.as_ref(), Some(thread), |thread| {
            if thread.task.as_ref().is_none_or(|t| t.cancelled) {
                return Step::Leave(None);
            }
            let next = round::task_ended(thread, &ended, core.now_ms(), &core.lifetimes, max_record_bytes);
            let paused = next.paused().is_some();
            let stored = Stored {
                id: next.id.clone(),
                tool: next.tool.clone(),
                principal: next.principal.clone(),
                owner: next.owner.clone(),
                until: next.expires_at_ms,
                asked: (paused && core.observing()).then(|| next.clone()),
                paused,
            };
            if paused { Step::Save(next, Some(stored)) } else { Step::Finish(next, Some(stored)) }
        })
        .await?;
        let Some(Stored { id, tool, principal, owner, until, asked, paused }) = stored.flatten() else {
            return Ok(());
        };
        if let Some(thread) = &asked {
            core.observe(crate::Event::Asked { thread });
        }
        if let TaskEnd::Result(result) = &ended {
            let principal = principal.as_deref();
            core.observe(crate::Event::Finished { thread_id: &id, tool: &tool, principal, result });
        }
        if paused {
            core.meters.round(&tool, crate::meter::Outcome::Paused);
            // Counted since the task was made; it now counts to its round's expiry.
            if let Some(owner) = &owner {
                let _ = core.store.count_paused(owner, &id, &tool, until, core.limits.paused).await;
            }
        }
        Ok(())
    }
}

/// A run that ended outside its steps (a panic the graph did not catch).
fn lost(e: &JoinError) -> RunError {
    RunError::StepPanicked { step: "(run)".into(), message: e.to_string() }
}

#[cfg(test)]
mod tests;
