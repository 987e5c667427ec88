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
use hitl_schema::DecisionKind;
use serde_json::{Map, Value, json};

/// A boxed future, as models and tools return.
pub type Pending<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// What the model does next, given the agent's state (its inputs and `messages`).
pub trait Model: Send + Sync + 'static {
    /// The next assistant turn (tool calls, or a final message) and what it cost. An
    /// error ends the call with an error result that says so; a transient one
    /// ([`StepError::transient`]: the API is down or slow) leaves a resumed call paused
    /// after the turns that finished, so the same answers sent again try the model again.
    fn next<'a>(&'a self, state: &'a Value) -> Pending<'a, Result<Answer, StepError>>;
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

/// What a tool returns: its result as text, or an error the model sees. It is given
/// the arguments to run with and how the call came to run ([`Ran`]).
pub type ToolFn = Arc<dyn Fn(Map<String, Value>, &Ran<'_>) -> Pending<'static, Result<String, String>> + Send + Sync>;

/// How a call came to run, for a tool that must know: the step's context (its caller)
/// and whether a person approved it (as proposed, or edited). hitl's gateway sends the
/// receipt of that approval upstream with the call.
#[derive(Clone, Copy)]
pub struct Ran<'a> {
    /// The step's context.
    pub ctx: &'a StepContext,
    /// The arguments the model proposed (an edit's run with others).
    pub proposed: &'a Map<String, Value>,
    /// `Some(false)`: a person approved it as proposed; `Some(true)`: with their edit;
    /// `None`: it ran without a review.
    pub edited: Option<bool>,
}

/// A tool the agent can call.
#[derive(Clone)]
pub struct Tool {
    /// Its name.
    pub name: String,
    /// What it does, as the model is told.
    pub description: String,
    /// JSON Schema of its arguments, when it declares one: checked when it runs, and
    /// (per-call mode) part of the review's response schema.
    pub args_schema: Option<Value>,
    /// How a person reviews its calls; `None`: they run as the model asks.
    pub review: Option<ToolReview>,
    /// What decides each proposed call before anyone reviews it (`None`: `review`,
    /// for every call).
    pub gate: Option<GateFn>,
    /// What it does.
    pub run: ToolFn,
}

/// Decides one call a model proposes, with the step's context (its caller), when the
/// model proposes it: a gateway's policies, whose `when` sees the call's arguments and
/// whose rate limits count it. Decided once; a resume keeps what it decided.
pub type GateFn = Arc<dyn Fn(&ToolCall, &StepContext) -> Pending<'static, CallGate> + Send + Sync>;

/// What a [`GateFn`] decided for one call.
pub enum CallGate {
    /// Run it as proposed.
    Run,
    /// Ask this review first.
    Review(Box<ToolReview>),
    /// Do not run it: the model is told this error.
    Answer(String),
}

/// Describes a call to its reviewer.
pub type Describe = Arc<dyn Fn(&ToolCall) -> String + Send + Sync>;

/// How a tool's calls are reviewed.
#[derive(Clone)]
pub struct ToolReview {
    /// The decisions a reviewer may make.
    pub decisions: Vec<DecisionKind>,
    /// The description of a call shown to the reviewer, from its arguments; `None`:
    /// the middleware's (`Tool execution requires approval`, the tool, the arguments
    /// as a Python dict).
    pub describe: Option<Describe>,
    /// Who decides on hitl's approval page instead of the client's user; such a call
    /// is always asked on its own (one page per call), whatever the mode.
    pub approval: Option<payload::ApprovalBy>,
}

impl ToolReview {
    /// Every decision allowed, described as the middleware does.
    pub fn all_decisions() -> Self {
        Self { decisions: DecisionKind::ALL.to_vec(), describe: None, approval: None }
    }

    fn description(&self, call: &ToolCall) -> String {
        match &self.describe {
            Some(describe) => describe(call),
            None => default_description(DEFAULT_PREFIX, call),
        }
    }
}

/// The tools an agent may call, read at each turn (a gateway's tools change while the
/// server runs).
pub trait Toolbox: Send + Sync + 'static {
    /// The tools offered now.
    fn tools(&self) -> Vec<Tool>;
}

impl Toolbox for Vec<Tool> {
    fn tools(&self) -> Vec<Tool> {
        self.clone()
    }
}

const DEFAULT_PREFIX: &str = "Tool execution requires approval";

/// The description of a call, as the Python middleware writes it: the prefix, the
/// tool, and the arguments as a Python dict.
fn default_description(prefix: &str, call: &ToolCall) -> String {
    format!("{prefix}\n\nTool: {}\nArgs: {}", call.name, python_repr(&Value::Object(call.args.clone())))
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
    pub interrupt_on: HashMap<String, Vec<DecisionKind>>,
    /// The interrupt mode.
    pub mode: InterruptMode,
    /// Prefix of the default description of a call.
    pub description_prefix: String,
}

impl HumanInTheLoop {
    /// Review `tools` with every decision allowed, in `mode`.
    pub fn all_decisions(tools: &[&str], mode: InterruptMode) -> Self {
        Self {
            interrupt_on: tools.iter().map(|t| ((*t).to_owned(), DecisionKind::ALL.to_vec())).collect(),
            mode,
            description_prefix: DEFAULT_PREFIX.to_owned(),
        }
    }

    /// `tools` with the reviews this middleware names.
    fn apply(&self, tools: Vec<Tool>) -> Vec<Tool> {
        tools
            .into_iter()
            .map(|mut tool| {
                if let Some(decisions) = self.interrupt_on.get(&tool.name) {
                    let prefix = self.description_prefix.clone();
                    tool.review = Some(ToolReview {
                        decisions: decisions.clone(),
                        describe: (prefix != DEFAULT_PREFIX)
                            .then(|| Arc::new(move |call: &ToolCall| default_description(&prefix, call)) as _),
                        approval: None,
                    });
                }
                tool
            })
            .collect()
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
fn decision_schema(tool: &Tool, review: &ToolReview) -> Value {
    let names: Vec<&str> = review.decisions.iter().map(|d| d.as_str()).collect();
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
async fn run_tool(tool: &Tool, args: &Map<String, Value>, ran: &Ran<'_>) -> Result<String, String> {
    if let Some(schema) = &tool.args_schema
        && let Err(violations) = hitl_schema::validate_value(schema, &Value::Object(args.clone()))
    {
        let details: Vec<String> = violations.iter().map(|v| v.message.clone()).collect();
        return Err(format!("invalid arguments for {}: {}", tool.name, details.join("; ")));
    }
    (tool.run)(args.clone(), ran).await
}

/// How a call of the model's turn is gated, decided when the model proposed it (and kept
/// in its message, so a resume sees the same reviews whatever the toolbox holds then):
/// by the tool's gate, when it has one, else by its review.
async fn gate_of(tools: &HashMap<String, Tool>, mode: InterruptMode, call: &ToolCall, ctx: &StepContext) -> Value {
    let Some(tool) = tools.get(&call.name) else { return json!("unknown") };
    let decided = match &tool.gate {
        Some(gate) => gate(call, ctx).await,
        None => tool.review.clone().map_or(CallGate::Run, |review| CallGate::Review(Box::new(review))),
    };
    match decided {
        CallGate::Run => json!("run"),
        CallGate::Answer(error) => json!({ "answer": error }),
        CallGate::Review(review) => review_gate(tool, &review, mode, call),
    }
}

/// The gate of a call under `review`: the question to ask, kept in the message.
fn review_gate(tool: &Tool, review: &ToolReview, mode: InterruptMode, call: &ToolCall) -> Value {
    let allowed: Vec<&str> = review.decisions.iter().map(|d| d.as_str()).collect();
    let request = ActionRequest::new(&call.name, call.args.clone(), Some(review.description(call)));
    let config = ReviewConfig::new(&call.name, allowed.iter().copied());
    // Calls decided on an approval page are asked one by one; the rest as the mode says.
    let alone = mode == InterruptMode::PerCall || review.approval.is_some();
    let schema = alone.then(|| decision_schema(tool, review));
    json!({"review": {"request": request, "config": config, "approval": review.approval, "schema": schema}})
}

/// The reviewer's decisions on the calls under review, by call id (calls not under
/// review have none and run as asked). The step re-runs from the top on resume, so the
/// decisions come first and the calls run after.
fn review_calls(ctx: &StepContext, message: &Value) -> Result<HashMap<String, payload::Decision>, StepError> {
    let invalid = |e: serde_json::Error| StepError::msg(format!("the review's reply is not valid: {e}"));
    let reviews: Vec<(String, &Value)> = message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["gate"]["review"].is_object())
        .map(|c| (c["id"].as_str().unwrap_or_default().to_owned(), &c["gate"]["review"]))
        .collect();
    fn parse<T: serde::de::DeserializeOwned>(value: &Value) -> Result<T, StepError> {
        serde_json::from_value(value.clone())
            .map_err(|e| StepError::msg(format!("the review's reply is not valid: {e}")))
    }
    let (batch, single): (Vec<_>, Vec<_>) = reviews.into_iter().partition(|(_, r)| r["schema"].is_null());
    let mut decisions = HashMap::new();
    if !batch.is_empty() {
        let request = ReviewRequest {
            action_requests: batch.iter().map(|(_, r)| parse(&r["request"])).collect::<Result<_, _>>()?,
            review_configs: batch.iter().map(|(_, r)| parse(&r["config"])).collect::<Result<_, _>>()?,
        };
        let reply: ReviewReply = serde_json::from_value(ctx.interrupt(request.to_value())?).map_err(invalid)?;
        if reply.decisions.len() != batch.len() {
            return Err(StepError::msg(format!(
                "the review answered {} decisions for {} calls",
                reply.decisions.len(),
                batch.len()
            )));
        }
        decisions.extend(batch.iter().map(|(id, _)| id.clone()).zip(reply.decisions));
    }
    for (id, review) in single {
        let approval = ToolApproval {
            action_request: parse(&review["request"])?,
            review_config: Some(parse(&review["config"])?),
            approval: parse(&review["approval"])?,
            covers: None,
        };
        let decision = ctx.interrupt_with_schema(approval.to_value(), review["schema"].clone())?;
        decisions.insert(id, serde_json::from_value(decision).map_err(invalid)?);
    }
    Ok(decisions)
}

/// Runs each call as its decision says; returns the tool messages and the calls that
/// ran (with the arguments they ran with).
async fn run_calls(
    ctx: &StepContext,
    tools: &HashMap<String, Tool>,
    message: &Value,
    mut decisions: HashMap<String, payload::Decision>,
) -> Result<(Vec<Value>, Vec<Value>), StepError> {
    let (mut messages, mut ran) = (Vec::new(), Vec::new());
    let mut begun = false;
    let gates: Vec<&Value> = message["tool_calls"].as_array().into_iter().flatten().map(|c| &c["gate"]).collect();
    let calls = tool_calls(message);
    for (call, gate) in calls.iter().zip(gates) {
        // Decisions are by call id: a call whose id another call of the turn has too
        // never runs (it could run under the other's decision).
        if calls.iter().filter(|other| other.id == call.id).count() > 1 {
            let error = format!("Error: the tool call id {:?} is used by more than one call of this turn", call.id);
            messages.push(tool_message(call, error, "error"));
            continue;
        }
        if let Some(error) = gate["answer"].as_str() {
            // Decided without running when the model proposed it (denied, over a limit).
            messages.push(tool_message(call, format!("Error: {error}"), "error"));
            continue;
        }
        let reviewed = gate.as_str() != Some("run");
        let decision = match (gate.as_str(), decisions.remove(&call.id)) {
            // Not a tool the agent had when the model asked: never run.
            (Some("unknown"), _) => None,
            (Some("run"), _) => Some(payload::Decision::Approve),
            // Reviewed: run only as decided.
            (_, decided) => decided,
        };
        let Some(decision) = decision else {
            messages.push(tool_message(call, format!("Error: {} is not a valid tool", call.name), "error"));
            continue;
        };
        let (args, edited) = match decision {
            payload::Decision::Approve => (call.args.clone(), false),
            payload::Decision::Edit { edited_action } => (edited_action.args, true),
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
        if !begun {
            // Recorded before the first tool runs: a resend after this server died
            // mid-turn learns the outcome is unknown, and no tool runs twice.
            ctx.begin_effect().await?;
            begun = true;
        }
        let how = Ran { ctx, proposed: &call.args, edited: reviewed.then_some(edited) };
        match run_tool(tool, &args, &how).await {
            Ok(result) => {
                ran.push(json!({"name": call.name, "args": args}));
                messages.push(tool_message(call, result, "success"));
            }
            Err(error) => messages.push(tool_message(call, format!("Error: {error}"), "error")),
        }
    }
    Ok((messages, ran))
}

/// The model's turn as an assistant message, each call with its gate (`run`,
/// `unknown`, its review, or the error it ends with) as the toolbox says now.
async fn assistant_message(turn: Turn, tools: &HashMap<String, Tool>, mode: InterruptMode, ctx: &StepContext) -> Value {
    match turn {
        Turn::Message(text) => json!({"role": "assistant", "content": text}),
        Turn::ToolCalls(calls) => {
            let mut gated = Vec::with_capacity(calls.len());
            for c in &calls {
                let gate = gate_of(tools, mode, c, ctx).await;
                gated.push(json!({"id": c.id, "name": c.name, "args": c.args, "gate": gate}));
            }
            json!({"role": "assistant", "content": "", "tool_calls": gated})
        }
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
    let tools: Arc<dyn Toolbox> = Arc::new(review.apply(tools));
    tool_agent(name, description, input_schema, model, tools, review.mode, output)
}

/// [`tool_calling_agent`] over a [`Toolbox`] read at each turn, each tool reviewed as
/// it says, in `mode`. A model's turn that fails, or a tool the box no longer holds,
/// ends the call with an error result or an error message to the model.
pub fn tool_agent(
    name: &str,
    description: &str,
    input_schema: Value,
    model: Arc<dyn Model>,
    toolbox: Arc<dyn Toolbox>,
    mode: InterruptMode,
    output: fn(&Value) -> Value,
) -> Agent {
    let boxed = toolbox.clone();
    let tools_of =
        move || -> HashMap<String, Tool> { boxed.tools().into_iter().map(|t| (t.name.clone(), t)).collect() };
    let tools_now = tools_of.clone();
    let graph = StateGraph::new()
        .add_step("model", move |state, ctx| {
            let (model, tools_now) = (model.clone(), tools_now.clone());
            async move {
                let answer = model.next(&state).await?;
                let usage: Vec<Value> = answer.usage.into_iter().collect();
                let message = assistant_message(answer.turn, &tools_now(), mode, &ctx).await;
                Ok(json!({ "messages": [message], "usage": usage }))
            }
        })
        .add_step("tools", move |state, ctx| {
            let tools_of = tools_of.clone();
            async move {
                let message = last_message(&state);
                let decisions = review_calls(&ctx, &message)?;
                let (messages, ran) = run_calls(&ctx, &tools_of(), &message, decisions).await?;
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
