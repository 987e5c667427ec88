//! The Tasks extension's results (`io.modelcontextprotocol/tasks`): a task as every
//! result shows it, the `CreateTaskResult` of a call that became one, and what
//! `tasks/get` answers.

use serde::{Deserialize, Serialize};

use crate::{CallToolResult, ErrorObject, InputRequests, Meta, ResultType};

/// What a task is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// A request (or the server) runs it.
    Working,
    /// It waits for answers to its `inputRequests`.
    InputRequired,
    /// It ended with a result (a tool's error result too).
    Completed,
    /// Its client cancelled it.
    Cancelled,
    /// It ended with a JSON-RPC error.
    Failed,
}

/// The fields every task result carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// The task's id.
    pub task_id: String,
    /// What it is doing.
    pub status: TaskStatus,
    /// When it was made (RFC 3339).
    pub created_at: String,
    /// When it last changed (RFC 3339).
    pub last_updated_at: String,
    /// How long it is kept from its creation, in milliseconds.
    pub ttl_ms: u64,
    /// How often the client is asked to poll, in milliseconds.
    pub poll_interval_ms: u64,
}

/// What a `tools/call` that became a task answers (`resultType: "task"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateTaskResult {
    /// The task.
    #[serde(flatten)]
    pub task: Task,
    /// Always `task`.
    pub result_type: ResultType,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Meta>,
}

impl CreateTaskResult {
    /// The result of a call that became `task`.
    pub fn new(task: Task) -> Self {
        Self { task, result_type: ResultType::Other("task".into()), meta: None }
    }
}

/// The result of `tasks/get`: the task, its outstanding questions while it waits, its
/// result once completed, its error once failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetTaskResult {
    /// The task.
    #[serde(flatten)]
    pub task: Task,
    /// `input_required`: the questions not answered yet, by task request key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_requests: Option<InputRequests>,
    /// `completed`: the call's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<CallToolResult>,
    /// `failed`: the error's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// `failed`: the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorObject>,
    /// `complete` on 2026-07-28.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_type: Option<ResultType>,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Meta>,
}
