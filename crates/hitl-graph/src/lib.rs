//! An agent runtime: a graph of async steps over a JSON state, whose steps can pause
//! with [`StepContext::interrupt`] and resume from a [`Checkpoint`].
//!
//! It follows LangGraph's `StateGraph`: steps return partial updates that are merged
//! into the state at the end of each superstep; steps that several edges reach in the
//! same superstep run concurrently; a step that interrupts runs again from its start on
//! resume, and each `interrupt` call then returns, in order, the value given for it.
//! Code before an `interrupt` may therefore run more than once: place questions first.
//!
//! The runtime knows nothing of MCP, HTTP or stores: a run takes a checkpoint in and
//! gives a checkpoint out.
//!
//! ```
//! use hitl_graph::{END, START, Outcome, StateGraph};
//! use serde_json::json;
//!
//! # futures_util::future::FutureExt::now_or_never(async {
//! let graph = StateGraph::new()
//!     .add_step("choose_region", |_state, ctx| async move {
//!         let region = ctx.interrupt(json!("Which region should the service deploy to?"))?;
//!         Ok(json!({ "region": region }))
//!     })
//!     .add_edge(START, "choose_region")
//!     .add_edge("choose_region", END)
//!     .compile()
//!     .unwrap();
//!
//! let Outcome::Paused { interrupts, checkpoint } = graph.invoke(json!({}), json!(null)).await.unwrap() else {
//!     panic!("expected a pause")
//! };
//! let answers = [(interrupts[0].id.clone(), json!("eu-west-1"))].into_iter().collect();
//! let Outcome::Done(output) = graph.resume(checkpoint, answers, json!(null)).await.unwrap() else {
//!     panic!("expected the end")
//! };
//! assert_eq!(output, json!({ "region": "eu-west-1" }));
//! # }).unwrap();
//! ```

mod agent;
mod builder;
mod checkpoint;
mod context;
mod extensions;
mod graph;
pub mod payload;
mod runtime;

pub use agent::{Agent, TaskSupport};
pub use builder::{CompileError, StateGraph};
pub use checkpoint::{Checkpoint, Interrupt, Outcome, ResumeValues, RunError};
pub use context::{
    AuditSink, CallThread, Caller, Effects, Interrupted, Metadata, Progress, ProgressFn, Run, StepContext, StepError,
};
pub use extensions::Extensions;
pub use graph::{Graph, Reducer, ReducerFn};

/// The name of the virtual first step.
pub const START: &str = "__start__";
/// The name of the virtual last step.
pub const END: &str = "__end__";
/// Supersteps a run may take before it is stopped as runaway.
pub const DEFAULT_RECURSION_LIMIT: u32 = 25;
/// The format version of [`Checkpoint`]s written by this crate.
pub const CHECKPOINT_FORMAT: u32 = 1;

#[cfg(test)]
mod tests;
