//! A [`Model`] over a real model API (`hitl-model`): the agent's messages become the
//! API's conversation (the call's arguments are the user's request), and the API's tool
//! calls become the agent's, reviewed and run as the runtime says.

use std::sync::Arc;

use hitl_graph::StepError;
use hitl_model::{ChatRequest, Message, ModelClient, ToolSpec};
use serde_json::{Map, Value, json};

use crate::tool_agent::{Answer, Model, Pending, ToolCall, Toolbox, Turn};

/// State keys the runtime writes; the rest are the call's arguments.
const RUNTIME_KEYS: [&str; 4] = ["messages", "ran", "usage", "output"];

/// A model served by an API, with a system prompt and the tools it may call.
pub struct ChatModel {
    client: ModelClient,
    system: Option<String>,
    tools: Arc<dyn Toolbox>,
}

impl ChatModel {
    /// `client`'s model, told `system` and offered the tools `tools` holds at each turn
    /// (the agent's own toolbox, so the model is offered what the agent can run).
    pub fn new(client: ModelClient, system: Option<String>, tools: Arc<dyn Toolbox>) -> Self {
        Self { client, system, tools }
    }

    /// The tools as the API describes them, under the names the API accepts.
    fn specs(&self, names: &mut Names) -> Vec<ToolSpec> {
        self.tools
            .tools()
            .into_iter()
            .map(|tool| ToolSpec {
                input_schema: tool.args_schema.unwrap_or_else(|| json!({"type": "object"})),
                name: names.api(&tool.name),
                description: tool.description,
            })
            .collect()
    }

    /// The conversation so far: the request, then the agent's messages.
    fn conversation(&self, state: &Value, names: &mut Names) -> ChatRequest {
        let tools = self.specs(names);
        let mut messages = vec![Message::User(request_of(state))];
        for message in state["messages"].as_array().into_iter().flatten() {
            let text = message["content"].as_str().filter(|t| !t.is_empty()).map(str::to_owned);
            messages.push(match message["role"].as_str() {
                Some("tool") => Message::Tool {
                    call_id: message["tool_call_id"].as_str().unwrap_or_default().to_owned(),
                    content: text.unwrap_or_default(),
                    is_error: message["status"] == "error",
                },
                _ => Message::Assistant {
                    text,
                    tool_calls: message["tool_calls"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|c| hitl_model::ToolCall {
                            id: c["id"].as_str().unwrap_or_default().to_owned(),
                            name: names.api(c["name"].as_str().unwrap_or_default()),
                            arguments: c["args"].as_object().cloned().unwrap_or_default(),
                        })
                        .collect(),
                },
            });
        }
        ChatRequest { system: self.system.clone(), messages, tools }
    }
}

/// Tool names as the APIs accept them (`^[a-zA-Z0-9_-]{1,64}$`: `db.drop` is sent as
/// `db_drop`), and back. Names that would clash get a numbered suffix.
#[derive(Default)]
struct Names {
    to_api: std::collections::HashMap<String, String>,
    from_api: std::collections::HashMap<String, String>,
}

impl Names {
    /// The name `name` is sent under.
    fn api(&mut self, name: &str) -> String {
        if let Some(api) = self.to_api.get(name) {
            return api.clone();
        }
        let base: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
            .take(64)
            .collect();
        let base = if base.is_empty() { "tool".to_owned() } else { base };
        let mut api = base.clone();
        let mut n = 2;
        while self.from_api.contains_key(&api) {
            let suffix = format!("_{n}");
            api = format!("{}{suffix}", &base[..base.len().min(64 - suffix.len())]);
            n += 1;
        }
        self.to_api.insert(name.to_owned(), api.clone());
        self.from_api.insert(api.clone(), name.to_owned());
        api
    }

    /// The tool a name the API sent names (a name never sent stays as it is).
    fn ours(&self, api: String) -> String {
        self.from_api.get(&api).cloned().unwrap_or(api)
    }
}

/// The user's request: the call's only string argument as it is, else its arguments as
/// JSON.
fn request_of(state: &Value) -> String {
    let args: Map<String, Value> = state
        .as_object()
        .map(|s| {
            s.iter().filter(|(k, _)| !RUNTIME_KEYS.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect()
        })
        .unwrap_or_default();
    match args.values().collect::<Vec<_>>().as_slice() {
        [Value::String(text)] => text.clone(),
        _ => Value::Object(args).to_string(),
    }
}

impl Model for ChatModel {
    fn next<'a>(&'a self, state: &'a Value) -> Pending<'a, Result<Answer, StepError>> {
        Box::pin(async move {
            // Any failure of the API may pass (a key fixed, a server back): tried again.
            let mut names = Names::default();
            let request = self.conversation(state, &mut names);
            let answer =
                self.client.chat(&request).await.map_err(|e| StepError::transient(format!("the model failed: {e}")))?;
            let turn = if answer.tool_calls.is_empty() {
                Turn::Message(answer.text.unwrap_or_default())
            } else {
                Turn::ToolCalls(
                    answer
                        .tool_calls
                        .into_iter()
                        .map(|c| ToolCall { id: c.id, name: names.ours(c.name), args: c.arguments })
                        .collect(),
                )
            };
            let usage = json!({"input_tokens": answer.usage.input_tokens, "output_tokens": answer.usage.output_tokens});
            Ok(Answer { turn, usage: Some(usage) })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Names;

    #[test]
    fn tool_names_are_sent_as_the_apis_accept_them_and_read_back() {
        let mut names = Names::default();
        assert_eq!(names.api("db.drop_partition"), "db_drop_partition");
        assert_eq!(names.api("db_drop.partition"), "db_drop_partition_2", "a clash is numbered");
        assert_eq!(names.api("db.drop_partition"), "db_drop_partition", "the same name, the same way");
        assert_eq!(names.api(&"x".repeat(80)).len(), 64);
        assert_eq!(names.ours("db_drop_partition_2".into()), "db_drop.partition");
        assert_eq!(names.ours("unknown".into()), "unknown");
    }
}
