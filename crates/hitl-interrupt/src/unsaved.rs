//! Outcomes this process holds but could not save. A claimed round's run ended (the
//! upstream answered, the agent finished or asked again) while the store was down:
//! dropping the outcome would leave the round claimed with its effect begun, so a
//! resend would wait out the lease and learn that the outcome is unknown, though the
//! call did end and nothing stopped. Such an outcome is kept here instead (at most
//! [`MAX_UNSAVED`], counted in `hitl_unsaved_outcomes`) and saved again with backoff
//! by a task of its own, each attempt a compare-and-set on the claimed version (which
//! holds the claim as a renewal would). A resend on this process waits for it rather
//! than read a store that does not have it yet. Only when the process dies is such an
//! outcome lost: its claim lapses and the round's outcome is unknown, as for any run
//! that died.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hitl_protocol::ErrorObject;

use crate::{Clock, Observer, PausedLedger, PausedLimits, SaveError, StoreError, Thread};

/// The most outcomes one process keeps unsaved; past it an outcome is dropped as
/// before (the call fails with the store's error, and its resend learns the outcome is
/// unknown once the claim lapses).
pub const MAX_UNSAVED: usize = 10_000;

/// The message of a call whose outcome is kept while the store is down, and of a
/// resend that waited a lease's time for it.
pub const OUTCOME_KEPT: &str = "Internal error: the thread store is unavailable; the answers were taken and what they \
     led to is kept by this server until the store is back: send the same answers again to get it";

/// The longest pause between two attempts to save a kept outcome.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The ids of the threads whose outcome this process keeps unsaved.
#[derive(Default)]
pub(crate) struct Unsaved {
    ids: Mutex<HashSet<String>>,
    /// How many: the check on every answer costs no lock while nothing is kept.
    len: AtomicUsize,
}

impl Unsaved {
    /// Does this process keep thread `id`'s outcome unsaved?
    pub(crate) fn holds(&self, id: &str) -> bool {
        self.len.load(Ordering::Acquire) > 0 && self.lock().contains(id)
    }

    /// Keeps `id`, unless [`MAX_UNSAVED`] are kept already.
    fn insert(&self, id: &str) -> bool {
        let mut ids = self.lock();
        if ids.len() >= MAX_UNSAVED {
            return false;
        }
        ids.insert(id.to_owned());
        self.counted(ids.len());
        true
    }

    fn remove(&self, id: &str) {
        let mut ids = self.lock();
        ids.remove(id);
        self.counted(ids.len());
    }

    fn counted(&self, len: usize) {
        self.len.store(len, Ordering::Release);
        metrics::gauge!("hitl_unsaved_outcomes").set(len as f64);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.ids.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a kept outcome saves, and what follows its save.
pub(crate) enum Kept {
    /// The call ended: saved finished (and no longer counted as paused).
    Finished,
    /// The next round: saved, counted to its new expiry, and told to the observer.
    NextRound,
}

/// An outcome to save: `thread` compare-and-set on `expected`, until `until_ms` (the
/// stored record's expiry: the store has dropped the call by then).
pub(crate) struct Outcome {
    pub(crate) kind: Kept,
    pub(crate) thread: Thread,
    pub(crate) expected: u64,
    pub(crate) until_ms: u64,
}

/// What saving a kept outcome takes: the store, the clock for its backoff, the observer
/// and limits for what follows a next round's save, and the map of the kept.
pub(crate) struct Saver {
    pub(crate) store: Arc<dyn PausedLedger>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) observer: Option<Arc<dyn Observer>>,
    pub(crate) paused: PausedLimits,
    pub(crate) unsaved: Arc<Unsaved>,
    pub(crate) meters: Arc<crate::meter::Meters>,
}

impl Saver {
    /// Keeps `outcome`, whose save failed with `error`, and saves it again from a task of
    /// its own; `Err(error)` when there is no room or no runtime to keep it.
    pub(crate) fn keep(self, outcome: Outcome, error: StoreError) -> Result<ErrorObject, StoreError> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return Err(error) };
        let id = outcome.thread.id.clone();
        if !self.unsaved.insert(&id) {
            tracing::error!(thread_id = %id, %error, max = MAX_UNSAVED,
                "an outcome could not be saved and too many are kept already: it is dropped");
            return Err(error);
        }
        tracing::warn!(thread_id = %id, %error, "an outcome could not be saved: kept, and saved again when the store is back");
        runtime.spawn(self.save_kept(outcome));
        Ok(ErrorObject::internal(OUTCOME_KEPT))
    }

    /// Saves `outcome` again and again, with backoff, until it is saved, another request
    /// changed the thread, or the stored record expired.
    async fn save_kept(self, outcome: Outcome) {
        let id = outcome.thread.id.clone();
        let mut backoff = Duration::from_millis(50);
        for attempt in 1u64.. {
            self.clock.sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            if self.clock.now_ms() >= outcome.until_ms {
                tracing::error!(thread_id = %id, "a kept outcome is dropped: its call expired before the store was back");
                break;
            }
            let thread = outcome.thread.clone();
            let saved = match outcome.kind {
                Kept::Finished => self.store.save_finished(thread, outcome.expected, thread_owner(&outcome)).await,
                Kept::NextRound => self.store.save(thread, Some(outcome.expected)).await,
            };
            let landed = match saved {
                Ok(()) => true,
                // A save whose reply was lost may have landed: the record says.
                Err(SaveError::Conflict(_)) => match self.store.load(&id).await {
                    Ok(stored) => stored.is_some_and(|s| {
                        s.version == outcome.thread.version && s.last == outcome.thread.last && s.claim().is_none()
                    }),
                    Err(_) => continue,
                },
                Err(SaveError::Store(error)) => {
                    if attempt.is_power_of_two() {
                        tracing::warn!(thread_id = %id, %error, attempt, "a kept outcome could not be saved yet");
                    }
                    continue;
                }
            };
            if landed {
                tracing::info!(thread_id = %id, attempt, "a kept outcome is saved");
                self.after_kept(&outcome).await;
            } else {
                tracing::error!(thread_id = %id, "a kept outcome is dropped: another request changed its call first");
            }
            break;
        }
        self.unsaved.remove(&id);
    }

    /// What follows the save of a next round: it is counted and asked.
    async fn after_kept(&self, outcome: &Outcome) {
        let Kept::NextRound = outcome.kind else { return };
        let thread = &outcome.thread;
        self.meters.round(&thread.tool, crate::meter::Outcome::Paused);
        if let Some(observer) = &self.observer {
            observer.observe(&crate::Event::Asked { thread });
        }
        if let Some(owner) = &thread.owner {
            let limits = self.paused;
            let _ = self.store.count_paused(owner, &thread.id, &thread.tool, thread.expires_at_ms, limits).await;
        }
    }
}

fn thread_owner(outcome: &Outcome) -> Option<&str> {
    outcome.thread.owner.as_deref()
}

#[cfg(test)]
mod tests;
