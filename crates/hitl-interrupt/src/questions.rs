//! From pending interrupts to questions, and from answers back to resume values. Pure:
//! no I/O, no clock.

use hitl_graph::{Interrupt, ResumeValues};
use hitl_protocol::{
    CallToolResult, ElicitAction, ElicitRequestParams, ElicitResult, ErrorObject, FormElicitation, InputRequest,
    InputResponses, Needs,
};
use serde_json::{Value, json};

use crate::digest::{digest_hex, short_digest};
use crate::{Question, QuestionKind, Round};

/// The text every "cannot be asked" error result starts with.
pub const CANNOT_ASK: &str = "This tool needs input that can't be asked over MCP";
/// The error result of a declined text question.
pub const DECLINED: &str = "The request for input was declined.";
/// The error result of a cancelled text question.
pub const CANCELLED: &str = "The request for input was cancelled.";
/// The `-32602` message of an answer that does not fit its form.
pub const FORM_MISMATCH: &str = "Form content does not match requestedSchema";

/// Why interrupts cannot become questions; the text follows [`CANNOT_ASK`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{CANNOT_ASK}: {0}")]
pub struct CannotAsk(pub String);

impl CannotAsk {
    /// The error result the tool call ends with.
    pub fn to_result(&self) -> CallToolResult {
        CallToolResult::error([self.to_string()])
    }
}

/// Turns the pending interrupts into one round's questions. Interrupts that ask the
/// same text question share one question.
pub fn build(interrupts: &[Interrupt]) -> Result<Vec<Question>, CannotAsk> {
    let mut questions: Vec<Question> = Vec::new();
    for interrupt in interrupts {
        let question = match (&interrupt.value, &interrupt.response_schema) {
            (Value::String(message), None) => text_question(message, &interrupt.id),
            (_, None) => {
                return Err(CannotAsk(format!(
                    "the interrupt of step {} is not a string and has no response schema",
                    interrupt.step
                )));
            }
            (_, Some(_)) => {
                return Err(CannotAsk(format!(
                    "the interrupt of step {} has a response schema, which this server does not ask yet",
                    interrupt.step
                )));
            }
        };
        match questions.iter_mut().find(|q| q.key == question.key) {
            Some(same) => same.interrupt_ids.extend(question.interrupt_ids),
            None => questions.push(question),
        }
    }
    Ok(questions)
}

fn text_question(message: &str, interrupt_id: &str) -> Question {
    let key = format!("answer-{}", short_digest(&json!({ "text": message })));
    let request = InputRequest::Elicit(ElicitRequestParams::Form(FormElicitation {
        message: message.to_owned(),
        requested_schema: hitl_schema::text_form(),
        meta: None,
    }));
    Question { key, request, kind: QuestionKind::Text, interrupt_ids: vec![interrupt_id.to_owned()] }
}

/// What a round needs from the client.
pub fn needs(questions: &[Question]) -> Needs {
    let mut needs = Needs::default();
    for q in questions {
        match &q.request {
            InputRequest::Elicit(ElicitRequestParams::Form(_)) => needs.form = true,
            InputRequest::Elicit(ElicitRequestParams::Url(_)) => needs.url = true,
            InputRequest::CreateMessage(_) => needs.sampling = true,
            InputRequest::ListRoots(_) => needs.roots = true,
        }
    }
    needs
}

/// What a set of answers does to a round.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Every question answered: resume the agent with these values.
    Resume(ResumeValues),
    /// The answers end the call with this result (a declined text question).
    Finish(CallToolResult),
    /// Some question has no answer: ask the same round again.
    Missing,
    /// An answer does not fit its question: `-32602`, the round stays open.
    Invalid(ErrorObject),
}

/// Judges `responses` against `round`. Answers to keys the round did not ask are
/// ignored; an invalid answer wins over a missing one, so the client learns of it.
pub fn judge(round: &Round, responses: &InputResponses) -> Verdict {
    let mut resume = ResumeValues::new();
    let mut missing = false;
    let mut finish = None;
    for question in &round.questions {
        let Some(raw) = responses.get(&question.key) else {
            missing = true;
            continue;
        };
        let answer = match ElicitResult::from_value(&question.key, raw) {
            Ok(answer) => answer,
            Err(e) => return Verdict::Invalid(e),
        };
        match question.kind {
            QuestionKind::Text => match answer.action {
                ElicitAction::Accept => {
                    let content = answer.content.unwrap_or_default();
                    let form = match &question.request {
                        InputRequest::Elicit(ElicitRequestParams::Form(f)) => &f.requested_schema,
                        _ => unreachable!("text questions are forms"),
                    };
                    if let Err(violations) = hitl_schema::validate(form, &content) {
                        return Verdict::Invalid(form_mismatch(&question.key, &violations));
                    }
                    let value = content.get(hitl_schema::RESPONSE_FIELD).cloned().unwrap_or(Value::Null);
                    for id in &question.interrupt_ids {
                        resume.insert(id.clone(), value.clone());
                    }
                }
                ElicitAction::Decline => {
                    finish.get_or_insert_with(|| CallToolResult::error([DECLINED.to_owned()]));
                }
                ElicitAction::Cancel => {
                    finish.get_or_insert_with(|| CallToolResult::error([CANCELLED.to_owned()]));
                }
            },
        }
    }
    if missing {
        return Verdict::Missing;
    }
    match finish {
        Some(result) => Verdict::Finish(result),
        None => Verdict::Resume(resume),
    }
}

/// The `-32602` error of an answer outside its form, naming every field at fault.
pub fn form_mismatch(key: &str, violations: &[hitl_schema::Violation]) -> ErrorObject {
    let errors: Vec<Value> = violations.iter().map(|v| json!({ "field": v.field, "message": v.message })).collect();
    ErrorObject::invalid_params(FORM_MISMATCH).with_data(json!({ "inputKey": key, "errors": errors }))
}

/// Digest of the answers to `keys` (others are ignored), to recognise a resend of the
/// same answers.
pub fn answers_digest(keys: &[String], responses: &InputResponses) -> String {
    let own: serde_json::Map<String, Value> =
        keys.iter().filter_map(|k| responses.get(k).map(|v| (k.clone(), v.clone()))).collect();
    digest_hex(&Value::Object(own))
}

/// [`answers_digest`] over the round's own keys.
pub fn answers_digest_of(round: &Round, responses: &InputResponses) -> String {
    let keys: Vec<String> = round.questions.iter().map(|q| q.key.clone()).collect();
    answers_digest(&keys, responses)
}
