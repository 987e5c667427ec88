//! Calls followed as tasks (the Tasks extension, `io.modelcontextprotocol/tasks`): a
//! call that pauses, or runs on past a short wait ([`Tasks::start`]), for a
//! client that declared the extension becomes a task whose id is its thread's. The
//! task's state is the thread's: `input_required` with the open round's questions
//! (those not answered yet), `working` while a request or its process runs it,
//! `completed` with its result, `cancelled`, `failed` with a JSON-RPC error. Answers
//! come in parts (`tasks/update`), kept in the thread until every question of the round
//! has one; then the round is answered exactly as a retry would answer it (resume once,
//! the same checks), so a task is bound to its caller and runs once like any call. The
//! transitions (answers kept, a run's end, a cancellation) are `round`'s, pure; the
//! round is answered by the same driver as a client's retry, with the round's own token:
//! a task mints no `requestState` to resume itself.
//!
//! A task's request keys are `<round>:<question key>`: unique over the task's life, as
//! the extension requires, even when two rounds ask the same question.

use std::sync::Arc;

use hitl_protocol::{CallToolResult, ErrorObject, InputRequests, InputResponses};

use crate::call::ToolCall;
use crate::resume::{Answer, Resume};
use crate::round::{self, TaskNext, task_key};
use crate::shared::{Core, Deadline};
use crate::update::{Step, update, update_from};
use crate::{Agent, EngineError, LastOutcome, Thread};

/// What a task is doing: the protocol's own statuses.
pub use hitl_protocol::TaskStatus;

/// A task as `tasks/get` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskView {
    /// Its id (the thread's).
    pub id: String,
    /// The tool it calls.
    pub tool: String,
    /// What it is doing.
    pub status: TaskStatus,
    /// When it was made (ms since the epoch).
    pub created_at_ms: u64,
    /// When its state last changed.
    pub updated_at_ms: u64,
    /// When it goes.
    pub expires_at_ms: u64,
    /// `input_required`: the questions not answered yet, by task key.
    pub input_requests: Option<InputRequests>,
    /// `completed`: the result.
    pub result: Option<CallToolResult>,
    /// `failed`: the JSON-RPC error.
    pub error: Option<ErrorObject>,
    /// `working` with every answer of its open round in and no request running it: it
    /// runs when it can (its page done, its last run failed), so a poll tries it.
    pub ready: bool,
}

/// The error of a task whose run stopped with its process.
const LOST: &str = "Internal error: the server running this task stopped before it finished";

/// The error of a task id this caller has no task by.
pub fn unknown_task(id: &str) -> ErrorObject {
    ErrorObject::invalid_params(format!("Unknown task: {id}"))
}

/// What a client that follows tasks does to its tasks: start one
/// ([`Tasks::start`], in `task_runs.rs`), look at it, answer it in parts, cancel it.
/// Handed out by [`Engine::tasks`](crate::Engine::tasks).
#[derive(Clone)]
pub struct Tasks {
    pub(crate) core: Arc<Core>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks").finish_non_exhaustive()
    }
}

/// What an update found.
enum Updated {
    /// No such task of this caller.
    Unknown,
    /// Nothing to run.
    Idle,
    /// The answers are refused (the record would be too large).
    Refused(ErrorObject),
    /// The round has every answer: run it with `thread`'s; `fresh` are this update's.
    Run(Box<Thread>, InputResponses),
}

impl Tasks {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        Self { core }
    }

    /// The task `id` of `principal` (`None`: no such task for this caller).
    pub async fn get(&self, id: &str, principal: Option<&str>) -> Result<Option<TaskView>, EngineError> {
        let Some(thread) = self.own_task(id, principal).await? else { return Ok(None) };
        Ok(Some(view(&thread, self.core.now_ms())))
    }

    /// Takes answers to some of task `id`'s outstanding questions (task keys; others
    /// are ignored, as the extension says). When the round has all its answers and no
    /// request runs it, it is answered as a retry would answer it, in this request: the
    /// agent runs on to its next round or its result (with no new answers, this tries a
    /// complete round again: a page done since, a failed run). An answer the round
    /// refuses (a form mismatch) is dropped and its error returned; the task waits on.
    pub async fn update(
        &self,
        agent: &Agent,
        id: &str,
        principal: Option<&str>,
        responses: &InputResponses,
    ) -> Result<Result<(), ErrorObject>, EngineError> {
        let core = &self.core;
        let Some(thread) = self.own_task(id, principal).await? else { return Ok(Err(unknown_task(id))) };
        let max_record_bytes = core.limits.max_record_bytes;
        let updated = update_from(core.store.as_ref(), Some(thread), |thread| {
            if !own(thread, principal) {
                return Step::Leave(Updated::Unknown);
            }
            match round::task_answers(thread, responses, core.now_ms(), max_record_bytes) {
                TaskNext::Idle => Step::Leave(Updated::Idle),
                TaskNext::TooLarge(e) => Step::Leave(Updated::Refused(e)),
                TaskNext::Answer => Step::Leave(Updated::Run(Box::new(thread.clone()), InputResponses::new())),
                TaskNext::Keep { thread, fresh, ready } => {
                    let then = if ready { Updated::Run(thread.clone(), fresh) } else { Updated::Idle };
                    Step::Save(*thread, then)
                }
            }
        })
        .await?;
        let (thread, fresh) = match updated.unwrap_or(Updated::Unknown) {
            Updated::Unknown => return Ok(Err(unknown_task(id))),
            Updated::Idle => return Ok(Ok(())),
            Updated::Refused(e) => return Ok(Err(e)),
            Updated::Run(thread, fresh) => (thread, fresh),
        };
        let round = thread.round().expect("a task ready to run has its round");
        let task = thread.task.as_ref().expect("a task");
        // The round's own token: the task is this caller's, checked above.
        let token = core.secret.token(&thread.id, round.n, &round.nonce);
        let call = task_call(&thread, principal);
        let answer = Answer {
            agent,
            call: &call,
            binding: &thread.tool,
            args_digest: &thread.args_digest,
            thread_id: &thread.id,
            token: &token,
            responses: &task.partial,
            hold: false,
        };
        let deadline = Deadline::after(core.limits.request_timeout);
        match Resume::new(core).answer(answer, deadline).await? {
            Ok(_) => Ok(Ok(())),
            Err(error) => {
                self.drop_answers(id, principal, round.n, &fresh).await?;
                Ok(Err(error))
            }
        }
    }

    /// Cancels task `id`: unless it ended or a request is running its round
    /// (cancellation is cooperative), it ends, and the call never runs on; a run of
    /// this process is stopped at once, one of another replica when it next renews its
    /// claim.
    pub async fn cancel(&self, id: &str, principal: Option<&str>) -> Result<Result<(), ErrorObject>, EngineError> {
        let core = &self.core;
        let Some(thread) = self.own_task(id, principal).await? else { return Ok(Err(unknown_task(id))) };
        let cancelled = update_from(core.store.as_ref(), Some(thread), |thread| {
            if !own(thread, principal) {
                return Step::Leave(None);
            }
            let now = core.now_ms();
            let task = thread.task.as_ref().expect("own tasks are tasks");
            let answering = thread.paused().is_some() && thread.live_claim(now).is_some();
            let over = thread.paused().is_none() && !thread.working(now);
            if task.cancelled || task.error.is_some() || answering || over {
                return Step::Leave(Some(false));
            }
            Step::Finish(round::cancelled(thread.clone(), now, &core.lifetimes), Some(true))
        })
        .await?;
        match cancelled.flatten() {
            None => Ok(Err(unknown_task(id))),
            Some(true) => {
                core.running.stop(id);
                Ok(Ok(()))
            }
            Some(false) => Ok(Ok(())),
        }
    }

    /// The thread of task `id`, when it is a task of `principal`.
    async fn own_task(&self, id: &str, principal: Option<&str>) -> Result<Option<Thread>, EngineError> {
        // A task id is a thread id: refuse anything else before the store sees it.
        if uuid::Uuid::try_parse(id).is_err() {
            return Ok(None);
        }
        let thread = self.core.store.load(id).await?;
        Ok(thread.filter(|t| own(t, principal)))
    }

    /// Takes back the answers `fresh` to round `n` a refused update left in the task.
    async fn drop_answers(
        &self,
        id: &str,
        principal: Option<&str>,
        n: u32,
        fresh: &InputResponses,
    ) -> Result<(), EngineError> {
        if fresh.is_empty() {
            return Ok(());
        }
        update(self.core.store.as_ref(), id, |thread| {
            if !own(thread, principal) || thread.round().is_none_or(|r| r.n != n) {
                return Step::Leave(());
            }
            let mut updated = thread.clone();
            updated.task.as_mut().expect("a task").partial.retain(|key, _| !fresh.contains_key(key));
            updated.version += 1;
            Step::Save(updated, ())
        })
        .await?;
        Ok(())
    }
}

/// Is `thread` a task of `principal`?
fn own(thread: &Thread, principal: Option<&str>) -> bool {
    thread.task.is_some() && thread.principal.as_deref() == principal
}

/// The call a task's round runs for: the caller of its first request (its principal,
/// or the address it counts against, so the run has that request's caller key: an
/// agent's per-caller state, an upstream session) with the capabilities it declared.
fn task_call(thread: &Thread, principal: Option<&str>) -> ToolCall {
    let task = thread.task.as_ref().expect("a task");
    ToolCall {
        capabilities: Arc::new(task.capabilities.clone()),
        principal: principal.map(str::to_owned),
        peer: thread.owner.as_deref().and_then(|owner| owner.strip_prefix("peer:")).map(str::to_owned),
        ..ToolCall::default()
    }
}

/// Task `thread` as `tasks/get` shows it at `now`.
fn view(thread: &Thread, now: u64) -> TaskView {
    let task = thread.task.as_ref().expect("own tasks are tasks");
    let claimed = |round: &crate::Round| thread.live_claim(now).is_some_and(|c| c.round == round.n);
    // Every answer is in, and no request runs the round: it is about to run (its page
    // is not done yet, or the run before failed and is tried again).
    let ready = round::ready(thread, now);
    let (status, input_requests, result) = match (thread.round(), &thread.last) {
        _ if task.cancelled => (TaskStatus::Cancelled, None, None),
        _ if task.error.is_some() => (TaskStatus::Failed, None, None),
        (Some(round), _) if claimed(round) => (TaskStatus::Working, None, None),
        _ if ready => (TaskStatus::Working, None, None),
        (Some(round), _) => {
            let open = round
                .questions
                .iter()
                .filter(|q| !task.partial.contains_key(&q.key))
                .map(|q| (task_key(round.n, &q.key), q.request.clone()))
                .collect();
            (TaskStatus::InputRequired, Some(open), None)
        }
        (None, Some(last)) => match &last.outcome {
            LastOutcome::Result { result } => (TaskStatus::Completed, None, Some(result.clone())),
            LastOutcome::NextRound => (TaskStatus::Working, None, None),
        },
        (None, None) if thread.working(now) => (TaskStatus::Working, None, None),
        (None, None) => (TaskStatus::Failed, None, None),
    };
    let error = match status {
        TaskStatus::Failed => Some(task.error.clone().unwrap_or_else(|| ErrorObject::internal(LOST))),
        _ => None,
    };
    TaskView {
        id: thread.id.to_string(),
        tool: thread.tool.to_string(),
        status,
        created_at_ms: task.created_at_ms,
        updated_at_ms: task.updated_at_ms,
        expires_at_ms: thread.expires_at_ms,
        input_requests,
        result,
        error,
        ready,
    }
}
