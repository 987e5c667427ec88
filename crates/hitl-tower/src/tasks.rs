//! The Tasks extension (`io.modelcontextprotocol/tasks`) on the 2026-07-28 wire: a
//! `tools/call` from a client that declares the extension and pauses becomes a task
//! (`resultType: "task"`, its id the thread's, stored before it is returned);
//! `tasks/get` shows it (`input_required` with its outstanding questions, `working`,
//! `completed` with the result, `cancelled`), `tasks/update` answers some of its
//! questions, `tasks/cancel` ends it. Tasks are the caller's only, as threads are.

use std::time::Duration;

use hitl_graph::TaskSupport;
use hitl_interrupt::{TaskStart, TaskView};
use hitl_protocol::{
    ClientCapabilities, CreateTaskResult, EmptyResult, ErrorObject, GetTaskResult, ServerResult, Task, TaskParams,
};
use serde_json::{Map, json};

use crate::Shared;
use crate::validate::Caller;

/// The extension's identifier.
pub(crate) const TASKS: &str = "io.modelcontextprotocol/tasks";
/// How often clients are asked to poll, in ms.
const POLL_INTERVAL_MS: u64 = 1_000;
/// How long a new call of a tool that may run as a task is awaited before it becomes
/// one: a quick result is answered at once, a slow run is polled.
const TASK_WAIT: Duration = Duration::from_millis(300);

/// Does the client declare the Tasks extension on this request?
pub(crate) fn declared(capabilities: &ClientCapabilities) -> bool {
    capabilities.extensions.as_ref().is_some_and(|extensions| extensions.contains_key(TASKS))
}

/// The error of a request only a client that follows tasks can make.
pub(crate) fn undeclared() -> ErrorObject {
    let required = ClientCapabilities {
        extensions: Some(Box::new(Map::from_iter([(TASKS.to_owned(), json!({}))]))),
        ..ClientCapabilities::default()
    };
    ErrorObject::missing_capability("Missing required client capability", &required)
}

/// Task `view` as every result shows it.
fn task(view: &TaskView) -> Task {
    Task {
        task_id: view.id.clone(),
        status: view.status,
        created_at: hitl_protocol::rfc3339(view.created_at_ms),
        last_updated_at: hitl_protocol::rfc3339(view.updated_at_ms),
        ttl_ms: view.expires_at_ms.saturating_sub(view.created_at_ms),
        poll_interval_ms: POLL_INTERVAL_MS,
    }
}

/// The principal of a caller that follows tasks, or the error of one that does not.
fn follower(caller: &Caller) -> Result<Option<&str>, ErrorObject> {
    if declared(&caller.capabilities) { Ok(caller.principal.as_deref()) } else { Err(undeclared()) }
}

impl Shared {
    /// A new `tools/call` of `agent` from a client that follows tasks: its result when
    /// it ends at once, else the `CreateTaskResult` of the task it became (stored before
    /// it is answered).
    pub(crate) async fn call_as_task(
        &self,
        agent: &hitl_interrupt::Agent,
        call: hitl_interrupt::ToolCall,
    ) -> Result<ServerResult, ErrorObject> {
        let principal = call.principal.clone();
        let wait = if agent.tasks == TaskSupport::Required { Duration::ZERO } else { TASK_WAIT };
        match self.store_answer(self.engine.tasks().start(agent, call, wait).await)? {
            TaskStart::Complete(result) => Ok(ServerResult::CallTool(result)),
            TaskStart::Task(id) => Ok(ServerResult::CreateTask(self.created(&id, principal.as_deref()).await?)),
            TaskStart::Refused(error) => Err(error),
        }
    }

    /// The `CreateTaskResult` of task `id`.
    pub(crate) async fn created(&self, id: &str, principal: Option<&str>) -> Result<CreateTaskResult, ErrorObject> {
        let view = self.view(id, principal).await?;
        Ok(CreateTaskResult::new(task(&view)))
    }

    /// `tasks/get`: the caller's task. A round with every answer in runs when it can
    /// (its page done, its last run failed): polling moves it on. Other polls read the
    /// task once.
    pub(crate) async fn get_task(&self, params: TaskParams, caller: &Caller) -> Result<ServerResult, ErrorObject> {
        let (id, principal) = (params.task_id.as_str(), follower(caller)?);
        let mut view = self.view(id, principal).await?;
        if view.ready {
            self.update_viewed(&view, caller, &Default::default()).await?;
            view = self.view(id, principal).await?;
        }
        let error = view.error.clone();
        let result = GetTaskResult {
            task: task(&view),
            input_requests: view.input_requests,
            result: view.result,
            status_message: error.as_ref().map(|e| e.message.clone()),
            error,
            result_type: None,
            meta: None,
        };
        Ok(ServerResult::GetTask(Box::new(result)))
    }

    /// `tasks/update`: answers some of the caller's task's questions.
    pub(crate) async fn update_task(&self, params: TaskParams, caller: &Caller) -> Result<ServerResult, ErrorObject> {
        let (id, principal) = (params.task_id.as_str(), follower(caller)?);
        let view = self.view(id, principal).await?;
        self.update_viewed(&view, caller, &params.input_responses.unwrap_or_default()).await?;
        Ok(ServerResult::Empty(EmptyResult::default()))
    }

    /// `tasks/cancel`: ends the caller's task.
    pub(crate) async fn cancel_task(&self, params: TaskParams, caller: &Caller) -> Result<ServerResult, ErrorObject> {
        let principal = follower(caller)?;
        let cancelled = self.engine.tasks().cancel(&params.task_id, principal).await;
        self.store_answer(cancelled)?.map(|()| ServerResult::Empty(EmptyResult::default()))
    }

    /// Answers some of task `view`'s questions (none: runs a complete round).
    async fn update_viewed(
        &self,
        view: &TaskView,
        caller: &Caller,
        responses: &hitl_protocol::InputResponses,
    ) -> Result<(), ErrorObject> {
        let id = view.id.as_str();
        let tools = self.tools.snapshot();
        let Some(agent) = tools.get(&view.tool) else {
            return Err(ErrorObject::invalid_params(format!("The tool of task {id} is no longer served")));
        };
        self.store_answer(self.engine.tasks().update(agent, id, caller.principal.as_deref(), responses).await)?
    }

    /// The task `id` of the caller, or `Unknown task`.
    async fn view(&self, id: &str, principal: Option<&str>) -> Result<TaskView, ErrorObject> {
        match self.store_answer(self.engine.tasks().get(id, principal).await)? {
            Some(view) => Ok(view),
            None => Err(hitl_interrupt::unknown_task(id)),
        }
    }

    /// A store failure as the client sees it (the detail goes to the log).
    pub(crate) fn store_answer<T>(&self, outcome: Result<T, hitl_interrupt::EngineError>) -> Result<T, ErrorObject> {
        outcome.map_err(|e| {
            tracing::error!(error = %e, "task request failed");
            crate::store_unavailable()
        })
    }
}
