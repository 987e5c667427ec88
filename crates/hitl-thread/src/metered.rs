//! A store whose operations are timed and whose failures are counted, per operation
//! (`hitl_store_operation_seconds`, `hitl_store_errors_total`), through the `metrics`
//! facade: [`ThreadStore`], [`PausedLedger`] and [`Notes`], as far as the measured store
//! implements them. A compare-and-set that loses is not a failure.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use crate::store::{
    ClaimAttempt, LimitReached, Loaded, Notes, PausedLedger, PausedLimits, SaveError, StoreError, ThreadStore,
};
use crate::thread::Thread;

/// `inner`, measured.
///
/// ```
/// use std::sync::Arc;
/// use hitl_thread::{MemoryStore, MeteredStore, Notes, PausedLedger};
///
/// let memory = Arc::new(MemoryStore::default());
/// let store: Arc<dyn PausedLedger> = Arc::new(MeteredStore::new(memory.clone()));
/// let notes: Arc<dyn Notes> = Arc::new(MeteredStore::new(memory as Arc<dyn Notes>));
/// # let _ = (store, notes);
/// ```
pub struct MeteredStore<S: ?Sized> {
    inner: Arc<S>,
}

impl<S: ?Sized> MeteredStore<S> {
    /// Measures `inner`.
    pub fn new(inner: Arc<S>) -> Self {
        Self { inner }
    }
}

/// An outcome that counts as the store failing.
trait Failure {
    fn failed(&self) -> bool;
}

impl<T> Failure for Result<T, StoreError> {
    fn failed(&self) -> bool {
        self.is_err()
    }
}

impl<T> Failure for Result<T, SaveError> {
    fn failed(&self) -> bool {
        matches!(self, Err(SaveError::Store(_)))
    }
}

/// Store operation `operation` on thread `thread_id` (`""` when it names none), with its
/// span. Debug level: the most frequent span, kept out of the logs' way unless asked for
/// (`hitl serve` exports it with the others when spans go to OTLP). Made before the
/// operation takes the thread, so the id is not copied when the span is off.
fn op(operation: &'static str, thread_id: &str) -> (&'static str, tracing::Span) {
    (operation, tracing::debug_span!("store", operation, thread_id))
}

/// `work`, store operation `operation`, in `span`, timed and counted.
async fn timed<R: Failure>((operation, span): (&'static str, tracing::Span), work: impl Future<Output = R>) -> R {
    let started = Instant::now();
    let outcome = tracing::Instrument::instrument(work, span).await;
    metrics::histogram!("hitl_store_operation_seconds", "operation" => operation)
        .record(started.elapsed().as_secs_f64());
    if outcome.failed() {
        metrics::counter!("hitl_store_errors_total", "operation" => operation).increment(1);
    }
    outcome
}

#[async_trait]
impl<S: ThreadStore + ?Sized> ThreadStore for MeteredStore<S> {
    fn can_be_unreachable(&self) -> bool {
        self.inner.can_be_unreachable()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        timed(op("ping", ""), self.inner.ping()).await
    }

    async fn load(&self, id: &str) -> Result<Option<Thread>, StoreError> {
        timed(op("load", id), self.inner.load(id)).await
    }

    async fn load_claiming(&self, id: &str, attempt: ClaimAttempt<'_>) -> Result<Loaded, StoreError> {
        timed(op("load_claiming", id), self.inner.load_claiming(id, attempt)).await
    }

    async fn release_claim(&self, id: &str, claimed_version: u64) -> Result<bool, StoreError> {
        timed(op("release_claim", id), self.inner.release_claim(id, claimed_version)).await
    }

    async fn save(&self, thread: Thread, expected: Option<u64>) -> Result<(), SaveError> {
        timed(op("save", &thread.id), self.inner.save(thread, expected)).await
    }

    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        timed(op("delete", id), self.inner.delete(id)).await
    }
}

#[async_trait]
impl<S: PausedLedger + ?Sized> PausedLedger for MeteredStore<S> {
    async fn count_paused(
        &self,
        owner: &str,
        id: &str,
        tool: &str,
        until_ms: u64,
        limits: PausedLimits,
    ) -> Result<Result<(), LimitReached>, StoreError> {
        timed(op("count_paused", id), self.inner.count_paused(owner, id, tool, until_ms, limits)).await
    }

    async fn uncount_paused(&self, owner: &str, id: &str, tool: &str) -> Result<(), StoreError> {
        timed(op("uncount_paused", id), self.inner.uncount_paused(owner, id, tool)).await
    }

    async fn paused_by_tool(&self) -> Result<Vec<(String, u64)>, StoreError> {
        timed(op("paused_by_tool", ""), self.inner.paused_by_tool()).await
    }

    async fn paused(&self, offset: usize, limit: usize) -> Result<(Vec<String>, u64), StoreError> {
        timed(op("paused", ""), self.inner.paused(offset, limit)).await
    }

    async fn create_paused(
        &self,
        thread: Thread,
        owner: &str,
        limits: PausedLimits,
    ) -> Result<Result<(), LimitReached>, SaveError> {
        timed(op("create_paused", &thread.id), self.inner.create_paused(thread, owner, limits)).await
    }

    async fn save_finished(&self, thread: Thread, expected: u64, owner: Option<&str>) -> Result<(), SaveError> {
        timed(op("save_finished", &thread.id), self.inner.save_finished(thread, expected, owner)).await
    }
}

#[async_trait]
impl<S: Notes + ?Sized> Notes for MeteredStore<S> {
    async fn put_note(&self, key: &str, value: &str, until_ms: u64) -> Result<(), StoreError> {
        timed(op("put_note", ""), self.inner.put_note(key, value, until_ms)).await
    }

    async fn take_note(&self, key: &str) -> Result<Option<String>, StoreError> {
        timed(op("take_note", ""), self.inner.take_note(key)).await
    }

    async fn use_once(&self, key: &str, until_ms: u64) -> Result<bool, StoreError> {
        timed(op("use_once", ""), self.inner.use_once(key, until_ms)).await
    }

    async fn used(&self, key: &str) -> Result<bool, StoreError> {
        timed(op("used", ""), self.inner.used(key)).await
    }
}
