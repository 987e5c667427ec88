//! The store ports and the clock: [`ThreadStore`] (the record's compare-and-set and
//! claims), [`PausedLedger`] (the paused calls counted per owner), [`Notes`] (one-shot
//! notes between requests), and [`Store`], all of them with [`crate::Records`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use crate::{THREAD_FORMAT, Thread};

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
    /// The error for a record (JSON, or packed: [`crate::pack`]) whose format is newer
    /// than [`THREAD_FORMAT`], or `None` when the record is not one: stores call it when
    /// a record does not parse, so that a newer record is reported as such rather than
    /// as corrupt.
    pub fn newer_format(id: &str, record: &[u8]) -> Option<Self> {
        #[derive(serde::Deserialize)]
        struct Probe {
            format: u32,
        }
        let probe: Probe = if crate::packed::is_json(record) {
            serde_json::from_slice(record).ok()?
        } else {
            rmp_serde::from_slice(record).ok()?
        };
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

/// Why a save did not happen: a lost compare-and-set or a failed store, nothing else
/// (exhaustive, so that the engine handles both).
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// Another writer saved a newer version first.
    #[error("thread {0} was changed concurrently")]
    Conflict(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What binds a request's call to a thread (the tool, its arguments' digest, the
/// caller): compared field by field with a thread in memory, or as
/// [`crate::binding_digest`] by a store that compares without reading the record (made
/// once, when first asked).
#[derive(Debug)]
pub struct BoundCall<'a> {
    tool: &'a str,
    args_digest: &'a str,
    principal: Option<&'a str>,
    digest: std::sync::OnceLock<String>,
}

impl<'a> BoundCall<'a> {
    /// The binding of a call of `tool` with arguments digested as `args_digest`, by
    /// `principal`.
    pub fn new(tool: &'a str, args_digest: &'a str, principal: Option<&'a str>) -> Self {
        Self { tool, args_digest, principal, digest: std::sync::OnceLock::new() }
    }

    /// Is `thread` this call's?
    pub fn binds(&self, thread: &Thread) -> bool {
        *thread.tool == *self.tool
            && *thread.args_digest == *self.args_digest
            && thread.principal.as_deref() == self.principal
    }

    /// [`crate::binding_digest`] of the call: what [`Thread::binding_digest`] is for its
    /// thread.
    pub fn digest(&self) -> &str {
        self.digest.get_or_init(|| crate::binding_digest(self.tool, self.args_digest, self.principal))
    }
}

/// A request's attempt to claim a thread's open round in the step that loads it
/// ([`ThreadStore::load_claiming`]).
#[derive(Debug, Clone, Copy)]
pub struct ClaimAttempt<'a> {
    /// The token of the request's `requestState` (the part after the dot): only a
    /// token whose [`crate::proof`] is the open round's claims it.
    pub token: &'a str,
    /// The request's call: only the thread's own call claims it.
    pub binding: &'a BoundCall<'a>,
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
    /// the engine's claim would make it.
    pub claimed: bool,
}

/// Where threads live between rounds: the record's compare-and-set, and the claims a
/// store may make as it loads. Implementations must honour [`Thread::expires_at_ms`]
/// (an expired thread loads as `None`) and make [`ThreadStore::save`] a compare-and-set
/// on [`Thread::version`].
#[async_trait]
pub trait ThreadStore: Send + Sync + 'static {
    /// Can the store serve now? (`/healthz` readiness.)
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Can a save fail because the store is out of reach? A store in the process
    /// cannot: the engine then keeps no copy of an outcome to save again.
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
    /// default only loads (an opt-in hook).
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
}

/// The paused calls counted, per owner and in all, so that limits hold across replicas:
/// what the engine counts a paused call in, operators list (`hitl threads list`,
/// `GET /api/threads`) and the `hitl_paused_calls` gauge reads. A ledger lives beside
/// the threads it counts ([`ThreadStore`] is its supertrait), so that a store may create
/// and finish a paused call in one step.
#[async_trait]
pub trait PausedLedger: ThreadStore {
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

    /// Stops counting thread `id` (a call of `tool`: it finished); no error when it was
    /// not counted.
    async fn uncount_paused(&self, owner: &str, id: &str, tool: &str) -> Result<(), StoreError>;

    /// The paused calls counted now (thread ids), soonest to expire first: from
    /// `offset`, at most `limit`; and how many are counted in all (for operators:
    /// `hitl threads list`, `GET /api/threads`).
    async fn paused(&self, offset: usize, limit: usize) -> Result<(Vec<String>, u64), StoreError>;

    /// How many paused calls are counted now, per tool (a tool counted before and none
    /// now may show 0): the `hitl_paused_calls` gauge.
    async fn paused_by_tool(&self) -> Result<Vec<(String, u64)>, StoreError>;

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

    /// Saves a finished `thread` (compare-and-set on `expected`) and stops counting it
    /// among `owner`'s paused calls. A store may do both in one step.
    async fn save_finished(&self, thread: Thread, expected: u64, owner: Option<&str>) -> Result<(), SaveError> {
        save_finished_in_steps(self, thread, expected, owner).await
    }
}

/// [`PausedLedger::create_paused`] as a count, then a save (the default; stores that
/// override it may fall back to it).
pub async fn create_paused_in_steps<S: PausedLedger + ?Sized>(
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

/// [`PausedLedger::save_finished`] as a save, then an uncount (the default; stores that
/// override it may fall back to it).
pub async fn save_finished_in_steps<S: PausedLedger + ?Sized>(
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

/// Short notes from one request to a later one, on any replica: a value taken once
/// (say, the round a client's dropped push stream left open), and single-use marks
/// (a page link used, a page session signed out).
#[async_trait]
pub trait Notes: Send + Sync + 'static {
    /// Keeps `value` under `key` until `until_ms`, replacing any note there.
    async fn put_note(&self, key: &str, value: &str, until_ms: u64) -> Result<(), StoreError>;

    /// Takes the note under `key`: it is gone after (`None` when missing or past its
    /// time). Two requests never take one note.
    async fn take_note(&self, key: &str) -> Result<Option<String>, StoreError>;

    /// Marks `key` used until `until_ms`: `true` the first time, `false` while it is
    /// marked (single-use links).
    async fn use_once(&self, key: &str, until_ms: u64) -> Result<bool, StoreError>;

    /// Is `key` marked by [`Notes::use_once`] and not past its time? Reads only (a
    /// page session's revocation, checked on every request).
    async fn used(&self, key: &str) -> Result<bool, StoreError>;
}

impl std::fmt::Debug for dyn Notes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notes(..)")
    }
}

/// Every port at once: threads, the paused-call ledger, notes and records, as one
/// backend gives them (`store_from_url` in `hitl-server` returns one). Implemented for
/// every type that implements the four.
pub trait Store: ThreadStore + PausedLedger + Notes + crate::Records {}

impl<T: ThreadStore + PausedLedger + Notes + crate::Records + ?Sized> Store for T {}
