//! `kind = "workflow"`: steps in order, each a graph step, so a resumed call never does
//! a finished step again. A question is a relayed elicitation (so a decline reaches
//! the workflow, as in seed 003's `deploy_production_release`), keyed by what it asks;
//! a call goes through its tool's policy (the gateway's review question first when it
//! is reviewed) and marks its effect before the upstream is called.

use std::sync::Arc;

use hitl_gateway::{Catalog, Gate};
use hitl_graph::payload::{Relay, RelayReply, RelayedRequest, ToolResult};
use hitl_graph::{Agent, END, START, StateGraph, StepContext, StepError};
use serde_json::{Map, Value, json};

use crate::template::{fill, fill_value, names, names_in};
use crate::{AgentSpec, AskSpec, At, Problem, StepSpec, foreign_keys, listable, unlisted};

/// State keys besides the call's arguments: the answers so far, the result, whether
/// the workflow stopped.
const ANSWERS: &str = "hitl:answers";
const RESULT: &str = "hitl:result";
const STOPPED: &str = "hitl:stopped";
const OUTPUT: &str = "hitl:output";

/// The field of a text question's form.
const TEXT_FIELD: &str = "response";

/// One graph step of a workflow.
#[derive(Debug, Clone)]
enum Node {
    Ask(AskSpec),
    StopUnless {
        field: String,
        result: String,
    },
    /// A call, with the secrets asked just before it (they live only in this step).
    Call {
        tool: String,
        args: Map<String, Value>,
        secrets: Vec<AskSpec>,
    },
    Result(String),
}

/// What a step is, or why it is none.
fn classify(step: &StepSpec) -> Result<Node, String> {
    let given: Vec<&str> = [
        ("ask", step.ask.is_some()),
        ("stop_unless", step.stop_unless.is_some()),
        ("call", step.call.is_some()),
        ("args", step.args.is_some()),
        ("result", step.result.is_some()),
    ]
    .into_iter()
    .filter_map(|(key, set)| set.then_some(key))
    .collect();
    match (given.as_slice(), step) {
        (["ask"], StepSpec { ask: Some(ask), .. }) => Ok(Node::Ask(ask.clone())),
        (["stop_unless"] | ["stop_unless", "result"], StepSpec { stop_unless: Some(field), result, .. }) => {
            Ok(Node::StopUnless { field: field.clone(), result: result.clone().unwrap_or_else(|| "Stopped.".into()) })
        }
        (["call"] | ["call", "args"], StepSpec { call: Some(tool), args, .. }) => {
            Ok(Node::Call { tool: tool.clone(), args: args.clone().unwrap_or_default(), secrets: Vec::new() })
        }
        (["result"], StepSpec { result: Some(text), .. }) => Ok(Node::Result(text.clone())),
        ([], _) => Err("give one of ask, stop_unless, call or result".into()),
        _ => Err(format!(
            "{} do not go together in one step: give ask, stop_unless (with result), call (with args) or result",
            given.join(", ")
        )),
    }
}

/// The graph steps of `steps`: each secret question joins the call after it.
fn nodes(steps: &[StepSpec]) -> Result<Vec<(usize, Node)>, (usize, String)> {
    let mut nodes = Vec::new();
    let mut secrets: Vec<(usize, AskSpec)> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        match classify(step).map_err(|e| (i, e))? {
            Node::Ask(ask) if ask.secret.is_some() => secrets.push((i, ask)),
            Node::Call { tool, args, .. } => {
                if let Some((second, _)) = secrets.get(1) {
                    // Each secret after the first would wait in the record, in the
                    // clear, for the next to be typed.
                    return Err((*second, "one secret per call: ask it right before its call".into()));
                }
                let secrets = secrets.drain(..).map(|(_, ask)| ask).collect();
                nodes.push((i, Node::Call { tool, args, secrets }));
            }
            other => {
                if let Some((at, _)) = secrets.first() {
                    return Err((*at, "a secret goes only to a call's arguments: put the call right after it".into()));
                }
                nodes.push((i, other));
            }
        }
    }
    match secrets.first() {
        Some((at, _)) => Err((*at, "a secret goes only to a call's arguments: put the call right after it".into())),
        None => Ok(nodes),
    }
}

/// The names an answer to `ask` gives later steps.
fn answer_names(ask: &AskSpec) -> Vec<String> {
    match (&ask.schema, &ask.url, &ask.secret) {
        (Some(schema), _, _) => {
            schema["properties"].as_object().map(|p| p.keys().cloned().collect()).unwrap_or_default()
        }
        (None, Some(_), _) => ask.key.clone().into_iter().collect(),
        (None, None, Some(_)) => vec![ask.key.clone().unwrap_or_else(|| "secret".into())],
        (None, None, None) => vec![ask.key.clone().unwrap_or_else(|| TEXT_FIELD.into())],
    }
}

pub(crate) fn check(spec: &AgentSpec, at: &At, prefixes: &[String], problems: &mut Vec<Problem>) {
    foreign_keys(spec, at, problems);
    let steps = spec.steps.as_deref().unwrap_or_default();
    if steps.is_empty() {
        problems.push(at.key("kind").problem("a workflow needs steps = [ … ]"));
        return;
    }
    let at_steps = at.key("steps");
    for (i, step) in steps.iter().enumerate() {
        let key = step.ask.as_ref().and_then(|a| a.key.as_ref());
        if key.is_some() && steps[..i].iter().any(|s| s.ask.as_ref().and_then(|a| a.key.as_ref()) == key) {
            problems.push(at_steps.index(i).key("ask").key("key").problem("another question has this key"));
        }
    }
    let nodes = match nodes(steps) {
        Ok(nodes) => nodes,
        Err((i, message)) => {
            problems.push(at_steps.index(i).problem(message));
            return;
        }
    };
    // What templates may name: the arguments, then each question's answers.
    let mut known: Vec<String> = spec
        .input_schema
        .as_ref()
        .and_then(|s| s["properties"].as_object())
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    let unknown = |used: Vec<&str>, known: &[String], at: At, problems: &mut Vec<Problem>| {
        for name in used {
            if !known.iter().any(|k| k == name) {
                let offered = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
                problems.push(at.problem(format!(
                    "{{{name}}} names no argument of the tool and no answer of an earlier step (there are: {offered})"
                )));
                return;
            }
        }
    };
    for (i, node) in nodes {
        let at = at_steps.index(i);
        match node {
            Node::Ask(ask) => {
                check_ask(&ask, &at.key("ask"), problems);
                unknown(names(&ask.message), &known, at.key("ask").key("message"), problems);
                unknown(names(ask.url.as_deref().unwrap_or_default()), &known, at.key("ask").key("url"), problems);
                known.extend(answer_names(&ask));
            }
            Node::StopUnless { field, result } => {
                if !known.contains(&field) {
                    let offered = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
                    problems.push(at.key("stop_unless").problem(format!(
                        "{field:?} is no argument of the tool and no answer of an earlier step (there are: {offered})"
                    )));
                }
                unknown(names(&result), &known, at.key("result"), problems);
            }
            Node::Call { tool, args, secrets } => {
                if !listable(&tool, prefixes) || tool.contains(['*', '?']) {
                    problems.push(at.key("call").problem(unlisted(&tool, prefixes)));
                }
                let mut scope = known.clone();
                for (n, secret) in secrets.iter().enumerate() {
                    let at = at_steps.index(i - secrets.len() + n).key("ask");
                    check_ask(secret, &at, problems);
                    unknown(names(&secret.message), &known, at.key("message"), problems);
                    scope.extend(answer_names(secret));
                }
                for (key, value) in &args {
                    unknown(names_in(value), &scope, at.key("args").key(key), problems);
                }
            }
            Node::Result(text) => unknown(names(&text), &known, at.key("result"), problems),
        }
    }
}

/// A question's own problems: one kind, a schema that becomes a form, a URL that may be
/// asked.
fn check_ask(ask: &AskSpec, at: &At, problems: &mut Vec<Problem>) {
    let kinds = [ask.schema.is_some(), ask.url.is_some(), ask.secret.is_some()];
    if kinds.iter().filter(|k| **k).count() > 1 {
        problems.push(at.problem("give at most one of schema, url and secret"));
        return;
    }
    if let Some(schema) = &ask.schema {
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            problems.push(
                at.key("schema").problem("a form is an object schema (type = \"object\") whose fields are answers"),
            );
        } else if let Err(e) = hitl_schema::to_form(schema, &hitl_schema::FormOptions::default()) {
            problems.push(at.key("schema").pointer(&e.pointer).problem(format!("cannot be a form: {}", e.reason)));
        }
    }
    if let Some(url) = ask.url.as_ref().filter(|u| names(u).is_empty())
        && let Err(e) = hitl_schema::check_url(url)
    {
        problems.push(at.key("url").problem(e.reason));
    }
    if ask.key.as_ref().is_some_and(|k| k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')) {
        problems.push(at.key("key").problem("use letters, digits and '_'"));
    }
}

/// The workflow of `spec` (checked), calling the tools of `catalog`.
pub(crate) fn build(spec: &AgentSpec, catalog: &Catalog) -> Agent {
    let nodes = nodes(spec.steps.as_deref().unwrap_or_default()).unwrap_or_default();
    let count = nodes.len();
    let mut graph = StateGraph::new();
    for (n, (_, node)) in nodes.into_iter().enumerate() {
        let name = format!("step{n}");
        let (node, catalog) = (Arc::new(node), catalog.clone());
        graph = graph.add_step(name.clone(), move |state, ctx| {
            let (node, catalog) = (node.clone(), catalog.clone());
            async move { run(&node, &catalog, &state, &ctx).await }
        });
        let next = if n + 1 == count { "finish".to_owned() } else { format!("step{}", n + 1) };
        graph = graph.add_conditional_edges(name, move |state| {
            vec![if state[STOPPED] == true { "finish".to_owned() } else { next.clone() }]
        });
    }
    let graph = graph
        .add_step("finish", |state, _| async move {
            // The last result, else the answers.
            let output = match &state[RESULT] {
                Value::Null => state[ANSWERS].clone(),
                result => result.clone(),
            };
            Ok(json!({ OUTPUT: output }))
        })
        // The workflow's own keys start empty, whatever the call's arguments hold.
        .add_step("begin", |_, _| async move { Ok(json!({ ANSWERS: {}, RESULT: null, STOPPED: false })) })
        .add_edge(START, "begin")
        .add_edge("begin", if count == 0 { "finish" } else { "step0" })
        .add_edge("finish", END)
        .output_key(OUTPUT);
    let graph = graph.compile().unwrap_or_else(|e| panic!("the workflow {} compiles: {e}", spec.name));
    let input = spec.input_schema.clone().unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    // Its calls go to upstreams in the caller's own session.
    Agent::new(spec.name.clone(), spec.description.clone(), input, graph).per_caller()
}

/// The call's arguments and the answers so far.
fn scope(state: &Value) -> Map<String, Value> {
    let mut scope: Map<String, Value> = state
        .as_object()
        .map(|s| s.iter().filter(|(k, _)| !k.starts_with("hitl:")).map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    if let Some(answers) = state[ANSWERS].as_object() {
        scope.extend(answers.clone());
    }
    scope
}

/// Is `value` a yes: true, a string other than "", "0", "false" or "no", a non-zero
/// number, a non-empty list, an object?
fn truthy(value: Option<&Value>) -> bool {
    match value {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => !["", "0", "false", "no"].contains(&s.trim().to_ascii_lowercase().as_str()),
        Some(Value::Number(n)) => n.as_f64().is_some_and(|n| n != 0.0),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(_)) => true,
        _ => false,
    }
}

async fn run(node: &Node, catalog: &Catalog, state: &Value, ctx: &StepContext) -> Result<Value, StepError> {
    let scope = scope(state);
    match node {
        Node::Ask(ask) => {
            let mut answers = state[ANSWERS].as_object().cloned().unwrap_or_default();
            answers.extend(ask_one(ask, &scope, ctx)?);
            Ok(json!({ ANSWERS: answers }))
        }
        Node::StopUnless { field, result } => Ok(if truthy(scope.get(field)) {
            json!({})
        } else {
            json!({ RESULT: {"result": fill(result, &scope)}, STOPPED: true })
        }),
        Node::Result(text) => Ok(json!({ RESULT: {"result": fill(text, &scope)} })),
        Node::Call { tool, args: spec_args, secrets } => {
            let stop = |result: ToolResult| json!({ RESULT: result.to_value(), STOPPED: true });
            let Some(listed) = catalog.get(tool) else {
                return Ok(stop(ToolResult::error(format!(
                    "{tool} is not listed now: its upstream has not listed it (yet)"
                ))));
            };
            if listed.limits_callers() {
                // The workflow calls for whoever calls it; the policy names who may.
                return Ok(stop(ToolResult::error(format!(
                    "{tool} is only for the callers its policy names, so a workflow cannot call it"
                ))));
            }
            // Secrets are filled in after the review: a reviewer never sees them.
            let args = match fill_value(&Value::Object(spec_args.clone()), &scope) {
                Value::Object(args) => args,
                _ => Map::new(),
            };
            let (args, approved) = match listed.gate(args, ctx).await? {
                Gate::Run(args, approved) => (args, approved),
                Gate::Answer(result) => return Ok(stop(result)),
            };
            let mut with_secrets = scope.clone();
            let mut names = Vec::new();
            for secret in secrets {
                let label = secret.secret.as_deref().unwrap_or("secret");
                let name = secret.key.clone().unwrap_or_else(|| "secret".into());
                let Some(value) = ctx.ask_secret(label, &fill(&secret.message, &scope))? else {
                    return Ok(stop(ToolResult::error(format!("No {label} was given, so {tool} was not called."))));
                };
                with_secrets.insert(name.clone(), Value::String(value));
                names.push(name);
            }
            // Only the arguments the file writes with a secret get it, from the file's
            // template: a reviewer's edit cannot move a secret elsewhere.
            let mut args = args;
            for (key, template) in spec_args {
                if names_in(template).iter().any(|used| names.iter().any(|n| n == used)) {
                    args.insert(key.clone(), fill_value(template, &with_secrets));
                }
            }
            // Recorded first: a resend after this server died mid-call learns the
            // outcome is unknown, and the upstream is never called twice.
            ctx.begin_effect().await?;
            let result = listed.call_for(args, &approved, ctx).await;
            let failed = result.0.get("isError") == Some(&Value::Bool(true));
            Ok(json!({ RESULT: result.to_value(), STOPPED: failed }))
        }
    }
}

/// Asks `ask` (relayed, so a decline comes back here) and returns the answers it gives
/// (none when declined or cancelled).
fn ask_one(ask: &AskSpec, scope: &Map<String, Value>, ctx: &StepContext) -> Result<Map<String, Value>, StepError> {
    let message = fill(&ask.message, scope);
    let request = match (&ask.schema, &ask.url) {
        (Some(schema), _) => RelayedRequest::form(message, schema.clone()),
        (None, Some(url)) => RelayedRequest::url(message, fill(url, scope)),
        (None, None) => RelayedRequest::form(
            message,
            json!({"type": "object", "properties": {TEXT_FIELD: {"type": "string"}}, "required": [TEXT_FIELD]}),
        ),
    };
    let relay = match &ask.key {
        Some(key) => Relay::elicitation([(key.clone(), request)]),
        // Keyed by the engine from what it asks.
        None => {
            Relay { requests: hitl_graph::payload::Requests::List(vec![request]), ..Relay::elicitation::<String>([]) }
        }
    };
    let reply: RelayReply = serde_json::from_value(ctx.interrupt(relay.to_value())?)
        .map_err(|e| StepError::msg(format!("the answer is not valid: {e}")))?;
    let response = reply.responses.values().next().cloned().unwrap_or_default();
    let accepted = response["action"] == "accept";
    let content = response["content"].as_object().cloned().unwrap_or_default();
    Ok(match (&ask.schema, &ask.url) {
        (Some(_), _) if accepted => content,
        (None, Some(_)) => ask.key.iter().map(|k| (k.clone(), Value::Bool(accepted))).collect(),
        (None, None) if accepted => {
            let text = content.get(TEXT_FIELD).cloned().unwrap_or_default();
            Map::from_iter([(ask.key.clone().unwrap_or_else(|| TEXT_FIELD.into()), text)])
        }
        _ => Map::new(),
    })
}
