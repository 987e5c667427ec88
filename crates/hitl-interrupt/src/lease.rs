//! The lease of a claimed round while its run goes on: the claim renewed every third
//! of the lease, and the effects the run begins marked on the thread, both saved on one
//! version chain ([`Held`]).

use std::sync::Arc;
use std::time::Duration;

use crate::{Claim, Clock, PausedLedger, SaveError, Thread};

/// The claimed thread while its round's run goes on: lease renewals and effect marks
/// both save it, one at a time, each on the version the other left.
pub(crate) struct Held {
    pub(crate) store: Arc<dyn PausedLedger>,
    pub(crate) thread: tokio::sync::Mutex<Thread>,
    pub(crate) round: u32,
    pub(crate) observer: Option<Arc<dyn crate::Observer>>,
    /// The last superstep in which this run began an effect.
    pub(crate) begun_in: std::sync::Mutex<Option<u32>>,
}

impl Held {
    /// Saves the thread changed by `change`, compare-and-set on its current version.
    async fn save(&self, change: impl FnOnce(&mut Thread)) -> Result<(), SaveError> {
        let mut thread = self.thread.lock().await;
        let mut changed = thread.clone();
        change(&mut changed);
        changed.version += 1;
        self.store.save(changed.clone(), Some(thread.version)).await?;
        *thread = changed;
        Ok(())
    }

    /// Runs the agent while renewing the claim's lease every third of it, so a long step
    /// does not let a duplicate take the round over.
    /// `run` is pinned by the caller, so it is kept in one place (not moved into this
    /// future and pinned again). A run that ends at its first poll (one that waits for
    /// nothing, as most rounds' do) takes no renewal: no timer, and the renewal's future
    /// (boxed) is made only for a run that waits.
    pub(crate) async fn run_renewing<F>(
        &self,
        mut run: std::pin::Pin<&mut F>,
        clock: &dyn Clock,
        lease: Duration,
    ) -> F::Output
    where
        F: std::future::Future,
    {
        let first = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match run.as_mut().poll(cx) {
                std::task::Poll::Ready(outcome) => Some(outcome),
                std::task::Poll::Pending => None,
            })
        });
        if let Some(outcome) = first.await {
            return outcome;
        }
        let renew = Box::pin(async {
            loop {
                clock.sleep(lease / 3).await;
                let until = clock.now_ms().saturating_add(lease.as_millis() as u64);
                let renewed = self
                    .save(|thread| {
                        let renewed = thread.take_claim().map(|c| Claim { until_ms: until, ..c });
                        thread.set_claim(renewed);
                    })
                    .await;
                match renewed {
                    // Someone else holds the round now; our outcome will lose its save.
                    Err(SaveError::Conflict(_)) => return,
                    // Try again at the next tick; the lease has time left.
                    Ok(()) | Err(SaveError::Store(_)) => {}
                }
            }
        });
        match futures_util::future::select(run, renew).await {
            futures_util::future::Either::Left((outcome, _)) => outcome,
            futures_util::future::Either::Right(((), run)) => run.await,
        }
    }
}

/// Marks the effects a run begins on its held thread.
pub(crate) struct Marks(pub(crate) Arc<Held>);

impl hitl_graph::Effects for Marks {
    fn begin(&self, step: &str, superstep: u32) -> futures_util::future::BoxFuture<'static, Result<(), String>> {
        let held = self.0.clone();
        let step = step.to_owned();
        Box::pin(async move {
            let round = held.round;
            // The latest: a checkpoint past it holds every effect this run began.
            {
                let mut begun_in = held.begun_in.lock().unwrap_or_else(|p| p.into_inner());
                *begun_in = Some(begun_in.map_or(superstep, |s| s.max(superstep)));
            }
            if held.thread.lock().await.paused().is_some_and(|p| p.begun && p.round.n == round) {
                return Ok(());
            }
            let mark = |thread: &mut Thread| {
                if let Some(paused) = thread.paused_mut() {
                    paused.begun = true;
                }
            };
            match held.save(mark).await {
                Ok(()) => {
                    if let Some(observer) = &held.observer {
                        let thread = held.thread.lock().await;
                        let (thread_id, tool, principal) = (&thread.id, &thread.tool, thread.principal.as_deref());
                        observer.observe(&crate::Event::Began { thread_id, tool, principal, step: &step });
                    }
                    Ok(())
                }
                Err(SaveError::Conflict(_)) => Err("another request took this round over, so it acts there".into()),
                Err(SaveError::Store(e)) => Err(format!("the call could not be recorded before it began: {e}")),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ManualClock, MemoryStore};

    /// A held thread its store does not have: a renewal's save of it conflicts.
    fn held() -> Held {
        Held {
            store: Arc::new(MemoryStore::default()),
            thread: tokio::sync::Mutex::new(crate::update::tests::thread(1)),
            round: 1,
            observer: None,
            begun_in: std::sync::Mutex::new(None),
        }
    }

    /// Pending `n` times (waking itself), then `out`.
    fn pending(mut n: u32, out: u32) -> impl std::future::Future<Output = u32> {
        std::future::poll_fn(move |cx| {
            if n == 0 {
                return std::task::Poll::Ready(out);
            }
            n -= 1;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        })
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    #[test]
    fn a_run_that_waits_for_nothing_takes_no_renewal_timer() {
        let (held, clock) = (held(), ManualClock::new(0));
        let run = std::pin::pin!(pending(0, 7));
        assert_eq!(block_on(held.run_renewing(run, &clock, Duration::from_secs(30))), 7);
        assert_eq!(clock.now_ms(), 0, "no sleep was asked for");
    }

    #[test]
    fn a_run_that_waits_is_renewed_and_still_ends() {
        let (held, clock) = (held(), ManualClock::new(0));
        let run = std::pin::pin!(pending(3, 9));
        assert_eq!(block_on(held.run_renewing(run, &clock, Duration::from_secs(30))), 9);
        assert_eq!(clock.now_ms(), 10_000, "one renewal waited a third of the lease");
    }
}
