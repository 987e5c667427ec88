//! One upstream session per caller: the table of a 2025-era HTTP upstream's sessions
//! by caller key, closed after `idle` without calls, at most `cap` of them (past it,
//! the least recently used idle one is closed).
//!
//! The table does no I/O and reads no clock: it is told the time, and says which
//! sessions to close; the [`Upstream`](crate::Upstream) closes them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use crate::Era;

/// A caller's session; `None` until opened.
pub(crate) type Slot = Arc<Mutex<Option<Opened>>>;

/// An open session: the era negotiated in it (with its `Mcp-Session-Id`), the
/// transport generation it was opened in, and the task that reads its own stream
/// (stopped when the session is dropped).
#[derive(Debug)]
pub(crate) struct Opened {
    pub(crate) era: Era,
    pub(crate) generation: u64,
    pub(crate) listener: Option<tokio::task::AbortHandle>,
}

impl Drop for Opened {
    fn drop(&mut self) {
        if let Some(listener) = &self.listener {
            listener.abort();
        }
    }
}

/// How long a caller's session lives without calls, by default.
pub const SESSION_IDLE: Duration = Duration::from_secs(300);
/// How many callers' sessions one upstream keeps, by default.
pub const MAX_SESSIONS: usize = 1000;

/// The sessions of one upstream, by caller key.
#[derive(Debug)]
pub(crate) struct Table {
    idle: Duration,
    cap: usize,
    entries: HashMap<String, Entry>,
}

#[derive(Debug)]
struct Entry {
    slot: Slot,
    last_used: Instant,
    /// Requests using it now: a session in use is never closed.
    in_use: usize,
}

impl Table {
    pub(crate) fn new(idle: Duration, cap: usize) -> Self {
        Self { idle, cap: cap.max(1), entries: HashMap::new() }
    }

    pub(crate) fn idle(&self) -> Duration {
        self.idle
    }

    /// The session of `key`, made if need be and marked in use until [`Table::release`].
    /// Also returns the sessions closed to stay within the cap (the least recently
    /// used that no request uses; when every one is in use the table goes over the cap,
    /// bounded by the requests in flight).
    pub(crate) fn take(&mut self, key: &str, now: Instant) -> (Slot, Vec<Era>) {
        let mut closed = Vec::new();
        if !self.entries.contains_key(key) {
            while self.entries.len() >= self.cap {
                let lru = self
                    .entries
                    .iter()
                    .filter(|(_, e)| e.in_use == 0)
                    .min_by_key(|(_, e)| e.last_used)
                    .map(|(k, _)| k.clone());
                let Some(lru) = lru else { break };
                if let Some(entry) = self.entries.remove(&lru) {
                    closed.extend(opened(&entry.slot));
                }
            }
        }
        let entry = self.entries.entry(key.to_owned()).or_insert_with(|| Entry {
            slot: Slot::default(),
            last_used: now,
            in_use: 0,
        });
        entry.in_use += 1;
        entry.last_used = now;
        (entry.slot.clone(), closed)
    }

    /// A request for `key` is over.
    pub(crate) fn release(&mut self, key: &str, now: Instant) {
        if let Some(entry) = self.entries.get_mut(key) {
            entry.in_use = entry.in_use.saturating_sub(1);
            entry.last_used = now;
        }
    }

    /// Removes the sessions idle for `idle` or longer and returns them, with when the
    /// next one not in use is due.
    pub(crate) fn expire(&mut self, now: Instant) -> (Vec<Era>, Option<Instant>) {
        let idle = self.idle;
        let due: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| e.in_use == 0 && now.saturating_duration_since(e.last_used) >= idle)
            .map(|(k, _)| k.clone())
            .collect();
        let mut closed = Vec::new();
        for key in due {
            if let Some(entry) = self.entries.remove(&key) {
                closed.extend(opened(&entry.slot));
            }
        }
        // A session in use is due `idle` after its release, which comes later than any
        // wake-up planned now.
        let next = self.entries.values().filter(|e| e.in_use == 0).map(|e| e.last_used + idle).min();
        (closed, next)
    }

    /// How many sessions the table holds.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The session a slot opened, when it did. A slot no request uses is not locked.
fn opened(slot: &Slot) -> Option<Era> {
    slot.try_lock().ok().and_then(|mut s| s.take()).map(|opened| opened.era.clone())
}

/// A request's hold on its caller's session: released when dropped.
pub(crate) struct Lease {
    pub(crate) slot: Slot,
    key: String,
    table: Arc<SyncMutex<Table>>,
}

impl Lease {
    pub(crate) fn new(table: Arc<SyncMutex<Table>>, key: &str, slot: Slot) -> Self {
        Self { slot, key: key.to_owned(), table }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).release(&self.key, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn legacy(id: &str) -> Era {
        Era::Legacy { version: "2025-11-25".into(), session: Some(id.into()) }
    }

    /// Takes `key`'s session, opens it as `id` and releases it.
    fn open(table: &mut Table, key: &str, id: &str, now: Instant) -> Vec<Era> {
        let (slot, closed) = table.take(key, now);
        *slot.try_lock().unwrap() = Some(Opened { era: legacy(id), generation: 0, listener: None });
        table.release(key, now);
        closed
    }

    #[test]
    fn each_key_has_its_own_session_and_keeps_it() {
        let now = Instant::now();
        let mut table = Table::new(Duration::from_secs(300), 10);
        open(&mut table, "alice", "s-alice", now);
        open(&mut table, "bob", "s-bob", now);
        let (alice, _) = table.take("alice", now);
        let (bob, _) = table.take("bob", now);
        assert!(!Arc::ptr_eq(&alice, &bob), "two keys, two sessions");
        assert_eq!(alice.try_lock().unwrap().as_ref().map(|o| o.era.clone()), Some(legacy("s-alice")));
        assert_eq!(bob.try_lock().unwrap().as_ref().map(|o| o.era.clone()), Some(legacy("s-bob")));
        let (again, _) = table.take("alice", now);
        assert!(Arc::ptr_eq(&alice, &again), "the same key keeps its session");
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn idle_sessions_are_closed_and_busy_ones_kept() {
        let start = Instant::now();
        let idle = Duration::from_secs(300);
        let mut table = Table::new(idle, 10);
        open(&mut table, "alice", "s-alice", start);
        open(&mut table, "bob", "s-bob", start + Duration::from_secs(100));
        // Carol's request is still running.
        let (carol, _) = table.take("carol", start);
        *carol.try_lock().unwrap() = Some(Opened { era: legacy("s-carol"), generation: 0, listener: None });

        let (closed, next) = table.expire(start + Duration::from_secs(299));
        assert!(closed.is_empty(), "nothing idle long enough");
        assert_eq!(next, Some(start + idle));

        let (closed, next) = table.expire(start + idle);
        assert_eq!(closed, vec![legacy("s-alice")], "alice idle 300 s; carol is in use");
        assert_eq!(next, Some(start + Duration::from_secs(400)), "bob's; carol's is due only once released");
        assert_eq!(table.len(), 2);

        table.release("carol", start + idle);
        let (closed, _) = table.expire(start + idle + Duration::from_secs(100));
        assert_eq!(closed, vec![legacy("s-bob")]);
        let (closed, next) = table.expire(start + idle * 2);
        assert_eq!(closed, vec![legacy("s-carol")]);
        assert_eq!((next, table.len()), (None, 0));

        let (fresh, _) = table.take("alice", start + idle * 2);
        assert!(fresh.try_lock().unwrap().is_none(), "a closed session is opened again on use");
    }

    #[test]
    fn past_the_cap_the_least_recently_used_idle_session_is_closed() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut table = Table::new(Duration::from_secs(300), 3);
        open(&mut table, "a", "s-a", at(0));
        open(&mut table, "b", "s-b", at(1));
        open(&mut table, "c", "s-c", at(2));
        open(&mut table, "a", "s-a", at(3));
        // A flood of new keys: each closes the least recently used.
        assert_eq!(open(&mut table, "d", "s-d", at(4)), vec![legacy("s-b")]);
        assert_eq!(open(&mut table, "e", "s-e", at(5)), vec![legacy("s-c")]);
        assert_eq!(table.len(), 3);

        // A session in use is never closed for another.
        let (_a, _) = table.take("a", at(6));
        assert_eq!(open(&mut table, "f", "s-f", at(7)), vec![legacy("s-d")]);
        let (_e, _) = table.take("e", at(8));
        let (_f, _) = table.take("f", at(9));
        let (_, closed) = table.take("g", at(10));
        assert!(closed.is_empty(), "every session is in use: over the cap rather than closing one");
        assert_eq!(table.len(), 4);
    }
}
