//! What hitl keeps besides threads: the listing of approvals (pending and decided, by
//! page id) and the audit trail. Entries are JSON, written by the layer that owns them
//! (`hitl-pages`); a store implements [`Records`] next to [`crate::ThreadStore`], so
//! every replica on a shared store sees the same listing and trail.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::Value;

use crate::StoreError;
use crate::store::{Clock, MemoryStore};

/// The most audit entries a shared store keeps (the oldest go first).
pub const AUDIT_KEPT: usize = 100_000;
/// The most audit entries the memory store keeps, as JSON text (the `[audit] file`
/// has them all).
pub const AUDIT_KEPT_IN_MEMORY: usize = 10_000;

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

    /// Adds `entries` (objects with their `at_ms`) to the audit trail, in order, in one
    /// step where the store can; each gets a `seq` when read back.
    async fn append_audit(&self, entries: Vec<Value>) -> Result<(), StoreError>;

    /// Audit entries whose `at_ms` is at or after `since_ms`, in the order the store
    /// keeps them (oldest first), after the entry whose `seq` is `after` (none: from the
    /// first), at most `limit`. A `seq` this store did not give reads nothing.
    async fn audit_since(&self, since_ms: u64, after: Option<&str>, limit: usize) -> Result<Vec<Value>, StoreError>;

    /// Marks `key` used until `until_ms`: `true` the first time, `false` while it is
    /// marked (single-use links).
    async fn use_once(&self, key: &str, until_ms: u64) -> Result<bool, StoreError>;

    /// Is `key` marked by [`Records::use_once`] and not past its time? Reads only (a
    /// page session's revocation, checked on every request).
    async fn used(&self, key: &str) -> Result<bool, StoreError>;
}

/// A store of threads and records: what a server with pages runs on.
pub trait Store: crate::ThreadStore + Records {}

impl<T: crate::ThreadStore + Records> Store for T {}

/// The memory store's records.
#[derive(Default)]
pub(crate) struct Kept {
    approvals: HashMap<String, (u64, u64, Value)>,
    used: HashMap<String, u64>,
    next: u64,
    /// Each entry's `seq`, `at_ms` and JSON.
    audit: VecDeque<(u64, u64, String)>,
}

impl<C: Clock> MemoryStore<C> {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl<C: Clock> Records for MemoryStore<C> {
    async fn put_approval(&self, id: &str, entry: Value, until_ms: u64) -> Result<(), StoreError> {
        let now = self.now();
        let mut kept = self.kept();
        kept.approvals.retain(|_, (until, _, _)| *until > now);
        kept.next += 1;
        let order = kept.approvals.get(id).map_or(kept.next, |(_, order, _)| *order);
        kept.approvals.insert(id.to_owned(), (until_ms, order, entry));
        Ok(())
    }

    async fn approval(&self, id: &str) -> Result<Option<Value>, StoreError> {
        let now = self.now();
        Ok(self.kept().approvals.get(id).filter(|(until, _, _)| *until > now).map(|(_, _, e)| e.clone()))
    }

    async fn approvals(&self) -> Result<Vec<Value>, StoreError> {
        let now = self.now();
        let kept = self.kept();
        let mut live: Vec<_> = kept.approvals.values().filter(|(until, _, _)| *until > now).collect();
        live.sort_by_key(|(_, order, _)| *order);
        Ok(live.into_iter().map(|(_, _, e)| e.clone()).collect())
    }

    async fn remove_approvals(&self, ids: &[String]) -> Result<(), StoreError> {
        let mut kept = self.kept();
        for id in ids {
            kept.approvals.remove(id);
        }
        Ok(())
    }

    async fn append_audit(&self, entries: Vec<Value>) -> Result<(), StoreError> {
        let mut kept = self.kept();
        for mut entry in entries {
            kept.next += 1;
            entry["seq"] = kept.next.into();
            let at = entry.get("at_ms").and_then(Value::as_u64).unwrap_or(0);
            let seq = kept.next;
            kept.audit.push_back((seq, at, entry.to_string()));
        }
        while kept.audit.len() > AUDIT_KEPT_IN_MEMORY {
            kept.audit.pop_front();
        }
        Ok(())
    }

    async fn use_once(&self, key: &str, until_ms: u64) -> Result<bool, StoreError> {
        let now = self.now();
        let mut kept = self.kept();
        kept.used.retain(|_, until| *until > now);
        Ok(kept.used.insert(key.to_owned(), until_ms).is_none())
    }

    async fn used(&self, key: &str) -> Result<bool, StoreError> {
        let now = self.now();
        Ok(self.kept().used.get(key).is_some_and(|until| *until > now))
    }

    async fn audit_since(&self, since_ms: u64, after: Option<&str>, limit: usize) -> Result<Vec<Value>, StoreError> {
        let after = match after.map(str::parse::<u64>) {
            None => 0,
            Some(Ok(seq)) => seq,
            Some(Err(_)) => return Ok(Vec::new()),
        };
        let kept = self.kept();
        let since = kept.audit.iter().filter(|(seq, at, _)| *seq > after && *at >= since_ms).take(limit);
        since
            .map(|(_, _, e)| {
                serde_json::from_str(e).map_err(|e| StoreError::Corrupt { id: "audit".into(), reason: e.to_string() })
            })
            .collect()
    }
}

/// The memory store's records, for its constructor.
pub(crate) type KeptRecords = Mutex<Kept>;
