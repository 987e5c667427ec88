//! The in-process adapter of every port: [`MemoryStore`] keeps threads, the paused-call
//! ledger, notes and records in this process's memory.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;

use crate::records::{AUDIT_KEPT_IN_MEMORY, AuditLine, Records};
use crate::store::{
    ClaimAttempt, Clock, LimitReached, Loaded, Notes, PausedLedger, PausedLimits, SaveError, StoreError, SystemClock,
    ThreadStore,
};
use crate::{Claim, Thread, ThreadState};

/// A hasher for maps keyed by what the server made (thread ids, owners, tools): fast
/// and seeded per process. A client never chooses a stored key (a request's thread id
/// is only looked up), so hash flooding is not a concern.
type Fast = foldhash::fast::RandomState;

/// Threads in a process-local map: the default store, and the reference the store
/// conformance tests hold other stores to. Sharded, so concurrent rounds rarely wait on
/// each other's lock; each shard drops expired threads as it goes, from a queue ordered
/// by expiry, so the cost of a save does not grow with the number of paused calls.
/// A paused call is kept as its record, not as JSON: a load shares its names and its
/// checkpoint (a change is made on a copy of its own); its open round, most
/// of its memory, is kept as MessagePack and decoded by the load. A finished call, kept
/// only for resends, is kept as MessagePack too, smaller than its values or its JSON.
/// Finished calls are bounded by [`FinishedLimits`]: past either limit the oldest go
/// first, counted in `hitl_finished_calls_dropped_total`.
pub struct MemoryStore<C: Clock = SystemClock> {
    shards: Box<[Mutex<Shard>]>,
    finished: Finished,
    paused: Mutex<Ledger>,
    records: Mutex<Kept>,
    notes: Mutex<Noted>,
    clock: C,
    hasher: Fast,
}

/// One counted paused call.
struct Counted {
    owner: Arc<str>,
    tool: Arc<str>,
    until_ms: u64,
}

/// The paused calls counted, with their owners, tools and times.
#[derive(Default)]
struct Ledger {
    /// By thread id.
    counted: HashMap<Arc<str>, Counted, Fast>,
    /// How many each owner has counted (owners with none are dropped).
    per_owner: HashMap<Arc<str>, u64, Fast>,
    /// How many of each tool are counted; a tool counted once stays (at 0), so that the
    /// gauge shows it.
    per_tool: HashMap<Arc<str>, u64, Fast>,
    /// `(until_ms, id)` of every count; stale entries are skipped when popped.
    expiry: BinaryHeap<Reverse<(u64, Arc<str>)>>,
}

/// The copy of `key` that `map` holds, or a new one: one copy of each owner and tool.
fn interned(map: &HashMap<Arc<str>, u64, Fast>, key: &str) -> Arc<str> {
    map.get_key_value(key).map_or_else(|| Arc::from(key), |(k, _)| k.clone())
}

impl Ledger {
    fn sweep(&mut self, now: u64) {
        while let Some(Reverse((at, _))) = self.expiry.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((at, id))) = self.expiry.pop() else { break };
            if self.counted.get(&id).is_some_and(|c| c.until_ms == at) {
                self.remove(&id);
            }
        }
    }

    fn remove(&mut self, id: &str) -> Option<Counted> {
        let gone = self.counted.remove(id)?;
        if let Some(n) = self.per_owner.get_mut(&gone.owner) {
            *n -= 1;
            if *n == 0 {
                self.per_owner.remove(&gone.owner);
            }
        }
        if let Some(n) = self.per_tool.get_mut(&gone.tool) {
            *n -= 1;
        }
        Some(gone)
    }

    fn add(&mut self, id: Arc<str>, owner: &str, tool: &str, until_ms: u64) {
        let owner = interned(&self.per_owner, owner);
        let tool = interned(&self.per_tool, tool);
        *self.per_owner.entry(owner.clone()).or_default() += 1;
        *self.per_tool.entry(tool.clone()).or_default() += 1;
        self.counted.insert(id, Counted { owner, tool, until_ms });
    }

    /// Drops stale queue entries (of calls that finished or were counted again) once
    /// they outnumber the counted calls.
    fn compact(&mut self) {
        if self.expiry.len() > 2 * self.counted.len() + 64 {
            self.expiry = self.counted.iter().map(|(id, c)| Reverse((c.until_ms, id.clone()))).collect();
        }
    }
}

/// A thread as the memory store keeps it, and beside it what a save compares, the
/// sweep reads and a claim sets without touching the record (the record's own version
/// and claim are not read).
struct Stored {
    version: u64,
    expires_at_ms: u64,
    claim: Option<Claim>,
    record: Record,
    /// What it counts for among the finished calls (0: not finished).
    finished_bytes: u64,
}

/// What stands for a paused call's round in the record while the record keeps the
/// round encoded: one empty round, shared.
fn kept_encoded() -> Arc<crate::Round> {
    static EMPTY: std::sync::LazyLock<Arc<crate::Round>> = std::sync::LazyLock::new(Arc::default);
    EMPTY.clone()
}

/// A kept record: a call that may go on as its values, a finished one encoded.
enum Record {
    /// Paused or working: loaded on every round, so kept as its values, but for a paused
    /// call's open round, kept encoded (`round`, MessagePack): the round's questions and
    /// forms are most of a paused call's memory, and a load decodes the round alone.
    Live { thread: Box<Thread>, round: Option<Arc<[u8]>> },
    /// Finished: loaded only by a resend, so kept small (MessagePack, its fields named:
    /// smaller than its values or its JSON, and written without escaping).
    Finished(Arc<[u8]>),
}

/// How many finished calls the memory store keeps for resends, and in how many bytes
/// (a record's encoding, its id and what the store keeps beside it). Past either, the
/// oldest finished calls are dropped first: a resend of one gets `Invalid or expired
/// requestState`, as after its lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinishedLimits {
    /// Finished calls kept (`--max-finished-calls`).
    pub calls: u64,
    /// Bytes they may take (`--max-finished-bytes`).
    pub bytes: u64,
}

impl Default for FinishedLimits {
    /// A million calls, 1 GiB.
    fn default() -> Self {
        Self { calls: 1_000_000, bytes: 1 << 30 }
    }
}

/// The finished calls kept, in the order they finished: counted under the shards'
/// locks as they come and go, dropped oldest first past the limits.
struct Finished {
    limits: FinishedLimits,
    calls: AtomicU64,
    bytes: AtomicU64,
    dropped: AtomicU64,
    /// `(id, version)` of each finished save, oldest first; an entry whose thread has
    /// gone or changed since is skipped when popped. Locked before a shard, never after.
    order: Mutex<VecDeque<(Arc<str>, u64)>>,
}

impl Finished {
    fn new(limits: FinishedLimits) -> Self {
        Self {
            limits,
            calls: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            order: Mutex::default(),
        }
    }

    fn over(&self) -> bool {
        self.calls.load(Ordering::Relaxed) > self.limits.calls || self.bytes.load(Ordering::Relaxed) > self.limits.bytes
    }

    /// A stored thread came (`+1`) or went: the counts follow.
    fn count(&self, stored: &Stored, came: bool) {
        if stored.finished_bytes == 0 {
            return;
        }
        if came {
            self.calls.fetch_add(1, Ordering::Relaxed);
            self.bytes.fetch_add(stored.finished_bytes, Ordering::Relaxed);
        } else {
            self.calls.fetch_sub(1, Ordering::Relaxed);
            self.bytes.fetch_sub(stored.finished_bytes, Ordering::Relaxed);
        }
    }
}

/// What a finished record counts for: its encoding, its id (twice: map and queue) and
/// the entries beside it.
fn finished_bytes(packed: &[u8], id: &str) -> u64 {
    (packed.len() + 2 * id.len() + std::mem::size_of::<Stored>() + 64) as u64
}

#[derive(Default)]
struct Shard {
    threads: HashMap<Arc<str>, Stored, Fast>,
    /// `(expires_at_ms, id)` of every save; stale entries are skipped when popped.
    expiry: BinaryHeap<Reverse<(u64, Arc<str>)>>,
}

impl Shard {
    /// Drops stale queue entries once they outnumber the threads, so the queue stays
    /// proportional to what is stored (every save pushes one entry).
    fn compact(&mut self) {
        if self.expiry.len() > 2 * self.threads.len() + 64 {
            self.expiry = self.threads.iter().map(|(id, t)| Reverse((t.expires_at_ms, id.clone()))).collect();
        }
    }

    fn sweep(&mut self, now: u64, finished: &Finished) {
        while let Some(Reverse((at, _))) = self.expiry.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((_, id))) = self.expiry.pop() else { break };
            if self.threads.get(&id).is_some_and(|t| t.expires_at_ms <= now) {
                self.remove(&id, finished);
            }
        }
    }

    /// Does the map hold `id` finished, as saved at `version` (an entry of the finished
    /// calls' order that is not stale)?
    fn holds_finished(&self, id: &str, version: u64) -> bool {
        self.threads.get(id).is_some_and(|t| t.version == version && t.finished_bytes > 0)
    }

    /// Removes `id`, counting it out of the finished calls.
    fn remove(&mut self, id: &str, finished: &Finished) -> Option<Stored> {
        let gone = self.threads.remove(id)?;
        finished.count(&gone, false);
        Some(gone)
    }
}

const SHARDS: usize = 16;

impl Default for MemoryStore {
    fn default() -> Self {
        Self::with_clock(SystemClock)
    }
}

impl<C: Clock> MemoryStore<C> {
    /// A store that reads expiry from `clock`.
    pub fn with_clock(clock: C) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            finished: Finished::new(FinishedLimits::default()),
            paused: Mutex::new(Ledger::default()),
            records: Default::default(),
            notes: Mutex::default(),
            clock,
            hasher: Fast::default(),
        }
    }

    /// This store, keeping finished calls within `limits` (the default:
    /// [`FinishedLimits::default`]).
    pub fn with_finished_limits(mut self, limits: FinishedLimits) -> Self {
        self.finished.limits = limits;
        self
    }

    /// Finished calls kept now, and the bytes they count for.
    pub fn finished(&self) -> (u64, u64) {
        (self.finished.calls.load(Ordering::Relaxed), self.finished.bytes.load(Ordering::Relaxed))
    }

    /// Finished calls dropped so far to stay within the limits.
    pub fn finished_dropped(&self) -> u64 {
        self.finished.dropped.load(Ordering::Relaxed)
    }

    /// Drops the oldest finished calls while the kept ones are over a limit.
    fn drop_oldest_finished(&self) {
        if !self.finished.over() {
            return;
        }
        let mut order = self.finished.order.lock().unwrap_or_else(|p| p.into_inner());
        let mut dropped = 0;
        while self.finished.over() {
            let Some((id, version)) = order.pop_front() else { break };
            let mut shard = self.shard(&id);
            if shard.holds_finished(&id, version) {
                shard.remove(&id, &self.finished);
                dropped += 1;
            }
        }
        if dropped > 0 {
            self.finished.dropped.fetch_add(dropped, Ordering::Relaxed);
            metrics::counter!("hitl_finished_calls_dropped_total").increment(dropped);
        }
    }

    /// Drops queue entries of finished calls that have gone or changed once they
    /// outnumber the calls kept, so the queue stays as long as what it orders.
    fn compact_finished(&self, order: &mut VecDeque<(Arc<str>, u64)>) {
        if order.len() as u64 <= 2 * self.finished.calls.load(Ordering::Relaxed) + 64 {
            return;
        }
        order.retain(|(id, version)| self.shard(id).holds_finished(id, *version));
    }

    /// Live threads (for tests and metrics).
    pub fn len(&self) -> usize {
        let now = self.clock.now_ms();
        self.shards
            .iter()
            .map(|s| {
                s.lock().unwrap_or_else(|p| p.into_inner()).threads.values().filter(|t| t.expires_at_ms > now).count()
            })
            .sum()
    }

    /// No live thread?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stored threads (live or not yet swept), their expiry queue entries, paused calls
    /// counted, and the ledger's queue entries: what the store's memory grows with.
    #[cfg(any(test, feature = "test-support"))]
    #[doc(hidden)]
    pub fn sizes(&self) -> (usize, usize, u64, usize) {
        let shards = self.shards.iter().map(|s| s.lock().unwrap_or_else(|p| p.into_inner()));
        let (threads, queued) = shards.fold((0, 0), |(t, q), s| (t + s.threads.len(), q + s.expiry.len()));
        let ledger = self.paused.lock().unwrap_or_else(|p| p.into_inner());
        (threads, queued, ledger.counted.len() as u64, ledger.expiry.len())
    }

    fn shard(&self, id: &str) -> std::sync::MutexGuard<'_, Shard> {
        let index = (std::hash::BuildHasher::hash_one(&self.hasher, id) % SHARDS as u64) as usize;
        self.shards[index].lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl<C: Clock> ThreadStore for MemoryStore<C> {
    fn can_be_unreachable(&self) -> bool {
        false
    }

    async fn load(&self, id: &str) -> Result<Option<Thread>, StoreError> {
        let now = self.clock.now_ms();
        let (packed, version, claim) = {
            let shard = self.shard(id);
            let Some(stored) = shard.threads.get(id).filter(|t| t.expires_at_ms > now) else { return Ok(None) };
            match &stored.record {
                Record::Live { thread, round } => {
                    // Its names are shared: the copy copies no text.
                    let mut thread = Thread::clone(thread);
                    thread.version = stored.version;
                    thread.set_claim(stored.claim.clone());
                    let round = round.clone();
                    drop(shard);
                    // Read outside the shard's lock.
                    if let (Some(round), Some(paused)) = (round, thread.paused_mut()) {
                        paused.round = Arc::new(rmp_serde::from_slice(&round).map_err(|e| StoreError::Corrupt {
                            id: id.to_owned(),
                            reason: format!("its round: {e}"),
                        })?);
                    }
                    return Ok(Some(thread));
                }
                Record::Finished(packed) => (packed.clone(), stored.version, stored.claim.clone()),
            }
        };
        // Read outside the shard's lock.
        let corrupt = |e: rmp_serde::decode::Error| StoreError::Corrupt { id: id.to_owned(), reason: e.to_string() };
        let mut thread: Thread = rmp_serde::from_slice(&packed).map_err(corrupt)?;
        thread.version = version;
        thread.set_claim(claim);
        Ok(Some(thread))
    }

    /// The claim is set beside the record, under the shard's lock, if the thread is
    /// still as loaded: no copy of the thread and no JSON written.
    async fn load_claiming(&self, id: &str, attempt: ClaimAttempt<'_>) -> Result<Loaded, StoreError> {
        let thread = self.load(id).await?;
        let claim = thread.as_ref().and_then(|t| {
            let (round, proof) = t.claimable()?;
            let ours = attempt.binding.binds(t) && proof == crate::proof(attempt.token);
            (ours && t.live_claim(attempt.now_ms).is_none()).then_some((t.version, round))
        });
        let Some((version, round)) = claim else { return Ok(Loaded { thread, claimed: false }) };
        let now = self.clock.now_ms();
        let mut shard = self.shard(id);
        let stored = shard.threads.get_mut(id).filter(|t| t.version == version && t.expires_at_ms > now);
        let claimed = stored.map(|stored| {
            stored.version += 1;
            stored.claim = Some(Claim { round, until_ms: attempt.until_ms });
        });
        Ok(Loaded { thread, claimed: claimed.is_some() })
    }

    async fn release_claim(&self, id: &str, claimed_version: u64) -> Result<bool, StoreError> {
        let mut shard = self.shard(id);
        let stored = shard.threads.get_mut(id).filter(|t| t.version == claimed_version);
        Ok(stored
            .map(|stored| {
                stored.version += 1;
                stored.claim = None;
            })
            .is_some())
    }

    async fn save(&self, mut thread: Thread, expected: Option<u64>) -> Result<(), SaveError> {
        // The claim is kept beside the record; what is kept encoded (a finished call, a
        // paused call's round) is encoded outside the shard's lock.
        let claim = thread.take_claim();
        let (version, expires_at_ms) = (thread.version, thread.expires_at_ms);
        let (record, finished_bytes, id) = match thread.state {
            ThreadState::Finished => {
                let packed = crate::pack(&thread)?;
                let bytes = finished_bytes(&packed, &thread.id);
                (Record::Finished(packed.into()), bytes, thread.id)
            }
            _ => {
                let id = thread.id.clone();
                let round = match thread.paused_mut() {
                    Some(paused) => {
                        let mut packed = Vec::with_capacity(512);
                        rmp_serde::encode::write_named(&mut packed, &*paused.round)
                            .map_err(|e| StoreError::Corrupt { id: id.to_string(), reason: e.to_string() })?;
                        // The values go; the record keeps the encoding.
                        paused.round = kept_encoded();
                        Some(packed.into())
                    }
                    None => None,
                };
                (Record::Live { thread: Box::new(thread), round }, 0, id)
            }
        };
        let mut stored = Stored { version, expires_at_ms, claim, record, finished_bytes };
        // A paused call is counted before it is first saved (`expected` is none): its id
        // is kept once, for the ledger and the map alike. Later saves find it in the map,
        // so only a first one takes the ledger's lock (never held with a shard's).
        let counted = expected
            .is_none()
            .then(|| {
                let ledger = self.paused.lock().unwrap_or_else(|p| p.into_inner());
                ledger.counted.get_key_value(&*id).map(|(k, _)| k.clone())
            })
            .flatten();
        let now = self.clock.now_ms();
        let mut shard = self.shard(&id);
        shard.sweep(now, &self.finished);
        let current = shard.threads.get_key_value(&*id).filter(|(_, t)| t.expires_at_ms > now);
        if current.map(|(_, t)| t.version) != expected {
            return Err(SaveError::Conflict(id.to_string()));
        }
        // One copy of the id, for the map and the queues.
        let id = match current {
            Some((id, _)) => id.clone(),
            None => counted.unwrap_or(id),
        };
        if let Record::Live { thread, .. } = &mut stored.record {
            thread.id = id.clone();
        }
        shard.expiry.push(Reverse((expires_at_ms, id.clone())));
        self.finished.count(&stored, true);
        if let Some(replaced) = shard.threads.insert(id.clone(), stored) {
            self.finished.count(&replaced, false);
        }
        shard.compact();
        drop(shard);
        if finished_bytes > 0 {
            let mut order = self.finished.order.lock().unwrap_or_else(|p| p.into_inner());
            order.push_back((id, version));
            self.compact_finished(&mut order);
            drop(order);
            self.drop_oldest_finished();
        }
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        self.shard(id).remove(id, &self.finished);
        Ok(())
    }
}

#[async_trait]
impl<C: Clock> PausedLedger for MemoryStore<C> {
    async fn count_paused(
        &self,
        owner: &str,
        id: &str,
        tool: &str,
        until_ms: u64,
        limits: PausedLimits,
    ) -> Result<Result<(), LimitReached>, StoreError> {
        let mut ledger = self.paused.lock().unwrap_or_else(|p| p.into_inner());
        ledger.sweep(self.clock.now_ms());
        let known = ledger.counted.get_key_value(id).filter(|(_, c)| *c.owner == *owner).map(|(id, _)| id.clone());
        let id = match known {
            // Counted already (a later round): never refused, its time moves.
            Some(id) => {
                if let Some(counted) = ledger.counted.get_mut(&id) {
                    counted.until_ms = until_ms;
                }
                id
            }
            None => {
                // A call counted for another owner moves to this one.
                if ledger.remove(id).is_none() {
                    if ledger.per_owner.get(owner).copied().unwrap_or(0) >= limits.per_owner {
                        return Ok(Err(LimitReached::PerOwner));
                    }
                    if ledger.counted.len() as u64 >= limits.total {
                        return Ok(Err(LimitReached::Total));
                    }
                }
                let id: Arc<str> = Arc::from(id);
                ledger.add(id.clone(), owner, tool, until_ms);
                id
            }
        };
        ledger.expiry.push(Reverse((until_ms, id)));
        ledger.compact();
        Ok(Ok(()))
    }

    async fn uncount_paused(&self, owner: &str, id: &str, _tool: &str) -> Result<(), StoreError> {
        let mut ledger = self.paused.lock().unwrap_or_else(|p| p.into_inner());
        if ledger.counted.get(id).is_some_and(|c| *c.owner == *owner) {
            ledger.remove(id);
        }
        Ok(())
    }

    async fn paused_by_tool(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let mut ledger = self.paused.lock().unwrap_or_else(|p| p.into_inner());
        ledger.sweep(self.clock.now_ms());
        let mut counts: Vec<(String, u64)> = ledger.per_tool.iter().map(|(tool, n)| (tool.to_string(), *n)).collect();
        counts.sort_unstable();
        Ok(counts)
    }

    async fn paused(&self, offset: usize, limit: usize) -> Result<(Vec<String>, u64), StoreError> {
        let mut ledger = self.paused.lock().unwrap_or_else(|p| p.into_inner());
        ledger.sweep(self.clock.now_ms());
        let mut counted: Vec<(u64, &str)> = ledger.counted.iter().map(|(id, c)| (c.until_ms, &**id)).collect();
        counted.sort_unstable();
        let page = counted.iter().skip(offset).take(limit).map(|(_, id)| (*id).to_owned()).collect();
        Ok((page, ledger.counted.len() as u64))
    }
}

/// The memory store's notes.
#[derive(Default)]
struct Noted {
    /// Notes between requests: value and time.
    notes: HashMap<String, (String, u64)>,
    /// Keys marked by [`Notes::use_once`], and until when.
    used: HashMap<String, u64>,
}

impl<C: Clock> MemoryStore<C> {
    fn noted(&self) -> std::sync::MutexGuard<'_, Noted> {
        self.notes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl<C: Clock> Notes for MemoryStore<C> {
    async fn put_note(&self, key: &str, value: &str, until_ms: u64) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let mut noted = self.noted();
        let notes = &mut noted.notes;
        // Notes past their time go as new ones come, so the map stays as large as what
        // it holds.
        if notes.len() >= 64 && notes.len().is_power_of_two() {
            notes.retain(|_, (_, until)| *until > now);
        }
        notes.insert(key.to_owned(), (value.to_owned(), until_ms));
        Ok(())
    }

    async fn take_note(&self, key: &str) -> Result<Option<String>, StoreError> {
        let now = self.clock.now_ms();
        let taken = self.noted().notes.remove(key);
        Ok(taken.filter(|(_, until)| *until > now).map(|(value, _)| value))
    }

    async fn use_once(&self, key: &str, until_ms: u64) -> Result<bool, StoreError> {
        let now = self.clock.now_ms();
        let mut noted = self.noted();
        noted.used.retain(|_, until| *until > now);
        Ok(noted.used.insert(key.to_owned(), until_ms).is_none())
    }

    async fn used(&self, key: &str) -> Result<bool, StoreError> {
        let now = self.clock.now_ms();
        Ok(self.noted().used.get(key).is_some_and(|until| *until > now))
    }
}

/// The memory store's records.
#[derive(Default)]
struct Kept {
    approvals: HashMap<String, (u64, u64, Value)>,
    next: u64,
    /// Each entry's `seq`, and the entry.
    audit: VecDeque<(u64, AuditLine)>,
}

impl<C: Clock> MemoryStore<C> {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl<C: Clock> Records for MemoryStore<C> {
    async fn put_approval(&self, id: &str, entry: Value, until_ms: u64) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let mut kept = self.kept();
        kept.approvals.retain(|_, (until, _, _)| *until > now);
        kept.next += 1;
        let order = kept.approvals.get(id).map_or(kept.next, |(_, order, _)| *order);
        kept.approvals.insert(id.to_owned(), (until_ms, order, entry));
        Ok(())
    }

    async fn approval(&self, id: &str) -> Result<Option<Value>, StoreError> {
        let now = self.clock.now_ms();
        Ok(self.kept().approvals.get(id).filter(|(until, _, _)| *until > now).map(|(_, _, e)| e.clone()))
    }

    async fn approvals(&self) -> Result<Vec<Value>, StoreError> {
        let now = self.clock.now_ms();
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

    async fn append_audit(&self, entries: &[AuditLine]) -> Result<(), StoreError> {
        let mut kept = self.kept();
        for entry in entries {
            kept.next += 1;
            let seq = kept.next;
            kept.audit.push_back((seq, entry.clone()));
        }
        while kept.audit.len() > AUDIT_KEPT_IN_MEMORY {
            kept.audit.pop_front();
        }
        Ok(())
    }

    async fn audit_since(&self, since_ms: u64, after: Option<&str>, limit: usize) -> Result<Vec<Value>, StoreError> {
        let after = match after.map(str::parse::<u64>) {
            None => 0,
            Some(Ok(seq)) => seq,
            Some(Err(_)) => return Ok(Vec::new()),
        };
        // Copied out under the lock, parsed after it.
        let since: Vec<(u64, AuditLine)> = {
            let kept = self.kept();
            let since = kept.audit.iter().filter(|(seq, line)| *seq > after && line.at_ms >= since_ms);
            since.take(limit).cloned().collect()
        };
        since.into_iter().map(|(seq, line)| AuditLine::read_back(&line.json, seq)).collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::conformance::{claimable, thread};
    use crate::{FinishedLimits, ManualClock, MemoryStore, ThreadStore};

    #[test]
    fn the_memory_store_keeps_threads_and_records_as_every_store_must() {
        let store = MemoryStore::with_clock(ManualClock::new(1_000_000));
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(crate::conformance::run(&store, "t", 1_000_000));
        assert!(rt.block_on(crate::conformance::claims(&store, "u", 1_000_000)), "it claims as it loads");
        rt.block_on(crate::conformance::records(&store, "t", 1_000_000));
    }

    /// A finished call is kept encoded (MessagePack) and read back whole: every kind of
    /// JSON value in its result, its content's extra fields, a task's state.
    #[tokio::test]
    async fn a_finished_call_is_read_back_as_it_was_saved_whatever_its_result_holds() {
        let now = 1_000_000;
        let store = MemoryStore::with_clock(ManualClock::new(now));
        let structured = serde_json::json!({
            "n": -3, "big": u64::MAX, "f": 1.5, "whole": 2.0, "none": null, "yes": true,
            "list": [1, "two", {"three": [3]}], "text": "é \" \n \u{1F600}", "": "empty key",
        });
        let result: hitl_protocol::CallToolResult = serde_json::from_value(serde_json::json!({
            "resultType": "complete",
            "content": [{"type": "text", "text": "done", "annotations": {"priority": 0.5}, "_meta": {"k": "v"}},
                        {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
            "structuredContent": structured,
            "isError": false,
        }))
        .unwrap();
        let mut finished = thread("rich", 4, now + 600_000);
        finished.principal = Some("user:alice".into());
        finished.owner = Some("user:alice".into());
        finished.last = Some(std::sync::Arc::new(crate::Last {
            round: 2,
            nonce: "n".into(),
            keys: vec!["answer-1".into(), "review-2.1".into()],
            answers_digest: "ad".into(),
            outcome: crate::LastOutcome::Result { result },
        }));
        let mut task = crate::TaskState::new(
            now,
            serde_json::from_value(serde_json::json!({"elicitation": {"form": {}}})).unwrap(),
        );
        task.error = Some(hitl_protocol::ErrorObject::internal("x").with_data(serde_json::json!({"d": [1]})));
        finished.task = Some(Box::new(task));
        store.save(finished.clone(), None).await.unwrap();
        assert_eq!(store.load("rich").await.unwrap(), Some(finished));
    }

    /// A paused call is kept as it was saved, with shared names: a load copies no text.
    #[tokio::test]
    async fn a_paused_call_loaded_twice_shares_its_names_with_the_store() {
        use std::sync::Arc;
        let now = 1_000_000;
        let store = MemoryStore::with_clock(ManualClock::new(now));
        let mut paused = claimable("shared", "tok", now + 600_000);
        paused.owner = Some("principal:alice".into());
        store.save(paused.clone(), None).await.unwrap();
        let (one, two) = (store.load("shared").await.unwrap().unwrap(), store.load("shared").await.unwrap().unwrap());
        assert_eq!(one, paused, "loaded as saved");
        assert!(Arc::ptr_eq(&one.id, &two.id) && Arc::ptr_eq(&one.tool, &two.tool), "the names are shared");
        assert!(Arc::ptr_eq(&one.args_digest, &two.args_digest));
        assert!(Arc::ptr_eq(one.owner.as_ref().unwrap(), two.owner.as_ref().unwrap()));
    }

    #[tokio::test]
    async fn finished_calls_past_a_limit_are_dropped_oldest_first_and_paused_ones_never() {
        let now = 1_000_000;
        let later = now + 600_000;
        let store = MemoryStore::with_clock(ManualClock::new(now))
            .with_finished_limits(FinishedLimits { calls: 2, bytes: u64::MAX });
        store.save(claimable("paused", "tok", later), None).await.unwrap();
        for id in ["f1", "f2"] {
            store.save(thread(id, 1, later), None).await.unwrap();
        }
        assert_eq!((store.finished().0, store.finished_dropped()), (2, 0), "two finished calls fit");
        // f1 saved again: its first entry in the order is stale; it is now the newest.
        store.save(thread("f1", 2, later), Some(1)).await.unwrap();
        store.save(thread("f3", 1, later), None).await.unwrap();
        assert_eq!(store.load("f2").await.unwrap(), None, "the oldest finished call went first");
        assert!(store.load("f1").await.unwrap().is_some(), "a call finished again counts from its new save");
        assert!(store.load("f3").await.unwrap().is_some());
        assert!(store.load("paused").await.unwrap().is_some(), "a paused call is never dropped");
        assert_eq!((store.finished().0, store.finished_dropped()), (2, 1));

        store.delete("f3").await.unwrap();
        assert_eq!(store.finished().0, 1, "a deleted call stops counting");

        // By bytes: room for about one record.
        let one = {
            let probe = MemoryStore::with_clock(ManualClock::new(now));
            probe.save(thread("b0", 1, later), None).await.unwrap();
            probe.finished().1
        };
        let store = MemoryStore::with_clock(ManualClock::new(now))
            .with_finished_limits(FinishedLimits { calls: 1_000, bytes: one + one / 2 });
        for id in ["b1", "b2", "b3"] {
            store.save(thread(id, 1, later), None).await.unwrap();
        }
        assert_eq!(store.load("b2").await.unwrap(), None);
        assert!(store.load("b3").await.unwrap().is_some(), "the newest stays");
        assert_eq!((store.finished(), store.finished_dropped()), ((1, one), 2));
    }

    #[tokio::test]
    async fn finished_calls_that_expire_stop_counting_and_their_order_stays_short() {
        let mut now = 1_000_000;
        let store = MemoryStore::with_clock(ManualClock::new(now));
        // Five generations of 200, each expired when the next is saved.
        for generation in 0..5 {
            for i in 0..200 {
                store.save(thread(&format!("f{generation}-{i}"), 1, now + 1_000), None).await.unwrap();
            }
            store.clock.advance(2_000);
            now += 2_000;
        }
        store.save(thread("last", 1, now + 1_000), None).await.unwrap();
        let (calls, _) = store.finished();
        // Each shard sweeps as saves come to it (200 saves reach all 16).
        assert!(calls <= 201, "expired calls stop counting as they are swept: {calls} counted");
        let order = store.finished.order.lock().unwrap().len() as u64;
        assert!(order <= 2 * calls + 64, "the order of finished calls is compacted: {order} entries for {calls}");
        assert_eq!(store.finished_dropped(), 0, "expired calls are not counted as dropped");
    }
}
