//! The paused calls this store wrote lately, as it wrote them, so that an answer that
//! reaches the replica which paused its call claims the round without Redis sending the
//! record back and this process unpacking it (`CLAIM_KNOWN` in the crate root).
//!
//! Redis stays the truth: a kept thread is used only when Redis still holds it at the
//! version kept, checked in the script that claims. A version names one record: every
//! write of a record is a compare-and-set that moves the version past the one expected
//! (the engine's saves, the claims and their release), so a record another replica
//! wrote, or one Redis lost, is read again. Bounded ([`RECENT_PAUSED`]), oldest out
//! first: a call answered after more were paused here is read from Redis as before.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use hitl_thread::Thread;

use crate::Fast;

/// How many paused calls a store keeps as it wrote them: about 3 KB each (23 MB more
/// resident memory for `choose_region` with all kept), beside a Redis that holds them.
pub const RECENT_PAUSED: usize = 8_192;

#[derive(Default)]
pub(crate) struct Recent {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    threads: HashMap<Arc<str>, Thread, Fast>,
    /// Ids in the order kept, with the version kept: a later keep of the same id (a
    /// second round) is not dropped for the first one's turn.
    order: VecDeque<(Arc<str>, u64)>,
}

impl Recent {
    /// Keeps `thread` (a paused call with a round to claim, just written at its
    /// version), the oldest kept going out past [`RECENT_PAUSED`].
    pub(crate) fn keep(&self, thread: Thread) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.order.push_back((thread.id.clone(), thread.version));
        inner.threads.insert(thread.id.clone(), thread);
        while inner.order.len() > RECENT_PAUSED {
            let Some((id, version)) = inner.order.pop_front() else { break };
            if inner.threads.get(&id).is_some_and(|kept| kept.version == version) {
                inner.threads.remove(&id);
            }
        }
    }

    /// The thread kept under `id`, if any.
    pub(crate) fn get(&self, id: &str) -> Option<Thread> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).threads.get(id).cloned()
    }

    /// Drops what is kept under `id`: its record changed, or is about to.
    pub(crate) fn forget(&self, id: &str) {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).threads.remove(id);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).threads.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(id: &str, version: u64) -> Thread {
        hitl_thread::conformance::thread(id, version, u64::MAX)
    }

    #[test]
    fn the_oldest_go_first_and_a_later_round_keeps_its_place() {
        let recent = Recent::default();
        recent.keep(thread("first", 1));
        for n in 0..RECENT_PAUSED - 1 {
            recent.keep(thread(&format!("t{n}"), 1));
        }
        assert_eq!(recent.len(), RECENT_PAUSED);
        // The first call's second round, kept again at its new version: its first
        // round's turn comes and goes without dropping it.
        recent.keep(thread("first", 3));
        assert_eq!(recent.len(), RECENT_PAUSED);
        assert_eq!(recent.get("first").map(|t| t.version), Some(3));
        recent.keep(thread("last", 1));
        assert_eq!(recent.len(), RECENT_PAUSED, "never more than the bound");
        assert!(recent.get("t0").is_none(), "the oldest went");
        assert_eq!(recent.get("first").map(|t| t.version), Some(3), "not the second round");
        recent.forget("first");
        assert!(recent.get("first").is_none());
        assert_eq!(recent.len(), RECENT_PAUSED - 1);
    }
}
