//! What every part of the round logic says of answers and questions: the error results
//! of a declined or cancelled question, and why interrupts cannot be asked. A leaf, so
//! that `questions` and `review` both take these without taking each other.

use hitl_protocol::CallToolResult;
use hitl_schema::CannotAsk;

/// The text every "cannot be asked" error result starts with.
pub(crate) const CANNOT_ASK: &str = "This tool needs input that can't be asked over MCP";
/// The error result of a declined text or typed question.
pub(crate) const DECLINED: &str = "The request for input was declined.";
/// The error result of a cancelled text or typed question.
pub(crate) const CANCELLED: &str = "The request for input was cancelled.";

/// Why interrupts cannot become questions; the text follows [`CANNOT_ASK`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{CANNOT_ASK}: {0}")]
pub(crate) struct NotAskable(pub(crate) String);

impl NotAskable {
    /// The error result the tool call ends with.
    pub(crate) fn to_result(&self) -> CallToolResult {
        CallToolResult::error([self.to_string()])
    }

    pub(crate) fn schema(step: &str, what: &str, e: &CannotAsk) -> Self {
        Self(format!("the {what} of step {step} cannot be asked: {} (at {})", e.reason, e.pointer))
    }
}
