//! `[[policy]] rate_limit`: calls per caller and policy over a sliding window (no more
//! than the count in any span of the window's length: the calls admitted in the last
//! minute are kept and counted), in this process's memory or in a store the replicas
//! share.
//!
//! ```
//! use hitl_gateway::limit::RateLimit;
//!
//! let limit: RateLimit = "30/minute".parse().unwrap();
//! assert_eq!((limit.count, limit.window_ms()), (30, 60_000));
//! assert!("30 per minute".parse::<RateLimit>().is_err());
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use async_trait::async_trait;

/// `<count>/<second|minute|hour|day>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct RateLimit {
    /// Calls admitted per window.
    pub count: u64,
    /// The window, in seconds.
    pub per_seconds: u64,
}

impl RateLimit {
    /// The window's length (ms).
    pub fn window_ms(&self) -> u64 {
        self.per_seconds * 1000
    }
}

impl std::str::FromStr for RateLimit {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let why = || format!("{text:?}: give <count>/second, /minute, /hour or /day (\"30/minute\")");
        let (count, per) = text.split_once('/').ok_or_else(why)?;
        let count: u64 = count.trim().parse().map_err(|_| why())?;
        let per_seconds = match per.trim() {
            "second" => 1,
            "minute" => 60,
            "hour" => 3_600,
            "day" => 86_400,
            _ => return Err(why()),
        };
        if count == 0 {
            return Err(format!("{text:?}: a limit of 0 admits nothing; use action = \"deny\""));
        }
        Ok(Self { count, per_seconds })
    }
}

impl TryFrom<String> for RateLimit {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl std::fmt::Display for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per = match self.per_seconds {
            1 => "second",
            60 => "minute",
            3_600 => "hour",
            _ => "day",
        };
        write!(f, "{}/{per}", self.count)
    }
}

/// Where calls are counted against rate limits.
#[async_trait]
pub trait Limiter: Send + Sync {
    /// Counts a call under `key` at `now_ms`, unless `limit.count` calls were counted
    /// under it in the window before: then `Ok(Some(ms))` until the oldest of them
    /// leaves the window, and nothing is counted. `Err` when the count cannot be read
    /// (the call is refused).
    async fn admit(&self, key: &str, limit: RateLimit, now_ms: u64) -> Result<Option<u64>, String>;
}

/// Counts in this process's memory (one replica, or a memory store).
#[derive(Default)]
pub struct MemoryLimiter {
    /// By key: when each call in the window was admitted (ms), oldest first.
    windows: Mutex<HashMap<String, VecDeque<u64>>>,
}

#[async_trait]
impl Limiter for MemoryLimiter {
    async fn admit(&self, key: &str, limit: RateLimit, now_ms: u64) -> Result<Option<u64>, String> {
        let window = limit.window_ms();
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if windows.len() > 100_000 {
            // Keys with no call left in their window count nothing: dropped before the
            // map grows further (a window is at most a day).
            windows.retain(|_, admitted| admitted.back().is_some_and(|last| last + 86_400_000 > now_ms));
        }
        let admitted = windows.entry(key.to_owned()).or_default();
        while admitted.front().is_some_and(|first| first + window <= now_ms) {
            admitted.pop_front();
        }
        if admitted.len() as u64 >= limit.count {
            let oldest = admitted.front().copied().unwrap_or(now_ms);
            return Ok(Some((oldest + window).saturating_sub(now_ms).max(1)));
        }
        admitted.push_back(now_ms);
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_span_of_the_window_admits_more_than_the_count() {
        let limiter = MemoryLimiter::default();
        let limit: RateLimit = "2/minute".parse().unwrap();
        let at = 120_000 + 59_000;
        assert_eq!(limiter.admit("k", limit, at).await, Ok(None));
        assert_eq!(limiter.admit("k", limit, at + 500).await, Ok(None));
        // Past the minute on the clock, but within a minute of the first two.
        assert_eq!(limiter.admit("k", limit, at + 2_000).await, Ok(Some(58_000)), "refused, not counted");
        assert_eq!(limiter.admit("other", limit, at + 3).await, Ok(None), "another caller has its own");
        assert_eq!(limiter.admit("k", limit, at + 60_000).await, Ok(None), "the first left the window");
        assert_eq!(limiter.admit("k", limit, at + 60_001).await, Ok(Some(499)));
        for bad in ["30", "30/week", "x/minute", "0/minute", "/minute"] {
            assert!(bad.parse::<RateLimit>().is_err(), "{bad}");
        }
        assert_eq!("5/second".parse::<RateLimit>().unwrap().to_string(), "5/second");
    }
}
