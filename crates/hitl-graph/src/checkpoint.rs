//! Where a run stopped and how it ended: checkpoints, interrupts, outcomes, errors.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Resume values, by interrupt id.
pub type ResumeValues = BTreeMap<String, Value>;

/// A pending interrupt: what a step asked, and how to answer it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interrupt {
    /// Stable id: the superstep, the step and the call's index within the step.
    pub id: String,
    /// The step that asked.
    pub step: String,
    /// The interrupt value (a question, or a structured request).
    pub value: Value,
    /// The JSON Schema the answer must fit, when the step gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Value>,
}

/// Where a run stopped, serializable so that another process can resume it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// [`CHECKPOINT_FORMAT`] when written.
    pub format: u32,
    /// The state before the current superstep's writes.
    pub state: Value,
    /// The steps of the current superstep.
    pub next: Vec<String>,
    /// The current superstep's index.
    pub superstep: u32,
    /// Updates of the steps that finished in the current superstep, by step.
    pub writes: BTreeMap<String, Value>,
    /// Resume values given so far to the current superstep's steps.
    pub resume: ResumeValues,
    /// The interrupts pending.
    pub interrupts: Vec<Interrupt>,
    /// Breakpoints already passed in the current superstep.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub passed_breakpoints: BTreeSet<String>,
}

impl Checkpoint {
    /// A run of `state` paused before its first superstep, whose steps are `next`:
    /// nothing written, asked or answered yet (what a store's or a round's test keeps).
    pub fn before(state: Value, next: &[&str]) -> Self {
        Self {
            format: crate::CHECKPOINT_FORMAT,
            state,
            next: next.iter().map(|step| (*step).to_owned()).collect(),
            superstep: 0,
            writes: BTreeMap::new(),
            resume: ResumeValues::default(),
            interrupts: Vec::new(),
            passed_breakpoints: BTreeSet::new(),
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The graph reached `END`; the final state.
    Done(Value),
    /// Steps are waiting for answers.
    Paused {
        /// What they asked, in step order.
        interrupts: Vec<Interrupt>,
        /// Where to resume.
        checkpoint: Checkpoint,
    },
    /// The run stopped at a static breakpoint.
    Breakpoint {
        /// The state at the breakpoint.
        state: Value,
        /// Where the run stopped.
        checkpoint: Checkpoint,
    },
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A step returned an error.
    #[error("step {step} failed: {message}")]
    StepFailed {
        /// The step.
        step: String,
        /// Its error.
        message: String,
    },
    /// A step panicked.
    #[error("step {step} panicked: {message}")]
    StepPanicked {
        /// The step.
        step: String,
        /// The panic message.
        message: String,
    },
    /// A step failed in a way that may pass; `kept` holds every superstep that
    /// finished (and the writes of this superstep's steps that did), so a run resumed
    /// from it with the same answers tries the failed step again and repeats nothing.
    #[error("step {step} failed: {message}")]
    Transient {
        /// The step.
        step: String,
        /// Its error.
        message: String,
        /// Where to try again from.
        kept: Box<Checkpoint>,
    },
    /// The run took more supersteps than allowed.
    #[error("recursion limit of {0} supersteps reached without hitting END")]
    RecursionLimit(u32),
    /// The checkpoint was written by another format or names unknown steps.
    #[error("invalid checkpoint: {0}")]
    BadCheckpoint(String),
    /// The caller cancelled the run between supersteps; the checkpoint holds every
    /// superstep that finished, so resuming from it never repeats one.
    #[error("the run was cancelled")]
    Cancelled(Box<Checkpoint>),
    /// A route function chose a step that does not exist.
    #[error("step {from} routed to unknown step {to}")]
    BadRoute {
        /// The step whose route chose.
        from: String,
        /// What it chose.
        to: String,
    },
}
