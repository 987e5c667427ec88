//! From pending interrupts to questions, and from answers back to resume values. Pure:
//! no I/O, no clock.
//!
//! An interrupt becomes questions in one of four ways:
//! - a string value with no response schema: a **text** question, the one-field
//!   `response` form, keyed `answer-<16 hex of a digest of the question>`;
//! - a value with a response schema: a **typed** question whose form comes from the
//!   schema (`hitl_schema::to_form`), keyed the same way over question and schema;
//! - a value `{"type": "mcp_elicitation", "requests": …}`: **relayed** elicitation
//!   requests, each checked by the form and URL rules and keyed by the agent's own key
//!   (or, in the list shape without one, `answer-<16 hex>` of what it asks, as a typed
//!   question asking the same is keyed);
//! - a value `{"type": "mcp_input", "requests": {key: {method, params}}}`: relayed
//!   input requests of any kind MCP allows (elicitation, sampling, roots).
//!
//! Keys are derived from the questions, never random, so a call restarted from the
//! start sees the same keys. When several interrupts are pending, relayed keys are
//! prefixed with a digest of their interrupt: `<16 hex>.<n>/<key>`.

use std::collections::{BTreeMap, HashMap};

use hitl_graph::payload::{Relay, RelayKind, RelayReply, RelayedRequest, SecretRequest, SignInRequest};
use hitl_graph::{Interrupt, ResumeValues};
use hitl_protocol::{
    CallToolResult, CreateMessageResult, ElicitAction, ElicitRequestParams, ElicitResult, ErrorObject, FormElicitation,
    InputRequest, InputResponses, ListRootsResult, Needs, UrlElicitation,
};
use hitl_schema::{DecisionKind, FormOptions};
use serde_json::{Map, Value, json};

use crate::answers::{CANCELLED, DECLINED, NotAskable};
use crate::{About, Page, PageKind, Question, QuestionKind, Round, review};
use hitl_thread::short_digest;

/// The `-32602` message of an answer that does not fit its form.
pub(crate) const FORM_MISMATCH: &str = "Form content does not match requestedSchema";

/// Turns the pending interrupts into one round's questions. Interrupts that ask the
/// same text (or typed) question share one question.
pub(crate) fn build(interrupts: &[Interrupt]) -> Result<Vec<Question>, NotAskable> {
    let several = interrupts.len() > 1;
    let mut questions: Vec<Question> = Vec::with_capacity(interrupts.len());
    let mut seen_digests: HashMap<String, usize> = HashMap::new();
    for interrupt in interrupts {
        if let Some(calls) = review::calls(interrupt) {
            questions.extend(review_questions(interrupt, calls?, &mut seen_digests)?);
            continue;
        }
        if let Some(question) = page_question(interrupt) {
            let question = question?;
            if questions.iter().any(|q| q.key == question.key) {
                return Err(NotAskable(format!("two interrupts ask the same page question {}", question.key)));
            }
            questions.push(question);
            continue;
        }
        let relay = Relay::parse(&interrupt.value);
        let is_relay = relay.is_some();
        let built = match (relay, &interrupt.response_schema, &interrupt.value) {
            (Some(relay), _, _) => relay_questions(interrupt, relay)?,
            (None, Some(schema), value) => vec![typed_question(interrupt, value, schema)?],
            (None, None, Value::String(message)) => vec![text_question(message, &interrupt.value, &interrupt.id)],
            (None, None, _) => {
                return Err(NotAskable(format!(
                    "the interrupt of step {} is not a string and has no response schema",
                    interrupt.step
                )));
            }
        };
        let prefix = if several && is_relay {
            let digest = short_digest(&interrupt.value);
            let n = seen_digests.entry(digest.clone()).or_default();
            *n += 1;
            format!("{digest}.{n}/")
        } else {
            String::new()
        };
        for mut question in built {
            if !prefix.is_empty() {
                question.key = format!("{prefix}{}", question.key);
            }
            match questions.iter_mut().find(|q| q.key == question.key) {
                Some(same) if matches!(question.kind, QuestionKind::Text | QuestionKind::Typed { .. }) => {
                    same.interrupt_ids.extend(question.interrupt_ids);
                }
                Some(_) => {
                    return Err(NotAskable(format!("two requests of one interrupt use the key {}", question.key)));
                }
                None => questions.push(question),
            }
        }
    }
    if questions.is_empty() {
        return Err(NotAskable("the interrupt asks no question".into()));
    }
    Ok(questions)
}

/// One question per tool call of a review interrupt, keyed `review-<16 hex of the
/// interrupt>.<n>`: `n` is the call's position in a batched interrupt, or counts
/// identical per-call interrupts, so every call gets its own question.
fn review_questions(
    interrupt: &Interrupt,
    calls: Vec<review::ReviewedCall>,
    seen_digests: &mut HashMap<String, usize>,
) -> Result<Vec<Question>, NotAskable> {
    let digest = short_digest(&interrupt.value);
    calls
        .into_iter()
        .enumerate()
        .map(|(i, call)| {
            let n = match call.mode {
                review::ReviewMode::Batched { .. } => i + 1,
                review::ReviewMode::PerCall { .. } => {
                    let seen = seen_digests.entry(format!("review-{digest}")).or_default();
                    *seen += 1;
                    *seen
                }
            };
            let (mut form, offered) = hitl_schema::review_form(&call.allowed, &call.args)
                .map_err(|e| NotAskable::schema(&interrupt.step, &format!("review of the {} call", call.tool), &e))?;
            let mut message = call.description.clone().unwrap_or_else(|| format!("Run {}?", call.tool));
            // Said to whoever decides: the client's user of their own calls, or an approver.
            let to_caller = call.approval.is_none();
            let covers =
                call.covers.as_ref().filter(|_| offered.contains(&DecisionKind::Approve)).map(|c| c.text(to_caller));
            if let Some(covers) = &covers {
                hitl_schema::offer_cover(&mut form, covers);
                if to_caller {
                    message = format!("{message}\n\nAn approval covers {covers}.");
                }
            }
            let (request, page) = match call.approval {
                None => (form_request(message, form), None),
                Some(by) => {
                    let waiting = format!("Waiting for approval by {} to run {}", by.approvers.join(", "), call.tool);
                    let kind = PageKind::Approval {
                        approvers: by.approvers,
                        policy: by.policy,
                        form,
                        about: Some(Box::new(About {
                            description: call.description.clone(),
                            upstream: by.upstream,
                            tool_description: by.tool_description,
                            annotations: by.annotations,
                            policy_at: by.policy_at,
                            policy_digest: by.policy_digest,
                            covers,
                        })),
                    };
                    (url_request(waiting), Some(unanswered(kind)))
                }
            };
            let kind = QuestionKind::Review(Box::new(review::Review {
                tool: call.tool,
                args: call.args,
                offered: offered.iter().map(|d| d.as_str().to_owned()).collect(),
                mode: call.mode,
            }));
            Ok(Question {
                key: format!("review-{digest}.{n}"),
                request,
                kind,
                interrupt_ids: vec![interrupt.id.clone()],
                page,
            })
        })
        .collect()
}

/// A secret or sign-in interrupt as its page question, keyed `secret-<16 hex>` or
/// `sign-in-<16 hex>` over the request; `None` for other interrupts.
fn page_question(interrupt: &Interrupt) -> Option<Result<Question, NotAskable>> {
    let step = &interrupt.step;
    let invalid = |what: &str, e: String| NotAskable(format!("the {what} request in step {step} is not valid: {e}"));
    let (prefix, message, kind) = if let Some(secret) = SecretRequest::parse(&interrupt.value) {
        match secret {
            Ok(s) => ("secret", s.message, PageKind::Secret { label: s.label }),
            Err(e) => return Some(Err(invalid("secret", e))),
        }
    } else {
        match SignInRequest::parse(&interrupt.value)? {
            // The provider's URL is kept as the request's until the state is known.
            Ok(s) => {
                let question = Question {
                    key: format!("sign-in-{}", short_digest(&interrupt.value)),
                    request: InputRequest::Elicit(ElicitRequestParams::Url(UrlElicitation {
                        message: s.message,
                        url: s.url,
                        elicitation_id: None,
                        meta: None,
                    })),
                    kind: QuestionKind::Page,
                    interrupt_ids: vec![interrupt.id.clone()],
                    page: Some(unanswered(PageKind::SignIn)),
                };
                return Some(Ok(question));
            }
            Err(e) => return Some(Err(invalid("sign-in", e))),
        }
    };
    Some(Ok(Question {
        key: format!("{prefix}-{}", short_digest(&interrupt.value)),
        request: url_request(message),
        kind: QuestionKind::Page,
        interrupt_ids: vec![interrupt.id.clone()],
        page: Some(unanswered(kind)),
    }))
}

/// A page question not answered yet; the engine gives it its id and URL.
fn unanswered(kind: PageKind) -> Box<Page> {
    Box::new(Page { id: String::new(), kind, answer: None, answered_by: None, answered_at_ms: None, asked_at_ms: 0 })
}

/// A URL question whose URL the engine fills in (hitl's page for it).
fn url_request(message: String) -> InputRequest {
    InputRequest::Elicit(ElicitRequestParams::Url(UrlElicitation {
        message,
        url: String::new(),
        elicitation_id: None,
        meta: None,
    }))
}

fn form_request(message: String, requested_schema: hitl_protocol::RequestedSchema) -> InputRequest {
    InputRequest::Elicit(ElicitRequestParams::Form(FormElicitation { message, requested_schema, meta: None }))
}

/// `asked` is `message` as the interrupt's value: the key is the digest of
/// `{"text": message}`, made without that object.
fn text_question(message: &str, asked: &Value, interrupt_id: &str) -> Question {
    let key = hitl_thread::prefixed_digest_of_entries("answer-", 16, std::iter::once(("text", asked)));
    Question {
        key,
        request: form_request(message.to_owned(), hitl_schema::text_form()),
        kind: QuestionKind::Text,
        interrupt_ids: vec![interrupt_id.to_owned()],
        page: None,
    }
}

fn typed_question(interrupt: &Interrupt, value: &Value, schema: &Value) -> Result<Question, NotAskable> {
    // A question that is not a string is shown as JSON.
    let message = match value {
        Value::String(s) => s.clone(),
        other => serde_json::to_string(other).unwrap_or_default(),
    };
    let form = hitl_schema::to_form(schema, &FormOptions::default())
        .map_err(|e| NotAskable::schema(&interrupt.step, "response schema", &e))?;
    let key = format!("answer-{}", short_digest(&json!({ "text": message, "schema": schema })));
    Ok(Question {
        key,
        request: form_request(message, form.schema),
        kind: QuestionKind::Typed { wrapped: form.wrapped },
        interrupt_ids: vec![interrupt.id.clone()],
        page: None,
    })
}

/// The requests of a relay interrupt ([`Relay`]), in the list shape (`[{key, message,
/// mode, requested_schema | url}]`) or the object shape (`{key: {message, mode?,
/// requestedSchema | url}}`, MCP's field names, a missing mode meaning form).
fn relay_questions(interrupt: &Interrupt, relay: Result<Relay, String>) -> Result<Vec<Question>, NotAskable> {
    let step = &interrupt.step;
    let relay = relay.map_err(|e| NotAskable(format!("the interrupt of step {step} is not a valid relay: {e}")))?;
    let entries: Vec<(String, RelayedRequest)> = match &relay.requests {
        // A request without a key is keyed by what it asks, as questions are.
        hitl_graph::payload::Requests::List(list) => {
            list.iter().map(|r| (r.key.clone().unwrap_or_else(|| derived_key(r)), r.clone())).collect()
        }
        hitl_graph::payload::Requests::Map(_) => relay.keyed().unwrap_or_default(),
    };
    if entries.is_empty() {
        return Err(NotAskable(format!("the interrupt of step {step} has no requests")));
    }
    let any_method = relay.kind == RelayKind::McpInput;
    entries
        .into_iter()
        .map(|(key, entry)| {
            let request = relayed_request(step, &key, &entry, any_method)?;
            Ok(Question {
                key: key.clone(),
                request,
                kind: QuestionKind::Relay { agent_key: key },
                interrupt_ids: vec![interrupt.id.clone()],
                page: None,
            })
        })
        .collect()
}

/// `answer-<16 hex>` of a relayed request's message and schema (or URL, or method and
/// params): the key a typed question asking the same would have.
fn derived_key(request: &RelayedRequest) -> String {
    let params = request.elicitation();
    let asked = match (&params.message, &params.requested_schema, &params.url) {
        (Some(text), Some(schema), _) => json!({ "text": text, "schema": schema }),
        (Some(text), None, Some(url)) => json!({ "text": text, "url": url }),
        _ => json!({ "method": request.method, "params": request.params }),
    };
    format!("answer-{}", short_digest(&asked))
}

fn relayed_request(
    step: &str,
    key: &str,
    entry: &RelayedRequest,
    any_method: bool,
) -> Result<InputRequest, NotAskable> {
    let what = format!("request {key}");
    match entry.method.as_deref() {
        None | Some("elicitation/create") => {}
        Some(method @ ("sampling/createMessage" | "roots/list")) if any_method => {
            let params = entry.params.clone().unwrap_or_else(|| json!({}));
            return serde_json::from_value(json!({ "method": method, "params": params }))
                .map_err(|e| NotAskable(format!("the {what} of step {step} is not a valid {method}: {e}")));
        }
        Some(other) => return Err(NotAskable(format!("the {what} of step {step} uses the method {other}"))),
    }
    let params = entry.elicitation();
    let Some(message) = params.message.as_ref().and_then(Value::as_str) else {
        return Err(NotAskable(format!("the {what} of step {step} has no message")));
    };
    match params.mode.as_ref().map(|m| m.as_str().unwrap_or("(not a string)")) {
        None | Some("form") => {
            let Some(schema) = &params.requested_schema else {
                return Err(NotAskable(format!("the {what} of step {step} is a form without a schema")));
            };
            let form = hitl_schema::to_form(schema, &FormOptions::default())
                .map_err(|e| NotAskable::schema(step, &what, &e))?;
            if form.wrapped {
                return Err(NotAskable(format!("the {what} of step {step} has a form schema that is not an object")));
            }
            Ok(form_request(message.to_owned(), form.schema))
        }
        Some("url") => {
            let url = params.url.as_ref().and_then(Value::as_str).unwrap_or_default();
            hitl_schema::check_url(url).map_err(|e| NotAskable::schema(step, &what, &e))?;
            Ok(InputRequest::Elicit(ElicitRequestParams::Url(UrlElicitation {
                message: message.to_owned(),
                url: url.to_owned(),
                elicitation_id: None,
                meta: None,
            })))
        }
        Some(other) => Err(NotAskable(format!("the {what} of step {step} uses the mode {other}"))),
    }
}

/// What a round needs from the client.
pub(crate) fn needs(questions: &[Question]) -> Needs {
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
pub(crate) enum Verdict {
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
#[cfg(test)]
pub(crate) fn judge(round: &Round, responses: &InputResponses) -> Verdict {
    judge_opening(round, responses, &|_, _| None)
}

/// Opens a page's sealed secret: `(sealed, page id)` to the value.
pub(crate) type Opener<'a> = &'a dyn Fn(&str, &str) -> Option<String>;

/// Judges `responses` against `round`, with secrets typed on pages opened by `open`.
/// Answers to keys the round did not ask are ignored; an invalid answer wins over a
/// missing one, so the client learns of it.
pub(crate) fn judge_opening(round: &Round, responses: &InputResponses, open: Opener<'_>) -> Verdict {
    let mut gathered = Gathered::default();
    let mut missing = false;
    for question in &round.questions {
        let Some(raw) = responses.get(&question.key) else {
            missing = true;
            continue;
        };
        let judged = match (&question.page, &question.kind) {
            (Some(page), kind) => match on_page(question, page, raw, open) {
                Ok(OnPage::NotYet) => {
                    missing = true;
                    continue;
                }
                Ok(OnPage::Value(value)) => {
                    gathered.answer(question, Judged::Value(value));
                    Ok(())
                }
                Ok(OnPage::Decided(action, content)) => match kind {
                    QuestionKind::Review(review) => {
                        let cover = review::Cover { offered: page_offers_cover(page), approval: Some(&page.id) };
                        review::decide(review, action, &content, cover).map(|o| gathered.review(question, review, o))
                    }
                    _ => {
                        gathered.answer(question, Judged::Value(json!({ "action": action })));
                        Ok(())
                    }
                },
                Err(e) => Err(e),
            },
            (None, QuestionKind::Review(review)) => {
                review_answer(question, review, raw).map(|o| gathered.review(question, review, o))
            }
            _ => answer(question, raw).map(|a| gathered.answer(question, a)),
        };
        if let Err(e) = judged {
            return Verdict::Invalid(e);
        }
    }
    if missing {
        return Verdict::Missing;
    }
    gathered.verdict()
}

/// What a round's answers amount to so far: resume values by interrupt id, relayed
/// responses and batched decisions still to be put together, or a result that ends the
/// call (the first declined or cancelled question).
#[derive(Default)]
struct Gathered {
    resume: ResumeValues,
    relayed: BTreeMap<String, Map<String, Value>>,
    batched: BTreeMap<String, Vec<Value>>,
    finish: Option<CallToolResult>,
}

impl Gathered {
    fn finish(&mut self, text: &str) {
        self.finish.get_or_insert_with(|| CallToolResult::error([text.to_owned()]));
    }

    fn review(&mut self, question: &Question, review: &review::Review, outcome: review::Outcome) {
        let decision = match outcome {
            review::Outcome::Finish(text) => return self.finish(text),
            review::Outcome::Decision(decision) => decision,
        };
        for id in &question.interrupt_ids {
            match review.mode {
                review::ReviewMode::PerCall { .. } => {
                    self.resume.insert(id.clone(), decision.clone());
                }
                review::ReviewMode::Batched { index, count, .. } => {
                    let decisions = self.batched.entry(id.clone()).or_insert_with(|| vec![Value::Null; count]);
                    if let Some(slot) = decisions.get_mut(index) {
                        *slot = decision.clone();
                    }
                }
            }
        }
    }

    fn answer(&mut self, question: &Question, answer: Judged) {
        match (&question.kind, answer) {
            (QuestionKind::Relay { agent_key }, answer) => {
                let value = match answer {
                    Judged::Value(v) => v,
                    Judged::Declined(action) => json!({ "action": action }),
                };
                for id in &question.interrupt_ids {
                    self.relayed.entry(id.clone()).or_default().insert(agent_key.clone(), value.clone());
                }
            }
            (_, Judged::Value(value)) => {
                // Each interrupt the question stands for gets the answer: the last one
                // takes it, the others a copy.
                if let Some((last, others)) = question.interrupt_ids.split_last() {
                    for id in others {
                        self.resume.insert(id.clone(), value.clone());
                    }
                    self.resume.insert(last.clone(), value);
                }
            }
            (_, Judged::Declined(action)) => {
                self.finish(if action == ElicitAction::Decline { DECLINED } else { CANCELLED });
            }
        }
    }

    fn verdict(self) -> Verdict {
        let Gathered { mut resume, relayed, batched, finish } = self;
        if let Some(result) = finish {
            return Verdict::Finish(result);
        }
        for (id, responses) in relayed {
            resume.insert(id, json!(RelayReply { responses }));
        }
        // Decisions are already spelled for their middleware (`editedAction` for the
        // JavaScript one), so the reply is written here rather than as a `ReviewReply`.
        for (id, decisions) in batched {
            resume.insert(id, json!({ "decisions": decisions }));
        }
        Verdict::Resume(resume)
    }
}

enum Judged {
    /// What the agent gets for this question.
    Value(Value),
    /// A text or typed question, or a relayed one, was declined or cancelled.
    Declined(ElicitAction),
}

/// The `-32602` message of a client's answer to a question answered on a page.
pub(crate) const ANSWERED_ON_PAGE: &str = "This question is answered on its page, not by the client";

/// What a client's answer to a page question, and the page, say.
enum OnPage {
    /// The page has no answer yet: ask the same round again.
    NotYet,
    /// What the agent gets (a secret or sign-in).
    Value(Value),
    /// A decision: the client withdrew (`decline`/`cancel`) or the approver decided
    /// (`accept` with the review form's content).
    Decided(ElicitAction, Map<String, Value>),
}

/// Reads a client's answer to a page question: `accept` without content means "look
/// again", `decline` or `cancel` withdraws the call; content is refused, since only the
/// page answers.
fn on_page(question: &Question, page: &Page, raw: &Value, open: Opener<'_>) -> Result<OnPage, ErrorObject> {
    let result = ElicitResult::from_value(&question.key, raw)?;
    if result.action != ElicitAction::Accept {
        return Ok(OnPage::Decided(result.action, Map::new()));
    }
    if result.content.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(ErrorObject::invalid_params(ANSWERED_ON_PAGE).with_data(json!({ "inputKey": question.key })));
    }
    let Some(answer) = &page.answer else { return Ok(OnPage::NotYet) };
    Ok(match &page.kind {
        PageKind::Approval { .. } => {
            OnPage::Decided(ElicitAction::Accept, answer.as_object().cloned().unwrap_or_default())
        }
        PageKind::Secret { .. } => {
            let sealed = answer.get("sealed").and_then(Value::as_str).unwrap_or_default();
            match open(sealed, &page.id) {
                Some(value) => OnPage::Value(json!({ "action": "accept", "value": value })),
                // Sealed under a secret this server no longer has: ask again.
                None => OnPage::NotYet,
            }
        }
        PageKind::SignIn => OnPage::Value(json!({ "action": "accept", "params": answer })),
    })
}

/// Checks an approver's decision (the review form's content) against the page's form
/// and the review's rules, before it is stored: the approver learns of a bad edit on
/// the page, and the client's retry never meets it.
pub(crate) fn check_decision(question: &Question, content: &Map<String, Value>) -> Result<(), ErrorObject> {
    let (Some(page @ Page { kind: PageKind::Approval { form, .. }, .. }), QuestionKind::Review(review)) =
        (question.page.as_deref(), &question.kind)
    else {
        return Err(ErrorObject::invalid_params("This question is not an approval"));
    };
    if let Err(violations) = hitl_schema::validate(form, content) {
        return Err(form_mismatch(&question.key, &violations));
    }
    let cover = review::Cover { offered: hitl_schema::offers_cover(form), approval: Some(&page.id) };
    review::decide(review, ElicitAction::Accept, content, cover).map(|_| ())
}

/// Whether an approval page's form offers to cover later calls.
fn page_offers_cover(page: &Page) -> bool {
    matches!(&page.kind, PageKind::Approval { form, .. } if hitl_schema::offers_cover(form))
}

/// Reads a review answer: the form's rules first, then the decision's.
fn review_answer(question: &Question, review: &review::Review, raw: &Value) -> Result<review::Outcome, ErrorObject> {
    let result = ElicitResult::from_value(&question.key, raw)?;
    let content = result.content.unwrap_or_default();
    let mut cover = review::Cover::default();
    if let InputRequest::Elicit(ElicitRequestParams::Form(form)) = &question.request {
        if result.action == ElicitAction::Accept
            && let Err(violations) = hitl_schema::validate(&form.requested_schema, &content)
        {
            return Err(form_mismatch(&question.key, &violations));
        }
        cover.offered = hitl_schema::offers_cover(&form.requested_schema);
    }
    review::decide(review, result.action, &content, cover)
}

/// Reads and checks one answer against its question.
fn answer(question: &Question, raw: &Value) -> Result<Judged, ErrorObject> {
    let key = &question.key;
    match &question.request {
        InputRequest::CreateMessage(_) => {
            let result = CreateMessageResult::from_value(key, raw)?;
            Ok(Judged::Value(serde_json::to_value(result).unwrap_or_default()))
        }
        InputRequest::ListRoots(_) => {
            let result = ListRootsResult::from_value(key, raw)?;
            Ok(Judged::Value(serde_json::to_value(result).unwrap_or_default()))
        }
        InputRequest::Elicit(params) => {
            let result = ElicitResult::from_value(key, raw)?;
            if result.action != ElicitAction::Accept {
                return Ok(Judged::Declined(result.action));
            }
            match params {
                // Accepting a URL question means the user finished the flow on the page.
                ElicitRequestParams::Url(_) => Ok(Judged::Value(json!({ "action": "accept" }))),
                ElicitRequestParams::Form(form) => {
                    let mut asked = result.content.unwrap_or_default();
                    if let Err(violations) = hitl_schema::validate(&form.requested_schema, &asked) {
                        return Err(form_mismatch(key, &violations));
                    }
                    // Only the fields asked for: anything else the client sent goes.
                    asked.retain(|k, _| form.requested_schema.properties.contains_key(k));
                    Ok(Judged::Value(match question.kind {
                        QuestionKind::Text | QuestionKind::Typed { wrapped: true } => {
                            asked.remove(hitl_schema::RESPONSE_FIELD).unwrap_or(Value::Null)
                        }
                        QuestionKind::Typed { wrapped: false } => Value::Object(asked),
                        QuestionKind::Relay { .. } => json!({ "action": "accept", "content": asked }),
                        QuestionKind::Review(_) => unreachable!("review answers are read by review_answer"),
                        QuestionKind::Page => unreachable!("page answers are read by on_page"),
                    }))
                }
            }
        }
    }
}

/// The `-32602` error of an answer outside its form, naming every field at fault.
pub(crate) fn form_mismatch(key: &str, violations: &[hitl_schema::Violation]) -> ErrorObject {
    let errors: Vec<Value> = violations.iter().map(|v| json!({ "field": v.field, "message": v.message })).collect();
    ErrorObject::invalid_params(FORM_MISMATCH).with_data(json!({ "inputKey": key, "errors": errors }))
}

#[cfg(test)]
mod tests;
