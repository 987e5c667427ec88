//! The parts of a compiled graph, which [`crate::StateGraph`] builds and the runtime
//! runs: its steps, edges and reducers.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::{StepContext, StepError};

/// A map by the graph's own names (its steps, its state's keys): foldhash, not SipHash,
/// as the names are the graph author's, looked up on every superstep.
pub(crate) type Names<V> = HashMap<String, V, foldhash::fast::RandomState>;

pub(crate) type StepFn = Arc<dyn Fn(Value, StepContext) -> BoxFuture<'static, Result<Value, StepError>> + Send + Sync>;
pub(crate) type RouteFn = Arc<dyn Fn(&Value) -> Vec<String> + Send + Sync>;
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
    pub(crate) fn apply(&self, current: Option<&Value>, update: Value) -> Value {
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

#[derive(Clone)]
pub(crate) struct Step {
    /// Its name, shared with the context of each of its runs.
    pub(crate) name: Arc<str>,
    pub(crate) run: StepFn,
}

#[derive(Clone)]
pub(crate) enum Edge {
    To(String),
    Route(RouteFn),
}

pub(crate) struct GraphInner {
    pub(crate) steps: Names<Step>,
    pub(crate) edges: Names<Vec<Edge>>,
    pub(crate) reducers: Names<Reducer>,
    pub(crate) interrupt_before: BTreeSet<String>,
    pub(crate) interrupt_after: BTreeSet<String>,
    pub(crate) recursion_limit: u32,
    pub(crate) output_keys: Option<Vec<String>>,
    pub(crate) output_value: Option<String>,
    /// The key of a guard's verdict ([`Graph::guarded`]): when set, the output.
    pub(crate) verdict: Option<String>,
}

/// A compiled graph; cheap to clone and share.
#[derive(Clone)]
pub struct Graph {
    pub(crate) inner: Arc<GraphInner>,
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut steps: Vec<&String> = self.inner.steps.keys().collect();
        steps.sort();
        f.debug_struct("Graph").field("steps", &steps).finish()
    }
}
