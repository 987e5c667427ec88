//! A server as a configuration file says, for the binary and a library user alike
//! ([`crate::ServerBuilder::config_file`]): its `[server]` options, the gateway and
//! its upstreams, the policies over every tool, declared agents, approvals by other
//! people, authentication, and reloads while serving. What cannot be made before
//! serving (listing the upstreams, hearing other replicas, watching the file) is a
//! [`Startup`] the server runs as it starts.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::ArgMatches;
use hitl_interrupt::{Agent, Engine};
use hitl_tower::{McpService, Notifier, Tools};

use crate::reload::{Live, Reloader};

/// What a configured server does as it starts serving.
pub(crate) struct Startup {
    pub(crate) live: Live,
    pub(crate) notifier: Notifier,
    /// The agents given to the builder, before the policies (a reload gates them
    /// again, with the examples and fixtures the options ask for).
    pub(crate) own: Vec<Agent>,
    /// Where its pages are served, for the checks a reload makes again.
    pub(crate) local: std::net::SocketAddr,
    /// The store's URL (`memory`, or Redis whose channels replicas share).
    pub(crate) store: String,
    pub(crate) redis_ca_file: Option<PathBuf>,
    /// Whether 2025-era clients are asked by push (their answers may reach another
    /// replica).
    pub(crate) push: bool,
    pub(crate) declared: Vec<hitl_declared::AgentSpec>,
    /// The file and the command line over it, read again on a reload (none: no file).
    pub(crate) reload: Option<(PathBuf, ArgMatches)>,
}

/// What of a built server a [`Startup`] works with.
pub(crate) struct Handles {
    pub(crate) tools: Tools,
    pub(crate) engine: Engine,
    pub(crate) service: McpService,
    pub(crate) pages: Option<hitl_pages::Reload>,
}

impl Startup {
    /// Gates `agent`, given to the builder after the configuration, under the
    /// policies in force, and keeps it for reloads; `None` (logged) when it cannot be
    /// served beside `served`.
    pub(crate) fn adopt(&mut self, agent: Agent, served: &[Agent]) -> Option<Agent> {
        if served.iter().any(|a| a.name == agent.name) {
            tracing::error!(agent = %agent.name, "an agent of this name is served already; this one is not");
            return None;
        }
        let policies = self.live.now().rules.policies.clone();
        let gate = if self.reload.is_some() { hitl_gateway::gate_reloadable } else { hitl_gateway::gate };
        let kept = self.live.now().rules.kept.clone();
        match gate(agent.clone(), &policies, Some(&kept)) {
            Ok(gated) => {
                self.own.push(agent);
                Some(gated)
            }
            Err(error) => {
                tracing::error!(%error, "an agent cannot be put under the policies; it is not served");
                None
            }
        }
    }

    /// Hears other replicas over Redis, lists every upstream (failing as
    /// `[gateway] unmatched = "error"` says), keeps the lists fresh and watches the
    /// file for reloads.
    pub(crate) async fn run(self, server: Handles) -> anyhow::Result<()> {
        // Replicas sharing a Redis store tell each other over its pub/sub channels.
        let channels = match self.store.as_str() {
            "memory" => None,
            url => {
                let ca =
                    self.redis_ca_file.as_deref().map(std::fs::read).transpose().context("reading the Redis CA")?;
                Some(hitl_store_redis::Channels::new(url, ca).map_err(anyhow::Error::msg)?)
            }
        };
        if let Some(channels) = &channels {
            if self.push {
                // A client's response may reach another replica than the stream that asked.
                let bus = Arc::new(crate::bus::RedisPushBus(channels.clone()));
                if let Err(error) = server.service.listen_for_answers(bus).await {
                    tracing::warn!(%error, "cannot listen for answers other replicas forward yet; trying again");
                }
            }
            // A decision stored on one replica wakes the retries every replica holds for it.
            if let Err(error) = crate::bus::share_decisions(&server.engine, channels.clone()).await {
                tracing::warn!(%error, "cannot hear decisions stored by other replicas yet; trying again");
            }
        }
        let loaded = self.live.now();
        let mut fresh = None;
        if let Some(gateway) = &loaded.rules.gateway {
            let tools = server.tools.clone();
            let publish: hitl_gateway::Publish = Arc::new(move |source, agents| tools.replace_listed(source, agents));
            if let Some(channels) = &channels {
                // Answers to calls another replica holds go to it over the store's Redis
                // (the held calls carry over to the gateway of a reloaded file).
                let bus = Arc::new(crate::bus::RedisBus(channels.clone()));
                if let Err(error) = gateway.listen(bus).await {
                    tracing::warn!(%error, "cannot listen for answers forwarded by other replicas yet; trying again");
                }
            }
            gateway.start(&publish).await.map_err(anyhow::Error::msg)?;
            for unmet in hitl_declared::unmet(&self.declared, &gateway.catalog()) {
                tracing::warn!("{unmet} yet: its calls fail until an upstream lists it");
            }
            fresh = crate::reload::keep_fresh(Some(gateway), &server.tools);
        }
        if let Some((path, matches)) = self.reload {
            let reloader = Reloader {
                path,
                matches,
                own: self.own,
                notifier: self.notifier,
                tools: server.tools,
                pages: server.pages,
                attempted: loaded.digest.clone(),
                live: self.live.clone(),
                local: self.local,
                fresh,
            };
            tokio::spawn(reloader.run());
        }
        Ok(())
    }
}
