//! Retries held while a person decides.
//!
//! A call paused for an approval by someone other than the client's user is retried by
//! its client with nothing new to say. Answering each retry at once with the same URL
//! question makes an SDK client spin (the Python SDK gives up after ten identical
//! rounds, in under a second). So a retry of a call whose only open questions are
//! approvals still undecided is *held*: it waits for the decision, at most
//! [`HoldPolicy::hold`], telling a client that asked for progress every
//! [`HoldPolicy::progress_every`] that it is still waiting; only then does it get the
//! question again. A decision stored in this process wakes its held retries at once;
//! one stored on another replica arrives through
//! [`Engine::relay_decisions`](crate::Engine::relay_decisions) and
//! [`Engine::wake`](crate::Engine::wake) (on Redis, pub/sub), and a retry looks at its thread again at each
//! progress tick in case a wake-up was lost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;

use crate::{PageKind, Thread};

/// How retries of calls waiting for an approver are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldPolicy {
    /// How long a retry waits for the decision before it is asked the question again
    /// (`[approvals] hold`; zero: never held).
    pub hold: Duration,
    /// Retries one caller may have held at once; past it a retry is answered at once
    /// (`[approvals] max_held_per_caller`).
    pub max_per_caller: usize,
    /// How often a held retry whose client asked for progress hears that it waits.
    pub progress_every: Duration,
}

impl Default for HoldPolicy {
    fn default() -> Self {
        Self { hold: Duration::from_secs(25), max_per_caller: 8, progress_every: Duration::from_secs(10) }
    }
}

impl HoldPolicy {
    /// Never hold: every retry is answered at once.
    pub fn off() -> Self {
        Self { hold: Duration::ZERO, ..Self::default() }
    }
}

/// Tells the other replicas that a thread's page was answered (publishes its id).
pub type Relay = Arc<dyn Fn(&str) + Send + Sync>;

/// The retries this process holds, by thread and by caller.
#[derive(Default)]
pub(crate) struct Waiting {
    threads: Mutex<HashMap<String, Arc<Notify>>>,
    callers: Mutex<HashMap<String, usize>>,
    relay: OnceLock<Relay>,
}

impl Waiting {
    /// A place for one more held retry of `owner` on `thread_id`: `None` when the
    /// owner holds `max` already.
    fn enter(self: &Arc<Self>, owner: &str, thread_id: &str, max: usize) -> Option<Held> {
        {
            let mut callers = self.callers.lock().unwrap_or_else(|p| p.into_inner());
            let count = callers.entry(owner.to_owned()).or_default();
            if *count >= max {
                return None;
            }
            *count += 1;
        }
        metrics::gauge!("hitl_held_retries").increment(1.0);
        let notify = self
            .threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(thread_id.to_owned())
            .or_insert_with(|| Arc::new(Notify::new()))
            .clone();
        Some(Held { waiting: self.clone(), owner: owner.to_owned(), thread_id: thread_id.to_owned(), notify })
    }

    /// Wakes the retries held on `thread_id` here.
    pub(crate) fn wake(&self, thread_id: &str) {
        if let Some(notify) = self.threads.lock().unwrap_or_else(|p| p.into_inner()).get(thread_id) {
            notify.notify_waiters();
        }
    }

    /// Calls `relay` with the thread's id whenever a page answer is stored in this
    /// process. Set once; later calls are ignored.
    pub(crate) fn relay(&self, relay: Relay) {
        let _ = self.relay.set(relay);
    }

    /// A page answer for `thread_id` was stored here: wake its held retries here and
    /// on the other replicas.
    pub(crate) fn decided(&self, thread_id: &str) {
        self.wake(thread_id);
        if let Some(relay) = self.relay.get() {
            relay(thread_id);
        }
    }

    /// Begins holding a retry of `owner`'s call on `thread_id` as `policy` says, to end
    /// no later than `deadline` (the request's): `None` when it is not to be held.
    pub(crate) fn hold(
        self: &Arc<Self>,
        policy: &HoldPolicy,
        owner: &str,
        thread_id: &str,
        deadline: Option<tokio::time::Instant>,
    ) -> Option<Holding> {
        if policy.hold.is_zero() {
            return None;
        }
        let now = tokio::time::Instant::now();
        let mut until = now + policy.hold;
        if let Some(deadline) = deadline {
            // Leave the request time to answer with the question.
            until = until.min(deadline.checked_sub(Duration::from_millis(500)).unwrap_or(now));
        }
        if until <= now {
            return None;
        }
        let held = self.enter(owner, thread_id, policy.max_per_caller)?;
        let every = policy.progress_every;
        Some(Holding { held, until, next_report: now + every, every, reports: 0 })
    }
}

/// One held retry's place; leaving it (drop) frees the caller's count.
pub(crate) struct Held {
    waiting: Arc<Waiting>,
    owner: String,
    thread_id: String,
    pub(crate) notify: Arc<Notify>,
}

impl Drop for Held {
    fn drop(&mut self) {
        metrics::gauge!("hitl_held_retries").decrement(1.0);
        let mut callers = self.waiting.callers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = callers.get_mut(&self.owner) {
            *count -= 1;
            if *count == 0 {
                callers.remove(&self.owner);
            }
        }
        drop(callers);
        let mut threads = self.waiting.threads.lock().unwrap_or_else(|p| p.into_inner());
        // The map's and this one: no other retry waits on the thread.
        if Arc::strong_count(&self.notify) <= 2 {
            threads.remove(&self.thread_id);
        }
    }
}

/// A retry being held: its place, until when, and its progress reports.
pub(crate) struct Holding {
    pub(crate) held: Held,
    until: tokio::time::Instant,
    next_report: tokio::time::Instant,
    /// How often a progress report is sent.
    every: Duration,
    reports: u32,
}

/// What a held retry's wait ended with.
pub(crate) enum Woken {
    /// A decision may have come (or a tick passed): decide again.
    Look,
    /// The hold is over: answer with the question again.
    Over,
}

/// The approvers `thread`'s open round waits for, when every question of it is an
/// approval no one has decided yet (a round a retry can only wait on).
pub(crate) fn awaited_approvers(thread: &Thread) -> Option<Vec<String>> {
    let round = thread.round()?;
    let mut approvers = Vec::new();
    for question in &round.questions {
        match &question.page {
            Some(page) if page.answer.is_none() => match &page.kind {
                PageKind::Approval { approvers: theirs, .. } => approvers.extend(theirs.iter().cloned()),
                _ => return None,
            },
            _ => return None,
        }
    }
    (!approvers.is_empty()).then_some(approvers)
}

impl Holding {
    /// Waits (with `woken` enabled before the thread was last read, so no decision
    /// is missed) for a decision, the next progress report or the hold's end.
    pub(crate) async fn wait(
        &mut self,
        woken: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
        approvers: &[String],
        progress: Option<&hitl_graph::ProgressFn>,
    ) -> Woken {
        let next = self.until.min(self.next_report);
        if tokio::time::timeout_at(next, woken).await.is_ok() {
            return Woken::Look;
        }
        let now = tokio::time::Instant::now();
        if now >= self.until {
            return Woken::Over;
        }
        if now >= self.next_report {
            self.reports += 1;
            self.next_report = now + self.every;
            if let Some(progress) = progress {
                progress(hitl_graph::Progress {
                    progress: f64::from(self.reports),
                    total: None,
                    message: Some(format!("waiting for approval by {}", approvers.join(", "))),
                    from_step: false,
                });
            }
        }
        Woken::Look
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_holds_at_most_its_share_and_leaving_frees_a_place() {
        let waiting = Arc::new(Waiting::default());
        let first = waiting.enter("principal:alice", "t1", 2).expect("a place");
        let second = waiting.enter("principal:alice", "t2", 2).expect("a place");
        assert!(waiting.enter("principal:alice", "t3", 2).is_none(), "past the share");
        assert!(waiting.enter("principal:bob", "t3", 2).is_some(), "another caller's share is its own");
        drop(first);
        assert!(waiting.enter("principal:alice", "t3", 2).is_some());
        drop(second);
        assert!(
            waiting.threads.lock().unwrap().is_empty(),
            "no thread is waited on: {:?}",
            waiting.threads.lock().unwrap().keys().collect::<Vec<_>>()
        );
        assert!(waiting.callers.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_wake_reaches_every_retry_held_on_the_thread() {
        let waiting = Arc::new(Waiting::default());
        let a = waiting.enter("principal:alice", "t1", 8).unwrap();
        let b = waiting.enter("principal:alice", "t1", 8).unwrap();
        let (wa, wb) = (a.notify.notified(), b.notify.notified());
        tokio::pin!(wa, wb);
        wa.as_mut().enable();
        wb.as_mut().enable();
        waiting.wake("t1");
        tokio::time::timeout(Duration::from_secs(5), async {
            wa.await;
            wb.await
        })
        .await
        .expect("both woken");
    }
}
