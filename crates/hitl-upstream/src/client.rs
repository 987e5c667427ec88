//! The client logic every transport shares: the era negotiated once per connection
//! (`server/discover` for 2026-07-28, else the `initialize` handshake), requests with
//! their `_meta` or session, tools listed across pages.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use hitl_protocol::jsonrpc::{self, Message};
use hitl_protocol::{ErrorObject, RequestId, headers, meta_keys as meta, version};
use serde_json::{Map, Value, json};
use tokio::sync::{Mutex, Notify, mpsc, oneshot};

use crate::sessions::{Lease, Opened, Slot, Table};
use crate::{Era, UpstreamError};

/// One message to send, encoded.
pub(crate) struct Outgoing<'a> {
    pub(crate) method: &'a str,
    /// `None` for a notification.
    pub(crate) id: Option<i64>,
    pub(crate) body: Vec<u8>,
    /// The `Mcp-Name` value (`params.name` of `tools/call`).
    pub(crate) name: Option<String>,
    /// Where requests the upstream sends while this one runs go (`None`: refused).
    /// With it, the transport sets no time limit: the [`Call`] does.
    pub(crate) asks: Option<Asks>,
    /// For a stream ([`Transport::listen`]): told once it is open (dropped untold when
    /// it could not be opened).
    pub(crate) opened: Option<oneshot::Sender<()>>,
}

/// Where what the upstream sends in the course of a call goes (a [`Call`]'s inbox).
#[derive(Debug, Clone)]
pub(crate) struct Asks {
    sender: mpsc::UnboundedSender<Incoming>,
    /// Whether the call asks for progress (`_meta.progressToken`, the request's id).
    progress: bool,
}

/// The calls in flight that take what the upstream sends outside their own response
/// (a stdio process's requests, a 2025-era session's GET stream), by request id, each
/// with the session it runs in.
#[derive(Debug, Default)]
pub(crate) struct Askers(std::sync::Mutex<std::collections::BTreeMap<i64, (Option<String>, Asks)>>);

/// A call registered in [`Askers`] until it is dropped.
pub(crate) struct Asking {
    id: i64,
    askers: Arc<Askers>,
}

impl Drop for Asking {
    fn drop(&mut self) {
        self.askers.lock().remove(&self.id);
    }
}

impl Askers {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<i64, (Option<String>, Asks)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers call `id`, made in `session` (its `Mcp-Session-Id`), while the
    /// returned guard lives.
    pub(crate) fn register(self: &Arc<Self>, id: i64, session: Option<String>, asks: Asks) -> Asking {
        self.lock().insert(id, (session, asks));
        Asking { id, askers: self.clone() }
    }

    /// The call a request from the upstream on `session`'s stream belongs to, when
    /// nothing else ties it to one: the call in flight in that session when there is
    /// exactly one; with several, none (it is refused rather than shown to the wrong
    /// person). A call in another caller's session is never one.
    pub(crate) fn sole(&self, upstream: &str, method: &str, session: Option<&str>) -> Option<Asks> {
        let askers = self.lock();
        let mut calls = askers.values().filter(|(s, _)| s.as_deref() == session);
        let first = calls.next().map(|(_, asks)| asks.clone());
        let more = calls.count();
        if more > 0 {
            tracing::warn!(
                upstream,
                method,
                calls = more + 1,
                "refused: it asked during several calls at once and the call it belongs to is unknown"
            );
            return None;
        }
        first
    }

    /// Hands a `notifications/progress` to the call whose request id is its token;
    /// `false` for any other message.
    pub(crate) fn progress(&self, message: &Message) -> bool {
        let Message::Notification(notification) = message else { return false };
        let token = notification.params.as_ref().and_then(|p| p.get("progressToken")).and_then(Value::as_i64);
        let asks = token.and_then(|t| self.lock().get(&t).map(|(_, asks)| asks.clone()));
        asks.is_some_and(|asks| asks.progress(message))
    }
}

/// What the upstream sends in the course of a call.
#[derive(Debug)]
enum Incoming {
    Asked(Asked),
    Progress(Map<String, Value>),
    /// The upstream is down and the call not yet sent: its time limit starts again.
    Waiting,
}

impl Asks {
    /// Hands a `notifications/progress` to the call; `false` for any other message.
    pub(crate) fn progress(&self, message: &Message) -> bool {
        let Message::Notification(notification) = message else { return false };
        if notification.method != "notifications/progress" {
            return false;
        }
        let mut params = notification.params.as_ref().and_then(Value::as_object).cloned().unwrap_or_default();
        params.remove("progressToken");
        let _ = self.sender.send(Incoming::Progress(params));
        true
    }
}

/// A request a 2025-era upstream sent in the middle of a call (`elicitation/create`,
/// `sampling/createMessage`, `roots/list`): the upstream waits for its answer. Dropped
/// unanswered, it is refused with `-32601`.
#[derive(Debug)]
pub struct Asked {
    /// Its method.
    pub method: String,
    /// Its params, as sent.
    pub params: Value,
    reply: oneshot::Sender<Result<Value, ErrorObject>>,
}

impl Asked {
    /// Answers with `result` (say, an `ElicitResult`).
    pub fn answer(self, result: Value) {
        let _ = self.reply.send(Ok(result));
    }

    /// Answers with an error.
    pub fn refuse(self, error: ErrorObject) {
        let _ = self.reply.send(Err(error));
    }
}

/// The reply to `request`, encoded: the answer of whoever receives it on `asks`, or
/// [`refusal`] when no one does.
pub(crate) async fn reply_to(asks: Option<&Asks>, request: jsonrpc::Request) -> Vec<u8> {
    let Some(asks) = asks else { return refusal(&request) };
    let (reply, answer) = oneshot::channel();
    let params = request.params.clone().unwrap_or_else(|| json!({}));
    if asks.sender.send(Incoming::Asked(Asked { method: request.method.clone(), params, reply })).is_err() {
        return refusal(&request);
    }
    let message = match answer.await {
        Ok(Ok(result)) => json!({"jsonrpc": "2.0", "id": request.id, "result": result}),
        Ok(Err(error)) => json!({"jsonrpc": "2.0", "id": request.id, "error": error}),
        Err(_) => return refusal(&request),
    };
    serde_json::to_vec(&message).expect("JSON values serialize")
}

/// A tool call under way ([`Upstream::start_call`]): what the upstream asks in its
/// course, then its result. Dropping it ends the call (the connection is closed).
#[derive(Debug)]
pub struct Call {
    upstream: String,
    timeout: Duration,
    inbox: mpsc::UnboundedReceiver<Incoming>,
    task: tokio::task::JoinHandle<Result<Value, UpstreamError>>,
    done: bool,
}

/// What a [`Call`] brings next.
#[derive(Debug)]
pub enum Event {
    /// The upstream asks something and waits for the answer.
    Asked(Asked),
    /// The upstream reports progress: the params of its `notifications/progress`
    /// (`progress`, `total`, `message`), without its token.
    Progress(Map<String, Value>),
    /// The call is over: the upstream's result, as [`Upstream::call_tool`] gives it.
    Done(Result<Value, UpstreamError>),
}

impl Call {
    /// The next event. The upstream's time limit runs from this call on (time spent
    /// holding an unanswered [`Asked`] does not count); once it passes, the call is
    /// given up as timed out.
    pub async fn next(&mut self) -> Event {
        if self.done {
            return Event::Done(Err(UpstreamError::Protocol {
                upstream: self.upstream.clone(),
                detail: "the call is already over".into(),
            }));
        }
        let event = loop {
            let next = async {
                tokio::select! {
                    biased;
                    Some(incoming) = self.inbox.recv() => match incoming {
                        Incoming::Asked(asked) => Some(Event::Asked(asked)),
                        Incoming::Progress(params) => Some(Event::Progress(params)),
                        Incoming::Waiting => None,
                    },
                    joined = &mut self.task => Some(Event::Done(joined.unwrap_or_else(|e| {
                        Err(UpstreamError::Unreachable { upstream: self.upstream.clone(), detail: e.to_string() })
                    }))),
                }
            };
            match tokio::time::timeout(self.timeout, next).await {
                Ok(Some(event)) => break event,
                // Waiting for the upstream to come back has its own bound.
                Ok(None) => {}
                Err(_) => {
                    self.task.abort();
                    let secs = self.timeout.as_secs();
                    break Event::Done(Err(UpstreamError::Timeout { upstream: self.upstream.clone(), secs }));
                }
            }
        };
        self.done = matches!(event, Event::Done(_));
        event
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What came back: the response (a request's), and the session it named.
pub(crate) struct Exchanged {
    pub(crate) response: Option<Result<Value, ErrorObject>>,
    pub(crate) session: Option<String>,
}

/// How messages reach an upstream.
#[async_trait::async_trait]
pub(crate) trait Transport: Send + Sync + std::fmt::Debug {
    /// Sends `message` in `era` and, for a request, waits for its response.
    async fn exchange(&self, era: &Era, message: Outgoing<'_>) -> Result<Exchanged, UpstreamError>;

    /// Makes sure there is a connection (starts a process); returns its generation,
    /// which changes when the connection starts over and the era must be negotiated
    /// again.
    async fn connect(&self) -> Result<u64, UpstreamError> {
        Ok(self.generation())
    }

    /// The current connection's generation.
    fn generation(&self) -> u64 {
        0
    }

    /// Opens the stream of the upstream's own notifications (`subscribe` is the
    /// 2026-07-28 `subscriptions/listen` request) and reads it until it ends. List
    /// changes on it, and on any other stream, are told to the transport's
    /// [`Changed`].
    async fn listen(&self, _era: &Era, _subscribe: Outgoing<'_>) -> Result<Listened, UpstreamError> {
        Ok(Listened::Unsupported)
    }

    /// Ends the session of `era`, where the transport can (HTTP DELETE).
    async fn close(&self, _era: &Era) {}

    /// Why the upstream is known to be down now without asking it (a stdio process
    /// that exited), if it is.
    fn down(&self) -> Option<String> {
        None
    }
}

/// What the upstream tells outside any call's response: list changes
/// (`notifications/*/list_changed`, told to `lists`) and resource updates
/// (`notifications/resources/updated`, sent on `updates`).
#[derive(Debug)]
pub(crate) struct Heard {
    pub(crate) lists: Notify,
    pub(crate) updates: tokio::sync::broadcast::Sender<crate::Updated>,
}

/// How many resource updates a slow reader may fall behind before it misses some.
const UPDATES_BACKLOG: usize = 256;

impl Default for Heard {
    fn default() -> Self {
        Self { lists: Notify::new(), updates: tokio::sync::broadcast::channel(UPDATES_BACKLOG).0 }
    }
}

/// Where a transport tells what it heard.
pub(crate) type Changed = Arc<Heard>;

/// How a notification stream ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Listened {
    /// The upstream offers none (or none is needed): do not try again.
    Unsupported,
    /// It was open and ended: open it again.
    Ended,
}

/// The methods of the notifications that say one of an upstream's lists changed: each
/// has the gateway list everything again.
pub(crate) const LISTS_CHANGED: [&str; 3] =
    ["notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed"];

/// A notification from the upstream, on any stream: a call's progress goes to that
/// call (by its token), a list change (tools, prompts, resources) to `heard.lists`, a
/// resource update to `heard.updates` with the session whose stream carried it.
pub(crate) fn notified(message: &Message, askers: &Askers, heard: &Heard, session: Option<&str>) {
    if askers.progress(message) {
        return;
    }
    let Message::Notification(notification) = message else { return };
    if LISTS_CHANGED.contains(&notification.method.as_str()) {
        heard.lists.notify_one();
    } else if notification.method == "notifications/resources/updated"
        && let Some(uri) = notification.params.as_ref().and_then(|p| p.get("uri")).and_then(Value::as_str)
    {
        // No one subscribed on this replica: nothing to relay.
        let _ = heard.updates.send(crate::Updated { session: session.map(str::to_owned), uri: uri.to_owned() });
    }
}

/// An MCP server hitl calls: over Streamable HTTP ([`Upstream::http`]) or a stdio
/// child process ([`Upstream::stdio`]). Cheap to share; requests run concurrently.
#[derive(Debug)]
pub struct Upstream {
    name: String,
    protocol: Option<String>,
    timeout: Duration,
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) changed: Changed,
    /// The session tools are listed in (and calls made for no one in particular).
    era: Mutex<Option<(Era, u64)>>,
    /// Each caller's session, for a 2025-era HTTP upstream that gives sessions.
    sessions: Arc<std::sync::Mutex<Table>>,
    /// Whether the task that closes idle sessions runs.
    sweeping: std::sync::atomic::AtomicBool,
    pub(crate) next_id: AtomicI64,
    /// Why the last request could not reach it (none: it answered, or none was sent).
    reach: std::sync::Mutex<Option<String>>,
    /// The capabilities it declared when its era was negotiated.
    pub(crate) capabilities: std::sync::Mutex<Value>,
    /// Its resource subscriptions ([`crate::subscriptions`]).
    pub(crate) subscribed: crate::subscribed::Subscribed,
}

/// `call`, a `tools/call` to `upstream`, in `span` and timed (`hitl_upstream_call_seconds`,
/// through the `metrics` facade; upstream names come from the configuration).
async fn timed<T>(
    upstream: String,
    span: tracing::Span,
    call: impl std::future::Future<Output = Result<T, UpstreamError>>,
) -> Result<T, UpstreamError> {
    let started = std::time::Instant::now();
    let outcome = tracing::Instrument::instrument(call, span).await;
    let label = if outcome.is_ok() { "ok" } else { "error" };
    metrics::histogram!("hitl_upstream_call_seconds", "upstream" => upstream, "outcome" => label)
        .record(started.elapsed().as_secs_f64());
    outcome
}

/// Keeps a notification stream open: `open` reads it until it ends, and is called again
/// at once when it ended, after a pause doubling from 1 s to 60 s when it failed, and
/// never again once it says the upstream offers none. `what` names the stream in logs.
async fn keep_open<F, Fut>(upstream: &str, what: &str, mut open: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Listened, UpstreamError>>,
{
    const FIRST: Duration = Duration::from_secs(1);
    let mut pause = FIRST;
    loop {
        match open().await {
            Ok(Listened::Unsupported) => {
                tracing::debug!(upstream, "{what}: none is offered");
                return;
            }
            Ok(Listened::Ended) => pause = FIRST,
            Err(error) => {
                tracing::debug!(upstream, %error, "{what} failed");
                pause = (pause * 2).min(Duration::from_secs(60));
            }
        }
        tokio::time::sleep(pause).await;
    }
}

/// Reads the stream of a caller's session `era` (its GET stream) for as long as the
/// session lives (the task is aborted when it is dropped, and it ends when the upstream
/// no longer knows the session).
async fn listen_in(transport: Arc<dyn Transport>, era: Era, upstream: String, opened: oneshot::Sender<()>) {
    let opened = std::sync::Mutex::new(Some(opened));
    keep_open(&upstream, "a caller's session stream", || async {
        let opened = opened.lock().unwrap_or_else(|p| p.into_inner()).take();
        let subscribe = Outgoing { method: "", id: None, body: Vec::new(), name: None, asks: None, opened };
        match transport.listen(&era, subscribe).await {
            Err(UpstreamError::SessionGone { .. }) => Ok(Listened::Unsupported),
            other => other,
        }
    })
    .await;
}

/// What hitl declares in the session every caller shares (tools are listed in it; a
/// stdio process or a 2025-era HTTP upstream without sessions serves every call in
/// it): the requests it relays to whichever client a call is made for, refusing them
/// (`-32601`) for a client that lacks them. Not `roots`: a client's roots belong to its
/// own session, and servers ask for them when the session starts, when no call, so no
/// client, is there to answer.
fn shared_capabilities() -> Value {
    json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}})
}

/// What hitl declares in a caller's own session: what that client declared of what
/// hitl relays (`elicitation`, `sampling`, `roots`), read from the call's `_meta`
/// (`io.modelcontextprotocol/clientCapabilities`); nothing when the call names none.
fn relayed(params: &Map<String, Value>) -> Value {
    let declared = params
        .get("_meta")
        .and_then(|m| m.get(meta::CLIENT_CAPABILITIES))
        .and_then(Value::as_object)
        .map(|caps| {
            caps.iter()
                .filter(|(name, _)| matches!(name.as_str(), "elicitation" | "sampling" | "roots"))
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect::<Map<String, Value>>()
        })
        .unwrap_or_default();
    Value::Object(declared)
}

/// This client, as upstreams see it.
fn client_info() -> Value {
    json!({"name": "hitl", "version": env!("CARGO_PKG_VERSION")})
}

impl Upstream {
    pub(crate) fn with_transport(
        name: String,
        protocol: Option<String>,
        timeout: Duration,
        changed: Changed,
        transport: Arc<dyn Transport>,
    ) -> Self {
        let sessions = Table::new(crate::SESSION_IDLE, crate::MAX_SESSIONS);
        Self {
            name,
            protocol,
            timeout,
            transport,
            changed,
            era: Mutex::new(None),
            sessions: Arc::new(std::sync::Mutex::new(sessions)),
            sweeping: std::sync::atomic::AtomicBool::new(false),
            next_id: AtomicI64::new(1),
            reach: std::sync::Mutex::new(None),
            capabilities: std::sync::Mutex::new(Value::Null),
            subscribed: crate::subscribed::Subscribed::default(),
        }
    }

    /// Why the upstream is unreachable now, if it is: its stdio process exited, or the
    /// last request sent to it found no one (a refusal or an error answer is an answer).
    pub fn unreachable(&self) -> Option<String> {
        self.transport.down().or_else(|| self.reach.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// A light request that tells whether it answers: `ping` in a 2025-era session,
    /// `server/discover` for 2026-07-28; its outcome is what [`Upstream::unreachable`]
    /// says next.
    pub async fn probe(&self) -> Result<(), UpstreamError> {
        let method = match self.era().await? {
            Era::Modern => "server/discover",
            Era::Legacy { .. } => "ping",
        };
        self.request(method, Map::new()).await.map(|_| ())
    }

    /// Notes whether `outcome` reached the upstream.
    fn noted<T>(&self, outcome: Result<T, UpstreamError>) -> Result<T, UpstreamError> {
        let unreached = match &outcome {
            Err(
                e @ (UpstreamError::Unreachable { .. } | UpstreamError::NotSent { .. } | UpstreamError::Timeout { .. }),
            ) => Some(e.to_string()),
            _ => None,
        };
        *self.reach.lock().unwrap_or_else(|p| p.into_inner()) = unreached;
        outcome
    }

    /// Closes a caller's session after `idle` without calls, and keeps at most `cap`
    /// of them (defaults [`crate::SESSION_IDLE`], [`crate::MAX_SESSIONS`]).
    pub fn with_sessions(mut self, idle: Duration, cap: usize) -> Self {
        self.sessions = Arc::new(std::sync::Mutex::new(Table::new(idle, cap)));
        self
    }

    /// How many callers' sessions are open (or being opened).
    pub fn sessions(&self) -> usize {
        self.table().len()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session of caller `key`, held until the lease is dropped; starts the task
    /// that closes idle sessions, and closes those the cap pushes out.
    pub(crate) fn lease(&self, key: &str) -> Lease {
        let (slot, closed) = self.table().take(key, std::time::Instant::now());
        self.close_all(closed);
        if !self.sweeping.swap(true, Ordering::Relaxed) {
            self.sweep();
        }
        Lease::new(self.sessions.clone(), key, slot)
    }

    /// Closes `eras`' sessions in the background.
    fn close_all(&self, eras: Vec<Era>) {
        if eras.is_empty() {
            return;
        }
        let (transport, name) = (self.transport.clone(), self.name.clone());
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        runtime.spawn(async move {
            for era in eras {
                tracing::debug!(upstream = %name, "a caller's session is closed");
                transport.close(&era).await;
            }
        });
    }

    /// Runs the task that closes callers' sessions once idle, for as long as this
    /// upstream lives.
    fn sweep(&self) {
        let (table, transport, name) = (Arc::downgrade(&self.sessions), self.transport.clone(), self.name.clone());
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.sweeping.store(false, Ordering::Relaxed);
            return;
        };
        runtime.spawn(async move {
            loop {
                let Some(sessions) = table.upgrade() else { return };
                let now = std::time::Instant::now();
                let (closed, next, idle) = {
                    let mut table = sessions.lock().unwrap_or_else(|p| p.into_inner());
                    let (closed, next) = table.expire(now);
                    (closed, next, table.idle())
                };
                drop(sessions);
                for era in closed {
                    tracing::debug!(upstream = %name, "an idle caller's session is closed");
                    transport.close(&era).await;
                }
                let next = next.unwrap_or(now + idle).max(now + Duration::from_millis(10));
                tokio::time::sleep_until(next.into()).await;
            }
        });
    }

    /// The era of caller `key`'s session (`slot`), opened with `listing`'s revision if
    /// need be; an opened session's own stream is read (the upstream's requests and
    /// list changes that belong to it come there) until the session is dropped.
    pub(crate) async fn keyed_era(&self, slot: &Slot, listing: &Era, declared: &Value) -> Result<Era, UpstreamError> {
        let mut opened = slot.lock().await;
        let generation = self.transport.connect().await?;
        if let Some(known) = &*opened
            && known.generation == generation
        {
            return Ok(known.era.clone());
        }
        let Era::Legacy { version, .. } = listing else { return Ok(listing.clone()) };
        let era = self.initialize(version, declared.clone()).await?;
        tracing::debug!(upstream = %self.name, "a caller's session is opened");
        let (stream_open, stream_opened) = oneshot::channel();
        let listener = tokio::runtime::Handle::try_current().ok().map(|runtime| {
            let listen = listen_in(self.transport.clone(), era.clone(), self.name.clone(), stream_open);
            runtime.spawn(listen).abort_handle()
        });
        *opened = Some(Opened { era: era.clone(), generation, listener });
        // What the upstream sends the session before its stream is open is lost (a list
        // change the first call causes): wait for the stream, a second at most.
        let _ = tokio::time::timeout(Duration::from_secs(1), stream_opened).await;
        Ok(era)
    }

    /// Forgets caller session `era` (the upstream no longer knows it).
    async fn forget_keyed(slot: &Slot, era: &Era) {
        let mut slot = slot.lock().await;
        if slot.as_ref().is_some_and(|known| known.era == *era) {
            *slot = None;
        }
    }

    /// Resolves once the upstream says its tools, prompts or resources changed
    /// (`notifications/*/list_changed`, on any stream) since the last time this resolved.
    pub async fn tools_changed(&self) {
        self.changed.lists.notified().await;
    }

    /// Keeps the upstream's notification stream open, so [`Upstream::tools_changed`]
    /// hears of changes: 2026-07-28 `subscriptions/listen`, a 2025-era session's GET
    /// stream, a stdio process's output. Opens it again when it ends; returns when the
    /// upstream offers none. Run it in a task of its own.
    pub async fn listen(&self) {
        keep_open(&self.name, "its notification stream", || async {
            let era = self.era().await?;
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let method = "subscriptions/listen";
            let params = json!({"notifications": {
                "toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": true
            }});
            let Value::Object(params) = params else { unreachable!("an object literal") };
            let (body, name) = body(&era, Some(id), method, Some(params));
            let subscribe = Outgoing { method, id: Some(id), body, name, asks: None, opened: None };
            let outcome = self.transport.listen(&era, subscribe).await;
            if let Err(UpstreamError::SessionGone { .. }) = &outcome {
                self.forget(&era).await;
            }
            outcome
        })
        .await;
    }

    /// Forgets the era `era` (a session the upstream no longer knows), so the next
    /// request negotiates again.
    async fn forget(&self, era: &Era) {
        let mut slot = self.era.lock().await;
        if slot.as_ref().is_some_and(|(known, _)| known == era) {
            *slot = None;
        }
    }

    /// The upstream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How long one of its requests may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The era negotiated with the upstream, negotiating it first if need be.
    pub async fn era(&self) -> Result<Era, UpstreamError> {
        let mut era = self.era.lock().await;
        let generation = self.noted(self.transport.connect().await)?;
        if let Some((known, at)) = &*era
            && *at == generation
        {
            return Ok(known.clone());
        }
        let negotiated = self.negotiate().await?;
        tracing::info!(upstream = %self.name, era = ?negotiated, "connected");
        *era = Some((negotiated.clone(), generation));
        Ok(negotiated)
    }

    /// Sends `method` with `params` and returns its result. A legacy session the
    /// upstream no longer knows (HTTP 404, or 400 naming the session) is opened again
    /// once; the request had not been served, so it is sent again.
    pub async fn request(&self, method: &str, params: Map<String, Value>) -> Result<Value, UpstreamError> {
        self.request_asking(None, method, params, None).await
    }

    /// [`Upstream::request`] in the session of caller `key` (see
    /// [`Upstream::start_call_for`]): a resource one caller's session made is read in it.
    pub async fn request_for(
        &self,
        key: Option<&str>,
        method: &str,
        params: Map<String, Value>,
    ) -> Result<Value, UpstreamError> {
        self.request_asking(key, method, params, None).await
    }

    /// [`Self::request_asking`], sent again while it fails before it was sent (a stdio
    /// process that exited and is not started again yet, a refused connection) until
    /// the upstream has been down for its `timeout`: a call whose effect has not begun
    /// waits for the upstream to come back, then runs once (a call under way hears of
    /// each pause, which starts its time limit again).
    async fn request_when_up(
        &self,
        key: Option<&str>,
        method: &str,
        params: Map<String, Value>,
        asks: Option<Asks>,
    ) -> Result<Value, UpstreamError> {
        let until = tokio::time::Instant::now() + self.timeout;
        let mut pause = Duration::from_millis(50);
        loop {
            match self.request_asking(key, method, params.clone(), asks.clone()).await {
                Err(e @ UpstreamError::NotSent { .. }) => {
                    if tokio::time::Instant::now() + pause >= until {
                        return Err(e);
                    }
                    tracing::debug!(upstream = %self.name, error = %e, "waiting for the upstream to come back");
                    if let Some(asks) = &asks {
                        let _ = asks.sender.send(Incoming::Waiting);
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                other => return other,
            }
        }
    }

    /// Sends `method` in the session of caller `key` (`None`: the listing session). A
    /// 2025-era upstream that gives sessions gets one per key, opened on first use and
    /// closed once idle; with any other upstream, every key shares what there is.
    async fn request_asking(
        &self,
        key: Option<&str>,
        method: &str,
        params: Map<String, Value>,
        asks: Option<Asks>,
    ) -> Result<Value, UpstreamError> {
        // Until the session is open, `method` has not been sent.
        let era = self.era().await.map_err(unsent)?;
        if let Some(key) = key
            && matches!(era, Era::Legacy { session: Some(_), .. })
        {
            let lease = self.lease(key);
            let declared = relayed(&params);
            let era = self.keyed_era(&lease.slot, &era, &declared).await.map_err(unsent)?;
            return match self.send(&era, method, params.clone(), asks.clone()).await {
                Err(UpstreamError::SessionGone { .. }) => {
                    Self::forget_keyed(&lease.slot, &era).await;
                    let listing = self.era().await?;
                    let era = self.keyed_era(&lease.slot, &listing, &declared).await?;
                    self.send(&era, method, params, asks).await
                }
                other => other,
            };
        }
        match self.send(&era, method, params.clone(), asks.clone()).await {
            Err(UpstreamError::SessionGone { .. }) if matches!(era, Era::Legacy { session: Some(_), .. }) => {
                self.forget(&era).await;
                let era = self.era().await?;
                self.send(&era, method, params, asks).await
            }
            other => other,
        }
    }

    /// Every tool the upstream lists, across pages, each as the object it sent.
    pub async fn list_tools(&self) -> Result<Vec<Map<String, Value>>, UpstreamError> {
        self.list_all("tools/list", "tools").await
    }

    /// Every item of a paged listing (`resources/list` and `resources`,
    /// `resources/templates/list` and `resourceTemplates`, `prompts/list` and
    /// `prompts`), across pages, each as the object it sent.
    pub async fn list_all(&self, method: &str, key: &str) -> Result<Vec<Map<String, Value>>, UpstreamError> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..1000 {
            let mut params = Map::new();
            if let Some(cursor) = cursor.take() {
                params.insert("cursor".into(), Value::String(cursor));
            }
            let result = self.request(method, params).await?;
            let Some(page) = result.get(key).and_then(Value::as_array) else {
                return Err(self.protocol(format!("its {method} result has no {key} array")));
            };
            items.extend(page.iter().filter_map(|t| t.as_object().cloned()));
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(items),
            }
        }
        Err(self.protocol(format!("its {method} pages never end")))
    }

    /// The span of a `tools/call` of tool `tool`, a child of the current one.
    fn call_span(&self, tool: &str) -> tracing::Span {
        tracing::info_span!("upstream_call", upstream = %self.name, tool = %tool)
    }

    /// Calls tool `name`; the result is the upstream's, unchanged (a `CallToolResult`,
    /// or a 2026-07-28 `input_required` result).
    pub async fn call_tool(&self, name: &str, arguments: Map<String, Value>) -> Result<Value, UpstreamError> {
        self.call_tool_with(name, arguments, Map::new()).await
    }

    /// Calls tool `name` with more params: a 2026-07-28 retry's `inputResponses` and
    /// `requestState`, or a `_meta` (say, the capabilities of the client the call is
    /// made for: `io.modelcontextprotocol/clientCapabilities`, kept as given).
    pub async fn call_tool_with(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        extra: Map<String, Value>,
    ) -> Result<Value, UpstreamError> {
        self.call_tool_for(None, name, arguments, extra).await
    }

    /// [`Upstream::call_tool_with`] in the session of caller `key` (see
    /// [`Upstream::start_call_for`]).
    pub async fn call_tool_for(
        &self,
        key: Option<&str>,
        name: &str,
        arguments: Map<String, Value>,
        extra: Map<String, Value>,
    ) -> Result<Value, UpstreamError> {
        let mut params =
            Map::from_iter([("name".to_owned(), json!(name)), ("arguments".to_owned(), Value::Object(arguments))]);
        params.extend(extra);
        let call = self.request_when_up(key, "tools/call", params, None);
        timed(self.name.clone(), self.call_span(name), call).await
    }

    /// [`Upstream::call_tool_with`], started in a task, with the requests the upstream
    /// sends in its course (a 2025-era server's `elicitation/create`) handed to the
    /// caller instead of refused, and its progress when `progress` (the call then
    /// carries a `progressToken`): see [`Call::next`].
    pub fn start_call(
        self: &Arc<Self>,
        name: &str,
        arguments: Map<String, Value>,
        extra: Map<String, Value>,
        progress: bool,
    ) -> Call {
        self.start_call_for(None, name, arguments, extra, progress)
    }

    /// [`Upstream::start_call`] in the session of caller `key`: calls for one key share
    /// a session of a 2025-era upstream that gives sessions, calls for different keys
    /// never do (`None`: the session tools are listed in). The key must come from who
    /// the caller is, never from what it sends alone. A stdio upstream is one process
    /// with one session, which every key shares.
    pub fn start_call_for(
        self: &Arc<Self>,
        key: Option<&str>,
        name: &str,
        arguments: Map<String, Value>,
        extra: Map<String, Value>,
        progress: bool,
    ) -> Call {
        let key = key.map(str::to_owned);
        let (sender, inbox) = mpsc::unbounded_channel();
        let asks = Asks { sender, progress };
        let mut params =
            Map::from_iter([("name".to_owned(), json!(name)), ("arguments".to_owned(), Value::Object(arguments))]);
        params.extend(extra);
        let upstream = self.clone();
        let call = async move { upstream.request_when_up(key.as_deref(), "tools/call", params, Some(asks)).await };
        // The call's span is made here, in the caller's (its trace reaches the upstream).
        let task = tokio::spawn(timed(self.name.clone(), self.call_span(name), call));
        Call { upstream: self.name.clone(), timeout: self.timeout, inbox, task, done: false }
    }

    async fn negotiate(&self) -> Result<Era, UpstreamError> {
        match self.protocol.as_deref() {
            Some(version::MODERN) => return self.discover().await,
            Some(legacy) => return self.initialize(legacy, shared_capabilities()).await,
            None => {}
        }
        // A modern request first; a server of an older revision refuses it (or answers
        // something this is not), and then the handshake decides.
        match self.discover().await {
            Ok(era) => Ok(era),
            Err(
                e @ (UpstreamError::Unreachable { .. } | UpstreamError::NotSent { .. } | UpstreamError::Timeout { .. }),
            ) => Err(e),
            Err(_) => self.initialize(version::LEGACY[0], shared_capabilities()).await,
        }
    }

    /// `server/discover`: a 2026-07-28 server names its versions.
    async fn discover(&self) -> Result<Era, UpstreamError> {
        let era = Era::Modern;
        let result = self.send(&era, "server/discover", Map::new(), None).await?;
        let versions: Vec<&str> = result
            .get("supportedVersions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if versions.contains(&version::MODERN) {
            self.keep_capabilities(&result);
            return Ok(era);
        }
        Err(self.protocol(format!("it supports {versions:?}, not {}", version::MODERN)))
    }

    /// The legacy handshake: `initialize` with `requested` and `capabilities` (what
    /// hitl relays in this session), the session id it gives, then
    /// `notifications/initialized`.
    async fn initialize(&self, requested: &str, capabilities: Value) -> Result<Era, UpstreamError> {
        let params = json!({
            "protocolVersion": requested,
            "capabilities": capabilities,
            "clientInfo": client_info(),
        });
        let Value::Object(params) = params else { unreachable!("an object literal") };
        let handshake = Era::Legacy { version: requested.to_owned(), session: None };
        let (result, session) = self.post(&handshake, "initialize", Some(params), None).await?;
        let result = result.ok_or_else(|| self.protocol("it answered initialize with no result"))?;
        let spoken = result.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
        let forced = self.protocol.is_some();
        if !version::LEGACY.contains(&spoken) || (forced && spoken != requested) {
            return Err(self.protocol(format!("it answered initialize with protocol version {spoken:?}")));
        }
        let era = Era::Legacy { version: spoken.to_owned(), session };
        self.post(&era, "notifications/initialized", None, None).await?;
        self.keep_capabilities(&result);
        Ok(era)
    }

    fn keep_capabilities(&self, result: &Value) {
        let capabilities = result.get("capabilities").cloned().unwrap_or(Value::Null);
        *self.capabilities.lock().unwrap_or_else(|p| p.into_inner()) = capabilities;
    }

    pub(crate) async fn send(
        &self,
        era: &Era,
        method: &str,
        params: Map<String, Value>,
        asks: Option<Asks>,
    ) -> Result<Value, UpstreamError> {
        let (result, _) = self.post(era, method, Some(params), asks).await?;
        result.ok_or_else(|| self.protocol(format!("it answered {method} with no result")))
    }

    /// Sends one message; `params` `None` is a notification.
    async fn post(
        &self,
        era: &Era,
        method: &str,
        params: Option<Map<String, Value>>,
        asks: Option<Asks>,
    ) -> Result<(Option<Value>, Option<String>), UpstreamError> {
        let id = params.is_some().then(|| self.next_id.fetch_add(1, Ordering::Relaxed));
        let mut params = params;
        if let (Some(id), Some(params), Some(true)) = (id, params.as_mut(), asks.as_ref().map(|a| a.progress)) {
            let meta = params.entry("_meta").or_insert_with(|| json!({}));
            if let Some(meta) = meta.as_object_mut() {
                meta.insert("progressToken".into(), json!(id));
            }
        }
        let (body, name) = body(era, id, method, params);
        let exchanged =
            self.noted(self.transport.exchange(era, Outgoing { method, id, body, name, asks, opened: None }).await)?;
        let result = match exchanged.response {
            None => None,
            Some(Ok(result)) => Some(result),
            Some(Err(error)) => return Err(self.refused(error)),
        };
        Ok((result, exchanged.session))
    }

    fn refused(&self, error: ErrorObject) -> UpstreamError {
        UpstreamError::Refused { upstream: self.name.clone(), error: Box::new(error) }
    }

    fn protocol(&self, detail: impl Into<String>) -> UpstreamError {
        UpstreamError::Protocol { upstream: self.name.clone(), detail: detail.into() }
    }
}

/// A failure to open the session a request goes in: the request itself was not sent.
fn unsent(error: UpstreamError) -> UpstreamError {
    match error {
        UpstreamError::Unreachable { upstream, detail } => UpstreamError::NotSent { upstream, detail },
        other => other,
    }
}

/// The JSON-RPC message, with the era's `_meta`, and its `Mcp-Name`.
pub(crate) fn body(
    era: &Era,
    id: Option<i64>,
    method: &str,
    params: Option<Map<String, Value>>,
) -> (Vec<u8>, Option<String>) {
    let name = headers::name_param(method).and_then(|p| params.as_ref()?.get(p)?.as_str().map(str::to_owned));
    let message = match (params, id) {
        (Some(mut params), Some(id)) => {
            if *era == Era::Modern {
                let meta = params.entry("_meta").or_insert_with(|| json!({}));
                if let Some(meta) = meta.as_object_mut() {
                    meta.insert(meta::PROTOCOL_VERSION.into(), json!(version::MODERN));
                    meta.insert(meta::CLIENT_INFO.into(), client_info());
                    meta.entry(meta::CLIENT_CAPABILITIES).or_insert_with(|| json!({}));
                }
            }
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        }
        _ => json!({"jsonrpc": "2.0", "method": method}),
    };
    (serde_json::to_vec(&message).expect("JSON values serialize"), name)
}

/// The answer to a request an upstream sent this client that no one takes (outside a
/// [`Call`], or given up): `-32601`, so its call goes on or fails instead of waiting
/// for an answer that never comes. One JSON-RPC message, encoded.
pub(crate) fn refusal(request: &jsonrpc::Request) -> Vec<u8> {
    let message = format!("no one answers {} for this request", request.method);
    let error = ErrorObject::new(hitl_protocol::ErrorCode::METHOD_NOT_FOUND, message);
    let reply = json!({"jsonrpc": "2.0", "id": request.id, "error": error});
    serde_json::to_vec(&reply).expect("JSON values serialize")
}

/// `Some` when `bytes` are the response to request `id`.
pub(crate) fn response_to(bytes: &[u8], id: i64) -> Option<Result<Value, ErrorObject>> {
    let id = RequestId::Number(id);
    match jsonrpc::parse(bytes).ok()? {
        Message::Response { id: got, result } if got == id => Some(Ok(result)),
        Message::Error { id: Some(got), error } if got == id => Some(Err(error)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asks() -> (Asks, mpsc::UnboundedReceiver<Incoming>) {
        let (sender, inbox) = mpsc::unbounded_channel();
        (Asks { sender, progress: false }, inbox)
    }

    #[test]
    fn sessions_declare_only_what_hitl_relays() {
        assert!(shared_capabilities().get("roots").is_none(), "no client answers roots at a session's start");
        let params = json!({"name": "t", "_meta": {meta::CLIENT_CAPABILITIES:
            {"elicitation": {"form": {}}, "roots": {"listChanged": true}, "extensions": {"x": {}}}}});
        let params = params.as_object().cloned().unwrap();
        assert_eq!(relayed(&params), json!({"elicitation": {"form": {}}, "roots": {"listChanged": true}}));
        assert_eq!(relayed(&Map::new()), json!({}), "a call that names no capabilities declares none");
    }

    #[test]
    fn a_request_on_a_sessions_stream_goes_only_to_a_call_in_that_session() {
        let askers = Arc::new(Askers::default());
        let (alice, _alice_inbox) = asks();
        let _alice = askers.register(1, Some("s-alice".into()), alice);
        assert!(askers.sole("db", "roots/list", Some("s-alice")).is_some(), "alice's one call");
        assert!(askers.sole("db", "roots/list", Some("s-bob")).is_none(), "never to another caller's call");
        assert!(askers.sole("db", "roots/list", None).is_none(), "nor from the listing session's stream");
        let (again, _again_inbox) = asks();
        let second = askers.register(2, Some("s-alice".into()), again);
        assert!(askers.sole("db", "roots/list", Some("s-alice")).is_none(), "two calls: whose is unknown");
        drop(second);
        assert!(askers.sole("db", "roots/list", Some("s-alice")).is_some(), "one again once the other ends");
    }
}
