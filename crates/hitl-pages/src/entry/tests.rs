//! The typed entry reads and writes the JSON the listing kept.

use serde_json::json;

use super::{ApprovalEntry, ApprovalStatus};

#[test]
fn an_entry_round_trips_in_its_order() {
    let stored = json!({
        "id": "p1", "status": "pending", "tool": "drop_table", "arguments": {"table": "orders"},
        "decisions": null, "policy": "dba", "approvers": ["group:dba"], "caller": null, "thread": "t1",
        "requested_at_ms": 1, "expires_at_ms": 2, "link": "https://h/approvals/p1",
        "decided_by": null, "decided_at_ms": null, "decision": null, "description": "Drops it."
    });
    let entry = ApprovalEntry::from_value(&stored).expect("an entry");
    assert!(entry.status.is_pending());
    assert_eq!(entry.to_value().to_string(), stored.to_string());
    assert_eq!(ApprovalStatus::of_entry(&json!({"status": "expired"})), Some(ApprovalStatus::Expired));
    assert_eq!(ApprovalStatus::of_entry(&json!({"event": "asked"})), None);
    assert_eq!(ApprovalStatus::of_decision(&json!({"decision": "edit"})).as_str(), "edited");
}
