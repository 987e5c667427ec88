//! What the endpoint serves besides its agents: other servers' resources and prompts
//! (a gateway's upstreams, behind [`Passthrough`]), and the notifications that tell
//! clients a list changed: on a 2026-07-28 `subscriptions/listen` stream (the
//! kinds it asked for, each carrying its subscription id) and on a 2025-era session's
//! GET stream.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use hitl_protocol::{ErrorObject, RequestId, SubscriptionFilter};
use http::{HeaderValue, StatusCode, header};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::McpBody;

/// Who asks, for a [`Passthrough`]: the principal and groups its policies judge, and
/// the engine's key of the caller (whose upstream session serves it).
#[derive(Debug, Clone, Default)]
pub struct Asker {
    /// The caller's principal.
    pub principal: Option<String>,
    /// Its groups.
    pub groups: Vec<String>,
    /// Its key (`hitl_interrupt::Call::caller_key`).
    pub caller: String,
}

/// What a [`Passthrough`] answers: the result, or the JSON-RPC error to answer with.
pub type Passed = Result<Value, ErrorObject>;

/// The future of a [`Passthrough`] request.
pub type PassFuture<'a, T> = BoxFuture<'a, T>;

/// Resources and prompts served from elsewhere (a gateway's upstreams), each list
/// already filtered for the asker. Results are passed on as they come.
pub trait Passthrough: Send + Sync {
    /// `resources/list`'s resources.
    fn resources(&self, asker: &Asker) -> Vec<Map<String, Value>>;
    /// `resources/templates/list`'s templates.
    fn resource_templates(&self, asker: &Asker) -> Vec<Map<String, Value>>;
    /// Prompts listed after the endpoint's own.
    fn prompts(&self, asker: &Asker) -> Vec<Map<String, Value>>;
    /// `resources/read` of `uri`: the result, or the error to answer with.
    fn read_resource<'a>(&'a self, uri: &'a str, asker: &'a Asker) -> PassFuture<'a, Passed>;
    /// `prompts/get` of a prompt that is not the endpoint's own (`params` without
    /// `name` and `_meta`); `None` when it serves no such prompt for the asker.
    fn get_prompt<'a>(
        &'a self,
        name: &'a str,
        params: Map<String, Value>,
        asker: &'a Asker,
    ) -> PassFuture<'a, Option<Passed>>;
}

/// A [`Passthrough`] in [`crate::ServerOptions`].
#[derive(Clone)]
pub struct Relayed(pub Arc<dyn Passthrough>);

impl std::fmt::Debug for Relayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Relayed(..)")
    }
}

/// A list the endpoint serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    /// `tools/list`.
    Tools,
    /// `resources/list` and `resources/templates/list`.
    Resources,
    /// `prompts/list`.
    Prompts,
}

impl ListKind {
    fn method(self) -> &'static str {
        match self {
            Self::Tools => "notifications/tools/list_changed",
            Self::Resources => "notifications/resources/list_changed",
            Self::Prompts => "notifications/prompts/list_changed",
        }
    }

    fn wanted(self, filter: &SubscriptionFilter) -> bool {
        let asked = match self {
            Self::Tools => filter.tools_list_changed,
            Self::Resources => filter.resources_list_changed,
            Self::Prompts => filter.prompts_list_changed,
        };
        asked == Some(true)
    }
}

/// Tells the open notification streams that a list changed. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Notifier {
    sender: broadcast::Sender<ListKind>,
    open: Arc<AtomicUsize>,
}

/// How many changes a slow stream may fall behind before it is told every list changed.
const BACKLOG: usize = 64;
/// How often an idle stream sends an SSE comment, so a client that went away is found
/// (and proxies keep it open).
const KEEPALIVE: Duration = Duration::from_secs(15);

impl Default for Notifier {
    fn default() -> Self {
        Self { sender: broadcast::channel(BACKLOG).0, open: Arc::default() }
    }
}

impl Notifier {
    /// Tells every open stream that asked for it that list `kind` changed.
    pub fn notify(&self, kind: ListKind) {
        // No stream open: nobody to tell.
        let _ = self.sender.send(kind);
    }

    /// How many notification streams are open.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

/// Counts an open stream for as long as it lives.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The notification of `kind`, with `_meta` when on a subscription.
fn notification(method: &str, subscription: Option<&RequestId>, mut params: Map<String, Value>) -> Bytes {
    if let Some(id) = subscription {
        params.insert("_meta".into(), json!({ SUBSCRIPTION_ID: id }));
    }
    let mut message = json!({"jsonrpc": "2.0", "method": method});
    if !params.is_empty() {
        message["params"] = Value::Object(params);
    }
    crate::sse::event(&message)
}

/// The `_meta` key naming the `subscriptions/listen` request a notification belongs to.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

impl Notifier {
    /// A `subscriptions/listen` stream: the acknowledgement of what it honours (the
    /// three list changes it asked for; resource subscriptions are not offered), then
    /// each change it asked for. `None` when `max` streams are open already.
    pub(crate) fn listen(
        &self,
        id: RequestId,
        filter: &SubscriptionFilter,
        max: usize,
    ) -> Option<http::Response<McpBody>> {
        let honoured = SubscriptionFilter {
            tools_list_changed: filter.tools_list_changed.filter(|asked| *asked),
            prompts_list_changed: filter.prompts_list_changed.filter(|asked| *asked),
            resources_list_changed: filter.resources_list_changed.filter(|asked| *asked),
            resource_subscriptions: None,
        };
        let mut params = Map::new();
        params.insert("notifications".into(), serde_json::to_value(&honoured).unwrap_or_else(|_| json!({})));
        let first = notification("notifications/subscriptions/acknowledged", Some(&id), params);
        self.stream(first, Some(id), honoured, max)
    }

    /// A 2025-era session's GET stream: every list change.
    pub(crate) fn session_stream(&self, max: usize) -> Option<http::Response<McpBody>> {
        let every = SubscriptionFilter {
            tools_list_changed: Some(true),
            prompts_list_changed: Some(true),
            resources_list_changed: Some(true),
            resource_subscriptions: None,
        };
        self.stream(Bytes::from_static(b": listening\n\n"), None, every, max)
    }

    fn stream(
        &self,
        first: Bytes,
        subscription: Option<RequestId>,
        filter: SubscriptionFilter,
        max: usize,
    ) -> Option<http::Response<McpBody>> {
        if self.open.fetch_add(1, Ordering::Relaxed) >= max {
            self.open.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let counted = Counted(self.open.clone());
        // Subscribed before the acknowledgement goes out: no change after it is missed.
        let changes = self.sender.subscribe();
        struct Open {
            first: Option<Bytes>,
            changes: broadcast::Receiver<ListKind>,
            subscription: Option<RequestId>,
            filter: SubscriptionFilter,
            _counted: Counted,
        }
        let open = Open { first: Some(first), changes, subscription, filter, _counted: counted };
        let frames = futures_util::stream::unfold(open, |mut open| async move {
            if let Some(first) = open.first.take() {
                return Some((Ok::<_, std::convert::Infallible>(Frame::data(first)), open));
            }
            loop {
                let kinds = match tokio::time::timeout(KEEPALIVE, open.changes.recv()).await {
                    Err(_) => return Some((Ok(Frame::data(Bytes::from_static(b": keepalive\n\n"))), open)),
                    Ok(Ok(kind)) => vec![kind],
                    // Fell behind: every list may have changed.
                    Ok(Err(broadcast::error::RecvError::Lagged(_))) => {
                        vec![ListKind::Tools, ListKind::Resources, ListKind::Prompts]
                    }
                    Ok(Err(broadcast::error::RecvError::Closed)) => return None,
                };
                let events: Vec<u8> = kinds
                    .into_iter()
                    .filter(|kind| kind.wanted(&open.filter))
                    .flat_map(|kind| notification(kind.method(), open.subscription.as_ref(), Map::new()).to_vec())
                    .collect();
                if !events.is_empty() {
                    return Some((Ok(Frame::data(Bytes::from(events))), open));
                }
            }
        });
        let mut response = http::Response::new(StreamBody::new(frames).boxed_unsync());
        *response.status_mut() = StatusCode::OK;
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        Some(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn next(body: &mut McpBody) -> String {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame()).await.unwrap().unwrap().unwrap();
        String::from_utf8(frame.into_data().unwrap().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_listen_stream_is_acknowledged_and_carries_only_what_it_asked_for() {
        let notifier = Notifier::default();
        let filter = SubscriptionFilter {
            tools_list_changed: Some(true),
            prompts_list_changed: Some(false),
            resources_list_changed: None,
            resource_subscriptions: Some(vec!["file:///x".into()]),
        };
        let mut body = notifier.listen(RequestId::Number(7), &filter, 1).unwrap().into_body();
        assert!(notifier.listen(RequestId::Number(8), &filter, 1).is_none(), "one stream at most");
        let ack = next(&mut body).await;
        assert!(ack.contains(r#""method":"notifications/subscriptions/acknowledged""#), "{ack}");
        assert!(ack.contains(r#""notifications":{"toolsListChanged":true}"#), "only what is honoured: {ack}");
        assert!(ack.contains(r#""io.modelcontextprotocol/subscriptionId":7"#), "{ack}");
        notifier.notify(ListKind::Prompts);
        notifier.notify(ListKind::Tools);
        let changed = next(&mut body).await;
        assert!(changed.contains("notifications/tools/list_changed"), "prompts were not asked for: {changed}");
        assert!(changed.contains(r#""io.modelcontextprotocol/subscriptionId":7"#), "{changed}");
        assert_eq!(notifier.open(), 1);
        drop(body);
        assert_eq!(notifier.open(), 0, "a closed stream is no longer counted");
    }

    #[tokio::test]
    async fn a_session_stream_carries_every_list_change_without_a_subscription() {
        let notifier = Notifier::default();
        let mut body = notifier.session_stream(4).unwrap().into_body();
        assert!(next(&mut body).await.starts_with(':'));
        notifier.notify(ListKind::Resources);
        let changed = next(&mut body).await;
        assert_eq!(
            changed,
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/list_changed\"}\n\n"
        );
    }
}
