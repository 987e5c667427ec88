//! A store for hitl written outside its crates: the four ports of `hitl-thread`
//! ([`ThreadStore`], [`PausedLedger`], [`Notes`], [`Records`]) over `HashMap`s behind
//! one `Mutex`. It keeps everything in this process, as `hitl_thread::MemoryStore`
//! does; a store of your own puts the same maps in a database. Its tests run
//! `hitl_thread::conformance` (feature `test-support`) and then serve a paused call on
//! it (`tests/store.rs`).
//!
//! ```
//! use std::sync::Arc;
//!
//! let store = Arc::new(custom_store::HashMapStore::default());
//! let server = hitl_server::Server::builder().store(store).build();
//! # drop(server);
//! ```

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use hitl_thread::{
    AuditLine, Clock as _, LimitReached, Notes, PausedLedger, PausedLimits, Records, SaveError, StoreError,
    SystemClock, Thread, ThreadStore,
};
use serde_json::Value;

/// Every port of a hitl store, in this process's memory.
#[derive(Default)]
pub struct HashMapStore(Mutex<Maps>);

#[derive(Default)]
struct Maps {
    /// Threads by id.
    threads: HashMap<String, Thread>,
    /// The paused calls counted, by thread id.
    paused: HashMap<String, Counted>,
    /// Every tool ever counted (the gauge shows a tool with no paused call as 0).
    tools: BTreeSet<String>,
    /// Notes: value and until when.
    notes: HashMap<String, (String, u64)>,
    /// Single-use marks, until when.
    used: HashMap<String, u64>,
    /// Approvals by id: their order, until when, the entry.
    approvals: HashMap<String, (u64, u64, Value)>,
    /// The audit trail, oldest first, each entry with its `seq`.
    audit: Vec<(u64, AuditLine)>,
    /// The last order or `seq` given.
    next: u64,
}

struct Counted {
    owner: String,
    tool: String,
    until_ms: u64,
}

impl HashMapStore {
    /// The maps, with what is past its time swept out (every time: this is an example;
    /// a real store indexes by expiry, or lets its database expire keys).
    fn maps(&self) -> MutexGuard<'_, Maps> {
        let now = SystemClock.now_ms();
        let mut maps = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        maps.threads.retain(|_, t| t.expires_at_ms > now);
        maps.paused.retain(|_, c| c.until_ms > now);
        maps.notes.retain(|_, (_, until)| *until > now);
        maps.used.retain(|_, until| *until > now);
        maps.approvals.retain(|_, (_, until, _)| *until > now);
        maps
    }
}

#[async_trait]
impl ThreadStore for HashMapStore {
    /// In this process, a save cannot fail for want of a network.
    fn can_be_unreachable(&self) -> bool {
        false
    }

    async fn load(&self, id: &str) -> Result<Option<Thread>, StoreError> {
        Ok(self.maps().threads.get(id).cloned())
    }

    /// A compare-and-set on the version: `expected` must be the stored one.
    async fn save(&self, thread: Thread, expected: Option<u64>) -> Result<(), SaveError> {
        let mut maps = self.maps();
        if maps.threads.get(&*thread.id).map(|t| t.version) != expected {
            return Err(SaveError::Conflict(thread.id.to_string()));
        }
        maps.threads.insert(thread.id.to_string(), thread);
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        self.maps().threads.remove(id);
        Ok(())
    }
}

#[async_trait]
impl PausedLedger for HashMapStore {
    async fn count_paused(
        &self,
        owner: &str,
        id: &str,
        tool: &str,
        until_ms: u64,
        limits: PausedLimits,
    ) -> Result<Result<(), LimitReached>, StoreError> {
        let mut maps = self.maps();
        if let Some(counted) = maps.paused.get_mut(id).filter(|c| c.owner == owner) {
            counted.until_ms = until_ms; // a later round: never refused
            return Ok(Ok(()));
        }
        maps.paused.remove(id);
        if maps.paused.values().filter(|c| c.owner == owner).count() as u64 >= limits.per_owner {
            return Ok(Err(LimitReached::PerOwner));
        }
        if maps.paused.len() as u64 >= limits.total {
            return Ok(Err(LimitReached::Total));
        }
        maps.tools.insert(tool.to_owned());
        maps.paused.insert(id.to_owned(), Counted { owner: owner.to_owned(), tool: tool.to_owned(), until_ms });
        Ok(Ok(()))
    }

    async fn uncount_paused(&self, owner: &str, id: &str, _tool: &str) -> Result<(), StoreError> {
        let mut maps = self.maps();
        if maps.paused.get(id).is_some_and(|c| c.owner == owner) {
            maps.paused.remove(id);
        }
        Ok(())
    }

    async fn paused(&self, offset: usize, limit: usize) -> Result<(Vec<String>, u64), StoreError> {
        let maps = self.maps();
        let mut counted: Vec<(u64, &String)> = maps.paused.iter().map(|(id, c)| (c.until_ms, id)).collect();
        counted.sort();
        let page = counted.into_iter().skip(offset).take(limit).map(|(_, id)| id.clone()).collect();
        Ok((page, maps.paused.len() as u64))
    }

    async fn paused_by_tool(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let maps = self.maps();
        let of = |tool: &String| maps.paused.values().filter(|c| c.tool == *tool).count() as u64;
        Ok(maps.tools.iter().map(|tool| (tool.clone(), of(tool))).collect())
    }
}

#[async_trait]
impl Notes for HashMapStore {
    async fn put_note(&self, key: &str, value: &str, until_ms: u64) -> Result<(), StoreError> {
        self.maps().notes.insert(key.to_owned(), (value.to_owned(), until_ms));
        Ok(())
    }

    async fn take_note(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self.maps().notes.remove(key).map(|(value, _)| value))
    }

    async fn use_once(&self, key: &str, until_ms: u64) -> Result<bool, StoreError> {
        Ok(self.maps().used.insert(key.to_owned(), until_ms).is_none())
    }

    async fn used(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.maps().used.contains_key(key))
    }
}

#[async_trait]
impl Records for HashMapStore {
    async fn put_approval(&self, id: &str, entry: Value, until_ms: u64) -> Result<(), StoreError> {
        let mut maps = self.maps();
        maps.next += 1;
        let order = maps.approvals.get(id).map_or(maps.next, |(order, _, _)| *order);
        maps.approvals.insert(id.to_owned(), (order, until_ms, entry));
        Ok(())
    }

    async fn approval(&self, id: &str) -> Result<Option<Value>, StoreError> {
        Ok(self.maps().approvals.get(id).map(|(_, _, entry)| entry.clone()))
    }

    async fn approvals(&self) -> Result<Vec<Value>, StoreError> {
        let maps = self.maps();
        let mut live: Vec<&(u64, u64, Value)> = maps.approvals.values().collect();
        live.sort_by_key(|(order, _, _)| *order);
        Ok(live.into_iter().map(|(_, _, entry)| entry.clone()).collect())
    }

    async fn remove_approvals(&self, ids: &[String]) -> Result<(), StoreError> {
        let mut maps = self.maps();
        for id in ids {
            maps.approvals.remove(id);
        }
        Ok(())
    }

    async fn append_audit(&self, entries: &[AuditLine]) -> Result<(), StoreError> {
        let mut maps = self.maps();
        for entry in entries {
            maps.next += 1;
            let seq = maps.next;
            maps.audit.push((seq, entry.clone()));
        }
        let over = maps.audit.len().saturating_sub(hitl_thread::AUDIT_KEPT_IN_MEMORY);
        maps.audit.drain(..over);
        Ok(())
    }

    async fn audit_since(&self, since_ms: u64, after: Option<&str>, limit: usize) -> Result<Vec<Value>, StoreError> {
        let Ok(after) = after.map_or(Ok(0), str::parse::<u64>) else { return Ok(Vec::new()) };
        let maps = self.maps();
        let since = maps.audit.iter().filter(|(seq, entry)| *seq > after && entry.at_ms >= since_ms);
        since.take(limit).map(|(seq, entry)| AuditLine::read_back(&entry.json, *seq)).collect()
    }
}
