//! A human gate in front of any MCP server: the tools of `[[upstream]]` servers listed
//! under `[[policy]]`s. `allow` forwards a call, `deny` fails it with an error result
//! naming the policy, `review` pauses it with the seed's review question (the tool,
//! its arguments, the allowed decisions) and runs it as the reviewer decided:
//! `approve` as asked, `edit` with arguments checked against the tool's schema (none
//! added), `reject` with the reviewer's message as the error, `respond` with the
//! reviewer's text as the result.
//!
//! Each upstream tool becomes an [`hitl_graph::Agent`], so a paused gateway call is a
//! thread like any agent's call: same `requestState`, same binding to the tool, its
//! arguments and the caller, same lifetimes, memory or Redis, resumed once.
//!
//! ```no_run
//! # async fn run() -> Result<(), String> {
//! use hitl_gateway::{Action, Gateway, GatewaySection, Policies, Policy, UpstreamSpec};
//!
//! let db: UpstreamSpec = toml_like();
//! # fn toml_like() -> UpstreamSpec { unimplemented!() }
//! let policies = Policies::new(
//!     vec![Policy {
//!         tools: vec!["db.drop_*".into()],
//!         resources: vec![],
//!         prompts: vec![],
//!         action: Action::Review,
//!         decisions: None,
//!         description: None,
//!         callers: Some(vec!["group:ops".into()]),
//!         approvers: Some(vec!["group:dba".into()]),
//!         when: None,
//!         rate_limit: None,
//!         approval_ttl: None,
//!         approval_scope: None,
//!     }],
//!     GatewaySection::default(),
//! )?;
//! let gateway = Gateway::new(&[db], policies, |name| std::env::var(name).ok())?;
//! let publish: hitl_gateway::Publish = std::sync::Arc::new(|source, agents: Vec<_>| {
//!     println!("{source}: {} gated tools", agents.len());
//!     Ok(())
//! });
//! gateway.start(&publish).await?;
//! # Ok(()) }
//! ```

mod agents;
mod catalog;
pub mod cover;
mod hold;
pub mod limit;
mod passthrough;
mod policy;
pub mod receipts;
mod subscriptions;
mod tools;
mod upstream;
pub mod when;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use agents::{gate, gate_reloadable};
pub use catalog::{Admitted, Approved, Catalog, Gate, Listed, result_text};
use hitl_graph::Agent;
use hitl_upstream::Upstream;
pub use hold::Bus;
use hold::Holds;
pub use passthrough::{Changed, ListChanged, Who};
use passthrough::{Collisions, Served};
pub use policy::{
    Action, Decided, DecisionKind, GatewaySection, Judgement, Kind, Policies, Policy, UnmatchedGlob, UnmatchedMode,
    UpstreamTools, glob_match,
};
use serde_json::{Map, Value};
pub use subscriptions::{MAX_SUBSCRIPTIONS, MAX_SUBSCRIPTIONS_PER_CLIENT, Updates};
pub use tools::{fill, fill_shown};
pub use upstream::UpstreamSpec;

/// Where the gateway puts each upstream's tools, each with the rest of its upstream
/// listing (`title`, `annotations`, `outputSchema`, …): swaps the set named `source`
/// whole, or refuses (a name another source serves) and changes nothing.
pub type Publish = Arc<dyn Fn(&str, Vec<(Agent, Map<String, Value>)>) -> Result<(), String> + Send + Sync>;

/// How often tools are listed again (an upstream that is down is tried every tick).
const LIST_TTL: Duration = Duration::from_secs(60);
const TICK: Duration = Duration::from_secs(5);
/// How long a 2025-era upstream's call that asked mid-call is held by default.
pub const HOLD_TIMEOUT: Duration = Duration::from_secs(600);

/// The upstreams, the policies their tools are listed under, and each one's state.
pub struct Gateway {
    upstreams: Vec<(UpstreamSpec, Arc<Upstream>)>,
    policies: Arc<Policies>,
    states: Mutex<BTreeMap<String, State>>,
    holds: Arc<Holds>,
    hold_timeout: Duration,
    catalog: Catalog,
    /// The names of hitl's own agents, which policies may name too.
    agents: Vec<String>,
    /// `[gateway] unmatched`.
    mode: UnmatchedMode,
    /// The policies judged at the last listing.
    judgement: Mutex<Judgement>,
    /// Whether `start` has listed every upstream once.
    started: std::sync::atomic::AtomicBool,
    /// What each upstream listed at its last listing (by name).
    served: Mutex<BTreeMap<String, Served>>,
    /// Resource URIs several upstreams list, logged once each.
    collisions: Collisions,
    /// Told when a listing changes one of hitl's lists.
    changed: Option<Changed>,
    /// hitl's clients' resource subscriptions.
    subscriptions: Arc<Mutex<subscriptions::Table>>,
    /// Told when a subscribed resource is updated.
    updates: Option<Updates>,
    /// Where calls are counted against `rate_limit`s and approvals that cover later
    /// calls are kept (none: calls are not limited, approvals cover nothing later).
    kept: Option<PolicyState>,
    /// What signs the receipts of approved calls (`[receipts]`; none: no receipts).
    receipts: Option<Arc<receipts::Receipts>>,
}

/// What the policies keep between calls: the counts of `rate_limit`s and the approvals
/// that cover later calls (`approval_ttl`). In this process's memory, or in the store
/// the replicas share, so that every replica counts and covers alike.
#[derive(Clone)]
pub struct PolicyState {
    /// Where calls are counted.
    pub limiter: Arc<dyn limit::Limiter>,
    /// Where approvals that cover later calls are kept.
    pub grants: Arc<dyn cover::Grants>,
}

impl PolicyState {
    /// Both in this process's memory (one replica).
    pub fn in_memory() -> Self {
        Self { limiter: Arc::new(limit::MemoryLimiter::default()), grants: Arc::new(cover::MemoryGrants::default()) }
    }
}

/// What the gateway knows of one upstream.
#[derive(Debug, Clone)]
enum State {
    /// Listed at `at`, with these tools (their own names).
    Up { tools: Vec<String>, at: Instant },
    /// The last listing failed.
    Down { error: String },
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("upstreams", &self.upstreams.iter().map(|(s, _)| &s.name).collect::<Vec<_>>())
            .finish()
    }
}

impl Gateway {
    /// The upstreams of `specs` (checked; nothing is sent yet) under `policies`. `env`
    /// resolves `env:` values.
    pub fn new(
        specs: &[UpstreamSpec],
        policies: Policies,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let mut upstreams: Vec<(UpstreamSpec, Arc<Upstream>)> = Vec::new();
        for spec in specs {
            if upstreams.iter().any(|(s, _)| s.name == spec.name) {
                return Err(format!("upstream {:?} is configured twice", spec.name));
            }
            upstreams.push((spec.clone(), Arc::new(spec.upstream(&env)?)));
        }
        Ok(Self {
            upstreams,
            policies: Arc::new(policies),
            states: Mutex::new(BTreeMap::new()),
            holds: Arc::new(Holds::new()),
            hold_timeout: HOLD_TIMEOUT,
            catalog: Catalog::default(),
            agents: Vec::new(),
            mode: UnmatchedMode::Warn,
            judgement: Mutex::new(Judgement::default()),
            started: std::sync::atomic::AtomicBool::new(false),
            served: Mutex::new(BTreeMap::new()),
            collisions: Collisions::default(),
            changed: None,
            subscriptions: Arc::default(),
            updates: None,
            kept: None,
            receipts: None,
        })
    }

    /// This gateway taking over from `previous` (a reload of the configuration): an
    /// upstream whose settings did not change keeps its connection, sessions and
    /// child process, and the calls `previous` holds and its clients' resource
    /// subscriptions carry over.
    #[must_use]
    pub fn succeeding(mut self, previous: &Gateway) -> Self {
        for (spec, upstream) in &mut self.upstreams {
            if let Some((_, kept)) = previous.upstreams.iter().find(|(old, _)| old == spec) {
                *upstream = kept.clone();
            }
        }
        self.holds = previous.holds.clone();
        self.subscriptions = previous.subscriptions.clone();
        self
    }

    /// Tells `changed` when a listing changes the tools, resources or prompts hitl
    /// lists (after the first listing of each upstream), so hitl can tell its clients.
    #[must_use]
    pub fn with_changes(mut self, changed: Changed) -> Self {
        self.changed = Some(changed);
        self
    }

    /// Sends each call a person approved with its receipt signed by `receipts`.
    #[must_use]
    pub fn with_receipts(mut self, receipts: Arc<receipts::Receipts>) -> Self {
        self.receipts = Some(receipts);
        self
    }

    /// Counts calls against the policies' `rate_limit`s and keeps approvals that cover
    /// later calls in `kept` (shared by the replicas when it is in their store).
    #[must_use]
    pub fn with_policy_state(mut self, kept: PolicyState) -> Self {
        self.kept = Some(kept);
        self
    }

    /// Tells `updates` which clients' subscribed resource an upstream updated.
    #[must_use]
    pub fn with_updates(mut self, updates: Updates) -> Self {
        self.updates = Some(updates);
        self
    }

    /// Policies may name these agents of hitl's own (a glob that matches one of them is
    /// not unmatched), and `mode` says what a glob that matches nothing does.
    #[must_use]
    pub fn with_agents(mut self, agents: Vec<String>, mode: UnmatchedMode) -> Self {
        self.agents = agents;
        self.mode = mode;
        self
    }

    /// The policies' globs that match nothing listed (or are pending an upstream's first
    /// listing), as judged at the last listing.
    pub fn unmatched(&self) -> Judgement {
        self.judgement.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Judges the policies on what is listed now; globs newly unmatched are logged
    /// (`WARN`, or `ERROR` when `[gateway] unmatched = "error"`).
    fn judge(&self) -> Judgement {
        let listed: Vec<UpstreamTools> = {
            let states = self.states.lock().unwrap_or_else(|p| p.into_inner());
            let served = self.served.lock().unwrap_or_else(|p| p.into_inner());
            let named = |items: &[Map<String, Value>], key: &str| -> Vec<String> {
                items.iter().filter_map(|item| item.get(key).and_then(Value::as_str)).map(str::to_owned).collect()
            };
            self.upstreams
                .iter()
                .map(|(spec, _)| {
                    let tools = match states.get(&spec.name) {
                        Some(State::Up { tools, .. }) => Some(tools.clone()),
                        _ => None,
                    };
                    // What it served besides its tools, from the same listing.
                    let served = served.get(&spec.name).filter(|_| tools.is_some());
                    UpstreamTools {
                        prefix: spec.listed_name(""),
                        tools,
                        resources: served.map(|s| {
                            let mut uris = named(&s.resources, "uri");
                            uris.extend(named(&s.templates, "uriTemplate"));
                            uris
                        }),
                        prompts: served.map(|s| named(&s.prompts, "name")),
                    }
                })
                .collect()
        };
        let judgement = self.policies.judge(&self.agents, &listed);
        let mut last = self.judgement.lock().unwrap_or_else(|p| p.into_inner());
        for found in judgement.unmatched.iter().filter(|u| !last.unmatched.contains(u)) {
            found.log(self.mode);
        }
        *last = judgement.clone();
        judgement
    }

    /// How long a call that asks mid-call is held for an upstream without a
    /// `hold_timeout` of its own (default [`HOLD_TIMEOUT`]).
    pub fn with_hold_timeout(mut self, timeout: Duration) -> Self {
        self.hold_timeout = timeout;
        self
    }

    /// The tools as listed now (kept current by every listing), for agents that call
    /// them under the same policies.
    pub fn catalog(&self) -> Catalog {
        self.catalog.clone()
    }

    /// The prefix of each upstream's listed names (`<name>.` unless `tool_prefix`).
    pub fn prefixes(specs: &[UpstreamSpec]) -> Vec<String> {
        specs.iter().map(|spec| spec.listed_name("")).collect()
    }

    /// Takes answers to the calls this replica holds from other replicas, and forwards
    /// answers to calls they hold, over `bus`. Without a bus, an answer that reaches a
    /// replica other than the holder fails the call with an error result.
    pub async fn listen(&self, bus: Arc<dyn Bus>) -> Result<(), String> {
        self.holds.listen(bus).await
    }

    /// Lists every upstream's tools and publishes them. Two tools with one listed name
    /// are an error naming both sources; an upstream that cannot be reached is logged,
    /// reported by [`Gateway::health`] and tried again by [`Gateway::keep_fresh`].
    /// With `[gateway] unmatched = "error"`, an upstream that does not answer is asked
    /// again until its `timeout` has passed, and the start fails while a policy glob
    /// matches nothing (or waits on an upstream that never listed).
    pub async fn start(&self, publish: &Publish) -> Result<(), String> {
        for index in 0..self.upstreams.len() {
            // Each upstream gets its own `timeout` to answer.
            let started = Instant::now();
            loop {
                if let Err(Refused(error)) = self.refresh(index, publish).await {
                    return Err(error);
                }
                let (spec, _) = &self.upstreams[index];
                let waiting = self.mode == UnmatchedMode::Error && self.was_down(&spec.name);
                if !waiting || started.elapsed() >= spec.timeout() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        self.started.store(true, std::sync::atomic::Ordering::Relaxed);
        let judgement = self.judge();
        let problems = judgement.problems();
        if self.mode == UnmatchedMode::Error && !problems.is_empty() {
            return Err(format!(
                "[gateway] unmatched = \"error\": {} policy glob(s) guard nothing:\n  {}",
                problems.len(),
                problems.join("\n  ")
            ));
        }
        Ok(())
    }

    /// Lists an upstream's tools again as soon as it says they changed
    /// (`notifications/tools/list_changed`, on the stream each upstream keeps open),
    /// else every minute, and those that are down every few seconds, until the task is
    /// dropped.
    pub async fn keep_fresh(self: Arc<Self>, publish: Publish) {
        let mut watchers = tokio::task::JoinSet::new();
        for index in 0..self.upstreams.len() {
            let upstream = self.upstreams[index].1.clone();
            watchers.spawn(async move { upstream.listen().await });
            let upstream = self.upstreams[index].1.clone();
            watchers.spawn(async move { upstream.listen_resources().await });
            let gateway = self.clone();
            watchers.spawn(async move { gateway.relay_updates(index).await });
            // A light probe every `health_interval`, so /healthz tells of an upstream
            // that went away between calls.
            let (upstream, every) = (self.upstreams[index].1.clone(), self.upstreams[index].0.health_interval());
            watchers.spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    if let Err(error) = upstream.probe().await {
                        tracing::debug!(upstream = %upstream.name(), %error, "its probe failed");
                    }
                }
            });
            let (gateway, publish) = (self.clone(), publish.clone());
            watchers.spawn(async move {
                loop {
                    gateway.upstreams[index].1.tools_changed().await;
                    let name = &gateway.upstreams[index].0.name;
                    tracing::info!(upstream = %name, "its tools changed; listing them again");
                    if let Err(Refused(error)) = gateway.refresh(index, &publish).await {
                        tracing::error!(upstream = %name, %error, "its new tool list is refused; the old one stays");
                    }
                }
            });
        }
        loop {
            tokio::time::sleep(TICK).await;
            for index in 0..self.upstreams.len() {
                let name = &self.upstreams[index].0.name;
                let due = match self.states.lock().unwrap_or_else(|p| p.into_inner()).get(name) {
                    Some(State::Up { at, .. }) => at.elapsed() >= LIST_TTL,
                    _ => true,
                };
                if due && let Err(Refused(error)) = self.refresh(index, &publish).await {
                    tracing::error!(upstream = %name, %error, "its new tool list is refused; the old one stays");
                }
            }
        }
    }

    /// `{"upstreams": {name: {"status": "ok", "tools": n, "held": calls held here} |
    /// {"status": "unreachable", "error": …}}, "unmatched_policies": n}`, for `/healthz`,
    /// with `resource_subscriptions` and `upstream_subscriptions` when an upstream
    /// offers subscriptions.
    pub fn health(&self) -> serde_json::Map<String, Value> {
        let states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        let upstreams: serde_json::Map<String, Value> = self
            .upstreams
            .iter()
            .map(|(spec, upstream)| {
                let held = self.holds.count(&spec.name);
                let state = match states.get(&spec.name) {
                    // Listed, but the last request or probe found no one (or its process
                    // exited): its tools stay listed, its calls fail naming it.
                    Some(State::Up { tools, .. }) if let Some(error) = upstream.unreachable() => {
                        serde_json::json!({"status": "unreachable", "error": error, "tools": tools.len(), "held": held})
                    }
                    Some(State::Up { tools, .. }) => {
                        serde_json::json!({"status": "ok", "tools": tools.len(), "held": held})
                    }
                    Some(State::Down { error }) => serde_json::json!({"status": "unreachable", "error": error}),
                    None => serde_json::json!({"status": "starting"}),
                };
                (spec.name.clone(), state)
            })
            .collect();
        let unmatched = self.judgement.lock().unwrap_or_else(|p| p.into_inner()).unmatched_policies();
        let mut health = serde_json::Map::from_iter([
            ("upstreams".to_owned(), Value::Object(upstreams)),
            ("unmatched_policies".to_owned(), unmatched.into()),
        ]);
        if self.offers_subscriptions() {
            // Clients' subscriptions, and those held with the upstreams (each once).
            let upstream: usize = self.upstreams.iter().map(|(_, u)| u.subscriptions()).sum();
            health.insert("resource_subscriptions".into(), self.subscriptions().into());
            health.insert("upstream_subscriptions".into(), upstream.into());
        }
        health
    }

    fn was_down(&self, name: &str) -> bool {
        matches!(self.states.lock().unwrap_or_else(|p| p.into_inner()).get(name), Some(State::Down { .. }))
    }

    /// Lists upstream `index` and publishes its tools; an unreachable upstream keeps
    /// the tools it had (their calls fail naming it).
    async fn refresh(&self, index: usize, publish: &Publish) -> Result<(), Refused> {
        let (spec, upstream) = &self.upstreams[index];
        let state = match upstream.list_tools().await {
            Ok(listed) => {
                if self.was_down(&spec.name) {
                    tracing::info!(upstream = %spec.name, "upstream answers again; its tools are listed");
                }
                let hold_timeout = spec.hold_timeout.map_or(self.hold_timeout, Duration::from_secs);
                let (mut agents, mut catalog, mut names) = (Vec::new(), Vec::new(), Vec::new());
                // Listed before the tools are published, so a listing is whole once it
                // shows.
                let served = Served {
                    tools: listed.clone(),
                    resources: self.optional_list(upstream, "resources/list", "resources").await,
                    templates: self.optional_list(upstream, "resources/templates/list", "resourceTemplates").await,
                    prompts: self.optional_list(upstream, "prompts/list", "prompts").await,
                };
                for tool in listed {
                    let Some(name) = tool.get("name").and_then(Value::as_str) else { continue };
                    names.push(name.to_owned());
                    let listed_name = spec.listed_name(name);
                    let mut listing = tool.clone();
                    for served in ["name", "description", "inputSchema"] {
                        listing.remove(served);
                    }
                    let decided = self.policies.decide(&listed_name);
                    let mut gated = tools::Gated::new(listed_name.clone(), tool, Some(&spec.name), decided);
                    if self.policies.conditional(&listed_name) {
                        gated = gated.with_conditions(self.policies.clone());
                    }
                    gated.kept = self.kept.clone();
                    gated.receipts = self.receipts.clone();
                    catalog.push(Arc::new(Listed { gated: gated.clone(), upstream: upstream.clone() }));
                    agents.push((gated.agent(upstream.clone(), self.holds.clone(), hold_timeout), listing));
                }
                publish(&format!("upstream {:?}", spec.name), agents).map_err(Refused)?;
                self.catalog.replace(&spec.name, catalog);
                self.keep_served(&spec.name, served);
                State::Up { tools: names, at: Instant::now() }
            }
            Err(error) => {
                // Logged when it goes down, not at every retry.
                if self.was_down(&spec.name) {
                    tracing::debug!(%error, "upstream still unreachable");
                } else {
                    tracing::warn!(%error, "upstream unreachable; its tools are listed once it answers");
                }
                State::Down { error: error.to_string() }
            }
        };
        let listed = matches!(state, State::Up { .. });
        self.states.lock().unwrap_or_else(|p| p.into_inner()).insert(spec.name.clone(), state);
        // Judged at each relisting once the first listing of every upstream is done
        // (`start` judges that one).
        if listed && self.started.load(std::sync::atomic::Ordering::Relaxed) {
            self.judge();
        }
        Ok(())
    }
}

/// A tool list the registry refused (a name another source serves).
struct Refused(String);

impl Gateway {
    /// A listing the upstream may not offer (`resources/list`, `prompts/list`, …):
    /// empty when it does not (or it failed, which is logged).
    async fn optional_list(&self, upstream: &Upstream, method: &str, key: &str) -> Vec<Map<String, Value>> {
        match upstream.list_all(method, key).await {
            Ok(items) => items,
            Err(hitl_upstream::UpstreamError::Refused { error, .. })
                if error.code == hitl_protocol::ErrorCode::METHOD_NOT_FOUND =>
            {
                Vec::new()
            }
            Err(error) => {
                tracing::debug!(upstream = %upstream.name(), %error, "{method} failed; listed as empty");
                Vec::new()
            }
        }
    }

    /// Keeps what upstream `name` listed and tells which of hitl's lists changed.
    fn keep_served(&self, name: &str, served: Served) {
        let before = self.served.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_owned(), served.clone());
        let (Some(before), Some(changed)) = (before, &self.changed) else { return };
        if before.tools != served.tools {
            changed(ListChanged::Tools);
        }
        if before.resources != served.resources || before.templates != served.templates {
            changed(ListChanged::Resources);
        }
        if before.prompts != served.prompts {
            changed(ListChanged::Prompts);
        }
    }

    /// Each upstream's listing, in the order of the file, with its spec.
    fn each_served(&self) -> Vec<(&UpstreamSpec, &Arc<Upstream>, Served)> {
        let served = self.served.lock().unwrap_or_else(|p| p.into_inner());
        self.upstreams
            .iter()
            .filter_map(|(spec, upstream)| served.get(&spec.name).map(|s| (spec, upstream, s.clone())))
            .collect()
    }

    /// Whether any upstream lists resources or templates.
    pub fn serves_resources(&self) -> bool {
        self.served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .any(|s| !s.resources.is_empty() || !s.templates.is_empty())
    }

    /// The resources the upstreams list that `who` may read, URIs as the upstreams gave
    /// them; a URI two upstreams list is listed once, as the first in the file lists it.
    pub fn resources(&self, who: Who<'_>) -> Vec<Map<String, Value>> {
        let mut listed: Vec<Map<String, Value>> = Vec::new();
        let mut first: BTreeMap<String, String> = BTreeMap::new();
        for (spec, _, served) in self.each_served() {
            for resource in served.resources {
                let Some(uri) = resource.get("uri").and_then(Value::as_str).map(str::to_owned) else { continue };
                if let Some(by) = first.get(&uri) {
                    self.collisions.log(&uri, by, &spec.name);
                    continue;
                }
                first.insert(uri.clone(), spec.name.clone());
                if self.policies.may_use(Kind::Resource, &spec.listed_name(&uri), who.principal, who.groups) {
                    listed.push(resource);
                }
            }
        }
        listed
    }

    /// The resource templates the upstreams list that `who` may use (each named
    /// `<prefix><uriTemplate>` for the policies).
    pub fn resource_templates(&self, who: Who<'_>) -> Vec<Map<String, Value>> {
        let mut listed = Vec::new();
        for (spec, _, served) in self.each_served() {
            for template in served.templates {
                let Some(uri) = template.get("uriTemplate").and_then(Value::as_str) else { continue };
                if self.policies.may_use(Kind::Resource, &spec.listed_name(uri), who.principal, who.groups) {
                    listed.push(template);
                }
            }
        }
        listed
    }

    /// The prompts the upstreams list that `who` may get, named as tools are
    /// (`<prefix><name>`).
    pub fn prompts(&self, who: Who<'_>) -> Vec<Map<String, Value>> {
        let mut listed = Vec::new();
        for (spec, _, served) in self.each_served() {
            for mut prompt in served.prompts {
                let Some(name) = prompt.get("name").and_then(Value::as_str).map(|n| spec.listed_name(n)) else {
                    continue;
                };
                if self.policies.may_use(Kind::Prompt, &name, who.principal, who.groups) {
                    prompt.insert("name".into(), Value::String(name));
                    listed.push(prompt);
                }
            }
        }
        listed
    }

    /// Whether `name` is an upstream prompt's listed name.
    pub fn has_prompt(&self, name: &str) -> bool {
        self.each_served().iter().any(|(spec, _, served)| {
            served
                .prompts
                .iter()
                .any(|p| p.get("name").and_then(Value::as_str).is_some_and(|n| spec.listed_name(n) == name))
        })
    }

    /// Reads `uri` from the upstream that serves it: the first in the file that lists
    /// it, or else returned it in a result, or else lists a template it fits. A URI
    /// no upstream serves, or that `who` is not among the callers of, is `Resource not
    /// found` (so names do not leak); a denied one names its policy, as a denied tool's
    /// call does.
    pub async fn read_resource(&self, uri: &str, who: Who<'_>) -> Result<Value, hitl_protocol::ErrorObject> {
        let Some(index) = self.route(uri) else { return Err(passthrough::not_found(uri)) };
        let (spec, upstream) = &self.upstreams[index];
        self.may_read(spec, uri, who)?;
        let params = Map::from_iter([("uri".to_owned(), Value::String(uri.to_owned()))]);
        match upstream.request_for(who.caller, "resources/read", params).await {
            Ok(result) => Ok(passthrough::as_ours(result)),
            Err(error) => Err(passthrough::relayed_error(error)),
        }
    }

    /// The upstream (its index) that serves `uri`: the first in the file that lists it,
    /// or else returned it in a result, or else lists a template it fits.
    fn route(&self, uri: &str) -> Option<usize> {
        let served = self.served.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let each = || {
            self.upstreams.iter().enumerate().filter_map(|(i, (spec, _))| served.get(&spec.name).map(|s| (i, spec, s)))
        };
        let returned = self.holds.seen.upstream_of(uri);
        each()
            .find(|(_, _, s)| s.resources.iter().any(|r| r.get("uri").and_then(Value::as_str) == Some(uri)))
            .or_else(|| each().find(|(_, spec, _)| returned.as_deref() == Some(spec.name.as_str())))
            .or_else(|| {
                each().find(|(_, _, s)| {
                    s.templates.iter().any(|t| {
                        t.get("uriTemplate").and_then(Value::as_str).is_some_and(|t| passthrough::fits(t, uri))
                    })
                })
            })
            .map(|(i, _, _)| i)
    }

    /// Whether `who` may read `uri` of `spec`'s upstream: a denied one names its policy;
    /// one `who` is not among the callers of is `Resource not found`.
    fn may_read(&self, spec: &UpstreamSpec, uri: &str, who: Who<'_>) -> Result<(), hitl_protocol::ErrorObject> {
        let name = spec.listed_name(uri);
        let decided = self.policies.decide_for(Kind::Resource, &name);
        if decided.action == Action::Deny {
            let policy = decided.policy.map_or_else(|| "[gateway] default_action".to_owned(), Policy::label);
            return Err(hitl_protocol::ErrorObject::invalid_params(format!(
                "Resource {uri} is denied by the policy {policy}"
            )));
        }
        if !self.policies.may_use(Kind::Resource, &name, who.principal, who.groups) {
            return Err(passthrough::not_found(uri));
        }
        Ok(())
    }

    /// Gets prompt `name` (its listed name) from its upstream, with `params` (its
    /// `arguments`, and a 2026-07-28 retry's `inputResponses` and `requestState`) sent
    /// on. `None` when no upstream lists it (or `who` may not see it); a denied prompt
    /// names its policy.
    pub async fn get_prompt(
        &self,
        name: &str,
        mut params: Map<String, Value>,
        who: Who<'_>,
    ) -> Option<Result<Value, hitl_protocol::ErrorObject>> {
        let served = self.each_served();
        let (upstream, own) = served.iter().find_map(|(spec, upstream, s)| {
            s.prompts.iter().find_map(|p| {
                let own = p.get("name").and_then(Value::as_str)?;
                (spec.listed_name(own) == name).then(|| (Arc::clone(upstream), own.to_owned()))
            })
        })?;
        let decided = self.policies.decide_for(Kind::Prompt, name);
        if decided.action == Action::Deny {
            let policy = decided.policy.map_or_else(|| "[gateway] default_action".to_owned(), Policy::label);
            return Some(Err(hitl_protocol::ErrorObject::invalid_params(format!(
                "Prompt {name} is denied by the policy {policy}"
            ))));
        }
        if !self.policies.may_use(Kind::Prompt, name, who.principal, who.groups) {
            return None;
        }
        params.insert("name".into(), Value::String(own));
        Some(match upstream.request_for(who.caller, "prompts/get", params).await {
            Ok(result) => Ok(passthrough::as_ours(result)),
            Err(error) => Err(passthrough::relayed_error(error)),
        })
    }
}
