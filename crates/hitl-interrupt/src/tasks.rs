//! Calls followed as tasks (the Tasks extension, `io.modelcontextprotocol/tasks`): a
//! call that pauses, or runs on past a short wait ([`Engine::call_as_task`]), for a
//! client that declared the extension becomes a task whose id is its thread's. The
//! task's state is the thread's: `input_required` with the open round's questions
//! (those not answered yet), `working` while a request or its process runs it,
//! `completed` with its result, `cancelled`, `failed` with a JSON-RPC error. Answers
//! come in parts (`tasks/update`), kept in the thread until every question of the round
//! has one; then the round is answered exactly as a retry would answer it (resume once,
//! the same checks), so a task is bound to its caller and runs once like any call.
//!
//! A task's request keys are `<round>:<question key>`: unique over the task's life, as
//! the extension requires, even when two rounds ask the same question.

use hitl_protocol::{CallToolResult, ErrorObject, InputRequests, InputResponses};
use serde_json::Map;

use crate::engine::{Deadline, Engine, EngineError};
use hitl_thread::SaveError;
use hitl_thread::{LastOutcome, Thread};

/// What a task is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskStatus {
    /// A request is running it.
    Working,
    /// It waits for answers.
    InputRequired,
    /// It ended with a result (a tool error too).
    Completed,
    /// Its client cancelled it.
    Cancelled,
    /// Its run ended with a JSON-RPC error (not a tool's error result).
    Failed,
}

impl TaskStatus {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
        }
    }
}

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

/// The task key of question `key` of round `n`.
fn task_key(n: u32, key: &str) -> String {
    format!("{n}:{key}")
}

impl Engine {
    /// The task `id` of `principal` (`None`: no such task for this caller).
    pub async fn task(&self, id: &str, principal: Option<&str>) -> Result<Option<TaskView>, EngineError> {
        let Some(thread) = self.own_task(id, principal).await? else { return Ok(None) };
        let task = thread.task.as_ref().expect("own_task returns tasks");
        let now = self.now_ms();
        let over = task.cancelled || task.error.is_some();
        let claimed = |round: &crate::Round| thread.live_claim(now).is_some_and(|c| c.round == round.n);
        // Every answer is in, and no request runs the round: it is about to run (its page
        // is not done yet, or the run before failed and is tried again).
        let ready = !over
            && thread.round.as_ref().is_some_and(|round| {
                !claimed(round) && round.questions.iter().all(|q| task.partial.contains_key(&q.key))
            });
        let (status, input_requests, result) = match (&thread.round, &thread.last) {
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
        Ok(Some(TaskView {
            id: thread.id.clone(),
            tool: thread.tool.clone(),
            status,
            created_at_ms: task.created_at_ms,
            updated_at_ms: task.updated_at_ms,
            expires_at_ms: thread.expires_at_ms,
            input_requests,
            result,
            error,
            ready,
        }))
    }

    /// Takes answers to some of task `id`'s outstanding questions (task keys; others
    /// are ignored, as the extension says). When the round has all its answers and no
    /// request runs it, it is answered as a retry would answer it, in this request: the
    /// agent runs on to its next round or its result (with no new answers, this tries a
    /// complete round again: a page done since, a failed run). An answer the round
    /// refuses (a form mismatch) is dropped and its error returned; the task waits on.
    pub async fn update_task(
        &self,
        agent: &crate::Agent,
        id: &str,
        principal: Option<&str>,
        responses: &InputResponses,
    ) -> Result<Result<(), ErrorObject>, EngineError> {
        let (thread, fresh) = loop {
            let Some(thread) = self.own_task(id, principal).await? else { return Ok(Err(unknown_task(id))) };
            let task = thread.task.as_ref().expect("own_task returns tasks");
            let Some(round) = thread.round.as_ref().filter(|_| !task.cancelled) else { return Ok(Ok(())) };
            let fresh: InputResponses = round
                .questions
                .iter()
                .filter(|q| !task.partial.contains_key(&q.key))
                .filter_map(|q| responses.get(&task_key(round.n, &q.key)).map(|v| (q.key.clone(), v.clone())))
                .collect();
            if fresh.is_empty() {
                break (thread, fresh);
            }
            let mut updated = thread.clone();
            let kept = updated.task.as_mut().expect("a task");
            kept.partial.extend(fresh.clone());
            kept.updated_at_ms = self.now_ms();
            updated.version += 1;
            // Answers are the client's bytes: the record must still fit.
            if let Err(too_large) = crate::round::fits(&updated, self.limits.max_record_bytes) {
                return Ok(Err(too_large));
            }
            match self.store.save(updated.clone(), Some(thread.version)).await {
                Ok(()) => break (updated, fresh),
                Err(SaveError::Conflict(_)) => continue,
                Err(SaveError::Store(e)) => return Err(e.into()),
            }
        };
        let round = thread.round.as_ref().expect("an open round");
        let task = thread.task.as_ref().expect("a task");
        let running = thread.live_claim(self.now_ms()).is_some_and(|c| c.round == round.n);
        if running || round.questions.iter().any(|q| !task.partial.contains_key(&q.key)) {
            return Ok(Ok(()));
        }
        let (partial, capabilities) = (&task.partial, task.capabilities.clone());
        let request_state = self.secret().request_state(&thread.id, round.n, &round.nonce);
        let call = crate::Call {
            arguments: Map::new(),
            input_responses: Some(partial.clone()),
            request_state: Some(request_state.clone()),
            context: None,
            capabilities,
            principal: principal.map(str::to_owned),
            // The address the call counts against, so the run has the caller key of the
            // call's first request (an agent's per-caller state, an upstream session).
            peer: thread.owner.as_deref().and_then(|owner| owner.strip_prefix("peer:")).map(str::to_owned),
            era: hitl_protocol::version::Era::Modern,
            prompt: false,
            progress: None,
            cancel: None,
            task: true,
            session: None,
        };
        let deadline = Deadline::after(self.limits.request_timeout);
        match self.answer_round(agent, call, thread.args_digest.clone(), &request_state, deadline).await? {
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
    pub async fn cancel_task(&self, id: &str, principal: Option<&str>) -> Result<Result<(), ErrorObject>, EngineError> {
        loop {
            let Some(thread) = self.own_task(id, principal).await? else { return Ok(Err(unknown_task(id))) };
            let now = self.now_ms();
            let task = thread.task.as_ref().expect("own_task returns tasks");
            let answering = thread.round.is_some() && thread.live_claim(now).is_some();
            let over = thread.round.is_none() && !thread.working(now);
            if task.cancelled || task.error.is_some() || answering || over {
                return Ok(Ok(()));
            }
            let expected = thread.version;
            let owner = thread.owner.clone();
            let ended = self.cancelled(thread);
            match self.store.save_finished(ended, expected, owner.as_deref()).await {
                Ok(()) => {
                    self.stop_run(id);
                    return Ok(Ok(()));
                }
                Err(SaveError::Conflict(_)) => continue,
                Err(SaveError::Store(e)) => return Err(e.into()),
            }
        }
    }

    /// Task `thread` cancelled now: it never runs on, and is kept a while for `tasks/get`.
    pub(crate) fn cancelled(&self, mut thread: Thread) -> Thread {
        let now = self.now_ms();
        let task = thread.task.as_mut().expect("a task");
        (task.cancelled, task.updated_at_ms) = (true, now);
        task.partial.clear();
        (thread.round, thread.checkpoint, thread.begun, thread.claim) = (None, None, None, None);
        thread.version += 1;
        thread.expires_at_ms = now.saturating_add(self.lifetimes.finished.as_millis() as u64);
        thread
    }

    /// The thread of task `id`, when it is a task of `principal`.
    async fn own_task(&self, id: &str, principal: Option<&str>) -> Result<Option<Thread>, EngineError> {
        // A task id is a thread id: refuse anything else before the store sees it.
        if uuid::Uuid::try_parse(id).is_err() {
            return Ok(None);
        }
        let thread = self.store.load(id).await?;
        Ok(thread.filter(|t| t.task.is_some() && t.principal.as_deref() == principal))
    }

    /// Takes back the answers `fresh` to round `n` a refused update left in the task.
    async fn drop_answers(
        &self,
        id: &str,
        principal: Option<&str>,
        n: u32,
        fresh: &InputResponses,
    ) -> Result<(), EngineError> {
        loop {
            let Some(thread) = self.own_task(id, principal).await? else { return Ok(()) };
            if thread.round.as_ref().is_none_or(|r| r.n != n) {
                return Ok(());
            }
            let mut updated = thread.clone();
            updated.task.as_mut().expect("a task").partial.retain(|key, _| !fresh.contains_key(key));
            updated.version += 1;
            match self.store.save(updated, Some(thread.version)).await {
                Ok(()) => return Ok(()),
                Err(SaveError::Conflict(_)) => continue,
                Err(SaveError::Store(e)) => return Err(e.into()),
            }
        }
    }
}
