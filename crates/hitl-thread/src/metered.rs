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
    /// Each registered at its first record (the program installs its recorder before it
    /// serves), not looked up in the recorder's registry at every one.
    handles: Handles,
}

impl<S: ?Sized> MeteredStore<S> {
    /// Measures `inner`.
    pub fn new(inner: Arc<S>) -> Self {
        Self { inner, handles: Handles::default() }
    }

    /// `work`, store operation `operation`, in `span`, timed and counted.
    async fn timed<R: Failure>(&self, (operation, span): (Op, tracing::Span), work: impl Future<Output = R>) -> R {
        let started = Instant::now();
        let outcome = tracing::Instrument::instrument(work, span).await;
        let seconds = &self.handles.seconds[operation as usize];
        seconds.get_or_init(|| operation.seconds()).record(started.elapsed().as_secs_f64());
        if outcome.failed() {
            self.handles.errors[operation as usize].get_or_init(|| operation.errors()).increment(1);
        }
        outcome
    }
}

/// Each operation's handles, by [`Op`] (`op as usize` is its index): a series appears
/// at its first record, as it did when each record looked its handle up.
struct Handles {
    seconds: [std::sync::OnceLock<metrics::Histogram>; Op::COUNT],
    errors: [std::sync::OnceLock<metrics::Counter>; Op::COUNT],
}

impl Default for Handles {
    fn default() -> Self {
        Self {
            seconds: std::array::from_fn(|_| std::sync::OnceLock::new()),
            errors: std::array::from_fn(|_| std::sync::OnceLock::new()),
        }
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

/// The store's operations, each with its metric keys made once, as statics (the label
/// is a literal): a record looks its handle up without building a key.
macro_rules! operations {
    ($($op:ident => $label:literal),* $(,)?) => {
        #[derive(Clone, Copy)]
        enum Op {
            $($op),*
        }

        impl Op {
            /// How many operations there are.
            const COUNT: usize = [$(Self::$op),*].len();

            fn as_str(self) -> &'static str {
                match self {
                    $(Self::$op => $label),*
                }
            }

            /// `hitl_store_operation_seconds{operation}`.
            fn seconds(self) -> metrics::Histogram {
                match self {
                    $(Self::$op => metrics::histogram!("hitl_store_operation_seconds", "operation" => $label)),*
                }
            }

            /// `hitl_store_errors_total{operation}`.
            fn errors(self) -> metrics::Counter {
                match self {
                    $(Self::$op => metrics::counter!("hitl_store_errors_total", "operation" => $label)),*
                }
            }
        }
    };
}

operations! {
    Ping => "ping",
    Load => "load",
    LoadClaiming => "load_claiming",
    ReleaseClaim => "release_claim",
    Save => "save",
    Delete => "delete",
    CountPaused => "count_paused",
    UncountPaused => "uncount_paused",
    PausedByTool => "paused_by_tool",
    Paused => "paused",
    CreatePaused => "create_paused",
    SaveFinished => "save_finished",
    PutNote => "put_note",
    TakeNote => "take_note",
    UseOnce => "use_once",
    Used => "used",
}

/// Store operation `operation` on thread `thread_id` (`""` when it names none), with its
/// span. Debug level: the most frequent span, kept out of the logs' way unless asked for
/// (`hitl serve` exports it with the others when spans go to OTLP). Made before the
/// operation takes the thread, so the id is not copied when the span is off.
fn op(operation: Op, thread_id: &str) -> (Op, tracing::Span) {
    (operation, tracing::debug_span!("store", operation = operation.as_str(), thread_id))
}

#[async_trait]
impl<S: ThreadStore + ?Sized> ThreadStore for MeteredStore<S> {
    fn can_be_unreachable(&self) -> bool {
        self.inner.can_be_unreachable()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.timed(op(Op::Ping, ""), self.inner.ping()).await
    }

    async fn load(&self, id: &str) -> Result<Option<Thread>, StoreError> {
        self.timed(op(Op::Load, id), self.inner.load(id)).await
    }

    async fn load_claiming(&self, id: &str, attempt: ClaimAttempt<'_>) -> Result<Loaded, StoreError> {
        self.timed(op(Op::LoadClaiming, id), self.inner.load_claiming(id, attempt)).await
    }

    async fn release_claim(&self, id: &str, claimed_version: u64) -> Result<bool, StoreError> {
        self.timed(op(Op::ReleaseClaim, id), self.inner.release_claim(id, claimed_version)).await
    }

    async fn save(&self, thread: Thread, expected: Option<u64>) -> Result<(), SaveError> {
        self.timed(op(Op::Save, &thread.id), self.inner.save(thread, expected)).await
    }

    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        self.timed(op(Op::Delete, id), self.inner.delete(id)).await
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
        self.timed(op(Op::CountPaused, id), self.inner.count_paused(owner, id, tool, until_ms, limits)).await
    }

    async fn uncount_paused(&self, owner: &str, id: &str, tool: &str) -> Result<(), StoreError> {
        self.timed(op(Op::UncountPaused, id), self.inner.uncount_paused(owner, id, tool)).await
    }

    async fn paused_by_tool(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.timed(op(Op::PausedByTool, ""), self.inner.paused_by_tool()).await
    }

    async fn paused(&self, offset: usize, limit: usize) -> Result<(Vec<String>, u64), StoreError> {
        self.timed(op(Op::Paused, ""), self.inner.paused(offset, limit)).await
    }

    async fn create_paused(
        &self,
        thread: Thread,
        owner: &str,
        limits: PausedLimits,
    ) -> Result<Result<(), LimitReached>, SaveError> {
        self.timed(op(Op::CreatePaused, &thread.id), self.inner.create_paused(thread, owner, limits)).await
    }

    async fn save_finished(&self, thread: Thread, expected: u64, owner: Option<&str>) -> Result<(), SaveError> {
        self.timed(op(Op::SaveFinished, &thread.id), self.inner.save_finished(thread, expected, owner)).await
    }
}

#[async_trait]
impl<S: Notes + ?Sized> Notes for MeteredStore<S> {
    async fn put_note(&self, key: &str, value: &str, until_ms: u64) -> Result<(), StoreError> {
        self.timed(op(Op::PutNote, ""), self.inner.put_note(key, value, until_ms)).await
    }

    async fn take_note(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.timed(op(Op::TakeNote, ""), self.inner.take_note(key)).await
    }

    async fn use_once(&self, key: &str, until_ms: u64) -> Result<bool, StoreError> {
        self.timed(op(Op::UseOnce, ""), self.inner.use_once(key, until_ms)).await
    }

    async fn used(&self, key: &str) -> Result<bool, StoreError> {
        self.timed(op(Op::Used, ""), self.inner.used(key)).await
    }
}
