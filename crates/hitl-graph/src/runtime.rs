//! Running a compiled graph: supersteps, interrupts, breakpoints, progress and cancel.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures_util::FutureExt as _;
use futures_util::future::join_all;
use serde_json::{Map, Value};

use crate::context::StepCalls;
use crate::graph::{Edge, Graph, GraphInner, Step, StepFn};
use crate::{
    CHECKPOINT_FORMAT, Checkpoint, END, Interrupt, Outcome, Progress, ResumeValues, Run, RunError, START, StepContext,
    StepError,
};

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

    /// This graph with step `name` run first, a guard (say, a person's review before
    /// an agent starts). When the guard writes a non-null `verdict`, the run ends there
    /// and the verdict is its output (none of the graph's own steps runs); otherwise
    /// the run goes on from the graph's start, on the state the guard left. `None`
    /// when the graph already has a step `name`.
    pub fn guarded<F, Fut>(&self, name: &str, guard: F, verdict: &str) -> Option<Graph>
    where
        F: Fn(Value, StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, StepError>> + Send + 'static,
    {
        let inner = &self.inner;
        if inner.steps.contains_key(name) || name == START || name == END {
            return None;
        }
        let mut steps = inner.steps.clone();
        let run: StepFn = Arc::new(move |state, ctx| guard(state, ctx).boxed());
        steps.insert(name.to_owned(), Step { name: Arc::from(name), run });
        let mut edges = inner.edges.clone();
        let start = edges.insert(START.to_owned(), vec![Edge::To(name.to_owned())]).unwrap_or_default();
        let key = verdict.to_owned();
        let route = move |state: &Value| {
            if state.get(&key).is_some_and(|v| !v.is_null()) {
                return vec![END.to_owned()];
            }
            start
                .iter()
                .flat_map(|edge| match edge {
                    Edge::To(to) => vec![to.clone()],
                    Edge::Route(route) => route(state),
                })
                .collect()
        };
        edges.insert(name.to_owned(), vec![Edge::Route(Arc::new(route))]);
        Some(Graph {
            inner: Arc::new(GraphInner {
                steps,
                edges,
                reducers: inner.reducers.clone(),
                interrupt_before: inner.interrupt_before.clone(),
                interrupt_after: inner.interrupt_after.clone(),
                recursion_limit: inner.recursion_limit.saturating_add(1),
                output_keys: inner.output_keys.clone(),
                output_value: inner.output_value.clone(),
                verdict: Some(verdict.to_owned()),
            }),
        })
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
            let interrupts = self.superstep(&mut cp, &run).await?;
            if !interrupts.is_empty() {
                cp.interrupts = interrupts.clone();
                return Ok(Outcome::Paused { interrupts, checkpoint: cp });
            }
            let ran = self.advance(&mut cp)?;
            finished += 1;
            if let Some(progress) = &run.progress {
                progress(Progress::at(f64::from(finished)));
            }
            if ran.iter().any(|s| self.inner.interrupt_after.contains(s)) {
                return Ok(Outcome::Breakpoint { state: cp.state.clone(), checkpoint: cp });
            }
        }
    }

    /// Runs the steps of the current superstep that have not written yet, concurrently;
    /// their updates go to `cp.writes`. Returns what the steps that paused asked.
    async fn superstep(&self, cp: &mut Checkpoint, run: &Arc<Run>) -> Result<Vec<Interrupt>, RunError> {
        let to_run: Vec<&Step> =
            cp.next.iter().filter(|s| !cp.writes.contains_key(*s)).map(|s| &self.inner.steps[s]).collect();
        let mut interrupts = Vec::new();
        if let [step] = to_run[..] {
            // One step (most supersteps), awaited as it is: it is lent the superstep's
            // resume values, which the checkpoint takes back once it ran.
            let resume = std::mem::take(&mut cp.resume);
            let (result, ctx) = start(step, cp, resume, run).await;
            cp.resume = std::mem::take(&mut ctx.calls.lock().unwrap_or_else(|p| p.into_inner()).resume);
            took(cp, step, result, &ctx, &mut interrupts)?;
        } else {
            let ran = join_all(to_run.iter().map(|step| start(step, cp, cp.resume.clone(), run))).await;
            for (step, (result, ctx)) in to_run.iter().zip(ran) {
                took(cp, step, result, &ctx, &mut interrupts)?;
            }
        }
        Ok(interrupts)
    }

    /// Ends a superstep whose steps all wrote: merges the writes in step order, routes
    /// to the next steps, and returns the steps that ran.
    fn advance(&self, cp: &mut Checkpoint) -> Result<Vec<String>, RunError> {
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
        cp.passed_breakpoints.clear();
        cp.next = next;
        Ok(ran)
    }

    fn output(&self, state: Value) -> Value {
        if let (Some(key), Value::Object(map)) = (&self.inner.verdict, &state)
            && let Some(verdict) = map.get(key).filter(|v| !v.is_null())
        {
            return verdict.clone();
        }
        // The state itself, not a copy: a state that is not an object has no such key.
        if let Some(key) = &self.inner.output_value {
            return match state {
                Value::Object(mut map) => map.remove(key).unwrap_or(Value::Null),
                other => other,
            };
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
            match edge {
                Edge::To(to) => self.follow(from, to, &mut out)?,
                Edge::Route(route) => {
                    for to in route(state) {
                        self.follow(from, &to, &mut out)?;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Adds `to`, an edge's end, to the steps `out` runs next (once; never [`END`]).
    fn follow(&self, from: &str, to: &str, out: &mut Vec<String>) -> Result<(), RunError> {
        if to == END || out.iter().any(|kept| kept == to) {
            return Ok(());
        }
        if !self.inner.steps.contains_key(to) {
            return Err(RunError::BadRoute { from: from.to_owned(), to: to.to_owned() });
        }
        out.push(to.to_owned());
        Ok(())
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

/// A run of `step` in the superstep `cp` stands at, with `resume` as its answers so far:
/// what it returned or how it panicked, and its context.
fn start(
    step: &Step,
    cp: &Checkpoint,
    resume: ResumeValues,
    run: &Arc<Run>,
) -> impl Future<Output = (std::thread::Result<Result<Value, StepError>>, StepContext)> + Send + 'static {
    let ctx = StepContext {
        step: step.name.clone(),
        superstep: cp.superstep,
        run: run.clone(),
        calls: Arc::new(Mutex::new(StepCalls { resume, ..StepCalls::default() })),
    };
    let fut = (step.run)(cp.state.clone(), ctx.clone());
    async move { (AssertUnwindSafe(fut).catch_unwind().await, ctx) }
}

/// Takes what a run of `step` gave: its update into `cp.writes`, or the question it
/// asked into `interrupts`; a failure or a panic ends the run.
fn took(
    cp: &mut Checkpoint,
    step: &Step,
    result: std::thread::Result<Result<Value, StepError>>,
    ctx: &StepContext,
    interrupts: &mut Vec<Interrupt>,
) -> Result<(), RunError> {
    let name = &*step.name;
    let failed = |message: String| RunError::StepFailed { step: name.to_owned(), message };
    match result {
        Ok(Ok(update)) => {
            cp.writes.insert(name.to_owned(), update);
        }
        Ok(Err(StepError::Interrupted)) => {
            let pending = ctx.calls.lock().unwrap_or_else(|p| p.into_inner()).pending.take();
            interrupts.push(pending.ok_or_else(|| failed("returned Interrupted without calling interrupt".into()))?);
        }
        Ok(Err(StepError::Failed(e))) => return Err(failed(e.to_string())),
        Ok(Err(StepError::Transient(e))) => {
            return Err(RunError::Transient {
                step: name.to_owned(),
                message: e.to_string(),
                kept: Box::new(cp.clone()),
            });
        }
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            return Err(RunError::StepPanicked { step: name.to_owned(), message });
        }
    }
    Ok(())
}
