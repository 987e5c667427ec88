//! The subscriptions held with one upstream, counted by session and URI (what
//! `subscriptions.rs` tells the upstream follows from these counts).

use std::collections::{BTreeSet, HashMap};

use tokio::sync::watch;

use crate::Era;
use crate::sessions::Lease;

/// The subscriptions held with one upstream, by session and URI.
#[derive(Debug)]
pub(crate) struct Subscribed {
    held: std::sync::Mutex<HashMap<(Option<String>, String), Held>>,
    /// The URIs of the 2026-07-28 `subscriptions/listen` stream.
    pub(crate) uris: watch::Sender<BTreeSet<String>>,
}

impl Default for Subscribed {
    fn default() -> Self {
        Self { held: std::sync::Mutex::default(), uris: watch::channel(BTreeSet::new()).0 }
    }
}

/// One subscription: how many hold it, the era it was made in, and the hold on the
/// caller's session that keeps it open meanwhile.
pub(crate) struct Held {
    count: usize,
    pub(crate) era: Era,
    _lease: Option<Lease>,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held").field("count", &self.count).field("era", &self.era).finish()
    }
}

impl Subscribed {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Option<String>, String), Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many subscriptions it holds (each session and URI once).
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Counts one more holder of a subscription made already; `false` when there is none.
    pub(crate) fn join(&self, session: &Option<String>, uri: &str) -> bool {
        match self.lock().get_mut(&(session.clone(), uri.to_owned())) {
            Some(held) => {
                held.count += 1;
                true
            }
            None => false,
        }
    }

    /// Keeps a subscription just made (or counts one more holder, when another request
    /// made it meanwhile; its lease is then dropped). Whether it is new.
    pub(crate) fn keep(&self, session: Option<String>, uri: &str, era: Era, lease: Option<Lease>) -> bool {
        let mut held = self.lock();
        match held.get_mut(&(session.clone(), uri.to_owned())) {
            Some(known) => {
                known.count += 1;
                false
            }
            None => {
                held.insert((session, uri.to_owned()), Held { count: 1, era, _lease: lease });
                true
            }
        }
    }

    /// One holder fewer; the subscription itself once the last is gone.
    pub(crate) fn release(&self, session: Option<&str>, uri: &str) -> Option<Held> {
        let mut held = self.lock();
        let key = (session.map(str::to_owned), uri.to_owned());
        let known = held.get_mut(&key)?;
        known.count -= 1;
        if known.count == 0 { held.remove(&key) } else { None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscription_is_made_once_per_session_and_uri_and_ends_with_its_last_holder() {
        let subscribed = Subscribed::default();
        let era = Era::Legacy { version: "2025-11-25".into(), session: Some("s1".into()) };
        let s1 = Some("s1".to_owned());
        assert!(!subscribed.join(&s1, "demo://a"), "none yet: it is sent upstream");
        assert!(subscribed.keep(s1.clone(), "demo://a", era.clone(), None));
        assert!(subscribed.join(&s1, "demo://a"), "a second holder is only counted");
        assert!(!subscribed.keep(s1.clone(), "demo://a", era.clone(), None), "made twice at once: counted");
        assert!(!subscribed.join(&None, "demo://a"), "another session has its own");
        assert!(subscribed.release(Some("s1"), "demo://a").is_none());
        assert!(subscribed.release(Some("s1"), "demo://a").is_none());
        let last = subscribed.release(Some("s1"), "demo://a").expect("the last holder ends it");
        assert_eq!(last.era, era);
        assert!(subscribed.release(Some("s1"), "demo://a").is_none(), "nothing left to end");
        assert_eq!(subscribed.len(), 0);
    }
}
