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
use hitl_graph::payload::{self, ActionRequest, ReviewConfig, ReviewReply, ReviewRequest, ToolApproval};
use hitl_graph::{END, START, StateGraph, StepContext, StepError};
use hitl_schema::Decision;
use serde_json::{Map, Value, json};

/// A boxed future, as models and tools return.
pub type Pending<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// What the model does next, given the agent's state (its inputs and `messages`).
pub trait Model: Send + Sync + 'static {
    /// The next assistant turn (tool calls, or a final message) and what it cost; an
    /// error ends the call with an error result that says so.
    fn next<'a>(&'a self, state: &'a Value) -> Pending<'a, Result<Answer, String>>;
}

/// A model's turn and its token usage, when the model reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The turn.
    pub turn: Turn,
    /// `{"input_tokens", "output_tokens"}`, kept in the run's state under `usage`.
    pub usage: Option<Value>,
}

impl From<Turn> for Answer {
    fn from(turn: Turn) -> Self {
        Self { turn, usage: None }
    }
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
pub type ToolFn = Arc<dyn Fn(Map<String, Value>) -> Pending<'static, Result<String, String>> + Send + Sync>;

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

/// The response schema of a per-call review of `tool`.
fn decision_schema(tool: &Tool, allowed: &[Decision]) -> Value {
    let names: Vec<&str> = allowed.iter().map(|d| d.as_str()).collect();
    payload::decision_schema(&tool.name, tool.args_schema.as_ref(), &names)
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
async fn run_tool(tool: &Tool, args: &Map<String, Value>) -> Result<String, String> {
    if let Some(schema) = &tool.args_schema
        && let Err(violations) = hitl_schema::validate_value(schema, &Value::Object(args.clone()))
    {
        let details: Vec<String> = violations.iter().map(|v| v.message.clone()).collect();
        return Err(format!("invalid arguments for {}: {}", tool.name, details.join("; ")));
    }
    (tool.run)(args.clone()).await
}

/// The reviewer's decisions on the calls under review, by call id (calls not under
/// review have none and run as asked). The step re-runs from the top on resume, so the
/// decisions come first and the calls run after.
fn review_calls(
    ctx: &StepContext,
    review: &HumanInTheLoop,
    tools: &HashMap<String, Tool>,
    calls: &[ToolCall],
) -> Result<HashMap<String, payload::Decision>, StepError> {
    let gated: Vec<&ToolCall> = calls.iter().filter(|c| review.interrupt_on.contains_key(&c.name)).collect();
    let allowed = |call: &ToolCall| review.interrupt_on[&call.name].iter().map(|d| d.as_str());
    let action = |call: &ToolCall| ActionRequest::new(&call.name, call.args.clone(), Some(review.description(call)));
    let invalid = |e: serde_json::Error| StepError::msg(format!("the review's reply is not valid: {e}"));
    let mut decisions = HashMap::new();
    match review.mode {
        InterruptMode::Batched if !gated.is_empty() => {
            let request = ReviewRequest {
                action_requests: gated.iter().map(|c| action(c)).collect(),
                review_configs: gated.iter().map(|c| ReviewConfig::new(&c.name, allowed(c))).collect(),
            };
            let reply: ReviewReply = serde_json::from_value(ctx.interrupt(request.to_value())?).map_err(invalid)?;
            decisions.extend(gated.iter().map(|c| c.id.clone()).zip(reply.decisions));
        }
        InterruptMode::PerCall => {
            for call in gated {
                let approval = ToolApproval {
                    action_request: action(call),
                    review_config: Some(ReviewConfig::new(&call.name, allowed(call))),
                    approval: None,
                };
                let schema = tools
                    .get(&call.name)
                    .map_or_else(|| json!({}), |t| decision_schema(t, &review.interrupt_on[&call.name]));
                let decision = ctx.interrupt_with_schema(approval.to_value(), schema)?;
                decisions.insert(call.id.clone(), serde_json::from_value(decision).map_err(invalid)?);
            }
        }
        InterruptMode::Batched => {}
    }
    Ok(decisions)
}

/// Runs each call as its decision says; returns the tool messages and the calls that
/// ran (with the arguments they ran with).
async fn run_calls(
    tools: &HashMap<String, Tool>,
    calls: &[ToolCall],
    mut decisions: HashMap<String, payload::Decision>,
) -> (Vec<Value>, Vec<Value>) {
    let (mut messages, mut ran) = (Vec::new(), Vec::new());
    for call in calls {
        let args = match decisions.remove(&call.id).unwrap_or(payload::Decision::Approve) {
            payload::Decision::Approve => call.args.clone(),
            payload::Decision::Edit { edited_action } => edited_action.args,
            payload::Decision::Reject { message } => {
                let reason = message
                    .unwrap_or_else(|| format!("User rejected the tool call for `{}` with id {}", call.name, call.id));
                messages.push(tool_message(call, reason, "error"));
                continue;
            }
            payload::Decision::Respond { message } => {
                messages.push(tool_message(call, message, "success"));
                continue;
            }
        };
        let Some(tool) = tools.get(&call.name) else {
            messages.push(tool_message(call, format!("Error: {} is not a valid tool", call.name), "error"));
            continue;
        };
        match run_tool(tool, &args).await {
            Ok(result) => {
                ran.push(json!({"name": call.name, "args": args}));
                messages.push(tool_message(call, result, "success"));
            }
            Err(error) => messages.push(tool_message(call, format!("Error: {error}"), "error")),
        }
    }
    (messages, ran)
}

/// The model's turn as an assistant message.
fn assistant_message(turn: Turn) -> Value {
    match turn {
        Turn::Message(text) => json!({"role": "assistant", "content": text}),
        Turn::ToolCalls(calls) => json!({"role": "assistant", "content": "", "tool_calls": calls.iter()
            .map(|c| json!({"id": c.id, "name": c.name, "args": c.args})).collect::<Vec<_>>()}),
    }
}

fn last_message(state: &Value) -> Value {
    state["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or(Value::Null)
}

/// Builds the agent: `model` → (review) → `tools` → `model` … until the model answers.
/// The state holds the call's arguments, `messages`, `ran` (the calls that ran, with
/// the arguments they ran with) and `usage` (each model turn's tokens, when reported);
/// `output` turns the final state into the agent's output (an object).
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
                let answer = model.next(&state).await.map_err(|e| StepError::msg(format!("the model failed: {e}")))?;
                let usage: Vec<Value> = answer.usage.into_iter().collect();
                Ok(json!({ "messages": [assistant_message(answer.turn)], "usage": usage }))
            }
        })
        .add_step("tools", move |state, ctx| {
            let (tools, review) = (tools.clone(), review.clone());
            async move {
                let calls = tool_calls(&last_message(&state));
                let decisions = review_calls(&ctx, &review, &tools, &calls)?;
                let (messages, ran) = run_calls(&tools, &calls, decisions).await;
                Ok(json!({ "messages": messages, "ran": ran }))
            }
        })
        .add_step("finish", move |state, _| async move { Ok(json!({ "output": output(&state) })) })
        .add_edge(START, "model")
        .add_conditional_edges("model", |state| {
            let next = if tool_calls(&last_message(state)).is_empty() { "finish" } else { "tools" };
            vec![next.to_owned()]
        })
        .add_edge("tools", "model")
        .add_edge("finish", END)
        .reducer("messages", hitl_graph::Reducer::Append)
        .reducer("ran", hitl_graph::Reducer::Append)
        .reducer("usage", hitl_graph::Reducer::Append)
        .output_key("output");
    crate::agent(name, description, input_schema, graph)
}
