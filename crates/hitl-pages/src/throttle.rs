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
        let times = failures.get_mut(&client(address))?;
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
        let address = client(address);
        if failures.len() >= KEPT && !failures.contains_key(&address) {
            failures.retain(|_, times| {
                forget(times, now);
                !times.is_empty()
            });
            if failures.len() >= KEPT {
                // Full of addresses failing now: the table stays bounded.
                return;
            }
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

/// The client an address stands for: an IPv6 address by its /64 (one host is given a
/// whole /64 to pick addresses from), an IPv4 address as it is.
fn client(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1)))
        }
        IpAddr::V6(v6) => IpAddr::V4(v6.to_ipv4_mapped().unwrap_or(std::net::Ipv4Addr::UNSPECIFIED)),
        v4 => v4,
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

    #[test]
    fn an_ipv6_host_is_one_client_whatever_address_of_its_64_it_picks() {
        let throttle = Throttle::default();
        let start = Instant::now();
        for n in 0..FAILURES as u16 {
            let address: IpAddr = format!("2001:db8:1:2::{n:x}").parse().unwrap();
            throttle.failed(address, start);
        }
        let another: IpAddr = "2001:db8:1:2:ffff::1".parse().unwrap();
        assert!(throttle.wait(another, start).is_some(), "the same /64");
        let elsewhere: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(throttle.wait(elsewhere, start), None, "another /64");
    }
}
