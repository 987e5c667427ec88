//! Sign-in throttling: after [`FAILURES`] failed sign-ins from one client address within
//! [`WINDOW`], that address's sign-ins are refused until the oldest failure is older
//! than the window, so a token can't be guessed at speed. Kept by each replica.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed sign-ins one address may make within [`WINDOW`].
pub(crate) const FAILURES: usize = 10;
/// How far back failures count.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// Addresses kept before the idle ones are dropped.
const KEPT: usize = 10_000;

/// Recent failed sign-ins, by address.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    failures: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
}

impl Throttle {
    /// How long `address` must wait before it may try again at `now`, if it must.
    pub(crate) fn wait(&self, address: IpAddr, now: Instant) -> Option<Duration> {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let times = failures.get_mut(&address)?;
        forget(times, now);
        if times.len() < FAILURES {
            return None;
        }
        let oldest = *times.front()?;
        Some(WINDOW.saturating_sub(now.saturating_duration_since(oldest)))
    }

    /// Counts a failed sign-in from `address` at `now`.
    pub(crate) fn failed(&self, address: IpAddr, now: Instant) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() >= KEPT {
            failures.retain(|_, times| {
                forget(times, now);
                !times.is_empty()
            });
        }
        let times = failures.entry(address).or_default();
        forget(times, now);
        times.push_back(now);
        // Never more than the limit needs: the newest ones.
        while times.len() > FAILURES {
            times.pop_front();
        }
    }
}

/// Drops failures older than the window.
fn forget(times: &mut VecDeque<Instant>, now: Instant) {
    while times.front().is_some_and(|t| now.saturating_duration_since(*t) >= WINDOW) {
        times.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_failures_in_a_minute_hold_an_address_back_until_the_first_is_a_minute_old() {
        let throttle = Throttle::default();
        let (here, there): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        let start = Instant::now();
        for n in 0..FAILURES as u64 {
            assert_eq!(throttle.wait(here, start + Duration::from_secs(n)), None, "failure {n} is allowed");
            throttle.failed(here, start + Duration::from_secs(n));
        }
        let now = start + Duration::from_secs(10);
        assert_eq!(throttle.wait(here, now), Some(Duration::from_secs(50)), "the eleventh waits");
        assert_eq!(throttle.wait(there, now), None, "another address does not");
        assert_eq!(throttle.wait(here, start + WINDOW), None, "the first failure has aged out");
        throttle.failed(here, start + WINDOW);
        assert_eq!(throttle.wait(here, start + WINDOW), Some(Duration::from_secs(1)), "ten in the window again");
    }
}
