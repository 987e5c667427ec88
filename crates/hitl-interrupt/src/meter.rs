//! What the engine counts and times, through the `metrics` facade: nothing is recorded
//! unless the program installs a recorder (`hitl serve` does, for `/metrics`). Tool
//! labels are the served agents' names (a call to an unknown tool is refused before it
//! gets here), so label values stay bounded.

use std::time::Instant;

/// How a round went, as `hitl_rounds_total{outcome}` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A round was stored and asked.
    Paused,
    /// Its answers were taken and the agent resumed.
    Resumed,
    /// A resend got the outcome its answers had.
    Replayed,
    /// The answers did not fit the questions.
    InvalidAnswer,
    /// The `requestState` did not verify, or belongs to another call.
    InvalidState,
    /// The `requestState` named a call the store no longer has (it expired).
    Expired,
    /// The round needs a mode the client did not declare.
    RefusedCapability,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Paused => "paused",
            Self::Resumed => "resumed",
            Self::Replayed => "replayed",
            Self::InvalidAnswer => "invalid_answer",
            Self::InvalidState => "invalid_state",
            Self::Expired => "expired",
            Self::RefusedCapability => "refused_capability",
        }
    }
}

/// Counts one round of `tool`.
pub(crate) fn round(tool: &str, outcome: Outcome) {
    metrics::counter!("hitl_rounds_total", "tool" => tool.to_owned(), "outcome" => outcome.as_str()).increment(1);
}

/// The time people took to answer a round of `tool` asked at `asked_at_ms`.
pub(crate) fn answered(tool: &str, asked_at_ms: u64, now_ms: u64) {
    if asked_at_ms > 0 {
        let seconds = now_ms.saturating_sub(asked_at_ms) as f64 / 1000.0;
        metrics::histogram!("hitl_answer_seconds", "tool" => tool.to_owned()).record(seconds);
    }
}

/// The time an agent run of `tool` took, from `started`.
pub(crate) fn ran(tool: &str, started: Instant) {
    metrics::histogram!("hitl_agent_run_seconds", "tool" => tool.to_owned()).record(started.elapsed().as_secs_f64());
}
