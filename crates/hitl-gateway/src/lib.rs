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
//!     vec![Policy { tools: vec!["db.drop_*".into()], action: Action::Review, decisions: None, description: None }],
//!     GatewaySection::default(),
//! )?;
//! let gateway = Gateway::start(&[db], &policies, |name| std::env::var(name).ok(), &[]).await?;
//! println!("{} gated tools", gateway.agents.len());
//! # Ok(()) }
//! ```

mod policy;
mod tools;
mod upstream;

use std::collections::HashMap;
use std::sync::Arc;

use hitl_graph::Agent;
use hitl_upstream::Upstream;
pub use policy::{Action, Decided, DecisionName, GatewaySection, Policies, Policy, glob_match};
pub use upstream::UpstreamSpec;

/// The upstreams and the agents that serve their tools.
#[derive(Debug, Default)]
pub struct Gateway {
    /// One agent per listed upstream tool.
    pub agents: Vec<Agent>,
    /// The upstreams, by name.
    pub upstreams: Vec<Arc<Upstream>>,
}

impl Gateway {
    /// Connects to every upstream and lists its tools under `policies`. `env` resolves
    /// `env:` header values; `taken` are names already served (agents), which no
    /// upstream tool may reuse. Two tools with one listed name are an error naming
    /// both sources. An upstream that cannot be reached is logged and left out.
    pub async fn start(
        specs: &[UpstreamSpec],
        policies: &Policies,
        env: impl Fn(&str) -> Option<String>,
        taken: &[String],
    ) -> Result<Self, String> {
        let mut owners: HashMap<String, String> = taken.iter().map(|n| (n.clone(), "an agent".to_owned())).collect();
        let mut gateway = Gateway::default();
        for spec in specs {
            if gateway.upstreams.iter().any(|u| u.name() == spec.name) {
                return Err(format!("upstream {:?} is configured twice", spec.name));
            }
            let upstream = Arc::new(spec.upstream(&env)?);
            gateway.upstreams.push(upstream.clone());
            let listed = match upstream.list_tools().await {
                Ok(tools) => tools,
                Err(error) => {
                    tracing::warn!(%error, "upstream unreachable at start; its tools are not listed");
                    continue;
                }
            };
            for tool in listed {
                let Some(name) = tool.get("name").and_then(serde_json::Value::as_str) else { continue };
                let listed_name = spec.listed_name(name);
                let source = format!("upstream {:?} (tool {name:?})", spec.name);
                if let Some(first) = owners.insert(listed_name.clone(), source.clone()) {
                    return Err(format!("two tools are listed as {listed_name:?}: {first} and {source}"));
                }
                let gated = tools::Gated::new(listed_name.clone(), tool, policies.decide(&listed_name));
                gateway.agents.push(gated.agent(upstream.clone()));
            }
        }
        Ok(gateway)
    }
}
