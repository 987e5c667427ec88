//! The rules a configuration file gives (`[[policy]]`, `[[upstream]]`, `[[agent]]`),
//! made in one piece so that a reload replaces them whole ([`crate::reload`]).

use std::sync::Arc;

use anyhow::{Context as _, bail};
use hitl_gateway::{Gateway, Judgement, Policies, PolicyState, UnmatchedMode};
use hitl_interrupt::Agent;

use super::ServeArgs;

/// What the policies, the upstreams and the declared agents of one configuration make.
#[derive(Clone)]
pub(crate) struct Rules {
    pub(crate) policies: Arc<Policies>,
    /// The gateway, configured but not started (none without `[[upstream]]`).
    pub(crate) gateway: Option<Arc<Gateway>>,
    /// hitl's own agents and the declared ones, each under the policies.
    pub(crate) agents: Vec<Agent>,
    /// Without upstreams: the policies judged on the agents alone.
    pub(crate) judged: Option<Judgement>,
    /// `[gateway] unmatched`.
    pub(crate) mode: UnmatchedMode,
    /// The `[[upstream]]`s, as written.
    pub(crate) upstreams: Vec<hitl_gateway::UpstreamSpec>,
    /// Where calls are counted against `rate_limit`s and approvals that cover later
    /// calls are kept: this process's memory, or the Redis store the replicas share
    /// (kept across reloads).
    pub(crate) kept: PolicyState,
    /// What signs the receipts of approved calls (`[receipts]`, read at start and kept
    /// across reloads, as the public key served is).
    pub(crate) receipts: Option<Arc<hitl_gateway::receipts::Receipts>>,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules").field("agents", &self.agents.len()).field("gateway", &self.gateway).finish()
    }
}

impl Rules {
    /// The policies' globs that match nothing: as the gateway judged them at its last
    /// listing, else as judged on hitl's own agents.
    pub(crate) fn unmatched(&self) -> Judgement {
        match &self.gateway {
            Some(gateway) => gateway.unmatched(),
            None => self.judged.clone().unwrap_or_default(),
        }
    }
}

impl ServeArgs {
    /// The rules of these arguments for `own` agents (the examples, fixtures and a
    /// program's own, not gated yet), telling `notifier` of list changes. A reload
    /// passes the `previous` rules, whose unchanged upstreams and held calls carry over.
    pub(crate) fn rules(
        &self,
        own: &[Agent],
        notifier: &hitl_tower::Notifier,
        previous: Option<&Rules>,
    ) -> anyhow::Result<Rules> {
        // Declared agents call the gateway's tools as it lists them.
        let gateway = self.gateway.gateway()?;
        let gateway = match (gateway, previous.and_then(|p| p.gateway.as_deref())) {
            (Some(gateway), Some(previous)) => Some(gateway.succeeding(previous)),
            (gateway, _) => gateway,
        };
        let kept = match previous {
            Some(previous) => previous.kept.clone(),
            None => self.policy_state()?,
        };
        let receipts = match previous {
            Some(previous) => previous.receipts.clone(),
            None => self.receipts()?,
        };
        let gateway = gateway.map(|g| g.with_policy_state(kept.clone()));
        let gateway = match &receipts {
            Some(receipts) => gateway.map(|g| g.with_receipts(receipts.clone())),
            None => gateway,
        };
        let catalog = gateway.as_ref().map(|g| g.catalog()).unwrap_or_default();
        let env = |name: &str| std::env::var(name).ok();
        let declared = hitl_declared::build(&self.declared, &catalog, env).map_err(|problem| {
            let file = self.config.as_deref().map_or_else(String::new, |f| format!("{}: ", f.display()));
            anyhow::anyhow!("{file}{problem}")
        })?;
        for agent in &declared {
            if own.iter().any(|a| a.name == agent.name) {
                bail!(
                    "[[agent]] {:?}: a built-in agent has this name (rename it, or serve with --no-examples)",
                    agent.name
                );
            }
        }
        // Policies apply to agents too: review and deny act before an agent starts.
        // With a file that may be reloaded, every agent has its guard, so a call paused
        // under earlier rules resumes under the rules then in force.
        let policies = Arc::new(self.gateway.policies()?);
        let gate = match self.config.is_some() {
            true => hitl_gateway::gate_reloadable,
            false => hitl_gateway::gate,
        };
        let mut agents: Vec<Agent> = own
            .iter()
            .cloned()
            .chain(declared)
            .map(|a| gate(a, &policies, Some(&kept)))
            .collect::<Result<_, _>>()
            .map_err(anyhow::Error::msg)?;
        // The approvers' decision tools are outside every policy and the default action.
        if self.pages.approvals.mcp_decisions {
            if !policies.have_approvers() {
                bail!(
                    "[approvals] mcp_decisions = true lists its tools to approvers, but no [[policy]] names approvers"
                );
            }
            agents.extend(self.decision_desk.agents());
        }
        if policies.limit_callers() && !self.authenticates() && self.principal_header.is_none() && !self.stdio {
            bail!(
                "a [[policy]] names callers, but callers are not known: set [auth] tokens_file (--tokens-file) or --principal-header"
            );
        }
        if policies.cover_later_calls() && !self.authenticates() && self.principal_header.is_none() && !self.stdio {
            bail!(
                "a [[policy]] sets approval_ttl, whose approvals cover the same caller's later calls, but callers are not known: set [auth] tokens_file (--tokens-file), [auth.jwt] or --principal-header"
            );
        }
        if policies.have_approvers() && !self.authenticates() {
            bail!(
                "a [[policy]] names approvers, who sign in to decide: set [auth] tokens_file (--tokens-file) or [auth.jwt]"
            );
        }
        // A policy glob that matches none of these and no upstream tool guards nothing.
        let agent_names: Vec<String> = agents.iter().map(|a| a.name.clone()).collect();
        let mode = self.gateway.gateway.unmatched.unwrap_or_default();
        let gateway = gateway.map(|g| {
            let told = notifier.clone();
            let changes: hitl_gateway::Changed = Arc::new(move |changed| {
                told.notify(match changed {
                    hitl_gateway::ListChanged::Tools => hitl_tower::ListKind::Tools,
                    hitl_gateway::ListChanged::Resources => hitl_tower::ListKind::Resources,
                    hitl_gateway::ListChanged::Prompts => hitl_tower::ListKind::Prompts,
                });
            });
            let told = notifier.clone();
            let updates: hitl_gateway::Updates = Arc::new(move |uri, clients| told.updated(uri, clients));
            Arc::new(g.with_agents(agent_names.clone(), mode).with_changes(changes).with_updates(updates))
        });
        let judged = gateway.is_none().then(|| policies.judge(&agent_names, &[]));
        let upstreams = self.gateway.upstream.clone();
        Ok(Rules { policies, gateway, agents, judged, mode, upstreams, kept, receipts })
    }

    /// The key of `[receipts] key_file`, read now.
    fn receipts(&self) -> anyhow::Result<Option<Arc<hitl_gateway::receipts::Receipts>>> {
        let Some(path) = &self.receipts.key_file else { return Ok(None) };
        let pem = std::fs::read_to_string(path).with_context(|| format!("[receipts] key_file {}", path.display()))?;
        let receipts = hitl_gateway::receipts::Receipts::from_pem(&pem)
            .map_err(|e| anyhow::anyhow!("[receipts] key_file {}: {e}", path.display()))?;
        Ok(Some(Arc::new(receipts)))
    }

    /// Where rate limits are counted and covering approvals kept: memory, or the Redis
    /// store's server.
    fn policy_state(&self) -> anyhow::Result<PolicyState> {
        if self.store == "memory" {
            return Ok(PolicyState::in_memory());
        }
        let ca = self.redis_ca_file.as_deref().map(std::fs::read).transpose()?;
        let store = hitl_store_redis::RedisStore::with_tls_roots(&self.store, ca).map_err(anyhow::Error::msg)?;
        Ok(PolicyState {
            limiter: Arc::new(crate::limits::RedisLimiter(store.clone())),
            grants: Arc::new(crate::limits::RedisGrants(store)),
        })
    }
}
