//! An entry of the audit trail (`[audit] file`, `GET /api/audit`, the store's trail),
//! typed: what the ledger writes and what the API reads back to filter by reader.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::entry::ApprovalStatus;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// A round was asked (with its approvals, if any).
    Asked,
    /// A round's answers were taken, or a page's secret or sign-in was given.
    Answered,
    /// The call began an effect that happens at most once (the upstream call).
    Executed,
    /// The call ended.
    Finished,
    /// Answers, a decision or a single-use link were refused.
    Refused,
    /// An approval was approved as asked.
    Approved,
    /// An approval was approved with other arguments.
    Edited,
    /// An approval was rejected.
    Rejected,
    /// An approval was answered with a message instead of running.
    Responded,
    /// An approval was decided otherwise.
    Decided,
    /// The call's round was answered otherwise before anyone decided its approval.
    Withdrawn,
    /// Nobody decided an approval in time.
    Expired,
    /// An approver signed in to the pages with a single-use link.
    SignedIn,
    /// A policy (or `[gateway] default_action`) let a call run without a review.
    Allowed,
    /// A policy refused a call.
    Denied,
    /// A policy sent a call for review (the `asked` entry that follows has its round).
    ReviewAsked,
    /// A call ran without a review of its own: an earlier approval covered it
    /// (`[[policy]] approval_ttl`; `approval` names that approval).
    ApprovedByEarlier,
}

impl AuditKind {
    /// The entry of a decision that gave its approval `status`.
    pub(crate) fn of_decision(status: ApprovalStatus) -> Self {
        match status {
            ApprovalStatus::Approved => Self::Approved,
            ApprovalStatus::Edited => Self::Edited,
            ApprovalStatus::Rejected => Self::Rejected,
            ApprovalStatus::Responded => Self::Responded,
            ApprovalStatus::Withdrawn => Self::Withdrawn,
            ApprovalStatus::Expired => Self::Expired,
            ApprovalStatus::Pending | ApprovalStatus::Decided => Self::Decided,
        }
    }
}

/// What a page other than an approval took (never the value itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AuditPage {
    /// A secret typed on its page.
    Secret {
        /// What the value is.
        label: String,
    },
    /// A sign-in completed by its callback.
    SignIn,
}

/// One entry of the audit trail: what happened, to which call, decided by whom under
/// which policy. Fields a kind of entry does not have are left out of its JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// What happened.
    pub event: AuditKind,
    /// The call's thread. Shared (as the tool, principal and digest): the entries the
    /// ledger makes from a thread copy none of its names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<Arc<str>>,
    /// The tool (a prompt's name without its `prompt:` prefix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<Arc<str>>,
    /// Who made the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<Arc<str>>,
    /// The upstream server that runs the call (none: hitl itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// The digest of the call's arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_digest: Option<Arc<str>>,
    /// The round asked or answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    /// Its question keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<String>>,
    /// The arguments reviewed, redacted and capped as listings show them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// The approvals a round asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<Vec<String>>,
    /// The approval the entry is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// Who may decide it: an entry that names them is shown to them alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvers: Option<Vec<String>>,
    /// Who decided, or tried to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver: Option<String>,
    /// An edit's changes, by argument: `{"from", "to"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<Value>,
    /// The approver's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Value>,
    /// The policy's tool globs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Where the policy is written (`hitl.toml:12`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_at: Option<String>,
    /// A digest of the policy's text: which version of the rules decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_digest: Option<String>,
    /// The step that began an effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Whether the call ended with an error result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// Why something was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The question a page answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// What kind of page answered it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<AuditPage>,
    /// How an approver signed in (`single-use link`; `slack <user id>` for a press in
    /// Slack).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// When it was written (ms since the epoch; 0 until the ledger takes it).
    #[serde(default)]
    pub at_ms: u64,
    /// The same, as an RFC 3339 UTC time.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub at: String,
    /// What the store added (the trail's `seq`), kept as read.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl AuditEvent {
    /// An entry of `event` with nothing else in it yet.
    pub fn new(event: AuditKind) -> Self {
        Self {
            event,
            thread: None,
            tool: None,
            principal: None,
            upstream: None,
            args_digest: None,
            round: None,
            keys: None,
            arguments: None,
            approvals: None,
            approval: None,
            approvers: None,
            approver: None,
            diff: None,
            message: None,
            policy: None,
            policy_at: None,
            policy_digest: None,
            step: None,
            is_error: None,
            reason: None,
            key: None,
            page: None,
            via: None,
            at_ms: 0,
            at: String::new(),
            other: Map::new(),
        }
    }

    /// An entry read back from the store or the file (`None`: not one hitl wrote).
    pub fn from_value(entry: &Value) -> Option<Self> {
        Self::deserialize(entry).ok()
    }

    /// As the store keeps it.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// Serialized once, for the store and the `[audit] file`.
    pub fn to_line(&self) -> hitl_thread::AuditLine {
        self.to_line_in(&mut Vec::new())
    }

    /// [`AuditEvent::to_line`], written through `buffer` (left empty): a ledger that
    /// keeps one buffer allocates each line once, as the line it keeps.
    pub fn to_line_in(&self, buffer: &mut Vec<u8>) -> hitl_thread::AuditLine {
        buffer.clear();
        // Strings, numbers and JSON values: serializing cannot fail.
        let written = serde_json::to_writer(&mut *buffer, self).ok().and_then(|()| std::str::from_utf8(buffer).ok());
        let line = hitl_thread::AuditLine { at_ms: self.at_ms, json: written.unwrap_or("{}").into() };
        buffer.clear();
        line
    }

    /// Is the entry about one approval (it names its approvers), so shown to them alone?
    pub fn about_approval(&self) -> bool {
        self.approvers.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_written_without_the_fields_it_lacks_and_read_back_whole() {
        let mut entry = AuditEvent::new(AuditKind::SignedIn);
        (entry.approver, entry.approval, entry.via) = (Some("user:bob".into()), Some("a1".into()), Some("link".into()));
        entry.at_ms = 5;
        let json = serde_json::to_string(&entry).unwrap();
        assert_eq!(json, r#"{"event":"signed_in","approval":"a1","approver":"user:bob","via":"link","at_ms":5}"#);
        let mut stored = entry.to_value();
        stored["seq"] = "1-0".into();
        let read = AuditEvent::from_value(&stored).unwrap();
        assert_eq!((read.other.get("seq"), read.to_value()), (Some(&Value::from("1-0")), stored));
        let page = AuditEvent {
            page: Some(AuditPage::Secret { label: "API key".into() }),
            ..AuditEvent::new(AuditKind::Answered)
        };
        assert_eq!(page.to_value()["page"], serde_json::json!({"type": "secret", "label": "API key"}));
        assert!(AuditEvent::from_value(&serde_json::json!({"event": "unknown"})).is_none(), "not one hitl wrote");
    }
}
