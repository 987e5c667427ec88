//! What the engine counts and times, through the `metrics` facade: nothing is recorded
//! unless the program installs a recorder (`hitl serve` does, for `/metrics`). Tool
//! labels are the served agents' names (a call to an unknown tool is refused before it
//! gets here), so label values stay bounded.

use std::sync::Arc;
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
    /// Every outcome, in declaration order (`outcome as usize` is its index).
    const ALL: [Self; 7] = [
        Self::Paused,
        Self::Resumed,
        Self::Replayed,
        Self::InvalidAnswer,
        Self::InvalidState,
        Self::Expired,
        Self::RefusedCapability,
    ];

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

/// The engine's metric handles, registered once per tool (at its first record) rather
/// than looked up, with a new label string, at every record. One per engine: made after
/// the program installs its recorder (`hitl serve` installs it before it serves).
#[derive(Default)]
pub(crate) struct Meters {
    /// By the served tools' names: foldhash, not SipHash.
    by_tool: std::sync::Mutex<std::collections::HashMap<Box<str>, Arc<ToolMeters>, foldhash::fast::RandomState>>,
}

/// One tool's handles.
struct ToolMeters {
    /// `hitl_rounds_total`, by [`Outcome`] (its index in [`Outcome::ALL`]).
    rounds: [metrics::Counter; Outcome::ALL.len()],
    answered: metrics::Histogram,
    ran: metrics::Histogram,
}

impl Meters {
    fn of(&self, tool: &str) -> Arc<ToolMeters> {
        let mut by_tool = self.by_tool.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(meters) = by_tool.get(tool) {
            return meters.clone();
        }
        let label = tool.to_owned();
        let meters = Arc::new(ToolMeters {
            rounds: Outcome::ALL.map(|outcome| {
                metrics::counter!("hitl_rounds_total", "tool" => label.clone(), "outcome" => outcome.as_str())
            }),
            answered: metrics::histogram!("hitl_answer_seconds", "tool" => label.clone()),
            ran: metrics::histogram!("hitl_agent_run_seconds", "tool" => label),
        });
        by_tool.insert(tool.into(), meters.clone());
        meters
    }

    /// Counts one round of `tool`.
    pub(crate) fn round(&self, tool: &str, outcome: Outcome) {
        self.of(tool).rounds[outcome as usize].increment(1);
    }

    /// The time people took to answer a round of `tool` asked at `asked_at_ms`.
    pub(crate) fn answered(&self, tool: &str, asked_at_ms: u64, now_ms: u64) {
        if asked_at_ms > 0 {
            let seconds = now_ms.saturating_sub(asked_at_ms) as f64 / 1000.0;
            self.of(tool).answered.record(seconds);
        }
    }

    /// The time an agent run of `tool` took, from `started`.
    pub(crate) fn ran(&self, tool: &str, started: Instant) {
        self.of(tool).ran.record(started.elapsed().as_secs_f64());
    }
}
