//! Building a graph: steps, edges, reducers, breakpoints, and the checks of `compile`.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

use futures_util::FutureExt as _;
use serde_json::Value;

use crate::graph::{Edge, Graph, GraphInner, Names, Reducer, Step, StepFn};
use crate::{DEFAULT_RECURSION_LIMIT, END, START, StepContext, StepError};

/// Builds a graph; [`StateGraph::compile`] checks it.
#[derive(Default)]
pub struct StateGraph {
    steps: Vec<(String, Step)>,
    edges: Vec<(String, Edge)>,
    reducers: Names<Reducer>,
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
        let name: String = name.into();
        self.steps.push((name.clone(), Step { name: Arc::from(name.as_str()), run }));
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
        let mut steps = Names::default();
        for (name, step) in self.steps {
            if name == START || name == END {
                problems.push(format!("{name} is reserved"));
            } else if steps.insert(name.clone(), step).is_some() {
                problems.push(format!("step {name} is defined twice"));
            }
        }
        let known = |n: &str| steps.contains_key(n);
        let mut edges: Names<Vec<Edge>> = Names::default();
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
                verdict: None,
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
