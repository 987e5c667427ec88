//! A tool-calling agent with human review of its tool calls: the Rust equivalent of
//! LangChain's `create_agent` with `HumanInTheLoopMiddleware`.
//!
//! A model proposes tool calls; calls to tools under review pause the agent with an
//! interrupt the server turns into one review question per call; each decision then
//! runs the call (`approve`, `edit`), answers in its place (`respond`) or refuses it
//! (`reject`), and the model sees the tool messages. Both interrupt modes exist:
//! batched (one interrupt for every call of a turn, resumed with `{"decisions": [...]}`
//! in order) and per call (one interrupt per call, with a response schema that lists
//! the decisions the call allows and the tool's argument types).

use std::collections::HashMap;
use std::sync::Arc;

use hitl_graph::Agent;
use hitl_graph::{END, START, StateGraph, StepError};
use hitl_schema::Decision;
use serde_json::{Map, Value, json};

/// What the model does next, given the agent's state (its inputs and `messages`).
pub trait Model: Send + Sync + 'static {
    /// The next assistant turn: tool calls, or a final message.
    fn next(&self, state: &Value) -> Turn;
}

/// An assistant turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Turn {
    /// Calls to make, in order.
    ToolCalls(Vec<ToolCall>),
    /// The final answer.
    Message(String),
}

/// A tool call the model proposes.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Its id, echoed by the tool message.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments.
    pub args: Map<String, Value>,
}

/// What a tool returns: its result as text, or an error the model sees.
pub type ToolFn = Arc<dyn Fn(&Map<String, Value>) -> Result<String, String> + Send + Sync>;

/// A tool the agent can call.
#[derive(Clone)]
pub struct Tool {
    /// Its name.
    pub name: String,
    /// JSON Schema of its arguments, when it declares one: checked when it runs, and
    /// (per-call mode) part of the review's response schema.
    pub args_schema: Option<Value>,
    /// What it does.
    pub run: ToolFn,
}

/// How review interrupts are raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterruptMode {
    /// One interrupt for every reviewed call of a turn (the default).
    Batched,
    /// One interrupt per reviewed call.
    PerCall,
}

/// Which tools need review, and the decisions each allows.
#[derive(Debug, Clone)]
pub struct HumanInTheLoop {
    /// Tool name to allowed decisions.
    pub interrupt_on: HashMap<String, Vec<Decision>>,
    /// The interrupt mode.
    pub mode: InterruptMode,
    /// Prefix of the default description of a call.
    pub description_prefix: String,
}

impl HumanInTheLoop {
    /// Review `tools` with every decision allowed, in `mode`.
    pub fn all_decisions(tools: &[&str], mode: InterruptMode) -> Self {
        Self {
            interrupt_on: tools.iter().map(|t| ((*t).to_owned(), Decision::ALL.to_vec())).collect(),
            mode,
            description_prefix: "Tool execution requires approval".to_owned(),
        }
    }

    /// The description of a call, as the Python middleware writes it: the prefix, the
    /// tool, and the arguments as a Python dict.
    fn description(&self, call: &ToolCall) -> String {
        format!(
            "{}\n\nTool: {}\nArgs: {}",
            self.description_prefix,
            call.name,
            python_repr(&Value::Object(call.args.clone()))
        )
    }
}

/// A JSON value as Python's `repr` shows the equivalent object.
pub fn python_repr(value: &Value) -> String {
    match value {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
            let mut out = String::from(quote);
            for c in s.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if c == quote => {
                        out.push('\\');
                        out.push(c);
                    }
                    c => out.push(c),
                }
            }
            out.push(quote);
            out
        }
        Value::Array(items) => format!("[{}]", items.iter().map(python_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", python_repr(&Value::String(k.clone())), python_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The response schema of a per-call review: one branch per allowed decision, the edit
/// branch pinned to the tool and, when it declares them, its argument types.
fn decision_schema(tool: &Tool, allowed: &[Decision]) -> Value {
    let branches: Vec<Value> = allowed
        .iter()
        .map(|d| match d {
            Decision::Approve => json!({"type": "object", "properties": {"type": {"const": "approve"}}, "required": ["type"]}),
            Decision::Reject => json!({"type": "object", "properties": {"type": {"const": "reject"}, "message": {"type": "string"}}, "required": ["type"]}),
            Decision::Respond => json!({"type": "object", "properties": {"type": {"const": "respond"}, "message": {"type": "string"}}, "required": ["type", "message"]}),
            Decision::Edit => json!({"type": "object", "properties": {
                "type": {"const": "edit"},
                "edited_action": {"type": "object", "properties": {
                    "name": {"const": tool.name},
                    "args": tool.args_schema.clone().unwrap_or_else(|| json!({"type": "object"}))
                }, "required": ["name", "args"]}
            }, "required": ["type", "edited_action"]}),
        })
        .collect();
    json!({ "oneOf": branches })
}

fn tool_calls(message: &Value) -> Vec<ToolCall> {
    message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| ToolCall {
                    id: c["id"].as_str().unwrap_or_default().to_owned(),
                    name: c["name"].as_str().unwrap_or_default().to_owned(),
                    args: c["args"].as_object().cloned().unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn tool_message(call: &ToolCall, content: String, status: &str) -> Value {
    json!({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content, "status": status})
}

/// Runs a tool after checking its arguments against its schema, as for any call.
fn run_tool(tool: &Tool, args: &Map<String, Value>) -> Result<String, String> {
    if let Some(schema) = &tool.args_schema
        && let Err(violations) = hitl_schema::validate_value(schema, &Value::Object(args.clone()))
    {
        let details: Vec<String> = violations.iter().map(|v| v.message.clone()).collect();
        return Err(format!("invalid arguments for {}: {}", tool.name, details.join("; ")));
    }
    (tool.run)(args)
}

/// Builds the agent: `model` → (review) → `tools` → `model` … until the model answers.
/// The state holds the call's arguments, `messages` and `ran` (the calls that ran, with
/// the arguments they ran with); `output` turns the final state into the agent's
/// output (an object).
pub fn tool_calling_agent(
    name: &str,
    description: &str,
    input_schema: Value,
    model: Arc<dyn Model>,
    tools: Vec<Tool>,
    review: HumanInTheLoop,
    output: fn(&Value) -> Value,
) -> Agent {
    let tools: Arc<HashMap<String, Tool>> = Arc::new(tools.into_iter().map(|t| (t.name.clone(), t)).collect());
    let review = Arc::new(review);
    let graph = StateGraph::new()
        .add_step("model", move |state, _| {
            let model = model.clone();
            async move {
                let message = match model.next(&state) {
                    Turn::Message(text) => json!({"role": "assistant", "content": text}),
                    Turn::ToolCalls(calls) => json!({"role": "assistant", "content": "", "tool_calls": calls.iter()
                        .map(|c| json!({"id": c.id, "name": c.name, "args": c.args})).collect::<Vec<_>>()}),
                };
                Ok(json!({ "messages": [message] }))
            }
        })
        .add_step("tools", move |state, ctx| {
            let (tools, review) = (tools.clone(), review.clone());
            async move {
                let last = state["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or(Value::Null);
                let calls = tool_calls(&last);
                let gated: Vec<&ToolCall> = calls.iter().filter(|c| review.interrupt_on.contains_key(&c.name)).collect();
                // Decisions first (the step re-runs from here on resume), then the calls.
                let mut decisions: HashMap<String, Value> = HashMap::new();
                match review.mode {
                    InterruptMode::Batched if !gated.is_empty() => {
                        let requests: Vec<Value> = gated.iter()
                            .map(|c| json!({"name": c.name, "args": c.args, "description": review.description(c)}))
                            .collect();
                        let configs: Vec<Value> = gated.iter()
                            .map(|c| json!({"action_name": c.name, "allowed_decisions":
                                review.interrupt_on[&c.name].iter().map(|d| d.as_str()).collect::<Vec<_>>()}))
                            .collect();
                        let reply = ctx.interrupt(json!({"action_requests": requests, "review_configs": configs}))?;
                        for (call, decision) in gated.iter().zip(reply["decisions"].as_array().cloned().unwrap_or_default()) {
                            decisions.insert(call.id.clone(), decision);
                        }
                    }
                    InterruptMode::PerCall => {
                        for call in &gated {
                            let allowed = &review.interrupt_on[&call.name];
                            let schema = tools.get(&call.name).map_or_else(|| json!({}), |t| decision_schema(t, allowed));
                            let value = json!({"type": "tool_approval",
                                "action_request": {"name": call.name, "args": call.args, "description": review.description(call)},
                                "review_config": {"action_name": call.name,
                                    "allowed_decisions": allowed.iter().map(|d| d.as_str()).collect::<Vec<_>>()}});
                            decisions.insert(call.id.clone(), ctx.interrupt_with_schema(value, schema)?);
                        }
                    }
                    InterruptMode::Batched => {}
                }
                let mut messages = Vec::new();
                let mut ran = Vec::new();
                for call in &calls {
                    let decision = decisions.get(&call.id).cloned().unwrap_or(json!({"type": "approve"}));
                    let args = match decision["type"].as_str() {
                        Some("approve") => Some(call.args.clone()),
                        Some("edit") => {
                            let edited = decision.get("edited_action").or_else(|| decision.get("editedAction"));
                            Some(edited.and_then(|e| e["args"].as_object().cloned()).unwrap_or_default())
                        }
                        Some("reject") => {
                            let reason = decision["message"].as_str().map(str::to_owned).unwrap_or_else(|| {
                                format!("User rejected the tool call for `{}` with id {}", call.name, call.id)
                            });
                            messages.push(tool_message(call, reason, "error"));
                            None
                        }
                        Some("respond") => {
                            messages.push(tool_message(call, decision["message"].as_str().unwrap_or_default().to_owned(), "success"));
                            None
                        }
                        other => return Err(StepError::msg(format!("unknown decision {other:?}"))),
                    };
                    let Some(args) = args else { continue };
                    let Some(tool) = tools.get(&call.name) else {
                        messages.push(tool_message(call, format!("Error: {} is not a valid tool", call.name), "error"));
                        continue;
                    };
                    match run_tool(tool, &args) {
                        Ok(result) => {
                            ran.push(json!({"name": call.name, "args": args}));
                            messages.push(tool_message(call, result, "success"));
                        }
                        Err(error) => messages.push(tool_message(call, format!("Error: {error}"), "error")),
                    }
                }
                Ok(json!({ "messages": messages, "ran": ran }))
            }
        })
        .add_step("finish", move |state, _| async move { Ok(json!({ "output": output(&state) })) })
        .add_edge(START, "model")
        .add_conditional_edges("model", |state| {
            let last = state["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or(Value::Null);
            if tool_calls(&last).is_empty() { vec!["finish".to_owned()] } else { vec!["tools".to_owned()] }
        })
        .add_edge("tools", "model")
        .add_edge("finish", END)
        .reducer("messages", hitl_graph::Reducer::Append)
        .reducer("ran", hitl_graph::Reducer::Append)
        .output_key("output");
    crate::agent(name, description, input_schema, graph)
}
