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
use hitl_graph::payload::{self, ActionRequest, EditedAction, ReviewConfig, ReviewRequest, ToolApproval};
use hitl_protocol::{ElicitAction, ErrorObject};
use hitl_schema::DecisionKind;
use serde_json::{Map, Value, json};

use crate::answers::{CANCELLED, DECLINED, NotAskable};

pub(crate) use hitl_thread::{Review, ReviewMode};

/// One call to review, read from an interrupt.
pub(crate) struct ReviewedCall {
    pub(crate) tool: String,
    pub(crate) args: Map<String, Value>,
    pub(crate) description: Option<String>,
    pub(crate) allowed: Vec<DecisionKind>,
    pub(crate) mode: ReviewMode,
    /// Who decides on hitl's approval page, when not the client's user.
    pub(crate) approval: Option<payload::ApprovalBy>,
    /// What an approval covers besides the call (`[[policy]] approval_ttl`).
    pub(crate) covers: Option<payload::Covers>,
}

/// Is this interrupt a review ([`ToolApproval`] or [`ReviewRequest`])? Then its calls,
/// in order.
pub(crate) fn calls(interrupt: &Interrupt) -> Option<Result<Vec<ReviewedCall>, NotAskable>> {
    let step = &interrupt.step;
    let invalid = |e: String| NotAskable(format!("the review in step {step} is not valid: {e}"));
    if let Some(approval) = ToolApproval::parse(&interrupt.value) {
        let mode = ReviewMode::PerCall { schema: interrupt.response_schema.clone() };
        return Some(approval.map_err(invalid).and_then(|a| {
            let mut call = call(step, &a.action_request, a.review_config.as_ref(), mode)?;
            call.approval = a.approval;
            call.covers = a.covers;
            Ok(vec![call])
        }));
    }
    let (request, camel_case) = ReviewRequest::parse(&interrupt.value)?;
    let request = match request {
        Ok(request) => request,
        Err(e) => return Some(Err(invalid(e))),
    };
    let count = request.action_requests.len();
    let calls = request
        .action_requests
        .iter()
        .enumerate()
        .map(|(index, action)| {
            let config = action.name.as_deref().and_then(|name| request.config(name));
            call(step, action, config, ReviewMode::Batched { index, count, camel_case })
        })
        .collect();
    Some(calls)
}

fn call(
    step: &str,
    request: &ActionRequest,
    config: Option<&ReviewConfig>,
    mode: ReviewMode,
) -> Result<ReviewedCall, NotAskable> {
    let Some(tool) = &request.name else {
        return Err(NotAskable(format!("a tool call to review in step {step} has no name")));
    };
    let args = match &request.args {
        Value::Object(args) => args.clone(),
        Value::Null => Map::new(),
        _ => return Err(NotAskable(format!("the arguments of the {tool} call in step {step} are not an object"))),
    };
    let allowed: Vec<DecisionKind> = match config.and_then(ReviewConfig::allowed) {
        Some(names) => names.into_iter().filter_map(DecisionKind::parse).collect(),
        None => DecisionKind::ALL.to_vec(),
    };
    let description = request.description.clone();
    Ok(ReviewedCall { tool: tool.clone(), args, description, allowed, mode, approval: None, covers: None })
}

/// The answer to a review question, as the middleware's decision; `Err` for an answer
/// that does not fit, `Ok(None)` when the answer ends the call with `finish`.
pub(crate) enum Outcome {
    Decision(Value),
    Finish(&'static str),
}

/// Whether a review offered to cover later calls, and the approval that decided it
/// (a page's id; none: the client's user in the client).
#[derive(Clone, Copy, Default)]
pub(crate) struct Cover<'a> {
    pub(crate) offered: bool,
    pub(crate) approval: Option<&'a str>,
}

/// Turns an elicitation answer into a decision. Where `cover` was offered, an approval
/// says whether it covers later calls (`"cover"`, `true` unless the reviewer said
/// `false`) and which approval it is (`"approval"`).
pub(crate) fn decide(
    review: &Review,
    action: ElicitAction,
    content: &Map<String, Value>,
    cover: Cover<'_>,
) -> Result<Outcome, ErrorObject> {
    let offered = |d: &str| review.offered.iter().any(|o| o == d);
    let decision = match action {
        ElicitAction::Cancel => return Ok(Outcome::Finish(CANCELLED)),
        ElicitAction::Decline if offered("reject") => payload::Decision::Reject { message: None },
        ElicitAction::Decline => return Ok(Outcome::Finish(DECLINED)),
        ElicitAction::Accept => {
            let kind = content.get("decision").and_then(Value::as_str).unwrap_or_default();
            if !offered(kind) {
                return Err(ErrorObject::invalid_params(format!("The decision {kind:?} is not allowed for this call")));
            }
            let message = content.get("message").and_then(Value::as_str).map(str::trim).filter(|m| !m.is_empty());
            let message = message.map(str::to_owned);
            match kind {
                "approve" => payload::Decision::Approve,
                "reject" => payload::Decision::Reject { message },
                "respond" => match message {
                    Some(message) => payload::Decision::Respond { message },
                    None => return Err(ErrorObject::invalid_params("A respond decision needs a message")),
                },
                "edit" => {
                    let not_an_object = || ErrorObject::invalid_params("The arguments must be a JSON object");
                    let args = match content.get("args") {
                        None => review.args.clone(),
                        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
                            Ok(Value::Object(args)) => args,
                            _ => return Err(not_an_object()),
                        },
                        Some(_) => return Err(not_an_object()),
                    };
                    payload::Decision::Edit { edited_action: EditedAction { name: review.tool.clone(), args } }
                }
                other => return Err(ErrorObject::invalid_params(format!("Unknown decision {other:?}"))),
            }
        }
    };
    let approved = matches!(decision, payload::Decision::Approve);
    let mut decision = decision.to_value(matches!(review.mode, ReviewMode::Batched { camel_case: true, .. }));
    if cover.offered
        && approved
        && let Value::Object(fields) = &mut decision
    {
        let covers = match content.get(hitl_schema::COVER_FIELD) {
            None => true,
            Some(Value::Bool(covers)) => *covers,
            Some(_) => return Err(ErrorObject::invalid_params("cover must be true or false")),
        };
        fields.insert(hitl_schema::COVER_FIELD.into(), Value::Bool(covers));
        if let Some(approval) = cover.approval {
            fields.insert("approval".into(), Value::from(approval));
        }
    }
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
