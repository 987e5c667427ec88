//! The thread store port, the clock, and the in-memory store.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use crate::{Claim, THREAD_FORMAT, Thread};

/// A boxed future, as [`Clock::sleep`] returns.
pub type Sleep = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Time: milliseconds since the Unix epoch, and waiting.
pub trait Clock: Send + Sync + 'static {
    /// Now.
    fn now_ms(&self) -> u64;

    /// Waits `duration` (a request waiting for another one that resumes the same
    /// round polls the store in between).
    fn sleep(&self, duration: Duration) -> Sleep;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
    }

    /// A tokio timer: the engine runs on tokio.
    fn sleep(&self, duration: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A clock tests move by hand, so that expiry needs no sleeping.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock at `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self(AtomicU64::new(now_ms))
    }

    /// Moves the clock forward.
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Moves the clock by `duration` and yields once, so waiting costs no real time.
    fn sleep(&self, duration: Duration) -> Sleep {
        self.advance(duration.as_millis() as u64);
        let mut yielded = false;
        Box::pin(std::future::poll_fn(move |cx| {
            if yielded {
                std::task::Poll::Ready(())
            } else {
                yielded = true;
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
        }))
    }
}

impl<C: Clock> Clock for std::sync::Arc<C> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        (**self).sleep(duration)
    }
}

/// A store failure (not a lost race: see [`SaveError::Conflict`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend could not be reached or failed.
    #[error("thread store unavailable: {0}")]
    Unavailable(String),
    /// A stored record could not be read.
    #[error("thread record {id} is corrupt: {reason}")]
    Corrupt {
        /// The thread.
        id: String,
        /// Why.
        reason: String,
    },
    /// A record written by a newer build, in a format this one does not know: left as
    /// it is (a rolling upgrade's newer replica can still resume it).
    #[error("thread record {id} has format {format}, newer than this build's {THREAD_FORMAT}")]
    NewerFormat {
        /// The thread.
        id: String,
        /// The record's format.
        format: u32,
    },
}

impl StoreError {
    /// The error for a record whose format is newer than [`THREAD_FORMAT`], or `None`
    /// when the record is not one: stores call it when a record does not parse, so that
    /// a newer record is reported as such rather than as corrupt.
    pub fn newer_format(id: &str, json: &[u8]) -> Option<Self> {
        #[derive(serde::Deserialize)]
        struct Probe {
            format: u32,
        }
        let probe: Probe = serde_json::from_slice(json).ok()?;
        (probe.format > THREAD_FORMAT).then(|| Self::NewerFormat { id: id.to_owned(), format: probe.format })
    }
}

/// How many paused calls the store may hold: per owner (the caller's principal, or its
/// address) and in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PausedLimits {
    /// Paused calls of one owner.
    pub per_owner: u64,
    /// Paused calls of every owner together.
    pub total: u64,
}

impl Default for PausedLimits {
    fn default() -> Self {
        Self { per_owner: 1_000, total: 1_000_000 }
    }
}

/// Which limit of [`PausedLimits`] a new paused call would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitReached {
    /// The owner's.
    PerOwner,
    /// The store's.
    Total,
}

/// Why a save did not happen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SaveError {
    /// Another writer saved a newer version first.
    #[error("thread {0} was changed concurrently")]
    Conflict(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A request's attempt to claim a thread's open round in the step that loads it
/// ([`ThreadStore::load_claiming`]).
#[derive(Debug, Clone, Copy)]
pub struct ClaimAttempt<'a> {
    /// The token of the request's `requestState` (the part after the dot): only a
    /// token whose [`crate::state::proof`] is the open round's claims it.
    pub token: &'a str,
    /// [`crate::binding_digest`] of the request's call: only the thread's own call claims
    /// it ([`Thread::binding_digest`]).
    pub binding: &'a str,
    /// Now (ms since the epoch): a claim that lasts until then or before has lapsed.
    pub now_ms: u64,
    /// Until when the claim holds (now plus the lease).
    pub until_ms: u64,
}

/// A thread loaded by [`ThreadStore::load_claiming`]: as it was before any claim made
/// in that step, and whether one was.
#[derive(Debug)]
pub struct Loaded {
    /// The thread as it was, unless it is missing or expired.
    pub thread: Option<Thread>,
    /// The store claimed its open round: it now holds the thread with
    /// `Claim { round, until_ms }` and its version one past the one loaded, as
    /// [`crate::round::decide`] would make it.
    pub claimed: bool,
}

/// Where threads live between rounds. Implementations must honour
/// [`Thread::expires_at_ms`] (an expired thread loads as `None`) and make
/// [`ThreadStore::save`] a compare-and-set on [`Thread::version`].
#[async_trait]
pub trait ThreadStore: Send + Sync + 'static {
    /// Can the store serve now? (`/healthz` readiness.)
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Can a save fail because the store is out of reach? A store in the process
    /// cannot: the engine then keeps no copy of an outcome to save again
    /// (see [`crate::MAX_UNSAVED`]).
    fn can_be_unreachable(&self) -> bool {
        true
    }

    /// The thread, unless it is missing or expired.
    async fn load(&self, id: &str) -> Result<Option<Thread>, StoreError>;

    /// Loads thread `id` and, in the same step, claims its open round when
    /// [`Thread::claimable`] names it, `attempt.token` proves it, `attempt.binding` is
    /// the thread's and no live claim holds it: one step where a load and a
    /// compare-and-set save would take two. A claim the request then does not use (its
    /// answers are refused) is given back with [`ThreadStore::release_claim`]. The
    /// default only loads.
    async fn load_claiming(&self, id: &str, attempt: ClaimAttempt<'_>) -> Result<Loaded, StoreError> {
        let _ = attempt;
        Ok(Loaded { thread: self.load(id).await?, claimed: false })
    }

    /// Gives back the claim [`ThreadStore::load_claiming`] made, if the thread is still
    /// at `claimed_version` (the version the claim gave it): the claim is removed and
    /// the version bumped past it. `Ok(false)` when the thread changed since.
    async fn release_claim(&self, id: &str, claimed_version: u64) -> Result<bool, StoreError> {
        let _ = (id, claimed_version);
        Ok(false)
    }

    /// Writes `thread` if the stored version is `expected` (`None`: no live record).
    /// Taken by value so a store that keeps threads in memory keeps it without a copy.
    async fn save(&self, thread: Thread, expected: Option<u64>) -> Result<(), SaveError>;

    /// Removes the thread (no error when it is gone).
    async fn delete(&self, id: &str) -> Result<(), StoreError>;

    /// Counts thread `id` (a call of `tool`) among `owner`'s paused calls until
    /// `until_ms`, unless a new one would pass `limits`. A thread already counted is
    /// never refused: its time is moved to `until_ms` (a later round). Entries past their
    /// time no longer count.
    async fn count_paused(
        &self,
        owner: &str,
        id: &str,
        tool: &str,
        until_ms: u64,
        limits: PausedLimits,
    ) -> Result<Result<(), LimitReached>, StoreError>;

    /// The paused calls counted now (thread ids), soonest to expire first: from
    /// `offset`, at most `limit`; and how many are counted in all (for operators:
    /// `hitl threads list`, `GET /api/threads`).
    async fn paused(&self, offset: usize, limit: usize) -> Result<(Vec<String>, u64), StoreError>;

    /// How many paused calls are counted now, per tool (a tool counted before and none
    /// now may show 0): the `hitl_paused_calls` gauge.
    async fn paused_by_tool(&self) -> Result<Vec<(String, u64)>, StoreError>;

    /// Stops counting thread `id` (a call of `tool`: it finished); no error when it was
    /// not counted.
    async fn uncount_paused(&self, owner: &str, id: &str, tool: &str) -> Result<(), StoreError>;

    /// Stores a new paused `thread` counted among `owner`'s, unless that would pass
    /// `limits` (then nothing is stored or counted). A store may do both in one step.
    async fn create_paused(
        &self,
        thread: Thread,
        owner: &str,
        limits: PausedLimits,
    ) -> Result<Result<(), LimitReached>, SaveError> {
        create_paused_in_steps(self, thread, owner, limits).await
    }

    /// Keeps `value` under `key` until `until_ms`, replacing any note there: a short
    /// note from one request to a later one, on any replica (say, the round a client's
    /// dropped stream left open).
    async fn put_note(&self, key: &str, value: &str, until_ms: u64) -> Result<(), StoreError>;

    /// Takes the note under `key`: it is gone after (`None` when missing or past its
    /// time). Two requests never take one note.
    async fn take_note(&self, key: &str) -> Result<Option<String>, StoreError>;

    /// Saves a finished `thread` (compare-and-set on `expected`) and stops counting it
    /// among `owner`'s paused calls. A store may do both in one step.
    async fn save_finished(&self, thread: Thread, expected: u64, owner: Option<&str>) -> Result<(), SaveError> {
        save_finished_in_steps(self, thread, expected, owner).await
    }
}

/// [`ThreadStore::create_paused`] as a count, then a save (the default; stores that
/// override it may fall back to it).
pub async fn create_paused_in_steps<S: ThreadStore + ?Sized>(
    store: &S,
    thread: Thread,
    owner: &str,
    limits: PausedLimits,
) -> Result<Result<(), LimitReached>, SaveError> {
    if let Err(limit) = store.count_paused(owner, &thread.id, &thread.tool, thread.expires_at_ms, limits).await? {
        return Ok(Err(limit));
    }
    let (id, tool) = (thread.id.clone(), thread.tool.clone());
    match store.save(thread, None).await {
        Ok(()) => Ok(Ok(())),
        Err(e) => {
            // Best effort: an entry left behind stops counting at its expiry.
            let _ = store.uncount_paused(owner, &id, &tool).await;
            Err(e)
        }
    }
}

/// [`ThreadStore::save_finished`] as a save, then an uncount (the default; stores that
/// override it may fall back to it).
pub async fn save_finished_in_steps<S: ThreadStore + ?Sized>(
    store: &S,
    thread: Thread,
    expected: u64,
    owner: Option<&str>,
) -> Result<(), SaveError> {
    let (id, tool) = (thread.id.clone(), thread.tool.clone());
    store.save(thread, Some(expected)).await?;
    if let Some(owner) = owner {
        // Best effort: an entry left behind stops counting at its expiry.
        let _ = store.uncount_paused(owner, &id, &tool).await;
    }
    Ok(())
}

/// A hasher for maps keyed by what the server made (thread ids, owners, tools): fast
/// and seeded per process. A client never chooses a stored key (a request's thread id
/// is only looked up), so hash flooding is not a concern.
type Fast = foldhash::fast::RandomState;

/// Threads in a process-local map: the default store, and the reference the store
/// conformance tests hold other stores to. Sharded, so concurrent rounds rarely wait on
/// each other's lock; each shard drops expired threads as it goes, from a queue ordered
/// by expiry, so the cost of a save does not grow with the number of paused calls.
/// Threads are kept as their JSON, as a shared store keeps them: several times smaller
/// than the record in memory, and every load is a copy of its own, as from any store.
pub struct MemoryStore<C: Clock = SystemClock> {
    shards: Box<[Mutex<Shard>]>,
    paused: Mutex<Ledger>,
    pub(crate) records: crate::records::KeptRecords,
    /// Notes between requests: value and time.
    notes: Mutex<HashMap<String, (String, u64)>>,
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

/// A thread as the memory store keeps it: its JSON, and beside it what a save compares,
/// the sweep reads and a claim sets without writing the JSON again (the JSON's own
/// version and claim are not read).
struct Stored {
    version: u64,
    expires_at_ms: u64,
    claim: Option<Claim>,
    json: Arc<[u8]>,
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

    fn sweep(&mut self, now: u64) {
        while let Some(Reverse((at, _))) = self.expiry.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((_, id))) = self.expiry.pop() else { break };
            if self.threads.get(&id).is_some_and(|t| t.expires_at_ms <= now) {
                self.threads.remove(&id);
            }
        }
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
            paused: Mutex::new(Ledger::default()),
            records: Default::default(),
            notes: Mutex::default(),
            clock,
            hasher: Fast::default(),
        }
    }

    pub(crate) fn now(&self) -> u64 {
        self.clock.now_ms()
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
    #[cfg(test)]
    pub(crate) fn sizes(&self) -> (usize, usize, u64, usize) {
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

    async fn put_note(&self, key: &str, value: &str, until_ms: u64) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let mut notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
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
        let taken = self.notes.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        Ok(taken.filter(|(_, until)| *until > now).map(|(value, _)| value))
    }

    async fn load(&self, id: &str) -> Result<Option<Thread>, StoreError> {
        let now = self.clock.now_ms();
        let found = self.shard(id).threads.get(id).filter(|t| t.expires_at_ms > now).map(|t| {
            let beside = (t.version, t.claim.clone());
            (t.json.clone(), beside)
        });
        let Some((json, (version, claim))) = found else { return Ok(None) };
        // Parsed outside the shard's lock.
        let corrupt = |e: serde_json::Error| StoreError::Corrupt { id: id.to_owned(), reason: e.to_string() };
        let mut thread: Thread = serde_json::from_slice(&json).map_err(corrupt)?;
        (thread.version, thread.claim) = (version, claim);
        Ok(Some(thread))
    }

    /// The claim is set beside the record, under the shard's lock, if the thread is
    /// still as loaded: no copy of the thread and no JSON written.
    async fn load_claiming(&self, id: &str, attempt: ClaimAttempt<'_>) -> Result<Loaded, StoreError> {
        let thread = self.load(id).await?;
        let claim = thread.as_ref().and_then(|t| {
            let (round, proof) = t.claimable()?;
            let ours = proof == crate::state::proof(attempt.token) && t.binding_digest() == attempt.binding;
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
        // Written outside the shard's lock; the claim is kept beside the JSON.
        let claim = thread.claim.take();
        let mut json = Vec::with_capacity(1024);
        serde_json::to_writer(&mut json, &thread)
            .map_err(|e| StoreError::Corrupt { id: thread.id.clone(), reason: e.to_string() })?;
        let stored = Stored { version: thread.version, expires_at_ms: thread.expires_at_ms, claim, json: json.into() };
        let now = self.clock.now_ms();
        let mut shard = self.shard(&thread.id);
        shard.sweep(now);
        let current = shard.threads.get_key_value(thread.id.as_str()).filter(|(_, t)| t.expires_at_ms > now);
        if current.map(|(_, t)| t.version) != expected {
            return Err(SaveError::Conflict(thread.id));
        }
        // One copy of the id, for the map and the queue.
        let id = current.map_or_else(|| Arc::from(thread.id), |(id, _)| id.clone());
        shard.expiry.push(Reverse((stored.expires_at_ms, id.clone())));
        shard.threads.insert(id, stored);
        shard.compact();
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        self.shard(id).threads.remove(id);
        Ok(())
    }

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

#[cfg(test)]
mod tests {
    use crate::{ManualClock, MemoryStore};

    #[test]
    fn the_memory_store_keeps_threads_and_records_as_every_store_must() {
        let store = MemoryStore::with_clock(ManualClock::new(1_000_000));
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(crate::conformance::run(&store, "t", 1_000_000));
        assert!(rt.block_on(crate::conformance::claims(&store, "u", 1_000_000)), "it claims as it loads");
        rt.block_on(crate::conformance::records(&store, "t", 1_000_000));
    }
}
