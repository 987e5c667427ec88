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
    sets: BTreeMap<String, Vec<(Agent, Listing)>>,
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
        let mut names: BTreeMap<&str, &str> = BTreeMap::new();
        let others = registry.sets.iter().filter(|(name, _)| name.as_str() != source);
        let from_sets = others.flat_map(|(s, set)| set.iter().map(move |(a, _)| (s.as_str(), a)));
        for (owner, agent) in registry.fixed.iter().map(|a| ("an agent", a)).chain(from_sets) {
            names.insert(&agent.name, owner);
        }
        for (agent, _) in &agents {
            if let Some(owner) = names.insert(&agent.name, source) {
                return Err(format!("{source} lists {:?}, which {owner} already serves", agent.name));
            }
        }
        if agents.is_empty() {
            registry.sets.remove(source);
        } else {
            registry.sets.insert(source.to_owned(), agents);
        }
        registry.merged = Arc::new(merge(&registry.fixed, &registry.sets));
        let listings = registry.sets.values().flatten().filter(|(_, l)| !l.is_empty());
        registry.listings = Arc::new(listings.map(|(a, l)| (a.name.clone(), l.clone())).collect());
        Ok(())
    }
}

fn merge(fixed: &[Agent], sets: &BTreeMap<String, Vec<(Agent, Listing)>>) -> IndexMap<String, Agent> {
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
}
