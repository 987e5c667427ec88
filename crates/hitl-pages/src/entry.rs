//! An approval as hitl's listing keeps it (`GET /api/approvals`, the events stream, the
//! store's approval records), typed: the JSON it is stored and sent as is the same.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for an approver.
    Pending,
    /// Approved as asked.
    Approved,
    /// Approved with other arguments.
    Edited,
    /// Rejected.
    Rejected,
    /// Answered with a message instead of running.
    Responded,
    /// Decided otherwise.
    Decided,
    /// The call's round was answered otherwise before anyone decided.
    Withdrawn,
    /// Nobody decided in time.
    Expired,
}

impl ApprovalStatus {
    /// Is it still waiting for an approver?
    pub fn is_pending(self) -> bool {
        self == Self::Pending
    }

    /// The status a reviewer's `decision` gives its approval.
    pub(crate) fn of_decision(decision: &Value) -> Self {
        match decision.get("decision").and_then(Value::as_str) {
            Some("approve") => Self::Approved,
            Some("edit") => Self::Edited,
            Some("reject") => Self::Rejected,
            Some("respond") => Self::Responded,
            _ => Self::Decided,
        }
    }

    /// Its name on the wire (and the audit event of a decision).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Edited => "edited",
            Self::Rejected => "rejected",
            Self::Responded => "responded",
            Self::Decided => "decided",
            Self::Withdrawn => "withdrawn",
            Self::Expired => "expired",
        }
    }

    /// The status of a listing entry kept as JSON (`None`: it has none hitl knows).
    pub fn of_entry(entry: &Value) -> Option<Self> {
        Self::deserialize(entry.get("status")?).ok()
    }
}

/// An approval in the listing. Fields in the order they are stored and sent; what a
/// detail adds (the tool's description, `display`) is kept in `other`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalEntry {
    /// The approval's page id.
    pub id: String,
    /// Where it stands.
    pub status: ApprovalStatus,
    /// The tool called.
    pub tool: String,
    /// The call's arguments (as listings show them).
    pub arguments: Option<Value>,
    /// The decisions the reviewer is offered.
    pub decisions: Option<Value>,
    /// The policy that asks for the approval.
    pub policy: String,
    /// Who may decide: `user:<id>`, `group:<name>`.
    pub approvers: Vec<String>,
    /// Who made the call.
    pub caller: Option<String>,
    /// The call's thread.
    pub thread: String,
    /// When it was asked, in ms since the epoch.
    pub requested_at_ms: u64,
    /// When it lapses, in ms since the epoch.
    pub expires_at_ms: u64,
    /// Its page.
    pub link: String,
    /// Who decided.
    pub decided_by: Option<String>,
    /// When it ended, in ms since the epoch.
    pub decided_at_ms: Option<u64>,
    /// The decision (an edit's arguments as `arguments`).
    pub decision: Option<Value>,
    /// Anything else (a detail's description, upstream, annotations, `display`).
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl ApprovalEntry {
    /// The entry as JSON (stored, streamed, answered).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("an approval entry serializes")
    }

    /// A listing entry kept as JSON, typed (`None`: not one hitl wrote).
    pub fn from_value(entry: &Value) -> Option<Self> {
        Self::deserialize(entry).ok()
    }
}

#[cfg(test)]
mod tests;
