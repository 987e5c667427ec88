//! The Tasks extension (`io.modelcontextprotocol/tasks`) on the 2026-07-28 wire: a
//! `tools/call` from a client that declares the extension and pauses becomes a task
//! (`resultType: "task"`, its id the thread's, stored before it is returned);
//! `tasks/get` shows it (`input_required` with its outstanding questions, `working`,
//! `completed` with the result, `cancelled`), `tasks/update` answers some of its
//! questions, `tasks/cancel` ends it. Tasks are the caller's only, as threads are.

use hitl_interrupt::TaskView;
use hitl_protocol::{ClientCapabilities, ErrorObject, InputRequiredResult, TaskParams};
use serde_json::{Map, Value, json};

use crate::Shared;
use crate::validate::Caller;

/// The extension's identifier.
pub(crate) const TASKS: &str = "io.modelcontextprotocol/tasks";
/// How often clients are asked to poll, in ms.
const POLL_INTERVAL_MS: u64 = 1_000;

/// Does the client declare the Tasks extension on this request?
pub(crate) fn declared(capabilities: &ClientCapabilities) -> bool {
    capabilities.extensions.as_ref().is_some_and(|extensions| extensions.contains_key(TASKS))
}

/// The task's fields every shape carries.
fn task_fields(view: &TaskView) -> Map<String, Value> {
    let mut task = Map::new();
    task.insert("taskId".into(), json!(view.id));
    task.insert("status".into(), json!(view.status.as_str()));
    task.insert("createdAt".into(), json!(hitl_protocol::rfc3339(view.created_at_ms)));
    task.insert("lastUpdatedAt".into(), json!(hitl_protocol::rfc3339(view.updated_at_ms)));
    task.insert("ttlMs".into(), json!(view.expires_at_ms.saturating_sub(view.created_at_ms)));
    task.insert("pollIntervalMs".into(), json!(POLL_INTERVAL_MS));
    task
}

impl Shared {
    /// The `CreateTaskResult` of a call that paused as a task (`round` is its first
    /// round, already stored).
    pub(crate) async fn created(
        &self,
        round: &InputRequiredResult,
        principal: Option<&str>,
    ) -> Result<Value, ErrorObject> {
        let id = round.request_state.as_deref().and_then(|s| s.split_once('.')).map(|(id, _)| id).unwrap_or_default();
        let view = self.view(id, principal).await?;
        let mut task = task_fields(&view);
        task.insert("resultType".into(), json!("task"));
        Ok(Value::Object(task))
    }

    /// `tasks/get`, `tasks/update`, `tasks/cancel`.
    pub(crate) async fn task_request(
        &self,
        method: &str,
        params: TaskParams,
        caller: &Caller,
    ) -> Result<Value, ErrorObject> {
        if !declared(&caller.capabilities) {
            let required = ClientCapabilities {
                extensions: Some(Map::from_iter([(TASKS.to_owned(), json!({}))])),
                ..ClientCapabilities::default()
            };
            return Err(ErrorObject::missing_capability("Missing required client capability", &required));
        }
        let principal = caller.principal.as_deref();
        let id = params.task_id.as_str();
        match method {
            "tasks/get" => {
                // A round with every answer in shows `working` and runs when it can (its
                // page done, its last run failed): polling moves it on. Other polls read
                // the task once.
                let mut view = self.view(id, principal).await?;
                if view.status == hitl_interrupt::TaskStatus::Working {
                    self.update_viewed(&view, caller, &Default::default()).await?;
                    view = self.view(id, principal).await?;
                }
                let mut task = task_fields(&view);
                if let Some(requests) = &view.input_requests {
                    task.insert("inputRequests".into(), json!(requests));
                }
                if let Some(result) = &view.result {
                    task.insert("result".into(), serde_json::to_value(result).unwrap_or_default());
                }
                Ok(Value::Object(task))
            }
            "tasks/update" => {
                self.update(id, caller, &params.input_responses.unwrap_or_default()).await?;
                Ok(json!({}))
            }
            "tasks/cancel" => {
                let cancelled = self.engine.cancel_task(id, principal).await;
                self.store_answer(cancelled)?.map(|()| json!({}))
            }
            other => Err(ErrorObject::method_not_found(other)),
        }
    }

    /// Answers some of task `id`'s questions (none: runs a complete round).
    async fn update(
        &self,
        id: &str,
        caller: &Caller,
        responses: &hitl_protocol::InputResponses,
    ) -> Result<(), ErrorObject> {
        let view = self.view(id, caller.principal.as_deref()).await?;
        self.update_viewed(&view, caller, responses).await
    }

    /// [`Shared::update`] of a task already read.
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
        self.store_answer(self.engine.update_task(agent, id, caller.principal.as_deref(), responses).await)?
    }

    /// The task `id` of the caller, or `Unknown task`.
    async fn view(&self, id: &str, principal: Option<&str>) -> Result<TaskView, ErrorObject> {
        match self.store_answer(self.engine.task(id, principal).await)? {
            Some(view) => Ok(view),
            None => Err(hitl_interrupt::unknown_task(id)),
        }
    }

    /// A store failure as the client sees it (the detail goes to the log).
    fn store_answer<T>(&self, outcome: Result<T, hitl_interrupt::EngineError>) -> Result<T, ErrorObject> {
        outcome.map_err(|e| {
            tracing::error!(error = %e, "task request failed");
            ErrorObject::internal("Internal error: the thread store is unavailable")
        })
    }
}
