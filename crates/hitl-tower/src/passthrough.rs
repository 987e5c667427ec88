//! What the endpoint serves besides its agents: other servers' resources and prompts
//! (a gateway's upstreams, behind [`Passthrough`]), and the notifications that tell
//! clients a list changed: on a 2026-07-28 `subscriptions/listen` stream (the
//! kinds it asked for, each carrying its subscription id) and on a 2025-era session's
//! GET stream.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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
    /// Its key (`hitl_interrupt::ToolCall::caller_key`).
    pub caller: String,
}

/// What a [`Passthrough`] answers: the result, or the JSON-RPC error to answer with.
pub type Passed = Result<Value, ErrorObject>;

/// What a [`Passthrough`] subscription answers: done, or the JSON-RPC error to answer with.
pub type Subscribed = Result<(), ErrorObject>;

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
    /// Whether resources may be subscribed to (the capability `resources.subscribe`).
    fn subscribable(&self) -> bool {
        false
    }
    /// Subscribes `client` (a stream's or a session's id, which [`Notifier::updated`]
    /// names) to `uri` for `asker`: `Ok` once subscribed, or the error to answer with.
    fn subscribe<'a>(&'a self, client: &'a str, uri: &'a str, asker: &'a Asker) -> PassFuture<'a, Subscribed> {
        let _ = (client, asker);
        Box::pin(async move { Err(ErrorObject::invalid_params(format!("Resource {uri} cannot be subscribed to"))) })
    }
    /// Ends `client`'s subscription to `uri`, if any.
    fn unsubscribe<'a>(&'a self, client: &'a str, uri: &'a str) -> PassFuture<'a, ()> {
        let _ = (client, uri);
        Box::pin(async {})
    }
    /// Ends every subscription of `client`.
    fn forget<'a>(&'a self, client: &'a str) -> PassFuture<'a, ()> {
        let _ = client;
        Box::pin(async {})
    }
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

/// What the open notification streams are told.
#[derive(Debug, Clone)]
enum Note {
    /// A list changed.
    List(ListKind),
    /// A subscribed resource was updated: its URI and the clients subscribed to it.
    Updated(Arc<str>, Arc<[String]>),
}

/// Tells the open notification streams that a list changed, or a resource their
/// clients subscribed to was updated. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Notifier {
    sender: broadcast::Sender<Note>,
    open: Arc<AtomicUsize>,
    /// 2025-era sessions with subscriptions, and their GET streams.
    pub(crate) sessions: Arc<Sessions>,
}

/// How many changes a slow stream may fall behind before it is told every list changed.
const BACKLOG: usize = 64;
/// How often an idle stream sends an SSE comment, so a client that went away is found
/// (and proxies keep it open).
const KEEPALIVE: Duration = Duration::from_secs(15);

impl Default for Notifier {
    fn default() -> Self {
        Self { sender: broadcast::channel(BACKLOG).0, open: Arc::default(), sessions: Arc::default() }
    }
}

impl Notifier {
    /// Tells every open stream that asked for it that list `kind` changed.
    pub fn notify(&self, kind: ListKind) {
        // No stream open: nobody to tell.
        let _ = self.sender.send(Note::List(kind));
    }

    /// Tells the streams of `clients` (as [`Passthrough::subscribe`] named them) that
    /// resource `uri` was updated.
    pub fn updated(&self, uri: &str, clients: &[String]) {
        let _ = self.sender.send(Note::Updated(uri.into(), clients.into()));
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

/// Runs its closure when dropped (a stream's end).
struct OnClose(Option<Box<dyn FnOnce() + Send>>);

impl Drop for OnClose {
    fn drop(&mut self) {
        if let Some(close) = self.0.take() {
            close();
        }
    }
}

/// How long a 2025-era session's subscriptions outlive its last GET stream (or, with
/// none opened, its subscribe): a client that went away without `resources/unsubscribe`
/// holds nothing for long.
pub(crate) const SESSION_GRACE: Duration = Duration::from_secs(60);

/// 2025-era sessions that subscribed (or have a GET stream open): how many GET streams
/// each has open, and since when none.
#[derive(Debug, Default)]
pub(crate) struct Sessions(std::sync::Mutex<std::collections::HashMap<String, (usize, Option<Instant>)>>);

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (usize, Option<Instant>)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `client` subscribed.
    pub(crate) fn subscribed(&self, client: &str) {
        self.lock().entry(client.to_owned()).or_insert((0, Some(Instant::now())));
    }

    fn opened(&self, client: &str) {
        let mut sessions = self.lock();
        let entry = sessions.entry(client.to_owned()).or_insert((0, None));
        entry.0 += 1;
        entry.1 = None;
    }

    fn closed(&self, client: &str) {
        if let Some(entry) = self.lock().get_mut(client) {
            entry.0 = entry.0.saturating_sub(1);
            if entry.0 == 0 {
                entry.1 = Some(Instant::now());
            }
        }
    }

    /// The sessions without a GET stream for [`SESSION_GRACE`], forgotten here: their
    /// subscriptions are to end.
    pub(crate) fn expired(&self, now: Instant) -> Vec<String> {
        let mut sessions = self.lock();
        let due: Vec<String> = sessions
            .iter()
            .filter(|(_, (open, since))| *open == 0 && since.is_some_and(|s| now.duration_since(s) >= SESSION_GRACE))
            .map(|(client, _)| client.clone())
            .collect();
        for client in &due {
            sessions.remove(client);
        }
        due
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
    /// list changes it asked for, and the resources `subscribed` to for `client`), then
    /// each of those. `None` when `max` streams are open already. `closed` runs when
    /// the stream ends (its subscriptions end with it).
    pub(crate) fn listen(
        &self,
        id: RequestId,
        filter: &SubscriptionFilter,
        subscribed: Option<(String, Vec<String>)>,
        max: usize,
        closed: Option<Box<dyn FnOnce() + Send>>,
    ) -> Option<http::Response<McpBody>> {
        let (client, uris) = subscribed.unzip();
        let honoured = SubscriptionFilter {
            tools_list_changed: filter.tools_list_changed.filter(|asked| *asked),
            prompts_list_changed: filter.prompts_list_changed.filter(|asked| *asked),
            resources_list_changed: filter.resources_list_changed.filter(|asked| *asked),
            resource_subscriptions: uris,
        };
        let mut params = Map::new();
        params.insert("notifications".into(), serde_json::to_value(&honoured).unwrap_or_else(|_| json!({})));
        let first = notification("notifications/subscriptions/acknowledged", Some(&id), params);
        self.stream(first, Some(id), honoured, client, OnClose(closed), max)
    }

    /// Whether another stream may open now (`max` at most).
    pub(crate) fn has_room(&self, max: usize) -> bool {
        self.open() < max
    }

    /// A 2025-era session's GET stream: every list change, and the updates of the
    /// resources `client` (the session) subscribed to.
    pub(crate) fn session_stream(&self, client: String, max: usize) -> Option<http::Response<McpBody>> {
        let every = SubscriptionFilter {
            tools_list_changed: Some(true),
            prompts_list_changed: Some(true),
            resources_list_changed: Some(true),
            resource_subscriptions: None,
        };
        self.sessions.opened(&client);
        let (sessions, session) = (self.sessions.clone(), client.clone());
        let closed = OnClose(Some(Box::new(move || sessions.closed(&session))));
        self.stream(Bytes::from_static(b": listening\n\n"), None, every, Some(client), closed, max)
    }

    fn stream(
        &self,
        first: Bytes,
        subscription: Option<RequestId>,
        filter: SubscriptionFilter,
        client: Option<String>,
        closed: OnClose,
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
            changes: broadcast::Receiver<Note>,
            subscription: Option<RequestId>,
            filter: SubscriptionFilter,
            client: Option<String>,
            _counted: Counted,
            _closed: OnClose,
        }
        let open =
            Open { first: Some(first), changes, subscription, filter, client, _counted: counted, _closed: closed };
        let frames = futures_util::stream::unfold(open, |mut open| async move {
            if let Some(first) = open.first.take() {
                return Some((Ok::<_, std::convert::Infallible>(Frame::data(first)), open));
            }
            loop {
                let events: Vec<u8> = match tokio::time::timeout(KEEPALIVE, open.changes.recv()).await {
                    Err(_) => return Some((Ok(Frame::data(Bytes::from_static(b": keepalive\n\n"))), open)),
                    Ok(Ok(Note::List(kind))) if kind.wanted(&open.filter) => {
                        notification(kind.method(), open.subscription.as_ref(), Map::new()).to_vec()
                    }
                    Ok(Ok(Note::List(_))) => continue,
                    Ok(Ok(Note::Updated(uri, clients))) => {
                        if !open.client.as_ref().is_some_and(|c| clients.contains(c)) {
                            continue;
                        }
                        let params = Map::from_iter([("uri".to_owned(), Value::String(uri.to_string()))]);
                        notification("notifications/resources/updated", open.subscription.as_ref(), params).to_vec()
                    }
                    // Fell behind: every list may have changed (missed updates are lost).
                    Ok(Err(broadcast::error::RecvError::Lagged(_))) => {
                        [ListKind::Tools, ListKind::Resources, ListKind::Prompts]
                            .into_iter()
                            .filter(|kind| kind.wanted(&open.filter))
                            .flat_map(|kind| {
                                notification(kind.method(), open.subscription.as_ref(), Map::new()).to_vec()
                            })
                            .collect()
                    }
                    Ok(Err(broadcast::error::RecvError::Closed)) => return None,
                };
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
        let mut body = notifier.listen(RequestId::Number(7), &filter, None, 1, None).unwrap().into_body();
        assert!(notifier.listen(RequestId::Number(8), &filter, None, 1, None).is_none(), "one stream at most");
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
    async fn resource_updates_reach_only_the_streams_of_their_clients() {
        let notifier = Notifier::default();
        let filter = SubscriptionFilter::default();
        let subscribed = Some(("listen:a".to_owned(), vec!["demo://1".to_owned()]));
        let closed = Arc::new(AtomicUsize::new(0));
        let counted = closed.clone();
        let on_close: Box<dyn FnOnce() + Send> = Box::new(move || {
            counted.fetch_add(1, Ordering::Relaxed);
        });
        let mut a = notifier.listen(RequestId::Number(1), &filter, subscribed, 4, Some(on_close)).unwrap().into_body();
        let ack = next(&mut a).await;
        assert!(ack.contains(r#""notifications":{"resourceSubscriptions":["demo://1"]}"#), "{ack}");
        let mut b = notifier.session_stream("session:b".into(), 4).unwrap().into_body();
        assert!(next(&mut b).await.starts_with(':'));
        notifier.updated("demo://1", &["session:b".to_owned()]);
        notifier.updated("demo://1", &["listen:a".to_owned()]);
        let to_a = next(&mut a).await;
        assert!(to_a.contains(r#""method":"notifications/resources/updated""#), "{to_a}");
        assert!(to_a.contains(r#""uri":"demo://1""#) && to_a.contains(r#"subscriptionId":1"#), "{to_a}");
        let to_b = next(&mut b).await;
        assert_eq!(
            to_b,
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\",\"params\":{\"uri\":\"demo://1\"}}\n\n"
        );
        drop(a);
        assert_eq!(closed.load(Ordering::Relaxed), 1, "its end is told once");
    }

    #[test]
    fn a_session_without_a_get_stream_expires_after_its_grace() {
        let sessions = Sessions::default();
        let start = Instant::now();
        sessions.subscribed("session:a");
        sessions.opened("session:b");
        sessions.subscribed("session:b");
        assert!(sessions.expired(start + SESSION_GRACE / 2).is_empty());
        assert_eq!(sessions.expired(start + SESSION_GRACE * 2), ["session:a"], "b's stream is open");
        sessions.closed("session:b");
        let closed = Instant::now();
        assert!(sessions.expired(closed).is_empty(), "its grace starts when its stream closes");
        assert_eq!(sessions.expired(closed + SESSION_GRACE), ["session:b"]);
        assert!(sessions.expired(closed + SESSION_GRACE * 3).is_empty(), "forgotten once");
    }

    #[tokio::test]
    async fn a_session_stream_carries_every_list_change_without_a_subscription() {
        let notifier = Notifier::default();
        let mut body = notifier.session_stream("session:s".into(), 4).unwrap().into_body();
        assert!(next(&mut body).await.starts_with(':'));
        notifier.notify(ListKind::Resources);
        let changed = next(&mut body).await;
        assert_eq!(
            changed,
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/list_changed\"}\n\n"
        );
    }
}
