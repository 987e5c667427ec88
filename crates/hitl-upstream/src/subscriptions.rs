//! Resource subscriptions with an upstream. A 2025-era upstream is sent
//! `resources/subscribe` in the session the caller's reads go to (its own when the
//! upstream gives sessions, so a resource its session made is watched there, and the
//! session is held open while subscribed); a 2026-07-28 upstream gets the subscribed
//! URIs on one `subscriptions/listen` stream, opened again whenever they change.
//! Subscriptions are counted per session and URI: the upstream is told once, and
//! unsubscribed when the last one is gone.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::client::{Listened, Outgoing};
use crate::{Era, Upstream};

/// A `notifications/resources/updated` an upstream sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Updated {
    /// The `Mcp-Session-Id` of the 2025-era session whose stream carried it (none: a
    /// stdio process, a 2026-07-28 upstream, or one that gives no sessions).
    pub session: Option<String>,
    /// The resource.
    pub uri: String,
}

fn session_of(era: &Era) -> Option<String> {
    match era {
        Era::Legacy { session, .. } => session.clone(),
        Era::Modern => None,
    }
}

impl Upstream {
    /// Whether it declared `resources.subscribe` when its era was negotiated.
    pub fn offers_subscriptions(&self) -> bool {
        self.capabilities.lock().unwrap_or_else(|p| p.into_inner())["resources"]["subscribe"] == Value::Bool(true)
    }

    /// The resource updates it sends from now on, on any of its streams.
    pub fn updates(&self) -> broadcast::Receiver<Updated> {
        self.changed.updates.subscribe()
    }

    /// Subscribes to `uri` for caller `key`, in the session its reads go to (see
    /// [`Upstream::request_for`]); returns that session, which the updates it brings
    /// name ([`Updated::session`]). A subscription already held there is only counted.
    pub async fn subscribe(&self, key: Option<&str>, uri: &str) -> Result<Option<String>, crate::UpstreamError> {
        let listing = self.era().await?;
        if listing == Era::Modern {
            if self.subscribed.keep(None, uri, Era::Modern, None) {
                self.subscribed.uris.send_modify(|uris| {
                    uris.insert(uri.to_owned());
                });
            }
            return Ok(None);
        }
        let (era, lease) = match (key, &listing) {
            (Some(key), Era::Legacy { session: Some(_), .. }) => {
                let lease = self.lease(key);
                // A session a subscription opens declares nothing: no call of this caller runs in it yet.
                let era = self.keyed_era(&lease.slot, &listing, &Value::Object(Default::default())).await?;
                (era, Some(lease))
            }
            _ => (listing, None),
        };
        let session = session_of(&era);
        if self.subscribed.join(&session, uri) {
            return Ok(session);
        }
        let params = Map::from_iter([("uri".to_owned(), json!(uri))]);
        self.send(&era, "resources/subscribe", params, None).await?;
        self.subscribed.keep(session.clone(), uri, era, lease);
        Ok(session)
    }

    /// Gives up one hold on the subscription to `uri` in `session` (as
    /// [`Upstream::subscribe`] returned it); the last one unsubscribes upstream.
    pub async fn unsubscribe(&self, session: Option<&str>, uri: &str) {
        let Some(held) = self.subscribed.release(session, uri) else { return };
        if held.era == Era::Modern {
            self.subscribed.uris.send_modify(|uris| {
                uris.remove(uri);
            });
            return;
        }
        let params = Map::from_iter([("uri".to_owned(), json!(uri))]);
        if let Err(error) = self.send(&held.era, "resources/unsubscribe", params, None).await {
            tracing::debug!(upstream = %self.name(), uri, %error, "resources/unsubscribe failed");
        }
    }

    /// How many subscriptions it holds (each session and URI once).
    pub fn subscriptions(&self) -> usize {
        self.subscribed.len()
    }

    /// Keeps a 2026-07-28 upstream's `subscriptions/listen` stream of the subscribed
    /// URIs open (its updates reach [`Upstream::updates`]), opened again when they
    /// change or it ends; nothing while none is subscribed or the upstream is of
    /// another era. Run it in a task of its own.
    pub async fn listen_resources(&self) {
        let mut wanted = self.subscribed.uris.subscribe();
        let mut pause = Duration::from_secs(1);
        loop {
            let uris: Vec<String> = wanted.borrow_and_update().iter().cloned().collect();
            let modern = match self.era().await {
                _ if uris.is_empty() => false,
                Ok(era) => era == Era::Modern,
                Err(error) => {
                    tracing::debug!(upstream = %self.name(), %error, "its resource subscriptions wait for it");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(60));
                    continue;
                }
            };
            if !modern {
                if wanted.changed().await.is_err() {
                    return;
                }
                continue;
            }
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let method = "subscriptions/listen";
            let Value::Object(params) = json!({"notifications": {"resourceSubscriptions": uris}}) else {
                unreachable!("an object literal")
            };
            let (body, name) = crate::client::body(&Era::Modern, Some(id), method, Some(params));
            let subscribe = Outgoing { method, id: Some(id), body, name, asks: None, opened: None };
            tokio::select! {
                outcome = self.transport.listen(&Era::Modern, subscribe) => match outcome {
                    Ok(Listened::Ended) => pause = Duration::from_secs(1),
                    Ok(Listened::Unsupported) => {
                        tracing::debug!(upstream = %self.name(), "it offers no subscriptions/listen");
                        if wanted.changed().await.is_err() {
                            return;
                        }
                        continue;
                    }
                    Err(error) => {
                        tracing::debug!(upstream = %self.name(), %error, "its resource subscription stream failed");
                        pause = (pause * 2).min(Duration::from_secs(60));
                    }
                },
                // Opened again with the new URIs (the old stream is closed).
                changed = wanted.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
            }
            tokio::time::sleep(pause).await;
        }
    }
}
