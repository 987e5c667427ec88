//! The tools an endpoint serves: fixed ones (agents) and named sets that change while
//! it runs (a gateway's upstream tools, listed again when an upstream changes), each
//! set replaced whole. A request reads one snapshot, so a change never shows halfway.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use hitl_graph::Agent;
use indexmap::IndexMap;
use serde_json::{Map, Value};

/// More of a tool's `tools/list` entry than an agent says (`title`, `annotations`,
/// `outputSchema`, `icons`, `_meta`): a gateway's upstream tools, listed as they are.
pub type Listing = Map<String, Value>;

/// Named sets of tools, each with its tools' extra listings (a gateway's upstreams,
/// by name).
pub type Sets = BTreeMap<String, Vec<(Agent, Listing)>>;

/// The extra listings of the tools that have them, by name.
pub type Listings = Arc<BTreeMap<String, Listing>>;

/// The endpoint's tools; cheap to clone (a handle to one registry).
#[derive(Clone, Default)]
pub struct Tools {
    inner: Arc<RwLock<Registry>>,
}

#[derive(Default)]
struct Registry {
    fixed: Vec<Agent>,
    sets: Sets,
    merged: Arc<IndexMap<String, Agent>>,
    listings: Listings,
}

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.snapshot().keys()).finish()
    }
}

impl Tools {
    /// `fixed` tools, listed first in this order.
    pub fn new(fixed: Vec<Agent>) -> Self {
        let registry = Registry {
            merged: Arc::new(merge(&fixed, &BTreeMap::new())),
            fixed,
            sets: BTreeMap::new(),
            listings: Arc::default(),
        };
        Self { inner: Arc::new(RwLock::new(registry)) }
    }

    /// The tools now, by name, in listing order.
    pub fn snapshot(&self) -> Arc<IndexMap<String, Agent>> {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).merged.clone()
    }

    /// The tools now and the extra `tools/list` fields of those that have them, read
    /// together so that a change never shows halfway.
    pub fn listed(&self) -> (Arc<IndexMap<String, Agent>>, Listings) {
        let registry = self.inner.read().unwrap_or_else(|p| p.into_inner());
        (registry.merged.clone(), registry.listings.clone())
    }

    /// Replaces the set named `source` with `agents` (empty: removes it). Refused, and
    /// nothing changes, when a name is taken by another source or listed twice.
    pub fn replace(&self, source: &str, agents: Vec<Agent>) -> Result<(), String> {
        self.replace_listed(source, agents.into_iter().map(|a| (a, Listing::new())).collect())
    }

    /// [`Tools::replace`] with each tool's extra `tools/list` fields.
    pub fn replace_listed(&self, source: &str, agents: Vec<(Agent, Listing)>) -> Result<(), String> {
        let mut registry = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let mut sets = registry.sets.clone();
        match agents.is_empty() {
            true => sets.remove(source),
            false => sets.insert(source.to_owned(), agents),
        };
        let fixed = std::mem::take(&mut registry.fixed);
        match Registry::checked(fixed, sets, Some(source)) {
            Ok(replaced) => {
                *registry = replaced;
                Ok(())
            }
            Err((fixed, error)) => {
                registry.fixed = fixed;
                Err(error)
            }
        }
    }

    /// Replaces every tool at once, the fixed ones and every named set (a reload of
    /// the configuration): a request sees the old tools or the new, never a mix.
    /// Refused, and nothing changes, when a name is served twice.
    pub fn replace_all(&self, fixed: Vec<Agent>, sets: Sets) -> Result<(), String> {
        let replaced = Registry::checked(fixed, sets, None).map_err(|(_, error)| error)?;
        *self.inner.write().unwrap_or_else(|p| p.into_inner()) = replaced;
        Ok(())
    }
}

impl Registry {
    /// The registry of `fixed` and `sets`, or why not (a name served twice; blamed on
    /// `changed` when that set is the newcomer), with `fixed` handed back.
    fn checked(fixed: Vec<Agent>, sets: Sets, changed: Option<&str>) -> Result<Self, (Vec<Agent>, String)> {
        let mut names: BTreeMap<&str, &str> = BTreeMap::new();
        for agent in &fixed {
            if names.insert(&agent.name, "an agent").is_some() {
                let error = format!("the agent {:?} is served twice", agent.name);
                return Err((fixed, error));
            }
        }
        // The set that changed comes last, so a clash is said of it.
        let is_changed = |source: &String| Some(source.as_str()) == changed;
        let order = sets.iter().filter(|(s, _)| !is_changed(s)).chain(sets.iter().filter(|(s, _)| is_changed(s)));
        let mut clash = None;
        for (source, set) in order {
            for (agent, _) in set {
                if let Some(owner) = names.insert(&agent.name, source) {
                    clash = Some(format!("{source} lists {:?}, which {owner} already serves", agent.name));
                    break;
                }
            }
            if clash.is_some() {
                break;
            }
        }
        if let Some(error) = clash {
            return Err((fixed, error));
        }
        let merged = Arc::new(merge(&fixed, &sets));
        let listings = sets.values().flatten().filter(|(_, l)| !l.is_empty());
        let listings = Arc::new(listings.map(|(a, l)| (a.name.clone(), l.clone())).collect());
        Ok(Self { fixed, sets, merged, listings })
    }
}

fn merge(fixed: &[Agent], sets: &Sets) -> IndexMap<String, Agent> {
    let from_sets = sets.values().flatten().map(|(a, _)| a);
    fixed.iter().chain(from_sets).map(|a| (a.name.clone(), a.clone())).collect()
}

#[cfg(test)]
mod tests {
    use hitl_graph::{START, StateGraph};
    use serde_json::json;

    use super::*;

    fn agent(name: &str) -> Agent {
        let graph = StateGraph::new().add_step("s", |_, _| async { Ok(json!({})) }).add_edge(START, "s");
        Agent::new(name, "", json!({"type": "object"}), graph.compile().unwrap())
    }

    #[test]
    fn sets_are_replaced_whole_and_names_stay_unique() {
        let tools = Tools::new(vec![agent("greeter")]);
        tools.replace("upstream db", vec![agent("db.a"), agent("db.b")]).unwrap();
        let before = tools.snapshot();
        assert_eq!(before.keys().collect::<Vec<_>>(), ["greeter", "db.a", "db.b"]);
        tools.replace("upstream db", vec![agent("db.c")]).unwrap();
        assert_eq!(tools.snapshot().keys().collect::<Vec<_>>(), ["greeter", "db.c"]);
        assert_eq!(before.len(), 3, "a snapshot taken before stays as it was");

        let error = tools.replace("upstream git", vec![agent("greeter")]).unwrap_err();
        assert!(error.contains("an agent already serves"), "{error}");
        let error = tools.replace("upstream git", vec![agent("db.c")]).unwrap_err();
        assert!(error.contains("upstream db already serves"), "{error}");
        let error = tools.replace("upstream git", vec![agent("g.x"), agent("g.x")]).unwrap_err();
        assert!(error.contains("upstream git already serves"), "{error}");
        assert_eq!(tools.snapshot().len(), 2, "a refused set changes nothing");
        tools.replace("upstream db", vec![]).unwrap();
        assert_eq!(tools.snapshot().keys().collect::<Vec<_>>(), ["greeter"]);
        let listing: Listing = serde_json::from_value(json!({"title": "A"})).unwrap();
        tools
            .replace_listed("upstream db", vec![(agent("db.a"), listing.clone()), (agent("db.b"), Listing::new())])
            .unwrap();
        assert_eq!(*tools.listed().1, BTreeMap::from([("db.a".to_owned(), listing)]));
    }

    #[test]
    fn everything_is_replaced_at_once_or_not_at_all() {
        let tools = Tools::new(vec![agent("greeter")]);
        tools.replace("upstream db", vec![agent("db.a")]).unwrap();
        let sets = BTreeMap::from([("upstream git".to_owned(), vec![(agent("git.log"), Listing::new())])]);
        tools.replace_all(vec![agent("hello")], sets).unwrap();
        assert_eq!(tools.snapshot().keys().collect::<Vec<_>>(), ["hello", "git.log"]);

        let clash = BTreeMap::from([("upstream git".to_owned(), vec![(agent("hello"), Listing::new())])]);
        let error = tools.replace_all(vec![agent("hello")], clash).unwrap_err();
        assert!(error.contains("an agent already serves"), "{error}");
        let error = tools.replace_all(vec![agent("x"), agent("x")], BTreeMap::new()).unwrap_err();
        assert!(error.contains("served twice"), "{error}");
        assert_eq!(
            tools.snapshot().keys().collect::<Vec<_>>(),
            ["hello", "git.log"],
            "a refused reload changes nothing"
        );
    }
}
