//! Streamable HTTP: one POST per message, with the era's headers (`MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name` for 2026-07-28; `Mcp-Session-Id` for a legacy session), the
//! response read as JSON or as SSE.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hitl_protocol::{ErrorObject, headers, jsonrpc, version};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::client::{Askers, Asks, Changed, Exchanged, Listened, Outgoing, Transport, notified, reply_to, response_to};
use crate::sse::EventReader;
use crate::{Era, Upstream, UpstreamError};

/// Where an HTTP upstream is and how to reach it.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The name the upstream goes by (in errors and logs).
    pub name: String,
    /// Its MCP endpoint, `http://` or `https://`.
    pub url: Uri,
    /// For `https://`: the CA certificates (PEM) to trust instead of the system's
    /// (which `SSL_CERT_FILE` and `SSL_CERT_DIR` may name).
    pub ca_pem: Option<Vec<u8>>,
    /// Headers sent with every request (e.g. `Authorization`).
    pub headers: HeaderMap,
    /// The protocol revision to speak (`None`: the newest it supports).
    pub protocol: Option<String>,
    /// How long one request may take, response included.
    pub timeout: Duration,
    /// The largest message read from it (one JSON body, or one SSE event); a larger one
    /// fails the request with [`UpstreamError::TooLarge`], read no further.
    pub max_response_bytes: usize,
}

impl Upstream {
    /// An upstream over Streamable HTTP; nothing is sent until the first request.
    /// Fails when its CA certificates cannot be read, or none are found for `https://`.
    pub fn http(config: HttpConfig) -> Result<Self, UpstreamError> {
        let connector = connector(&config)?;
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let (name, protocol, timeout) = (config.name.clone(), config.protocol.clone(), config.timeout);
        let changed = Changed::default();
        let transport = HttpTransport { config, client, changed: changed.clone(), askers: Arc::default() };
        Ok(Self::with_transport(name, protocol, timeout, changed, Arc::new(transport)))
    }
}

/// A connector for `http://`, and for `https://` through rustls on ring with the
/// configured or the system's roots.
fn connector(config: &HttpConfig) -> Result<hitl_tls::Connector, UpstreamError> {
    let roots = match (config.url.scheme_str(), &config.ca_pem) {
        (Some("https"), Some(pem)) => hitl_tls::Roots::Pem(pem),
        (Some("https"), None) => hitl_tls::Roots::System,
        _ => hitl_tls::Roots::HttpOnly,
    };
    hitl_tls::connector(roots)
        .map_err(|e| UpstreamError::Config { upstream: config.name.clone(), detail: e.to_string() })
}

/// Headers added to every request to an HTTP upstream (say, the W3C `traceparent` of
/// the span it is made in), set once by the program.
pub type RequestHeaders = Box<dyn Fn(&mut http::HeaderMap) + Send + Sync>;

static REQUEST_HEADERS: std::sync::OnceLock<RequestHeaders> = std::sync::OnceLock::new();

/// Adds `headers` to every request to HTTP upstreams from now on; `false` when some were
/// set already (they stay).
pub fn add_request_headers(headers: RequestHeaders) -> bool {
    REQUEST_HEADERS.set(headers).is_ok()
}

#[derive(Debug)]
struct HttpTransport {
    config: HttpConfig,
    client: Client<hitl_tls::Connector, Full<Bytes>>,
    changed: Changed,
    /// The calls in flight that take what arrives on the session's GET stream.
    askers: Arc<Askers>,
}

#[async_trait::async_trait]
impl Transport for HttpTransport {
    async fn exchange(&self, era: &Era, message: Outgoing<'_>) -> Result<Exchanged, UpstreamError> {
        let request = self
            .post(era, message.method, message.name.as_deref(), message.body)
            .map_err(|e| self.protocol(e.to_string()))?;
        let _asking = match (message.id, &message.asks) {
            (Some(id), Some(asks)) => Some(self.askers.register(id, session_of(era), asks.clone())),
            _ => None,
        };
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| {
                // No connection was made: the request never left.
                if e.is_connect() { self.not_sent(e) } else { self.unreachable(e) }
            })?;
            let session =
                response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned).or_else(
                    || match era {
                        Era::Legacy { session, .. } => session.clone(),
                        Era::Modern => None,
                    },
                );
            let status = response.status();
            if refuses_session(era, status) {
                let bytes = self.whole(response.into_body()).await?;
                if status == StatusCode::NOT_FOUND || names_session(&bytes) {
                    return Err(self.session_gone(status, &bytes));
                }
                return match message.id {
                    None => Err(self.status(status, &bytes)),
                    Some(id) => Ok(Exchanged { response: Some(self.answer_in(&bytes, status, id)?), session }),
                };
            }
            let Some(id) = message.id else {
                if status.is_success() {
                    return Ok(Exchanged { response: None, session });
                }
                let bytes = self.whole(response.into_body()).await?;
                return Err(self.status(status, &bytes));
            };
            let sse = is_sse(response.headers());
            let result = self.read(era, response.into_body(), sse, status, id, message.asks.as_ref()).await?;
            Ok(Exchanged { response: Some(result), session })
        };
        if message.asks.is_some() {
            // The caller times the call, between the upstream's questions.
            return exchange.await;
        }
        match tokio::time::timeout(self.config.timeout, exchange).await {
            Ok(outcome) => outcome,
            Err(_) => Err(self.timeout()),
        }
    }

    async fn listen(&self, era: &Era, subscribe: Outgoing<'_>) -> Result<Listened, UpstreamError> {
        let request = match era {
            Era::Modern => self.post(era, subscribe.method, None, subscribe.body),
            // A 2025-era session's standalone stream.
            Era::Legacy { .. } => self.get(era),
        }
        .map_err(|e| self.protocol(e.to_string()))?;
        let response = match tokio::time::timeout(self.config.timeout, self.client.request(request)).await {
            Ok(response) => response.map_err(|e| self.unreachable(e))?,
            Err(_) => return Err(self.timeout()),
        };
        let status = response.status();
        let sse = is_sse(response.headers());
        if status == StatusCode::METHOD_NOT_ALLOWED || (status.is_success() && !sse) {
            return Ok(Listened::Unsupported);
        }
        if let (true, Some(opened)) = (status.is_success(), subscribe.opened) {
            let _ = opened.send(());
        }
        if !status.is_success() {
            let bytes = self.whole(response.into_body()).await?;
            if refuses_session(era, status) && (status == StatusCode::NOT_FOUND || names_session(&bytes)) {
                return Err(self.session_gone(status, &bytes));
            }
            if let Some(Err(_)) =
                unaddressed_error(&bytes, status).or_else(|| subscribe.id.and_then(|id| response_to(&bytes, id)))
            {
                return Ok(Listened::Unsupported);
            }
            return Err(self.status(status, &bytes));
        }
        let mut body = response.into_body();
        let mut events = EventReader::default();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| self.unreachable(e))?;
            let Some(data) = frame.data_ref() else { continue };
            let completed = events.feed(data);
            self.bounded(&events)?;
            for event in completed {
                match jsonrpc::parse(event.as_bytes()) {
                    Ok(jsonrpc::Message::Error { .. }) => return Ok(Listened::Unsupported),
                    // A request outside any call's stream (a 2025-era server that
                    // does not relate it to the call): answered by the call in flight.
                    Ok(jsonrpc::Message::Request(request)) => {
                        let session = session_of(era);
                        let asks = self.askers.sole(&self.config.name, &request.method, session.as_deref());
                        let reply = reply_to(asks.as_ref(), request).await;
                        self.answer(era, reply).await;
                    }
                    Ok(message) => notified(&message, &self.askers, &self.changed, session_of(era).as_deref()),
                    Err(_) => {}
                }
            }
        }
        Ok(Listened::Ended)
    }

    /// The Streamable HTTP way to end a session: DELETE with its `Mcp-Session-Id`
    /// (405: the upstream does not let clients end sessions; it expires them itself).
    async fn close(&self, era: &Era) {
        let Era::Legacy { session: Some(_), .. } = era else { return };
        let Ok(request) = self.request(Method::DELETE, "application/json", era, "", None).body(Full::new(Bytes::new()))
        else {
            return;
        };
        match tokio::time::timeout(self.config.timeout, self.client.request(request)).await {
            Ok(Ok(response)) if response.status().is_success() || response.status() == StatusCode::NOT_FOUND => {}
            Ok(Ok(response)) => {
                tracing::debug!(upstream = %self.config.name, status = %response.status(), "the upstream did not end a session")
            }
            Ok(Err(e)) => tracing::debug!(upstream = %self.config.name, error = %e, "could not end a session"),
            Err(_) => tracing::debug!(upstream = %self.config.name, "ending a session timed out"),
        }
    }
}

impl HttpTransport {
    /// The response to request `id`: one JSON object, or the SSE event that carries it
    /// (notifications before it are skipped; requests are answered through `asks`).
    async fn read(
        &self,
        era: &Era,
        mut body: hyper::body::Incoming,
        sse: bool,
        status: StatusCode,
        id: i64,
        asks: Option<&Asks>,
    ) -> Result<Result<Value, ErrorObject>, UpstreamError> {
        if !sse {
            let bytes = self.whole(body).await?;
            return self.answer_in(&bytes, status, id);
        }
        let mut events = EventReader::default();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| self.unreachable(e))?;
            let Some(data) = frame.data_ref() else { continue };
            let completed = events.feed(data);
            self.bounded(&events)?;
            for event in completed {
                if let Some(answer) = response_to(event.as_bytes(), id) {
                    return Ok(answer);
                }
                match jsonrpc::parse(event.as_bytes()) {
                    Ok(jsonrpc::Message::Request(request)) => {
                        let reply = reply_to(asks, request).await;
                        self.answer(era, reply).await;
                    }
                    // The call's own progress comes back through `askers`, where it is
                    // registered under its id, its progress token.
                    Ok(message) => notified(&message, &self.askers, &self.changed, session_of(era).as_deref()),
                    Err(_) => {}
                }
            }
        }
        match events.finish().and_then(|event| response_to(event.as_bytes(), id)) {
            Some(answer) => Ok(answer),
            None => Err(self.protocol("its event stream ended without the response")),
        }
    }

    /// A POST of `body` to the endpoint, with the configured headers and the era's.
    fn post(&self, era: &Era, method: &str, name: Option<&str>, body: Vec<u8>) -> http::Result<Request<Full<Bytes>>> {
        let mut request = self.request(Method::POST, "application/json, text/event-stream", era, method, name);
        let headers = request.headers_mut().expect("a fresh builder");
        headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        request.body(Full::new(Bytes::from(body)))
    }

    /// A GET of the endpoint: a 2025-era session's stream of notifications.
    fn get(&self, era: &Era) -> http::Result<Request<Full<Bytes>>> {
        self.request(Method::GET, "text/event-stream", era, "", None).body(Full::new(Bytes::new()))
    }

    /// A request to the endpoint with the configured headers, `accept` and the era's.
    fn request(
        &self,
        http_method: Method,
        accept: &'static str,
        era: &Era,
        method: &str,
        name: Option<&str>,
    ) -> http::request::Builder {
        let mut request = Request::builder().method(http_method).uri(self.config.url.clone());
        let headers = request.headers_mut().expect("a fresh builder");
        headers.extend(self.config.headers.clone());
        headers.insert(http::header::ACCEPT, HeaderValue::from_static(accept));
        for (header, value) in era_headers(era, method, name) {
            headers.insert(header, value);
        }
        if let Some(add) = REQUEST_HEADERS.get() {
            add(headers);
        }
        request
    }

    /// POSTs `reply`, the answer to a request the upstream sent mid-call.
    async fn answer(&self, era: &Era, reply: Vec<u8>) {
        let Ok(post) = self.post(era, "", None, reply) else { return };
        match tokio::time::timeout(self.config.timeout, self.client.request(post)).await {
            Ok(Ok(response)) if response.status().is_success() => {}
            Ok(Ok(response)) => {
                let status = response.status();
                tracing::warn!(upstream = %self.config.name, %status, "the upstream refused the answer to its request");
            }
            Ok(Err(e)) => {
                tracing::warn!(upstream = %self.config.name, error = %e, "could not answer the upstream's request")
            }
            Err(_) => tracing::warn!(upstream = %self.config.name, "answering the upstream's request timed out"),
        }
    }

    /// A whole body, read up to `max_response_bytes` (a larger `Content-Length` is
    /// refused before a byte is read).
    async fn whole(&self, body: hyper::body::Incoming) -> Result<Bytes, UpstreamError> {
        let limit = self.config.max_response_bytes;
        if hyper::body::Body::size_hint(&body).lower() > limit as u64 {
            return Err(self.too_large());
        }
        match http_body_util::Limited::new(body, limit).collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => Err(self.too_large()),
            Err(e) => Err(self.unreachable(&*e)),
        }
    }

    /// Fails when an event still unfinished holds more than `max_response_bytes`.
    fn bounded(&self, events: &EventReader) -> Result<(), UpstreamError> {
        if events.buffered() > self.config.max_response_bytes { Err(self.too_large()) } else { Ok(()) }
    }

    /// The answer to request `id` in a whole JSON body: its response, or an error
    /// without an id, or the status.
    fn answer_in(
        &self,
        bytes: &[u8],
        status: StatusCode,
        id: i64,
    ) -> Result<Result<Value, ErrorObject>, UpstreamError> {
        match response_to(bytes, id).or_else(|| unaddressed_error(bytes, status)) {
            Some(answer) => Ok(answer),
            None => Err(self.status(status, bytes)),
        }
    }

    fn session_gone(&self, status: StatusCode, body: &[u8]) -> UpstreamError {
        let detail = String::from_utf8_lossy(&body[..body.len().min(200)]).trim().to_owned();
        UpstreamError::SessionGone { upstream: self.config.name.clone(), status: status.as_u16(), detail }
    }

    fn too_large(&self) -> UpstreamError {
        UpstreamError::TooLarge { upstream: self.config.name.clone(), limit: self.config.max_response_bytes }
    }

    fn timeout(&self) -> UpstreamError {
        UpstreamError::Timeout { upstream: self.config.name.clone(), secs: self.config.timeout.as_secs() }
    }

    fn status(&self, status: StatusCode, body: &[u8]) -> UpstreamError {
        let detail = String::from_utf8_lossy(&body[..body.len().min(200)]).trim().to_owned();
        UpstreamError::Status { upstream: self.config.name.clone(), status: status.as_u16(), detail }
    }

    /// `error` and its causes (hyper's own message says little: "client error (Connect)").
    fn unreachable(&self, error: impl std::error::Error) -> UpstreamError {
        let mut detail = error.to_string();
        let mut cause = error.source();
        while let Some(inner) = cause {
            detail.push_str(": ");
            detail.push_str(&inner.to_string());
            cause = inner.source();
        }
        UpstreamError::Unreachable { upstream: self.config.name.clone(), detail }
    }

    /// [`Self::unreachable`], for an error that happened before the request was sent.
    fn not_sent(&self, error: impl std::error::Error) -> UpstreamError {
        match self.unreachable(error) {
            UpstreamError::Unreachable { upstream, detail } => UpstreamError::NotSent { upstream, detail },
            other => other,
        }
    }

    fn protocol(&self, detail: impl Into<String>) -> UpstreamError {
        UpstreamError::Protocol { upstream: self.config.name.clone(), detail: detail.into() }
    }
}

/// The `Mcp-Session-Id` of `era`.
fn session_of(era: &Era) -> Option<String> {
    match era {
        Era::Legacy { session, .. } => session.clone(),
        Era::Modern => None,
    }
}

/// May a response with `status` be a refusal of the session sent in `era`: 404, or 400
/// (the TypeScript SDK's servers answer a session they do not know with 400 `No valid
/// session ID provided`)?
fn refuses_session(era: &Era, status: StatusCode) -> bool {
    matches!(era, Era::Legacy { session: Some(_), .. })
        && matches!(status, StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST)
}

/// Does an error body name the session (`session` in any case)?
fn names_session(body: &[u8]) -> bool {
    body.windows(7).any(|w| w.eq_ignore_ascii_case(b"session"))
}

/// Whether a response is an SSE stream.
fn is_sse(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// An error response without an id (the server could not read ours), on an error
/// status.
fn unaddressed_error(bytes: &[u8], status: StatusCode) -> Option<Result<Value, ErrorObject>> {
    match jsonrpc::parse(bytes).ok()? {
        jsonrpc::Message::Error { id: None, error } if !status.is_success() => Some(Err(error)),
        _ => None,
    }
}

/// The headers of a request in `era`.
fn era_headers(era: &Era, method: &str, name: Option<&str>) -> Vec<(HeaderName, HeaderValue)> {
    let value = |v: &str| HeaderValue::from_str(v).unwrap_or_else(|_| HeaderValue::from_static(""));
    match era {
        Era::Modern => {
            let mut out = vec![
                (HeaderName::from_static(headers::PROTOCOL_VERSION), HeaderValue::from_static(version::MODERN)),
                (HeaderName::from_static(headers::METHOD), value(method)),
            ];
            if let Some(name) = name {
                out.push((HeaderName::from_static(headers::NAME), value(&headers::encode_value(name))));
            }
            out
        }
        Era::Legacy { version, session } => {
            let mut out = Vec::new();
            // 2025-03-26 predates the header; the handshake itself goes without it.
            if version.as_str() != version::LEGACY_DEFAULT && method != "initialize" {
                out.push((HeaderName::from_static(headers::PROTOCOL_VERSION), value(version)));
            }
            if let Some(session) = session {
                out.push((HeaderName::from_static("mcp-session-id"), value(session)));
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_session_only_when_one_was_sent() {
        let with = Era::Legacy { version: "2025-11-25".into(), session: Some("s".into()) };
        let without = Era::Legacy { version: "2025-11-25".into(), session: None };
        assert!(refuses_session(&with, StatusCode::BAD_REQUEST) && refuses_session(&with, StatusCode::NOT_FOUND));
        assert!(!refuses_session(&with, StatusCode::INTERNAL_SERVER_ERROR));
        assert!(
            !refuses_session(&without, StatusCode::NOT_FOUND) && !refuses_session(&Era::Modern, StatusCode::NOT_FOUND)
        );
        let everything = br#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#;
        assert!(names_session(everything) && names_session(b"SESSION not found"));
        assert!(!names_session(br#"{"error":{"message":"Bad Request: invalid params"}}"#));
    }
}
