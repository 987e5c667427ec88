//! Questions answered on hitl's pages rather than by the MCP client: an approver's
//! decision on a tool call, a secret typed on a page, a sign-in completed by its
//! callback, as the pages see them ([`PageView`], [`PageInput`], [`PageAnswer`]; the
//! use case is [`PageAnswers`](crate::PageAnswers)). And the [`Observer`] port, which
//! hears what happens to rounds.

use hitl_protocol::{CallToolResult, ErrorObject};
use serde_json::{Map, Value, json};

use crate::review::Review;
use crate::{Page, PageKind, QuestionKind, Thread};

/// What happens to rounds, as an [`Observer`] hears it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A round was stored and asked (a new call's, or the next one of a call).
    Asked {
        /// The thread, paused at the round asked.
        thread: &'a Thread,
    },
    /// A round's answers were taken: the agent resumes with them.
    Answered {
        /// The thread, claimed for the run.
        thread: &'a Thread,
        /// The round answered.
        round: &'a crate::Round,
    },
    /// A page question was answered.
    PageAnswered {
        /// The page, with its answer (a secret's sealed).
        page: &'a PageView,
    },
    /// A round's answers resumed the agent, which began an effect that must happen at
    /// most once (the gateway's upstream call).
    Began {
        /// The thread.
        thread_id: &'a str,
        /// The tool (or `prompt:<name>`) of the call.
        tool: &'a str,
        /// Who made the call.
        principal: Option<&'a str>,
        /// The step that began it.
        step: &'a str,
    },
    /// A stored call's answers were refused (they do not fit their questions, or they
    /// answer a question only a page answers); the round stays open.
    Refused {
        /// The thread.
        thread_id: &'a str,
        /// The tool.
        tool: &'a str,
        /// Who made the call.
        principal: Option<&'a str>,
        /// Why, as the client was told.
        reason: &'a str,
    },
    /// A step wrote an entry for the audit trail about the call it runs
    /// ([`hitl_graph::AuditSink`]: the gateway names the policy that let it through).
    Recorded {
        /// The call's thread (a call that never pauses is never stored under it).
        thread_id: &'a str,
        /// The tool (or `prompt:<name>`) of the call.
        tool: &'a str,
        /// Who made the call.
        principal: Option<&'a str>,
        /// The entry (a JSON object with at least `event`).
        entry: &'a Value,
    },
    /// A stored call ended with its result.
    Finished {
        /// The thread, as it was when the result was decided.
        thread_id: &'a str,
        /// The tool.
        tool: &'a str,
        /// Who made the call.
        principal: Option<&'a str>,
        /// The result.
        result: &'a CallToolResult,
    },
}

/// Hears what happens to rounds. Called inline: an observer hands events off
/// (a channel) and never blocks.
pub trait Observer: Send + Sync + 'static {
    /// One event.
    fn observe(&self, event: &Event<'_>);
}

/// A page question, as its page (and the approvals API) shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct PageView {
    /// The page's id.
    pub id: String,
    /// The thread.
    pub thread_id: String,
    /// The round.
    pub round: u32,
    /// The question's key.
    pub key: String,
    /// The tool (or `prompt:<name>`) the call was made to.
    pub tool: String,
    /// Who made the call.
    pub principal: Option<String>,
    /// Digest of the call's arguments.
    pub args_digest: String,
    /// The question as the client sees it.
    pub message: String,
    /// The page: its kind, its answer when given.
    pub page: Page,
    /// The call under review (approvals).
    pub review: Option<Review>,
    /// When the paused call expires (ms since the epoch).
    pub expires_at_ms: u64,
}

impl PageView {
    /// Page `id` of `thread`, when its open round still asks it (the id names its
    /// round, so a later round's question at the same index is another page).
    pub(crate) fn of(thread: &Thread, id: &str, index: usize) -> Option<Self> {
        Self::at(thread, index).filter(|view| view.id == id)
    }

    /// The page of question `index` of `thread`'s open round, if it has one.
    pub fn at(thread: &Thread, index: usize) -> Option<Self> {
        let round = thread.round()?;
        let question = round.questions.get(index)?;
        let page = (**question.page.as_ref()?).clone();
        let message = match &question.request {
            hitl_protocol::InputRequest::Elicit(params) => params.message().to_owned(),
            _ => String::new(),
        };
        Some(Self {
            id: page.id.clone(),
            thread_id: thread.id.to_string(),
            round: round.n,
            key: question.key.clone(),
            tool: thread.tool.to_string(),
            principal: thread.principal.as_deref().map(str::to_owned),
            args_digest: thread.args_digest.to_string(),
            message,
            review: match &question.kind {
                QuestionKind::Review(review) => Some((**review).clone()),
                _ => None,
            },
            page,
            expires_at_ms: thread.expires_at_ms,
        })
    }

    /// The approvers, for an approval.
    pub fn approvers(&self) -> &[String] {
        match &self.page.kind {
            PageKind::Approval { approvers, .. } => approvers,
            _ => &[],
        }
    }

    /// The page's answer without anything sensitive: a secret's sealed value is left
    /// out.
    pub fn public_answer(&self) -> Option<Value> {
        match self.page.kind {
            PageKind::Secret { .. } => self.page.answer.as_ref().map(|_| json!({ "entered": true })),
            _ => self.page.answer.clone(),
        }
    }
}

/// What a page gives its question.
#[derive(Debug, Clone)]
pub enum PageInput {
    /// An approver's decision: the review form's content (`decision`, `message`,
    /// `args` as a JSON string).
    Decision(Map<String, Value>),
    /// A secret, in clear: the engine seals it.
    Secret(String),
    /// A sign-in callback's query parameters.
    Callback(Map<String, Value>),
}

/// What answering a page did.
#[derive(Debug)]
pub enum PageAnswer {
    /// The answer is stored; the client's retry resumes with it.
    Taken(Box<PageView>),
    /// Someone answered first: the page as they left it.
    AlreadyAnswered(Box<PageView>),
    /// No such page: its id does not verify, or the call ended or expired.
    Gone,
    /// The answer does not fit (a bad edit, a decision the call does not offer).
    Refused(ErrorObject),
}

#[cfg(test)]
mod tests;
