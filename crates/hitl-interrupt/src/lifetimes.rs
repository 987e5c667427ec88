//! How long threads live and how much a caller may make the engine hold.

use std::time::Duration;

use hitl_thread::PausedLimits;

/// How long threads live. `default_ttl` (the deployment's thread TTL) shortens all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    /// A paused call, from its latest round.
    pub paused: Duration,
    /// A call finished by a request with a `requestState`, for resends.
    pub finished: Duration,
    /// A paused call whose round needs a mode the client did not declare.
    pub waiting_for_capability: Duration,
    /// How long a request that resumes an agent holds its round before another may
    /// take over (when the first died mid-run). Code before an `interrupt` may then
    /// run again, as in LangGraph.
    pub lease: Duration,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Self {
            paused: Duration::from_secs(24 * 3600),
            finished: Duration::from_secs(600),
            waiting_for_capability: Duration::from_secs(600),
            lease: Duration::from_secs(30),
        }
    }
}

impl Lifetimes {
    /// The defaults, each shortened to `default_ttl` when that is shorter.
    pub fn with_default_ttl(default_ttl: Option<Duration>) -> Self {
        let d = Self::default();
        let cap = |x: Duration| default_ttl.map_or(x, |t| x.min(t));
        Self {
            paused: cap(d.paused),
            finished: cap(d.finished),
            waiting_for_capability: cap(d.waiting_for_capability),
            lease: d.lease,
        }
    }
}

/// How much one caller, and everyone, may make the engine hold and do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Paused calls per owner and in all.
    pub paused: PausedLimits,
    /// The largest thread record stored, as JSON bytes.
    pub max_record_bytes: usize,
    /// How long one request may run agents (`None`: no limit). A paused call whose
    /// resume runs out of time stays paused.
    pub request_timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Self { paused: PausedLimits::default(), max_record_bytes: 1024 * 1024, request_timeout: None }
    }
}

/// How many rounds one request may resolve with answers it carried (a first call's
/// `inputResponses`): past it the call answers `input_required` as usual, so an agent
/// that keeps asking cannot hold a request for ever (rmcp's bound).
pub const MAX_ROUNDS_PER_REQUEST: u32 = 10;
