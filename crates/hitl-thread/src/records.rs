//! What hitl keeps besides threads: the listing of approvals (pending and decided, by
//! page id) and the audit trail. Entries are JSON, written by the layer that owns them
//! (`hitl-pages`); a store implements [`Records`] next to [`crate::ThreadStore`], so
//! every replica on a shared store sees the same listing and trail.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::StoreError;

/// The most audit entries a shared store keeps (the oldest go first). A store may keep
/// a few lines in one entry (Redis keeps up to four), so never fewer lines than this.
pub const AUDIT_KEPT: usize = 100_000;
/// The most audit entries the memory store keeps, as JSON text (the `[audit] file`
/// has them all).
pub const AUDIT_KEPT_IN_MEMORY: usize = 10_000;

/// An audit entry as its writer serialized it, once: a JSON object without `seq` (the
/// store gives that when the entry is read back), and its `at_ms`. Shared, so that a
/// batch kept for a store out of reach and the `[audit] file` line are not copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditLine {
    /// When it was written (ms since the epoch); [`Records::audit_since`] reads by it.
    pub at_ms: u64,
    /// The entry.
    pub json: Arc<str>,
}

impl AuditLine {
    /// `entry` (a JSON object with its `at_ms`), serialized.
    pub fn of(entry: &Value) -> Self {
        Self { at_ms: entry.get("at_ms").and_then(Value::as_u64).unwrap_or(0), json: entry.to_string().into() }
    }

    /// `json`, a stored entry, as [`Records::audit_since`] gives it: parsed, with the
    /// `seq` the store gave it.
    pub fn read_back(json: &str, seq: impl Into<Value>) -> Result<Value, StoreError> {
        let mut entry: Value = serde_json::from_str(json)
            .map_err(|e| StoreError::Corrupt { id: "audit".into(), reason: e.to_string() })?;
        if let Some(fields) = entry.as_object_mut() {
            fields.insert("seq".into(), seq.into());
        }
        Ok(entry)
    }
}

/// The approvals listing and the audit trail.
#[async_trait]
pub trait Records: Send + Sync + 'static {
    /// Puts `entry` in the listing under `id` (replacing what was there), kept until
    /// `until_ms`.
    async fn put_approval(&self, id: &str, entry: Value, until_ms: u64) -> Result<(), StoreError>;

    /// The entry `id`, unless it is missing or past its time.
    async fn approval(&self, id: &str) -> Result<Option<Value>, StoreError>;

    /// Every live entry, oldest first.
    async fn approvals(&self) -> Result<Vec<Value>, StoreError>;

    /// Takes the entries `ids` out of the listing (ended approvals past a caller's
    /// share); ids not listed are skipped.
    async fn remove_approvals(&self, ids: &[String]) -> Result<(), StoreError>;

    /// Adds `entries` to the audit trail, in order, in one step where the store can;
    /// each gets a `seq` when read back.
    async fn append_audit(&self, entries: &[AuditLine]) -> Result<(), StoreError>;

    /// Audit entries whose `at_ms` is at or after `since_ms`, in the order the store
    /// keeps them (oldest first), after the entry whose `seq` is `after` (none: from the
    /// first), at most `limit`. A `seq` this store did not give reads nothing.
    async fn audit_since(&self, since_ms: u64, after: Option<&str>, limit: usize) -> Result<Vec<Value>, StoreError>;
}
