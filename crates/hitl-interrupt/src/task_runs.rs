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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hitl_graph::{Outcome, RunError};
use hitl_protocol::{CallToolResponse, CallToolResult, ErrorObject};
use tokio::task::{AbortHandle, JoinError, JoinHandle};

use crate::engine::{Call, Deadline, Engine, EngineError, Settled, checked_arguments};
use crate::{Agent, THREAD_FORMAT, round};
use hitl_thread::{Claim, Last, LastOutcome, TaskState, Thread};
use hitl_thread::{SaveError, StoreError};

/// The runs of this process's working tasks, by task id.
pub(crate) type Running = Arc<Mutex<HashMap<String, AbortHandle>>>;

/// How a call made for a client that follows tasks began.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskStart {
    /// It ended within the wait: its result, answered as any call's.
    Complete(CallToolResult),
    /// It is a task (it paused, or it runs on): its id.
    Task(String),
}

/// How a task's first run ended, as the task will show it.
enum Ended {
    Result(CallToolResult),
    Paused(hitl_graph::Checkpoint, crate::Round),
    Failed(ErrorObject),
}

impl Engine {
    /// Serves a new call of `agent` (no `requestState`, no answers) for a client that
    /// follows tasks. The agent runs on its own; if its run ends within `wait` the call
    /// is answered as [`Engine::call`] answers it (a pause is a task with its first
    /// round); otherwise the call is stored as a `working` task, answered as
    /// [`TaskStart::Task`], and runs on in this process. A zero `wait` always makes a
    /// task.
    pub async fn call_as_task(
        &self,
        agent: &Agent,
        mut call: Call,
        wait: Duration,
    ) -> Result<Result<TaskStart, ErrorObject>, EngineError> {
        let (arguments, args_digest) = match checked_arguments(agent, &call) {
            Ok(checked) => checked,
            Err(error) => return Ok(Err(error)),
        };
        // The run may outlive the request: its client going away does not stop it, and
        // there is no stream for progress once it has.
        (call.task, call.cancel, call.progress) = (true, None, None);
        let (graph, tool) = (agent.graph.clone(), agent.name.clone());
        let run = call.run(agent);
        let mut handle = tokio::spawn(async move {
            let started = std::time::Instant::now();
            let outcome = graph.invoke_run(arguments, run).await;
            crate::meter::ran(&tool, started);
            outcome
        });
        let id = uuid::Uuid::now_v7().to_string();
        if !wait.is_zero()
            && let Ok(joined) = tokio::time::timeout(wait, &mut handle).await
        {
            let outcome = joined.unwrap_or_else(|e| Err(lost(&e)));
            let deadline = Deadline::after(self.limits.request_timeout);
            let reply = self.first_outcome(agent, call, id.clone(), args_digest, outcome, deadline).await?;
            return Ok(reply.map(|response| match response {
                CallToolResponse::Complete(result) => TaskStart::Complete(result),
                CallToolResponse::InputRequired(_) => TaskStart::Task(id),
            }));
        }
        let now = self.now_ms();
        let owner = call.owner();
        let mut thread = Thread {
            format: THREAD_FORMAT,
            id: id.clone(),
            version: 1,
            tool: call.binding(agent),
            args_digest,
            principal: call.principal.clone(),
            owner: Some(owner.clone()),
            checkpoint: None,
            round: None,
            last: None,
            claim: Some(Claim { round: 0, until_ms: now.saturating_add(self.lifetimes.lease.as_millis() as u64) }),
            begun: None,
            task: Some(TaskState::new(now, call.capabilities.clone())),
            expires_at_ms: now.saturating_add(self.lifetimes.paused.as_millis() as u64),
        };
        thread.format = hitl_thread::format_of(&thread);
        // The task is stored before its id is answered, and counts as a paused call.
        let created = self.store.create_paused(thread.clone(), &owner, self.limits.paused).await;
        if !matches!(created, Ok(Ok(()))) {
            handle.abort();
        }
        match created {
            Ok(Ok(())) => {}
            Ok(Err(limit)) => return Ok(Err(self.limit_reached(limit))),
            Err(SaveError::Store(e)) => return Err(e.into()),
            Err(SaveError::Conflict(id)) => {
                return Err(StoreError::Unavailable(format!("new thread {id} already exists")).into());
            }
        }
        self.running.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), handle.abort_handle());
        let engine = self.clone();
        tokio::spawn(async move { engine.run_on(thread, handle, call).await });
        Ok(Ok(TaskStart::Task(id)))
    }

    /// Stops this process's run of task `id`, if it has one.
    pub(crate) fn stop_run(&self, id: &str) {
        if let Some(run) = self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(id) {
            run.abort();
        }
    }

    /// Waits for a working task's run, renewing its claim, and stores how it ended.
    async fn run_on(self, mut thread: Thread, mut handle: JoinHandle<Result<Outcome, RunError>>, call: Call) {
        let joined = loop {
            let tick = self.clock.sleep(self.lifetimes.lease / 3);
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
        self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&thread.id);
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
        let until = self.now_ms().saturating_add(self.lifetimes.lease.as_millis() as u64);
        let mut renewed = thread.clone();
        renewed.claim = Some(Claim { round: 0, until_ms: until });
        renewed.version += 1;
        match self.store.save(renewed.clone(), Some(thread.version)).await {
            Ok(()) => {
                *thread = renewed;
                true
            }
            // The lease has time left: the next tick tries again.
            Err(SaveError::Store(_)) => true,
            // Only a cancellation changes a working task under its run.
            Err(SaveError::Conflict(_)) => match self.store.load(&thread.id).await {
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
        mut thread: Thread,
        outcome: Result<Outcome, RunError>,
        call: &Call,
    ) -> Result<(), EngineError> {
        let ended = match outcome {
            // A panic is the server's failure, not the tool's: a JSON-RPC error.
            Err(RunError::StepPanicked { step, message }) => {
                Ended::Failed(ErrorObject::internal(format!("Internal error: step {step} panicked: {message}")))
            }
            outcome => match self.settle(outcome, 1, call, &thread.id) {
                Settled::Done(CallToolResponse::Complete(result)) => Ended::Result(result),
                Settled::Done(CallToolResponse::InputRequired(_)) => unreachable!("settle finishes with a result"),
                Settled::Failed(error) => Ended::Failed(error),
                Settled::Paused(checkpoint, round) => {
                    match crate::ask::missing_capability(&round, &call.capabilities) {
                        Some(missing) => Ended::Failed(missing),
                        None => Ended::Paused(checkpoint, round),
                    }
                }
            },
        };
        loop {
            if thread.task.as_ref().is_none_or(|t| t.cancelled) {
                return Ok(());
            }
            let expected = thread.version;
            let next = self.ended(&thread, &ended);
            let owner = next.owner.clone();
            let (id, until, paused) = (next.id.clone(), next.expires_at_ms, next.round.is_some());
            // What the observer is shown of a round asked (no checkpoint).
            let asked = (paused && self.observing()).then(|| next.summary());
            let saved = if paused {
                self.store.save(next, Some(expected)).await
            } else {
                self.store.save_finished(next, expected, owner.as_deref()).await
            };
            match saved {
                Ok(()) => {
                    let (tool, principal) = (&thread.tool, thread.principal.as_deref());
                    if let Some(thread) = &asked {
                        self.observe(crate::Event::Asked { thread });
                    }
                    if let Ended::Result(result) = &ended {
                        self.observe(crate::Event::Finished { thread_id: &id, tool, principal, result });
                    }
                    if paused {
                        crate::meter::round(tool, crate::meter::Outcome::Paused);
                        // Counted since the task was made; it now counts to its round's expiry.
                        if let Some(owner) = &owner {
                            let _ = self.store.count_paused(owner, &id, tool, until, self.limits.paused).await;
                        }
                    }
                    return Ok(());
                }
                Err(SaveError::Store(e)) => return Err(e.into()),
                Err(SaveError::Conflict(_)) => match self.store.load(&id).await? {
                    Some(current) => thread = current,
                    None => return Ok(()),
                },
            }
        }
    }

    /// The working task `thread` as its run's end `ended` leaves it.
    fn ended(&self, thread: &Thread, ended: &Ended) -> Thread {
        let now = self.now_ms();
        let mut next = thread.clone();
        next.claim = None;
        next.version += 1;
        next.task.as_mut().expect("a task").updated_at_ms = now;
        let failed = |mut next: Thread, error: ErrorObject| {
            next.task.as_mut().expect("a task").error = Some(error);
            next.expires_at_ms = self.expiry(self.lifetimes.finished);
            next
        };
        match ended {
            Ended::Result(result) => {
                next.last = Some(Last {
                    round: 0,
                    nonce: String::new(),
                    keys: Vec::new(),
                    answers_digest: String::new(),
                    outcome: LastOutcome::Result { result: result.clone() },
                });
                next.expires_at_ms = self.expiry(self.lifetimes.finished);
                next
            }
            Ended::Failed(error) => failed(next, error.clone()),
            Ended::Paused(checkpoint, round) => {
                next.checkpoint = Some(checkpoint.clone());
                next.round = Some(round.clone());
                next.format = hitl_thread::format_of(&next);
                next.expires_at_ms = self.expiry(self.lifetimes.paused);
                // The agent's state is stored with the round: it must fit the record.
                match round::fits(&next, self.limits.max_record_bytes) {
                    Ok(()) => next,
                    Err(too_large) => {
                        (next.checkpoint, next.round) = (None, None);
                        next.format = hitl_thread::format_of(&next);
                        failed(next, too_large)
                    }
                }
            }
        }
    }
}

/// A run that ended outside its steps (a panic the graph did not catch).
fn lost(e: &JoinError) -> RunError {
    RunError::StepPanicked { step: "(run)".into(), message: e.to_string() }
}

#[cfg(test)]
mod tests;
