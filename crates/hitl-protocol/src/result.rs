//! What a server answers a client request, typed: one variant per result hitl makes,
//! and the results it relays from elsewhere as they came. [`ServerResult::stamp`] sets
//! what every result of an era carries (`resultType` and `_meta.serverInfo` on
//! 2026-07-28, no `resultType` for 2025-era clients) on the typed value.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::{
    CallToolResult, CreateTaskResult, DiscoverResult, GetPromptResult, GetTaskResult, InitializeResult,
    InputRequiredResult, ListPromptsResult, ListToolsResult, Meta, ResultType, meta_keys,
};

/// A result to send.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
// The large results of rare requests are boxed: every request's future and reply
// carries a `ServerResult`, and a tools/call's are a third of their size.
pub enum ServerResult {
    /// `server/discover`.
    Discover(Box<DiscoverResult>),
    /// `tools/list`.
    ListTools(ListToolsResult),
    /// `prompts/list`.
    ListPrompts(ListPromptsResult),
    /// `tools/call` that finished.
    CallTool(CallToolResult),
    /// `tools/call` or `prompts/get` that asks for input first.
    InputRequired(InputRequiredResult),
    /// `prompts/get`.
    GetPrompt(GetPromptResult),
    /// The legacy `initialize`.
    Initialize(Box<InitializeResult>),
    /// A `tools/call` that became a task.
    CreateTask(CreateTaskResult),
    /// `tasks/get`.
    GetTask(Box<GetTaskResult>),
    /// A result with nothing in it but what is stamped (`ping`, `tasks/update`, …).
    Empty(EmptyResult),
    /// A result made or relayed as JSON (resources, a passthrough's prompts, completion).
    Other(Value),
}

/// A result with no fields of its own.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EmptyResult {
    /// `complete` on 2026-07-28.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_type: Option<ResultType>,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Meta>,
}

impl ServerResult {
    /// Stamps the result for its era: on 2026-07-28 (`modern`), `resultType`
    /// (`complete` unless it has one) and `_meta.serverInfo`; for a 2025-era client, no
    /// `resultType`.
    pub fn stamp(&mut self, modern: bool, server_info: &Arc<Value>) {
        // A result whose `resultType` is not optional goes to a 2025-era client as JSON
        // without it.
        if !modern && matches!(self, Self::Discover(_) | Self::InputRequired(_) | Self::CreateTask(_)) {
            *self = Self::Other(serde_json::to_value(&*self).expect("a result serializes"));
        }
        let complete = || Some(ResultType::Complete);
        let (result_type, meta) = match self {
            Self::Discover(r) => (None, &mut r.meta),
            Self::ListTools(r) => (Some(&mut r.result_type), &mut r.meta),
            Self::ListPrompts(r) => (Some(&mut r.result_type), &mut r.meta),
            Self::CallTool(r) => (Some(&mut r.result_type), &mut r.meta),
            Self::InputRequired(r) => (None, &mut r.meta),
            Self::GetPrompt(r) => (Some(&mut r.result_type), &mut r.meta),
            // A 2025-era result only: nothing to stamp or take away.
            Self::Initialize(_) => return,
            Self::CreateTask(r) => (None, &mut r.meta),
            Self::GetTask(r) => (Some(&mut r.result_type), &mut r.meta),
            Self::Empty(r) => (Some(&mut r.result_type), &mut r.meta),
            Self::Other(Value::Object(map)) => return stamp_map(map, modern, server_info),
            Self::Other(_) => return,
        };
        match (modern, result_type) {
            (true, Some(result_type)) => {
                if result_type.is_none() {
                    *result_type = complete();
                }
            }
            (false, Some(result_type)) => *result_type = None,
            (_, None) => {}
        }
        if modern {
            meta.get_or_insert_with(Meta::new).stamp_server_info(server_info);
        }
    }
}

/// [`ServerResult::stamp`] of a result kept as JSON.
fn stamp_map(map: &mut Map<String, Value>, modern: bool, server_info: &Arc<Value>) {
    if !modern {
        map.remove("resultType");
        return;
    }
    map.entry("resultType").or_insert_with(|| Value::from("complete"));
    if let Value::Object(meta) = map.entry("_meta").or_insert_with(|| Value::Object(Map::new())) {
        meta.insert(meta_keys::SERVER_INFO.into(), Value::clone(server_info));
    }
}
