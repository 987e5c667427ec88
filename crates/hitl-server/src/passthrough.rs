//! The gateway's upstream resources and prompts as the endpoint's
//! [`hitl_tower::Passthrough`] (the two crates do not know each other).

use std::sync::Arc;

use hitl_gateway::{Gateway, Who};
use hitl_tower::{Asker, PassFuture, Passed, Passthrough, Subscribed};
use serde_json::{Map, Value};

/// The gateway's upstreams, passed through under its policies.
pub(crate) struct Upstreams(pub(crate) Arc<Gateway>);

fn who(asker: &Asker) -> Who<'_> {
    Who { principal: asker.principal.as_deref(), groups: &asker.groups, caller: Some(&asker.caller) }
}

impl Passthrough for Upstreams {
    fn resources(&self, asker: &Asker) -> Vec<Map<String, Value>> {
        self.0.resources(who(asker))
    }

    fn resource_templates(&self, asker: &Asker) -> Vec<Map<String, Value>> {
        self.0.resource_templates(who(asker))
    }

    fn prompts(&self, asker: &Asker) -> Vec<Map<String, Value>> {
        self.0.prompts(who(asker))
    }

    fn read_resource<'a>(&'a self, uri: &'a str, asker: &'a Asker) -> PassFuture<'a, Passed> {
        Box::pin(self.0.read_resource(uri, who(asker)))
    }

    fn get_prompt<'a>(
        &'a self,
        name: &'a str,
        params: Map<String, Value>,
        asker: &'a Asker,
    ) -> PassFuture<'a, Option<Passed>> {
        Box::pin(self.0.get_prompt(name, params, who(asker)))
    }

    fn subscribable(&self) -> bool {
        self.0.offers_subscriptions()
    }

    fn subscribe<'a>(&'a self, client: &'a str, uri: &'a str, asker: &'a Asker) -> PassFuture<'a, Subscribed> {
        Box::pin(self.0.subscribe(client, uri, who(asker)))
    }

    fn unsubscribe<'a>(&'a self, client: &'a str, uri: &'a str) -> PassFuture<'a, ()> {
        Box::pin(self.0.unsubscribe(client, uri))
    }

    fn forget<'a>(&'a self, client: &'a str) -> PassFuture<'a, ()> {
        Box::pin(self.0.forget(client))
    }
}
