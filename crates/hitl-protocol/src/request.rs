//! Typed client requests and notifications, and server-to-client requests.

use serde_json::{Map, Value};

use crate::jsonrpc::{self, ErrorObject, RequestId};
use crate::{CallToolParams, EmptyParams, GetPromptParams, InitializeParams, InputRequest, ListParams, Meta};

/// A client request hitl understands, with typed params.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant, reason = "built once per request and moved into its handler")]
pub enum ClientRequest {
    /// `server/discover` (2026-07-28).
    Discover(EmptyParams),
    /// `tools/list`.
    ListTools(ListParams),
    /// `tools/call`.
    CallTool(CallToolParams),
    /// `prompts/list`.
    ListPrompts(ListParams),
    /// `prompts/get`.
    GetPrompt(GetPromptParams),
    /// `initialize` (legacy).
    Initialize(InitializeParams),
    /// `ping` (legacy).
    Ping(EmptyParams),
    /// `completion/complete`.
    Complete(CompleteParams),
    /// `resources/list`.
    ListResources(ListParams),
    /// `resources/templates/list`.
    ListResourceTemplates(ListParams),
    /// `resources/read`.
    ReadResource(ReadResourceParams),
    /// `logging/setLevel` (legacy).
    SetLevel(SetLevelParams),
    /// `tasks/get` (the Tasks extension).
    GetTask(TaskParams),
    /// `tasks/update` (the Tasks extension).
    UpdateTask(TaskParams),
    /// `tasks/cancel` (the Tasks extension).
    CancelTask(TaskParams),
    /// `subscriptions/listen` (2026-07-28): a stream of the notifications asked for.
    Listen(ListenParams),
    /// `resources/subscribe` (2025-era): updates of a resource on the session's stream.
    Subscribe(ReadResourceParams),
    /// `resources/unsubscribe` (2025-era).
    Unsubscribe(ReadResourceParams),
}

/// Params of `subscriptions/listen`: which notifications the stream carries.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ListenParams {
    /// The filter; every kind is opt-in.
    pub notifications: SubscriptionFilter,
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Meta::is_empty")]
    pub meta: Meta,
}

/// The notifications a `subscriptions/listen` stream carries (and, in its
/// acknowledgement, those the server honours).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionFilter {
    /// `notifications/tools/list_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_list_changed: Option<bool>,
    /// `notifications/prompts/list_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts_list_changed: Option<bool>,
    /// `notifications/resources/list_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_list_changed: Option<bool>,
    /// `notifications/resources/updated` for these URIs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_subscriptions: Option<Vec<String>>,
}

/// Params of `tasks/get`, `tasks/update` and `tasks/cancel` (the Tasks extension,
/// `io.modelcontextprotocol/tasks`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskParams {
    /// The task.
    pub task_id: String,
    /// `tasks/update`: answers to some of the task's outstanding `inputRequests`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_responses: Option<crate::InputResponses>,
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Meta::is_empty")]
    pub meta: Meta,
}

/// Params of `completion/complete`: what is being completed, kept as sent.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CompleteParams {
    /// `ref/prompt` or `ref/resource`, with its name or URI.
    #[serde(rename = "ref")]
    pub reference: Value,
    /// The argument being completed (`name`, `value`).
    pub argument: Value,
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Meta::is_empty")]
    pub meta: Meta,
}

/// Params of `resources/read`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReadResourceParams {
    /// The resource.
    pub uri: String,
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Meta::is_empty")]
    pub meta: Meta,
}

/// Params of `logging/setLevel`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SetLevelParams {
    /// The lowest level to send.
    pub level: String,
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Meta::is_empty")]
    pub meta: Meta,
}

impl ClientRequest {
    /// Every method name this type reads.
    pub const METHODS: &'static [&'static str] = &[
        "server/discover",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "initialize",
        "ping",
        "completion/complete",
        "logging/setLevel",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "subscriptions/listen",
        "resources/subscribe",
        "resources/unsubscribe",
    ];

    /// Types a request: `-32601` for a method hitl does not serve, `-32602` with
    /// serde's message and the JSON path when the params do not fit.
    pub fn parse(method: &str, params: Option<Value>) -> Result<Self, ErrorObject> {
        let params = match params {
            Some(Value::Array(_)) => {
                return Err(ErrorObject::invalid_params("Invalid params: params must be an object"));
            }
            other => other,
        };
        Ok(match method {
            "server/discover" => Self::Discover(jsonrpc::params(params)?),
            "tools/list" => Self::ListTools(jsonrpc::params(params)?),
            "tools/call" => Self::CallTool(jsonrpc::params(params)?),
            "prompts/list" => Self::ListPrompts(jsonrpc::params(params)?),
            "prompts/get" => Self::GetPrompt(jsonrpc::params(params)?),
            "initialize" => Self::Initialize(jsonrpc::params(params)?),
            "ping" => Self::Ping(jsonrpc::params(params)?),
            "completion/complete" => Self::Complete(jsonrpc::params(params)?),
            "logging/setLevel" => Self::SetLevel(jsonrpc::params(params)?),
            "resources/list" => Self::ListResources(jsonrpc::params(params)?),
            "resources/templates/list" => Self::ListResourceTemplates(jsonrpc::params(params)?),
            "resources/read" => Self::ReadResource(jsonrpc::params(params)?),
            "tasks/get" => Self::GetTask(jsonrpc::params(params)?),
            "tasks/update" => Self::UpdateTask(jsonrpc::params(params)?),
            "tasks/cancel" => Self::CancelTask(jsonrpc::params(params)?),
            "subscriptions/listen" => Self::Listen(jsonrpc::params(params)?),
            "resources/subscribe" => Self::Subscribe(jsonrpc::params(params)?),
            "resources/unsubscribe" => Self::Unsubscribe(jsonrpc::params(params)?),
            other => return Err(ErrorObject::method_not_found(other)),
        })
    }

    /// The method name.
    pub fn method(&self) -> &'static str {
        match self {
            Self::Discover(_) => "server/discover",
            Self::ListTools(_) => "tools/list",
            Self::CallTool(_) => "tools/call",
            Self::ListPrompts(_) => "prompts/list",
            Self::GetPrompt(_) => "prompts/get",
            Self::Initialize(_) => "initialize",
            Self::Ping(_) => "ping",
            Self::Complete(_) => "completion/complete",
            Self::SetLevel(_) => "logging/setLevel",
            Self::ListResources(_) => "resources/list",
            Self::ListResourceTemplates(_) => "resources/templates/list",
            Self::ReadResource(_) => "resources/read",
            Self::GetTask(_) => "tasks/get",
            Self::UpdateTask(_) => "tasks/update",
            Self::CancelTask(_) => "tasks/cancel",
            Self::Listen(_) => "subscriptions/listen",
            Self::Subscribe(_) => "resources/subscribe",
            Self::Unsubscribe(_) => "resources/unsubscribe",
        }
    }

    /// The request's `_meta`.
    pub fn meta(&self) -> &Meta {
        match self {
            Self::Discover(p) | Self::Ping(p) => &p.meta,
            Self::ListTools(p) | Self::ListPrompts(p) | Self::ListResources(p) | Self::ListResourceTemplates(p) => {
                &p.meta
            }
            Self::ReadResource(p) | Self::Subscribe(p) | Self::Unsubscribe(p) => &p.meta,
            Self::Listen(p) => &p.meta,
            Self::CallTool(p) => &p.meta,
            Self::GetPrompt(p) => &p.meta,
            Self::Initialize(p) => &p.meta,
            Self::Complete(p) => &p.meta,
            Self::SetLevel(p) => &p.meta,
            Self::GetTask(p) | Self::UpdateTask(p) | Self::CancelTask(p) => &p.meta,
        }
    }
}

/// A client notification.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientNotification {
    /// `notifications/initialized` (legacy).
    Initialized,
    /// `notifications/cancelled`, with the id of the request to cancel when given.
    Cancelled(Option<RequestId>),
    /// Any other notification, which servers ignore.
    Other(String),
}

impl ClientNotification {
    /// Types a notification. Notifications get no response, so nothing here fails.
    pub fn parse(method: &str, params: Option<&Value>) -> Self {
        match method {
            "notifications/initialized" => Self::Initialized,
            "notifications/cancelled" => Self::Cancelled(
                params.and_then(|p| p.get("requestId")).and_then(|id| serde_json::from_value(id.clone()).ok()),
            ),
            other => Self::Other(other.to_owned()),
        }
    }
}

/// A server-to-client JSON-RPC request (legacy revisions: `elicitation/create` and
/// friends sent on the `tools/call` stream), as JSON.
pub fn server_request(id: &RequestId, request: &InputRequest) -> Value {
    let mut map = Map::new();
    map.insert("jsonrpc".into(), "2.0".into());
    map.insert("id".into(), serde_json::to_value(id).unwrap_or(Value::Null));
    if let Ok(Value::Object(body)) = serde_json::to_value(request) {
        map.extend(body);
    }
    Value::Object(map)
}
