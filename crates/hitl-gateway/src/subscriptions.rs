//! hitl's clients' resource subscriptions, relayed to the upstreams that serve the
//! resources: each client (a 2026-07-28 `subscriptions/listen` stream, a 2025-era
//! session) subscribes to URIs it may read; the upstream is subscribed in the session
//! the client's reads go to, and its `notifications/resources/updated` reach exactly the
//! clients subscribed to that URI there. Bounded per client and in all.

use std::collections::{BTreeMap, HashMap};

use hitl_protocol::ErrorObject;

use crate::passthrough::{not_found, relayed_error};
use crate::{Gateway, Who};

/// How many resources one client may be subscribed to.
pub const MAX_SUBSCRIPTIONS_PER_CLIENT: usize = 64;
/// How many resource subscriptions hitl holds for all its clients.
pub const MAX_SUBSCRIPTIONS: usize = 4096;

/// Where the gateway tells that a subscribed resource changed: its URI and the clients
/// subscribed to it.
pub type Updates = std::sync::Arc<dyn Fn(&str, &[String]) + Send + Sync>;

/// One client's subscription to one URI: the upstream (its index) and the upstream
/// session it is held in, once made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sub {
    upstream: usize,
    session: Option<String>,
    made: bool,
}

/// Every client's subscriptions.
#[derive(Debug)]
pub(crate) struct Table {
    by_client: HashMap<String, BTreeMap<String, Sub>>,
    total: usize,
    per_client: usize,
    in_all: usize,
}

impl Default for Table {
    fn default() -> Self {
        Self::new(MAX_SUBSCRIPTIONS_PER_CLIENT, MAX_SUBSCRIPTIONS)
    }
}

impl Table {
    pub(crate) fn new(per_client: usize, in_all: usize) -> Self {
        Self { by_client: HashMap::new(), total: 0, per_client, in_all }
    }

    /// Reserves `uri` on `upstream` for `client` (to be [`Table::made`]); `false` when
    /// it is subscribed already. Past a cap, the error to answer with.
    fn reserve(&mut self, client: &str, uri: &str, upstream: usize) -> Result<bool, ErrorObject> {
        let held = self.by_client.get(client);
        if held.is_some_and(|held| held.contains_key(uri)) {
            return Ok(false);
        }
        if held.map_or(0, BTreeMap::len) >= self.per_client {
            return Err(ErrorObject::invalid_params(format!(
                "Too many resource subscriptions: a client may hold at most {}",
                self.per_client
            )));
        }
        if self.total >= self.in_all {
            return Err(ErrorObject::internal(format!(
                "Too many resource subscriptions: hitl holds at most {} for all its clients; try again later",
                self.in_all
            )));
        }
        let sub = Sub { upstream, session: None, made: false };
        self.by_client.entry(client.to_owned()).or_default().insert(uri.to_owned(), sub);
        self.total += 1;
        Ok(true)
    }

    /// The reserved subscription is made in `session`; `false` when the client gave it
    /// up meanwhile (it is then to be undone upstream).
    fn made(&mut self, client: &str, uri: &str, session: Option<String>) -> bool {
        match self.by_client.get_mut(client).and_then(|held| held.get_mut(uri)) {
            Some(sub) => {
                sub.session = session;
                sub.made = true;
                true
            }
            None => false,
        }
    }

    fn remove(&mut self, client: &str, uri: &str) -> Option<Sub> {
        let held = self.by_client.get_mut(client)?;
        let sub = held.remove(uri)?;
        if held.is_empty() {
            self.by_client.remove(client);
        }
        self.total -= 1;
        Some(sub)
    }

    fn remove_client(&mut self, client: &str) -> Vec<(String, Sub)> {
        let held: Vec<(String, Sub)> = self.by_client.remove(client).into_iter().flatten().collect();
        self.total -= held.len();
        held
    }

    /// The clients subscribed to `uri` in `session` of `upstream`.
    fn targets(&self, upstream: usize, session: Option<&str>, uri: &str) -> Vec<String> {
        self.by_client
            .iter()
            .filter(|(_, held)| {
                held.get(uri).is_some_and(|s| s.made && s.upstream == upstream && s.session.as_deref() == session)
            })
            .map(|(client, _)| client.clone())
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.total
    }
}

impl Gateway {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether any upstream offers resource subscriptions (`resources.subscribe`).
    pub fn offers_subscriptions(&self) -> bool {
        self.upstreams.iter().any(|(_, upstream)| upstream.offers_subscriptions())
    }

    /// How many resource subscriptions hitl's clients hold.
    pub fn subscriptions(&self) -> usize {
        self.table().len()
    }

    /// Subscribes `client` (whoever its updates are told to) to `uri`, which `who`
    /// must be allowed to read: the upstream that serves it (as a read is routed) is
    /// subscribed in the session `who`'s reads go to. A URI no upstream serves, or that
    /// `who` is not among the callers of, is `Resource not found`; a denied one names
    /// its policy; one whose upstream offers no subscriptions says so. Subscribing
    /// again to a URI is a no-op.
    pub async fn subscribe(&self, client: &str, uri: &str, who: Who<'_>) -> Result<(), ErrorObject> {
        let Some(index) = self.route(uri) else { return Err(not_found(uri)) };
        let (spec, upstream) = &self.upstreams[index];
        self.may_read(spec, uri, who)?;
        if !upstream.offers_subscriptions() {
            return Err(ErrorObject::invalid_params(format!(
                "Resource {uri} cannot be subscribed to: upstream {} does not offer resource subscriptions",
                spec.name
            ))
            .with_data(serde_json::json!({ "uri": uri })));
        }
        if !self.table().reserve(client, uri, index)? {
            return Ok(());
        }
        match upstream.subscribe(who.caller, uri).await {
            Ok(session) => {
                let kept = self.table().made(client, uri, session.clone());
                if !kept {
                    upstream.unsubscribe(session.as_deref(), uri).await;
                }
                Ok(())
            }
            Err(error) => {
                self.table().remove(client, uri);
                Err(relayed_error(error))
            }
        }
    }

    /// Ends `client`'s subscription to `uri`, if it has one.
    pub async fn unsubscribe(&self, client: &str, uri: &str) {
        let removed = self.table().remove(client, uri);
        if let Some(sub) = removed.filter(|s| s.made) {
            self.upstreams[sub.upstream].1.unsubscribe(sub.session.as_deref(), uri).await;
        }
    }

    /// Ends every subscription of `client` (its stream closed, its session ended).
    pub async fn forget(&self, client: &str) {
        let removed = self.table().remove_client(client);
        for (uri, sub) in removed.into_iter().filter(|(_, s)| s.made) {
            self.upstreams[sub.upstream].1.unsubscribe(sub.session.as_deref(), &uri).await;
        }
    }

    /// Tells the clients subscribed to what upstream `index` says was updated, until
    /// the task is dropped.
    pub(crate) async fn relay_updates(&self, index: usize) {
        let mut updates = self.upstreams[index].1.updates();
        loop {
            let updated = match updates.recv().await {
                Ok(updated) => updated,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(upstream = %self.upstreams[index].0.name, missed, "resource updates were missed");
                    continue;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            let targets = self.table().targets(index, updated.session.as_deref(), &updated.uri);
            if let (false, Some(told)) = (targets.is_empty(), &self.updates) {
                told(&updated.uri, &targets);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_are_counted_and_capped_per_client_and_in_all() {
        let mut table = Table::new(2, 3);
        assert_eq!(table.reserve("a", "demo://1", 0), Ok(true));
        assert_eq!(table.reserve("a", "demo://1", 0), Ok(false), "again: nothing new");
        assert_eq!(table.reserve("a", "demo://2", 0), Ok(true));
        let error = table.reserve("a", "demo://3", 0).unwrap_err();
        assert_eq!(error.message, "Too many resource subscriptions: a client may hold at most 2");
        assert_eq!(error.code, hitl_protocol::ErrorCode::INVALID_PARAMS);
        assert_eq!(table.reserve("b", "demo://1", 0), Ok(true));
        let error = table.reserve("c", "demo://1", 0).unwrap_err();
        assert!(error.message.contains("hitl holds at most 3 for all its clients"), "{}", error.message);
        assert_eq!(table.len(), 3);

        // Updates reach the clients subscribed to that URI in that session, once made.
        assert!(table.made("a", "demo://1", Some("s-a".into())));
        assert!(table.targets(0, Some("s-a"), "demo://1") == ["a"]);
        assert!(table.targets(0, Some("s-b"), "demo://1").is_empty(), "another caller's session");
        assert!(table.targets(1, Some("s-a"), "demo://1").is_empty(), "another upstream");
        assert!(table.targets(0, None, "demo://1").is_empty(), "b's is not made yet");

        assert_eq!(table.remove("a", "demo://1").map(|s| s.made), Some(true));
        assert!(!table.made("a", "demo://1", None), "given up meanwhile: undone upstream");
        assert_eq!(table.remove_client("a").len(), 1);
        assert_eq!(table.len(), 1);
        assert_eq!(table.reserve("c", "demo://1", 0), Ok(true), "room again");
    }
}
