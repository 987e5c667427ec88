//! Serving one request: validate it, dispatch it, and answer with JSON or a stream.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::FutureExt as _;
use futures_util::future::Either;
use hitl_protocol::version::Era;
use hitl_protocol::{ClientRequest, ErrorObject, InitializeParams, RequestId, Response, ServerResult};
use http::{HeaderValue, Method, StatusCode};

use crate::validate::{self, Caller, Incoming, Valid};
use crate::{McpBody, Shared, error_response, json_response, push, session, sse};

/// What a request comes to before anything is awaited. Worked out by a plain function
/// before the request's future is made, so that future keeps neither the HTTP request
/// nor what reading it took: only what the dispatch needs.
#[allow(clippy::large_enum_variant, reason = "made once per request and moved into its future, not boxed again")]
enum Handling {
    /// Answered already (refused, accepted, or a stream that runs on its own).
    Done(http::Response<McpBody>),
    /// A rare request served by a boxed future of its own: a `subscriptions/listen`
    /// stream (its subscriptions made first), a 2025-era `initialize` (its session id).
    Later(Pin<Box<dyn Future<Output = http::Response<McpBody>> + Send>>),
    /// A request to dispatch and answer with JSON.
    Dispatch { id: RequestId, era: Era, request: ClientRequest, caller: Caller },
}

impl Shared {
    pub(crate) fn handle(
        self: Arc<Self>,
        request: http::Request<Bytes>,
    ) -> impl Future<Output = Result<http::Response<McpBody>, Infallible>> + Send {
        // Put together from futures made here, so that the request's future keeps only
        // what is awaited (an async block would also keep the handling it took apart).
        // Its output is the service's, so that no wrapper moves the future once more.
        match self.prepare(request) {
            Handling::Done(response) => Either::Left(Either::Left(std::future::ready(Ok(response)))),
            Handling::Later(later) => Either::Left(Either::Right(later.map(Ok))),
            Handling::Dispatch { id, era, request, caller } => {
                let dispatched = self.dispatch(request, caller, None, None);
                Either::Right(dispatched.map(move |result| Ok(self.respond(id, era, result))))
            }
        }
    }

    /// The JSON response to a dispatched request.
    fn respond(&self, id: RequestId, era: Era, result: Result<ServerResult, ErrorObject>) -> http::Response<McpBody> {
        match self.message(id, era, result) {
            Response::Error { id, error } => error_response(era, id, error),
            ok => json_response(StatusCode::OK, &ok),
        }
    }

    /// A 2025-era `initialize`, answered with a session. hitl keeps no per-session
    /// state, so the id names the client's session, signed (with what the client can
    /// answer, for push elicitation; the gateway keeps an upstream session per client
    /// session), and every request is served with or without it.
    async fn initialize(
        self: Arc<Self>,
        id: RequestId,
        params: InitializeParams,
        caller: Caller,
    ) -> http::Response<McpBody> {
        let version = hitl_protocol::version::negotiate_legacy(&params.protocol_version);
        let session = session::issue(self.engine.secret(), version, &params.capabilities);
        let result = self.dispatch(ClientRequest::Initialize(params), caller, None, None).await;
        let initialized = result.is_ok();
        let mut response = self.respond(id, Era::Legacy, result);
        if initialized && let Ok(value) = HeaderValue::from_str(&session) {
            response.headers_mut().insert("mcp-session-id", value);
        }
        response
    }

    /// Reads `request` and serves what needs no waiting; the rest is left to
    /// [`Shared::handle`]'s future.
    fn prepare(self: &Arc<Self>, request: http::Request<Bytes>) -> Handling {
        if request.method() == Method::GET
            && let Some(stream) = self.session_stream(&request)
        {
            return Handling::Done(stream);
        }
        // Over stdio, push elicitation is as the connection says.
        let push = self.options.legacy_elicitation
            || request.extensions().get::<crate::stdio::FromStdio>().is_some_and(|stdio| stdio.push);
        let validated = validate::validate(&self.tools.snapshot(), self.options.access.as_ref(), &request);
        // Read: its headers and body are not kept while the call runs.
        drop(request);
        let Valid { id, request, mut caller, stream, session, takes_sse } = match validated {
            Ok(Incoming::Request(valid)) => valid,
            Ok(Incoming::Answer(id, outcome, principal)) => {
                // A 2025-era client answering a question pushed to it; any other answer
                // is accepted and dropped.
                if push && !self.pushes.deliver(&id, outcome, principal.as_deref()) {
                    tracing::debug!(?id, "a client answered a request no call of this replica is waiting for");
                }
                return Handling::Done(crate::empty(StatusCode::ACCEPTED));
            }
            Err(refused) => return Handling::Done(*refused),
        };
        let era = caller.era;
        let request = match (request, era) {
            (ClientRequest::Listen(params), Era::Modern) => {
                let this = Arc::clone(self);
                return Handling::Later(Box::pin(async move { this.listen(id, &params.notifications, &caller).await }));
            }
            (ClientRequest::Initialize(params), Era::Legacy) => {
                let this = Arc::clone(self);
                return Handling::Later(Box::pin(async move { this.initialize(id, params, caller).await }));
            }
            (request, _) => request,
        };
        // Only a session id this server signed names a session: a client cannot make
        // up one, and a session is kept per caller (its principal) besides.
        caller.session = session.clone().filter(|id| session::read(self.engine.secret(), id).is_some());
        if push
            && era == Era::Legacy
            && takes_sse
            && matches!(request, ClientRequest::CallTool(_) | ClientRequest::GetPrompt(_))
            && let Some(session) = session.and_then(|id| session::read(self.engine.secret(), &id))
            // A client that answers none of what a round asks gets the error result of
            // any 2025-era client, not a stream of requests it cannot take.
            && (session.capabilities.elicits_form()
                || session.capabilities.elicits_url()
                || session.capabilities.sampling.is_some()
                || session.capabilities.roots.is_some())
        {
            let pushed = push::Pushed { id, request, caller, session, progress_token: stream };
            return Handling::Done(Arc::clone(self).push(pushed));
        }
        if let Some(token) = stream {
            let this = Arc::clone(self);
            return Handling::Done(sse::respond(token, move |progress, cancel| async move {
                let result = this.dispatch(request, caller, Some(progress), Some(cancel)).await;
                this.message(id, era, result)
            }));
        }
        Handling::Dispatch { id, era, request, caller }
    }
}

impl Shared {
    /// A 2025-era session's GET stream of list changes and of the updates of the
    /// resources it subscribed to: for a GET that names a session this server signed
    /// (without one, or from a 2026-07-28 client, GET stays 405).
    fn session_stream(&self, request: &http::Request<Bytes>) -> Option<http::Response<McpBody>> {
        let headers = request.headers();
        let version = headers.get(hitl_protocol::headers::PROTOCOL_VERSION).and_then(|v| v.to_str().ok());
        if version.is_some_and(|v| hitl_protocol::version::era_of(v) == Era::Modern) {
            return None;
        }
        let id = headers.get("mcp-session-id")?.to_str().ok()?;
        session::read(self.engine.secret(), id)?;
        self.forget_expired();
        let client = crate::dispatch::session_client(id);
        Some(
            self.options
                .notifier
                .session_stream(client, self.options.max_listeners)
                .unwrap_or_else(|| busy(Era::Legacy, None)),
        )
    }

    /// A 2026-07-28 `subscriptions/listen` stream. The resources it names are
    /// subscribed to first (for as long as the stream lives), when something offers
    /// subscriptions: one that cannot be is the request's error, and nothing is
    /// subscribed. Otherwise the acknowledgement leaves them out.
    async fn listen(
        &self,
        id: hitl_protocol::RequestId,
        filter: &hitl_protocol::SubscriptionFilter,
        caller: &validate::Caller,
    ) -> http::Response<McpBody> {
        let (notifier, max) = (&self.options.notifier, self.options.max_listeners);
        let asked = filter.resource_subscriptions.as_deref().unwrap_or_default();
        let passthrough = self.options.passthrough.as_ref().filter(|p| p.0.subscribable());
        let Some(passthrough) = passthrough.filter(|_| !asked.is_empty()) else {
            return notifier.listen(id.clone(), filter, None, max, None).unwrap_or_else(|| busy(Era::Modern, id));
        };
        if !notifier.has_room(max) {
            return busy(Era::Modern, id);
        }
        let client = format!("listen:{}", uuid::Uuid::new_v4().simple());
        let asker = crate::dispatch::asker(caller);
        let mut uris: Vec<String> = Vec::new();
        for uri in asked {
            if uris.contains(uri) {
                continue;
            }
            if let Err(error) = passthrough.0.subscribe(&client, uri, &asker).await {
                passthrough.0.forget(&client).await;
                return error_response(Era::Modern, Some(id), error);
            }
            uris.push(uri.clone());
        }
        // The stream's subscriptions end with it.
        let (relayed, forgotten) = (passthrough.0.clone(), client.clone());
        let closed: Box<dyn FnOnce() + Send> = Box::new(move || {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move { relayed.forget(&forgotten).await });
            }
        });
        notifier
            .listen(id.clone(), filter, Some((client, uris)), max, Some(closed))
            .unwrap_or_else(|| busy(Era::Modern, id))
    }
}

/// The answer when as many notification streams are open as are allowed: 503, to be
/// tried again.
fn busy(era: Era, id: impl Into<Option<hitl_protocol::RequestId>>) -> http::Response<McpBody> {
    let error = ErrorObject::internal("Too many notification streams are open; try again later");
    let mut response = crate::error_response(era, id.into(), error);
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from_static("5"));
    response
}
