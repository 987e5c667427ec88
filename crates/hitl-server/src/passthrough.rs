//! The gateway's upstream resources and prompts as the endpoint's
//! [`hitl_tower::Passthrough`] (the two crates do not know each other).

use std::sync::Arc;

use hitl_gateway::Who;
use hitl_protocol::ErrorObject;
use hitl_tower::{Asker, PassFuture, Passed, Passthrough, Subscribed};
use serde_json::{Map, Value, json};

use crate::reload::Live;

/// The upstreams of the configuration in force, passed through under its policies
/// (none: nothing is listed, reads fail as for an unknown resource or prompt).
pub(crate) struct Upstreams(pub(crate) Live);

impl Upstreams {
    fn gateway(&self) -> Option<Arc<hitl_gateway::Gateway>> {
        self.0.now().rules.gateway.clone()
    }
}

fn who(asker: &Asker) -> Who<'_> {
    Who { principal: asker.principal.as_deref(), groups: &asker.groups, caller: Some(&asker.caller) }
}

/// What a read of `uri` gets with no upstream to serve it.
fn not_found(uri: &str) -> ErrorObject {
    ErrorObject::invalid_params(format!("Resource not found: {uri}")).with_data(json!({ "uri": uri }))
}

impl Passthrough for Upstreams {
    fn resources(&self, asker: &Asker) -> Vec<Map<String, Value>> {
        self.gateway().map(|g| g.resources(who(asker))).unwrap_or_default()
    }

    fn resource_templates(&self, asker: &Asker) -> Vec<Map<String, Value>> {
        self.gateway().map(|g| g.resource_templates(who(asker))).unwrap_or_default()
    }

    fn prompts(&self, asker: &Asker) -> Vec<Map<String, Value>> {
        self.gateway().map(|g| g.prompts(who(asker))).unwrap_or_default()
    }

    fn read_resource<'a>(&'a self, uri: &'a str, asker: &'a Asker) -> PassFuture<'a, Passed> {
        let gateway = self.gateway();
        Box::pin(async move {
            match gateway {
                Some(gateway) => gateway.read_resource(uri, who(asker)).await,
                None => Err(not_found(uri)),
            }
        })
    }

    fn get_prompt<'a>(
        &'a self,
        name: &'a str,
        params: Map<String, Value>,
        asker: &'a Asker,
    ) -> PassFuture<'a, Option<Passed>> {
        let gateway = self.gateway();
        Box::pin(async move {
            match gateway {
                Some(gateway) => gateway.get_prompt(name, params, who(asker)).await,
                None => None,
            }
        })
    }

    fn subscribable(&self) -> bool {
        self.gateway().is_some_and(|g| g.offers_subscriptions())
    }

    fn subscribe<'a>(&'a self, client: &'a str, uri: &'a str, asker: &'a Asker) -> PassFuture<'a, Subscribed> {
        let gateway = self.gateway();
        Box::pin(async move {
            match gateway {
                Some(gateway) => gateway.subscribe(client, uri, who(asker)).await,
                None => Err(not_found(uri)),
            }
        })
    }

    fn unsubscribe<'a>(&'a self, client: &'a str, uri: &'a str) -> PassFuture<'a, ()> {
        let gateway = self.gateway();
        Box::pin(async move {
            if let Some(gateway) = gateway {
                gateway.unsubscribe(client, uri).await;
            }
        })
    }

    fn forget<'a>(&'a self, client: &'a str) -> PassFuture<'a, ()> {
        let gateway = self.gateway();
        Box::pin(async move {
            if let Some(gateway) = gateway {
                gateway.forget(client).await;
            }
        })
    }
}
