//! Tool-call review: the interrupts of a human-in-the-loop middleware (LangChain's
//! `HumanInTheLoopMiddleware` and its Rust equivalent in `hitl-agents`) become one
//! question per tool call, and each answer becomes the middleware's decision.
//!
//! Two interrupt shapes, one per interrupt mode:
//! - batched: `{"action_requests": [{name, args, description}], "review_configs":
//!   [{action_name, allowed_decisions}]}` (or the JavaScript `actionRequests` /
//!   `reviewConfigs`), resumed with `{"decisions": [...]}` in action order;
//! - per call: `{"type": "tool_approval", "action_request": {…}, "review_config": {…}}`
//!   with a response schema of the decisions the call allows, resumed with one decision.

use hitl_graph::Interrupt;
use hitl_protocol::{ElicitAction, ErrorObject};
use hitl_schema::Decision;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::questions::{CANCELLED, DECLINED, NotAskable};

/// How a review question's answer goes back to the middleware.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Review {
    /// The tool the call would run.
    pub tool: String,
    /// The arguments the model chose.
    pub args: Map<String, Value>,
    /// The decisions the question offers.
    pub offered: Vec<String>,
    /// Batched (the `index` of the call in its interrupt) or per call.
    pub mode: ReviewMode,
}

/// The interrupt mode of a review question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum ReviewMode {
    /// One interrupt for every call: decisions go back in order.
    Batched {
        /// The call's position in its interrupt.
        index: usize,
        /// How many calls the interrupt holds.
        count: usize,
        /// The JavaScript middleware: edits are `editedAction`.
        camel_case: bool,
    },
    /// One interrupt per call, with a schema every decision must fit.
    PerCall {
        /// The interrupt's response schema.
        schema: Option<Value>,
    },
}

/// One call to review, read from an interrupt.
pub(crate) struct ReviewedCall {
    pub(crate) tool: String,
    pub(crate) args: Map<String, Value>,
    pub(crate) description: Option<String>,
    pub(crate) allowed: Vec<Decision>,
    pub(crate) mode: ReviewMode,
}

/// Is this interrupt a review? Then its calls, in order.
pub(crate) fn calls(interrupt: &Interrupt) -> Option<Result<Vec<ReviewedCall>, NotAskable>> {
    let value = &interrupt.value;
    if value.get("type").and_then(Value::as_str) == Some("tool_approval") {
        let request = value.get("action_request").or_else(|| value.get("actionRequest"))?;
        let config = value.get("review_config").or_else(|| value.get("reviewConfig")).cloned().unwrap_or(Value::Null);
        let mode = ReviewMode::PerCall { schema: interrupt.response_schema.clone() };
        return Some(call(interrupt, request, &config, mode).map(|c| vec![c]));
    }
    let (requests, configs, camel_case) = match (value.get("action_requests"), value.get("actionRequests")) {
        (Some(Value::Array(r)), _) => (r, value.get("review_configs"), false),
        (None, Some(Value::Array(r))) => (r, value.get("reviewConfigs"), true),
        _ => return None,
    };
    let configs = configs.and_then(Value::as_array).cloned().unwrap_or_default();
    let count = requests.len();
    let calls = requests
        .iter()
        .enumerate()
        .map(|(index, request)| {
            let name = request.get("name").and_then(Value::as_str).unwrap_or_default();
            let config = configs
                .iter()
                .find(|c| c.get("action_name").or_else(|| c.get("actionName")).and_then(Value::as_str) == Some(name))
                .cloned()
                .unwrap_or(Value::Null);
            call(interrupt, request, &config, ReviewMode::Batched { index, count, camel_case })
        })
        .collect();
    Some(calls)
}

fn call(interrupt: &Interrupt, request: &Value, config: &Value, mode: ReviewMode) -> Result<ReviewedCall, NotAskable> {
    let step = &interrupt.step;
    let Some(tool) = request.get("name").and_then(Value::as_str) else {
        return Err(NotAskable(format!("a tool call to review in step {step} has no name")));
    };
    let args = match request.get("args") {
        Some(Value::Object(args)) => args.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => {
            return Err(NotAskable(format!("the arguments of the {tool} call in step {step} are not an object")));
        }
    };
    let names = config.get("allowed_decisions").or_else(|| config.get("allowedDecisions"));
    let allowed: Vec<Decision> = match names.and_then(Value::as_array) {
        Some(names) => names.iter().filter_map(Value::as_str).filter_map(Decision::parse).collect(),
        None => Decision::ALL.to_vec(),
    };
    let description = request.get("description").and_then(Value::as_str).map(str::to_owned);
    Ok(ReviewedCall { tool: tool.to_owned(), args, description, allowed, mode })
}

/// The answer to a review question, as the middleware's decision; `Err` for an answer
/// that does not fit, `Ok(None)` when the answer ends the call with `finish`.
pub(crate) enum Outcome {
    Decision(Value),
    Finish(&'static str),
}

/// Turns an elicitation answer into a decision.
pub(crate) fn decide(
    review: &Review,
    action: ElicitAction,
    content: &Map<String, Value>,
) -> Result<Outcome, ErrorObject> {
    let offered = |d: &str| review.offered.iter().any(|o| o == d);
    let decision = match action {
        ElicitAction::Cancel => return Ok(Outcome::Finish(CANCELLED)),
        ElicitAction::Decline if offered("reject") => json!({"type": "reject"}),
        ElicitAction::Decline => return Ok(Outcome::Finish(DECLINED)),
        ElicitAction::Accept => {
            let kind = content.get("decision").and_then(Value::as_str).unwrap_or_default();
            if !offered(kind) {
                return Err(ErrorObject::invalid_params(format!("The decision {kind:?} is not allowed for this call")));
            }
            let message = content.get("message").and_then(Value::as_str).map(str::trim).filter(|m| !m.is_empty());
            match kind {
                "approve" => json!({"type": "approve"}),
                "reject" => match message {
                    Some(m) => json!({"type": "reject", "message": m}),
                    None => json!({"type": "reject"}),
                },
                "respond" => match message {
                    Some(m) => json!({"type": "respond", "message": m}),
                    None => return Err(ErrorObject::invalid_params("A respond decision needs a message")),
                },
                "edit" => {
                    let args = match content.get("args") {
                        None => Value::Object(review.args.clone()),
                        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
                            Ok(args @ Value::Object(_)) => args,
                            _ => return Err(ErrorObject::invalid_params("The arguments must be a JSON object")),
                        },
                        Some(_) => return Err(ErrorObject::invalid_params("The arguments must be a JSON object")),
                    };
                    let camel = matches!(review.mode, ReviewMode::Batched { camel_case: true, .. });
                    let key = if camel { "editedAction" } else { "edited_action" };
                    json!({"type": "edit", key: {"name": review.tool, "args": args}})
                }
                other => return Err(ErrorObject::invalid_params(format!("Unknown decision {other:?}"))),
            }
        }
    };
    if let ReviewMode::PerCall { schema: Some(schema) } = &review.mode {
        check_decision(schema, &decision)?;
    }
    Ok(Outcome::Decision(decision))
}

/// Per-call mode: the decision must fit the interrupt's response schema (its branch for
/// the decision's type, so the error names what is wrong). A schema that refers to a
/// document outside itself is never fetched: the question is then asked unchecked.
fn check_decision(schema: &Value, decision: &Value) -> Result<(), ErrorObject> {
    if has_remote_ref(schema) {
        return Ok(());
    }
    let kind = decision.get("type");
    let branches = schema.get("oneOf").or_else(|| schema.get("anyOf")).and_then(Value::as_array);
    let branch = branches
        .and_then(|b| b.iter().find(|s| s.pointer("/properties/type/const") == kind))
        .map(|branch| {
            // Keep the root's `$defs` so local references in the branch resolve.
            let mut branch = branch.clone();
            for defs in ["$defs", "definitions"] {
                if let (Some(d), Value::Object(map)) = (schema.get(defs), &mut branch) {
                    map.entry(defs).or_insert_with(|| d.clone());
                }
            }
            branch
        })
        .unwrap_or_else(|| schema.clone());
    match hitl_schema::validate_value(&branch, decision) {
        Ok(()) => Ok(()),
        Err(violations) => {
            let first = violations.first().map(|v| v.message.clone()).unwrap_or_default();
            Err(ErrorObject::invalid_params(format!("The decision does not fit the tool: {first}"))
                .with_data(json!({ "errors": violations.iter().map(|v| json!({"path": v.field, "message": v.message})).collect::<Vec<_>>() })))
        }
    }
}

fn has_remote_ref(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => map
            .iter()
            .any(|(k, v)| (k == "$ref" && v.as_str().is_some_and(|r| !r.starts_with('#'))) || has_remote_ref(v)),
        Value::Array(items) => items.iter().any(has_remote_ref),
        _ => false,
    }
}
