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

pub use agent::Agent;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures_util::FutureExt as _;
use futures_util::future::{BoxFuture, join_all};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The name of the virtual first step.
pub const START: &str = "__start__";
/// The name of the virtual last step.
pub const END: &str = "__end__";
/// Supersteps a run may take before it is stopped as runaway.
pub const DEFAULT_RECURSION_LIMIT: u32 = 25;
/// The format version of [`Checkpoint`]s written by this crate.
pub const CHECKPOINT_FORMAT: u32 = 1;

/// Resume values, by interrupt id.
pub type ResumeValues = BTreeMap<String, Value>;

type StepFn = Arc<dyn Fn(Value, StepContext) -> BoxFuture<'static, Result<Value, StepError>> + Send + Sync>;
type RouteFn = Arc<dyn Fn(&Value) -> Vec<String> + Send + Sync>;
/// A custom reducer: merges an update into the current value of a state key.
pub type ReducerFn = Arc<dyn Fn(Option<&Value>, Value) -> Value + Send + Sync>;

/// How a state key merges updates.
#[derive(Clone)]
pub enum Reducer {
    /// The update replaces the value (the default).
    Replace,
    /// The update (an array, or one value) is appended to the array.
    Append,
    /// A function of the current value and the update.
    Custom(ReducerFn),
}

impl fmt::Debug for Reducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Replace => f.write_str("Replace"),
            Self::Append => f.write_str("Append"),
            Self::Custom(_) => f.write_str("Custom"),
        }
    }
}

impl Reducer {
    fn apply(&self, current: Option<&Value>, update: Value) -> Value {
        match self {
            Self::Replace => update,
            Self::Append => {
                let mut items = match current {
                    Some(Value::Array(items)) => items.clone(),
                    Some(Value::Null) | None => Vec::new(),
                    Some(other) => vec![other.clone()],
                };
                match update {
                    Value::Array(more) => items.extend(more),
                    one => items.push(one),
                }
                Value::Array(items)
            }
            Self::Custom(f) => f(current, update),
        }
    }
}

/// The signal a step propagates with `?` when it paused at an `interrupt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted;

/// Why a step did not return an update.
pub enum StepError {
    /// It paused at an interrupt.
    Interrupted,
    /// It failed.
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

impl fmt::Debug for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Interrupted => f.write_str("Interrupted"),
            Self::Failed(e) => write!(f, "Failed({e})"),
        }
    }
}

impl From<Interrupted> for StepError {
    fn from(_: Interrupted) -> Self {
        Self::Interrupted
    }
}

impl<E: Into<Box<dyn std::error::Error + Send + Sync>>> From<E> for StepError {
    fn from(e: E) -> Self {
        Self::Failed(e.into())
    }
}

impl StepError {
    /// A failure with a message.
    pub fn msg(message: impl fmt::Display) -> Self {
        Self::Failed(message.to_string().into())
    }
}

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

/// Called after each superstep with the number of supersteps finished in this run.
pub type ProgressFn = Arc<dyn Fn(u32) + Send + Sync>;

/// What a caller gives one run besides its input: the runtime context, metadata about
/// the request, a progress callback, and a way to cancel it.
#[derive(Clone, Default)]
pub struct Run {
    /// The runtime context steps see ([`StepContext::runtime_context`]); not stored.
    pub context: Value,
    /// What the caller knows of the request (for MCP: the client's capabilities),
    /// visible to steps as [`StepContext::metadata`]; not stored.
    pub metadata: Value,
    /// Called as supersteps finish.
    pub progress: Option<ProgressFn>,
    /// Set to stop the run before its next superstep ([`RunError::Cancelled`]); a
    /// superstep that started always finishes.
    pub cancel: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl fmt::Debug for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Run").field("context", &self.context).field("metadata", &self.metadata).finish_non_exhaustive()
    }
}

impl Run {
    /// A run with this runtime context and nothing else.
    pub fn with_context(context: Value) -> Self {
        Self { context, ..Self::default() }
    }

    fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// What a step sees besides the state: the runtime context and `interrupt`.
#[derive(Clone)]
pub struct StepContext {
    step: Arc<str>,
    superstep: u32,
    run: Arc<Run>,
    calls: Arc<Mutex<StepCalls>>,
}

#[derive(Default)]
struct StepCalls {
    next_index: usize,
    resume: ResumeValues,
    pending: Option<Interrupt>,
}

impl StepContext {
    /// The runtime context of the run (the caller's, not stored in checkpoints).
    pub fn runtime_context(&self) -> &Value {
        &self.run.context
    }

    /// What the caller knows of the request (for MCP: `{"clientCapabilities": …}`).
    pub fn metadata(&self) -> &Value {
        &self.run.metadata
    }

    /// The name of the running step.
    pub fn step(&self) -> &str {
        &self.step
    }

    /// Asks a question. The first time, returns `Err(Interrupted)`, which the step
    /// propagates with `?`; once resumed, returns the answer given for this call.
    pub fn interrupt(&self, value: Value) -> Result<Value, Interrupted> {
        self.ask(value, None)
    }

    /// Like [`StepContext::interrupt`], with a JSON Schema the answer must fit.
    pub fn interrupt_with_schema(&self, value: Value, response_schema: Value) -> Result<Value, Interrupted> {
        self.ask(value, Some(response_schema))
    }

    /// Asks a typed question: `T`'s JSON Schema (from schemars, the Rust analogue of a
    /// Pydantic model) is the response schema, and the answer is deserialized into `T`.
    ///
    /// Callers that resume runs check answers against the response schema first, so a
    /// value that does not fit is reported before anything runs; one that still fails
    /// to deserialize fails the step with the type's error.
    pub fn interrupt_as<T>(&self, question: Value) -> Result<T, StepError>
    where
        T: schemars::JsonSchema + serde::de::DeserializeOwned,
    {
        let schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
        let answer = self.ask(question, Some(schema))?;
        serde_json::from_value(answer)
            .map_err(|e| StepError::msg(format!("the answer does not fit {}: {e}", std::any::type_name::<T>())))
    }

    fn ask(&self, value: Value, response_schema: Option<Value>) -> Result<Value, Interrupted> {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let index = calls.next_index;
        calls.next_index += 1;
        let id = format!("{}:{}:{}", self.superstep, self.step, index);
        if let Some(answer) = calls.resume.get(&id) {
            return Ok(answer.clone());
        }
        calls.pending = Some(Interrupt { id, step: self.step.to_string(), value, response_schema });
        Err(Interrupted)
    }
}

struct Step {
    run: StepFn,
}

enum Edge {
    To(String),
    Route(RouteFn),
}

/// Builds a graph; [`StateGraph::compile`] checks it.
#[derive(Default)]
pub struct StateGraph {
    steps: Vec<(String, Step)>,
    edges: Vec<(String, Edge)>,
    reducers: HashMap<String, Reducer>,
    interrupt_before: BTreeSet<String>,
    interrupt_after: BTreeSet<String>,
    recursion_limit: Option<u32>,
    output_keys: Option<Vec<String>>,
    output_value: Option<String>,
}

impl StateGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a step: an async function of the state and a context that returns a partial
    /// update (an object whose keys are merged into the state).
    #[must_use]
    pub fn add_step<F, Fut>(mut self, name: impl Into<String>, step: F) -> Self
    where
        F: Fn(Value, StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, StepError>> + Send + 'static,
    {
        let run: StepFn = Arc::new(move |state, ctx| step(state, ctx).boxed());
        self.steps.push((name.into(), Step { run }));
        self
    }

    /// Adds an edge; use [`START`] and [`END`] for the ends.
    #[must_use]
    pub fn add_edge(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.edges.push((from.into(), Edge::To(to.into())));
        self
    }

    /// Adds a conditional edge: `route` picks the next step or steps from the state
    /// after `from`'s superstep (an empty list, or [`END`], ends that branch).
    #[must_use]
    pub fn add_conditional_edges<R>(mut self, from: impl Into<String>, route: R) -> Self
    where
        R: Fn(&Value) -> Vec<String> + Send + Sync + 'static,
    {
        self.edges.push((from.into(), Edge::Route(Arc::new(route))));
        self
    }

    /// Sets how a state key merges updates.
    #[must_use]
    pub fn reducer(mut self, key: impl Into<String>, reducer: Reducer) -> Self {
        self.reducers.insert(key.into(), reducer);
        self
    }

    /// Stops every run before `step` runs (a static breakpoint).
    #[must_use]
    pub fn interrupt_before(mut self, step: impl Into<String>) -> Self {
        self.interrupt_before.insert(step.into());
        self
    }

    /// Stops every run after `step` ran (a static breakpoint).
    #[must_use]
    pub fn interrupt_after(mut self, step: impl Into<String>) -> Self {
        self.interrupt_after.insert(step.into());
        self
    }

    /// Makes the run's output the value of one state key (by default the whole state).
    #[must_use]
    pub fn output_key(mut self, key: impl Into<String>) -> Self {
        self.output_value = Some(key.into());
        self
    }

    /// Limits the run's output to these state keys (by default the whole state).
    #[must_use]
    pub fn output_keys<I: IntoIterator<Item = S>, S: Into<String>>(mut self, keys: I) -> Self {
        self.output_keys = Some(keys.into_iter().map(Into::into).collect());
        self
    }

    /// Sets the most supersteps a run may take.
    #[must_use]
    pub fn recursion_limit(mut self, limit: u32) -> Self {
        self.recursion_limit = Some(limit);
        self
    }

    /// Checks the graph and reports every problem at once.
    pub fn compile(self) -> Result<Graph, CompileError> {
        let mut problems = Vec::new();
        let mut steps = HashMap::new();
        for (name, step) in self.steps {
            if name == START || name == END {
                problems.push(format!("{name} is reserved"));
            } else if steps.insert(name.clone(), step).is_some() {
                problems.push(format!("step {name} is defined twice"));
            }
        }
        let known = |n: &str| steps.contains_key(n);
        let mut edges: HashMap<String, Vec<Edge>> = HashMap::new();
        for (from, edge) in self.edges {
            if from != START && !known(&from) {
                problems.push(format!("edge from unknown step {from}"));
            }
            if let Edge::To(to) = &edge
                && to != END
                && !known(to)
            {
                problems.push(format!("edge to unknown step {to}"));
            }
            edges.entry(from).or_default().push(edge);
        }
        if !edges.contains_key(START) {
            problems.push("no edge from START".to_owned());
        }
        for name in self.interrupt_before.iter().chain(&self.interrupt_after) {
            if !known(name) {
                problems.push(format!("breakpoint on unknown step {name}"));
            }
        }
        // Reachability over static edges; a conditional edge may reach any step.
        let mut reached = BTreeSet::new();
        let mut todo = vec![START.to_owned()];
        while let Some(at) = todo.pop() {
            for edge in edges.get(&at).into_iter().flatten() {
                let targets: Vec<String> = match edge {
                    Edge::To(to) => vec![to.clone()],
                    Edge::Route(_) => steps.keys().cloned().collect(),
                };
                for to in targets {
                    if reached.insert(to.clone()) {
                        todo.push(to);
                    }
                }
            }
        }
        let mut unreached: Vec<&String> = steps.keys().filter(|s| !reached.contains(*s)).collect();
        unreached.sort();
        for s in unreached {
            problems.push(format!("no edge reaches step {s}"));
        }
        if !problems.is_empty() {
            problems.sort();
            return Err(CompileError { problems });
        }
        Ok(Graph {
            inner: Arc::new(GraphInner {
                steps,
                edges,
                reducers: self.reducers,
                interrupt_before: self.interrupt_before,
                interrupt_after: self.interrupt_after,
                recursion_limit: self.recursion_limit.unwrap_or(DEFAULT_RECURSION_LIMIT),
                output_keys: self.output_keys,
                output_value: self.output_value,
            }),
        })
    }
}

/// Every problem [`StateGraph::compile`] found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid graph: {}", problems.join("; "))]
pub struct CompileError {
    /// The problems, sorted.
    pub problems: Vec<String>,
}

struct GraphInner {
    steps: HashMap<String, Step>,
    edges: HashMap<String, Vec<Edge>>,
    reducers: HashMap<String, Reducer>,
    interrupt_before: BTreeSet<String>,
    interrupt_after: BTreeSet<String>,
    recursion_limit: u32,
    output_keys: Option<Vec<String>>,
    output_value: Option<String>,
}

/// A compiled graph; cheap to clone and share.
#[derive(Clone)]
pub struct Graph {
    inner: Arc<GraphInner>,
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut steps: Vec<&String> = self.inner.steps.keys().collect();
        steps.sort();
        f.debug_struct("Graph").field("steps", &steps).finish()
    }
}

impl Graph {
    /// Starts a run with `input` (merged into an empty state) and a runtime context.
    pub async fn invoke(&self, input: Value, runtime_context: Value) -> Result<Outcome, RunError> {
        self.invoke_run(input, Run::with_context(runtime_context)).await
    }

    /// Resumes a paused run: each pending interrupt with a value in `resume` gets it;
    /// steps without one ask again.
    pub async fn resume(
        &self,
        checkpoint: Checkpoint,
        resume: ResumeValues,
        runtime_context: Value,
    ) -> Result<Outcome, RunError> {
        self.resume_run(checkpoint, resume, Run::with_context(runtime_context)).await
    }

    /// [`Graph::invoke`] with every option of a [`Run`].
    pub async fn invoke_run(&self, input: Value, run: Run) -> Result<Outcome, RunError> {
        let mut state = Value::Object(Map::new());
        self.merge(&mut state, input);
        let next = self.successors(START, &state)?;
        let checkpoint = Checkpoint {
            format: CHECKPOINT_FORMAT,
            state,
            next,
            superstep: 0,
            writes: BTreeMap::new(),
            resume: BTreeMap::new(),
            interrupts: Vec::new(),
            passed_breakpoints: BTreeSet::new(),
        };
        self.run(checkpoint, Arc::new(run)).await
    }

    /// [`Graph::resume`] with every option of a [`Run`].
    pub async fn resume_run(
        &self,
        mut checkpoint: Checkpoint,
        resume: ResumeValues,
        run: Run,
    ) -> Result<Outcome, RunError> {
        if checkpoint.format != CHECKPOINT_FORMAT {
            return Err(RunError::BadCheckpoint(format!("format {} is not {CHECKPOINT_FORMAT}", checkpoint.format)));
        }
        if let Some(unknown) = checkpoint.next.iter().find(|s| !self.inner.steps.contains_key(*s)) {
            return Err(RunError::BadCheckpoint(format!("unknown step {unknown}")));
        }
        checkpoint.resume.extend(resume);
        checkpoint.interrupts.clear();
        self.run(checkpoint, Arc::new(run)).await
    }

    async fn run(&self, mut cp: Checkpoint, run: Arc<Run>) -> Result<Outcome, RunError> {
        let mut finished = 0;
        loop {
            // A run that ended is done even when the caller just went away.
            if cp.next.is_empty() {
                return Ok(Outcome::Done(self.output(cp.state)));
            }
            if run.cancelled() {
                return Err(RunError::Cancelled(Box::new(cp)));
            }
            if cp.superstep >= self.inner.recursion_limit {
                return Err(RunError::RecursionLimit(self.inner.recursion_limit));
            }
            if let Some(step) = cp.next.iter().find(|s| self.inner.interrupt_before.contains(*s)).cloned()
                && cp.passed_breakpoints.insert(format!("before:{step}"))
            {
                return Ok(Outcome::Breakpoint { state: cp.state.clone(), checkpoint: cp });
            }
            let to_run: Vec<String> = cp.next.iter().filter(|s| !cp.writes.contains_key(*s)).cloned().collect();
            let runs = to_run.iter().map(|name| {
                let ctx = StepContext {
                    step: Arc::from(name.as_str()),
                    superstep: cp.superstep,
                    run: run.clone(),
                    calls: Arc::new(Mutex::new(StepCalls { resume: cp.resume.clone(), ..StepCalls::default() })),
                };
                let fut = (self.inner.steps[name].run)(cp.state.clone(), ctx.clone());
                async move { (AssertUnwindSafe(fut).catch_unwind().await, ctx) }
            });
            let mut interrupts = Vec::new();
            for (name, (result, ctx)) in to_run.iter().zip(join_all(runs).await) {
                match result {
                    Ok(Ok(update)) => {
                        cp.writes.insert(name.clone(), update);
                    }
                    Ok(Err(StepError::Interrupted)) => {
                        let pending = ctx.calls.lock().unwrap_or_else(|p| p.into_inner()).pending.take();
                        match pending {
                            Some(interrupt) => interrupts.push(interrupt),
                            None => {
                                return Err(RunError::StepFailed {
                                    step: name.clone(),
                                    message: "returned Interrupted without calling interrupt".into(),
                                });
                            }
                        }
                    }
                    Ok(Err(StepError::Failed(e))) => {
                        return Err(RunError::StepFailed { step: name.clone(), message: e.to_string() });
                    }
                    Err(panic) => {
                        let message = panic
                            .downcast_ref::<&str>()
                            .map(|s| (*s).to_owned())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "unknown panic".into());
                        return Err(RunError::StepPanicked { step: name.clone(), message });
                    }
                }
            }
            if !interrupts.is_empty() {
                cp.interrupts = interrupts.clone();
                return Ok(Outcome::Paused { interrupts, checkpoint: cp });
            }
            // The superstep finished: merge its writes in step order, then route.
            let ran = std::mem::take(&mut cp.next);
            for name in &ran {
                if let Some(update) = cp.writes.remove(name) {
                    self.merge(&mut cp.state, update);
                }
            }
            let mut next = Vec::new();
            for name in &ran {
                for to in self.successors(name, &cp.state)? {
                    if !next.contains(&to) {
                        next.push(to);
                    }
                }
            }
            cp.writes.clear();
            cp.resume.clear();
            cp.superstep += 1;
            finished += 1;
            if let Some(progress) = &run.progress {
                progress(finished);
            }
            let stop_after = ran.iter().find(|s| self.inner.interrupt_after.contains(*s)).cloned();
            cp.passed_breakpoints.clear();
            cp.next = next;
            if stop_after.is_some() {
                return Ok(Outcome::Breakpoint { state: cp.state.clone(), checkpoint: cp });
            }
        }
    }

    fn output(&self, state: Value) -> Value {
        if let (Some(key), Value::Object(mut map)) = (&self.inner.output_value, state.clone()) {
            return map.remove(key).unwrap_or(Value::Null);
        }
        match (&self.inner.output_keys, state) {
            (Some(keys), Value::Object(mut map)) => {
                Value::Object(keys.iter().filter_map(|k| map.remove(k).map(|v| (k.clone(), v))).collect())
            }
            (_, state) => state,
        }
    }

    fn successors(&self, from: &str, state: &Value) -> Result<Vec<String>, RunError> {
        let mut out = Vec::new();
        for edge in self.inner.edges.get(from).into_iter().flatten() {
            let targets = match edge {
                Edge::To(to) => vec![to.clone()],
                Edge::Route(route) => route(state),
            };
            for to in targets {
                if to == END {
                    continue;
                }
                if !self.inner.steps.contains_key(&to) {
                    return Err(RunError::BadRoute { from: from.to_owned(), to });
                }
                if !out.contains(&to) {
                    out.push(to);
                }
            }
        }
        Ok(out)
    }

    fn merge(&self, state: &mut Value, update: Value) {
        let Value::Object(update) = update else { return };
        let Value::Object(state) = state else { return };
        for (key, value) in update {
            let merged = match self.inner.reducers.get(&key) {
                Some(reducer) => reducer.apply(state.get(&key), value),
                None => value,
            };
            state.insert(key, merged);
        }
    }
}

#[cfg(test)]
mod tests;
