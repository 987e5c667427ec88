//! Serving one request: validate it, dispatch it, and answer with JSON or a stream.

use std::sync::Arc;

use bytes::Bytes;
use hitl_protocol::version::Era;
use hitl_protocol::{ClientRequest, ErrorObject, Response};
use http::{HeaderValue, Method, StatusCode};

use crate::validate::{self, Incoming, Valid};
use crate::{McpBody, Shared, error_response, json_response, push, session, sse};

impl Shared {
    #[allow(clippy::manual_async_fn, reason = "an async fn would keep its arguments twice in its future")]
    pub(crate) fn handle(
        self: Arc<Self>,
        request: http::Request<Bytes>,
    ) -> impl Future<Output = http::Response<McpBody>> + Send {
        async move {
            if request.method() == Method::GET
                && let Some(stream) = self.session_stream(&request)
            {
                return stream;
            }
            // Over stdio, push elicitation is as the connection says.
            let push = self.options.legacy_elicitation
                || request.extensions().get::<crate::stdio::FromStdio>().is_some_and(|stdio| stdio.push);
            let validated = validate::validate(&self.tools.snapshot(), self.options.access.as_ref(), &request);
            // Read: its headers and body are not kept while the call runs.
            drop(request);
            // Taken apart as it is read: no whole `Valid` kept in the future beside its parts.
            let Valid { id, request, mut caller, stream, session, takes_sse } = match validated {
                Ok(Incoming::Request(valid)) => *valid,
                Ok(Incoming::Answer(id, outcome, principal)) => {
                    // A 2025-era client answering a question pushed to it; any other answer
                    // is accepted and dropped.
                    if push && !self.pushes.deliver(&id, outcome, principal.as_deref()) {
                        tracing::debug!(?id, "a client answered a request no call of this replica is waiting for");
                    }
                    return crate::empty(StatusCode::ACCEPTED);
                }
                Err(refused) => return *refused,
            };
            let era = caller.era;
            if let (ClientRequest::Listen(params), Era::Modern) = (&request, era) {
                return self.listen(id, &params.notifications, &caller).await;
            }
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
                return self.push(pushed);
            }
            if let Some(token) = stream {
                return sse::respond(token, move |progress, cancel| async move {
                    let result = self.dispatch(request, caller, Some(progress), Some(cancel)).await;
                    self.message(id, era, result)
                });
            }
            let initialize = match &request {
                ClientRequest::Initialize(params) => {
                    Some((params.protocol_version.clone(), params.capabilities.clone()))
                }
                _ => None,
            };
            let mut response = match self.message(id, era, self.dispatch(request, caller, None, None).await) {
                Response::Error { id, error } => return error_response(era, id, error),
                ok => json_response(StatusCode::OK, &ok),
            };
            if let Some((version, capabilities)) = initialize
                && era == Era::Legacy
            {
                // Legacy clients expect a session: hitl keeps no per-session state, so the id
                // names the client's session, signed (with what the client can answer, for
                // push elicitation; the gateway keeps an upstream session per client
                // session), and every request is served with or without it.
                let version = hitl_protocol::version::negotiate_legacy(&version);
                let session = session::issue(self.engine.secret(), version, &capabilities);
                if let Ok(value) = HeaderValue::from_str(&session) {
                    response.headers_mut().insert("mcp-session-id", value);
                }
            }
            response
        }
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
