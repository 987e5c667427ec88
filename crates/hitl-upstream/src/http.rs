//! An upstream over Streamable HTTP: the era negotiated once (2026-07-28 stateless
//! requests, or an `initialize` handshake and `Mcp-Session-Id` for 2025-03-26 to
//! 2025-11-25), then one POST per request, its response read as JSON or as SSE.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hitl_protocol::jsonrpc::{self, Message};
use hitl_protocol::{ErrorObject, RequestId, headers, meta_keys as meta, version};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;

use crate::sse::EventReader;
use crate::{Era, UpstreamError};

/// Where an HTTP upstream is and how to reach it.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The name the upstream goes by (in errors and logs).
    pub name: String,
    /// Its MCP endpoint.
    pub url: Uri,
    /// Headers sent with every request (e.g. `Authorization`).
    pub headers: HeaderMap,
    /// The protocol revision to speak (`None`: the newest it supports).
    pub protocol: Option<String>,
    /// How long one request may take, response included.
    pub timeout: Duration,
}

/// A Streamable HTTP upstream. Cheap to share: requests run concurrently over a pool
/// of connections.
#[derive(Debug)]
pub struct HttpUpstream {
    config: HttpConfig,
    client: Client<HttpConnector, Full<Bytes>>,
    era: Mutex<Option<Era>>,
    next_id: AtomicI64,
}

/// This client, as upstreams see it.
fn client_info() -> Value {
    json!({"name": "hitl", "version": env!("CARGO_PKG_VERSION")})
}

impl HttpUpstream {
    /// An upstream at `config.url`; nothing is sent until the first request.
    pub fn new(config: HttpConfig) -> Self {
        let client = Client::builder(TokioExecutor::new()).build_http();
        Self { config, client, era: Mutex::new(None), next_id: AtomicI64::new(1) }
    }

    /// The upstream's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The era negotiated with the upstream, negotiating it first if need be.
    pub async fn era(&self) -> Result<Era, UpstreamError> {
        let mut era = self.era.lock().await;
        if let Some(known) = &*era {
            return Ok(known.clone());
        }
        let negotiated = self.negotiate().await?;
        tracing::info!(upstream = %self.config.name, era = ?negotiated, "connected");
        *era = Some(negotiated.clone());
        Ok(negotiated)
    }

    /// Sends `method` with `params` and returns its result. A legacy session the
    /// upstream no longer knows (404) is opened again once; the request had not been
    /// served, so it is sent again.
    pub async fn request(&self, method: &str, params: Map<String, Value>) -> Result<Value, UpstreamError> {
        let era = self.era().await?;
        match self.send(&era, method, params.clone()).await {
            Err(UpstreamError::Status { status: 404, .. }) if matches!(era, Era::Legacy { session: Some(_), .. }) => {
                let mut slot = self.era.lock().await;
                if slot.as_ref() == Some(&era) {
                    *slot = None;
                }
                drop(slot);
                let era = self.era().await?;
                self.send(&era, method, params).await
            }
            other => other,
        }
    }

    /// Every tool the upstream lists, across pages, each as the object it sent.
    pub async fn list_tools(&self) -> Result<Vec<Map<String, Value>>, UpstreamError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..1000 {
            let mut params = Map::new();
            if let Some(cursor) = cursor.take() {
                params.insert("cursor".into(), Value::String(cursor));
            }
            let result = self.request("tools/list", params).await?;
            let Some(page) = result.get("tools").and_then(Value::as_array) else {
                return Err(self.protocol("its tools/list result has no tools array"));
            };
            tools.extend(page.iter().filter_map(|t| t.as_object().cloned()));
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(tools),
            }
        }
        Err(self.protocol("its tools/list pages never end"))
    }

    /// Calls tool `name`; the result is the upstream's, unchanged (a `CallToolResult`,
    /// or a 2026-07-28 `input_required` result).
    pub async fn call_tool(&self, name: &str, arguments: Map<String, Value>) -> Result<Value, UpstreamError> {
        let params =
            Map::from_iter([("name".to_owned(), json!(name)), ("arguments".to_owned(), Value::Object(arguments))]);
        self.request("tools/call", params).await
    }

    async fn negotiate(&self) -> Result<Era, UpstreamError> {
        match self.config.protocol.as_deref() {
            Some(version::MODERN) => return self.discover().await,
            Some(legacy) => return self.initialize(legacy).await,
            None => {}
        }
        // A modern request first; a server of an older revision refuses it (or answers
        // something this is not), and then the handshake decides.
        match self.discover().await {
            Ok(era) => Ok(era),
            Err(e @ (UpstreamError::Unreachable { .. } | UpstreamError::Timeout { .. })) => Err(e),
            Err(_) => self.initialize(version::LEGACY[0]).await,
        }
    }

    /// `server/discover`: a 2026-07-28 server names its versions.
    async fn discover(&self) -> Result<Era, UpstreamError> {
        let era = Era::Modern;
        let result = self.send(&era, "server/discover", Map::new()).await?;
        let versions: Vec<&str> = result
            .get("supportedVersions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if versions.contains(&version::MODERN) {
            return Ok(era);
        }
        Err(self.protocol(format!("it supports {versions:?}, not {}", version::MODERN)))
    }

    /// The legacy handshake: `initialize` with `requested`, the session id it gives,
    /// then `notifications/initialized`.
    async fn initialize(&self, requested: &str) -> Result<Era, UpstreamError> {
        let params = json!({
            "protocolVersion": requested,
            "capabilities": {},
            "clientInfo": client_info(),
        });
        let Value::Object(params) = params else { unreachable!("an object literal") };
        let handshake = Era::Legacy { version: requested.to_owned(), session: None };
        let (result, session) = self.post(&handshake, "initialize", Some(params)).await?;
        let result = result.ok_or_else(|| self.protocol("it answered initialize with no result"))?;
        let spoken = result.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
        let forced = self.config.protocol.is_some();
        if !version::LEGACY.contains(&spoken) || (forced && spoken != requested) {
            return Err(self.protocol(format!("it answered initialize with protocol version {spoken:?}")));
        }
        let era = Era::Legacy { version: spoken.to_owned(), session };
        self.post(&era, "notifications/initialized", None).await?;
        Ok(era)
    }

    async fn send(&self, era: &Era, method: &str, params: Map<String, Value>) -> Result<Value, UpstreamError> {
        let (result, _) = self.post(era, method, Some(params)).await?;
        result.ok_or_else(|| self.protocol(format!("it answered {method} with no result")))
    }

    /// One POST: a request (`params` given, the result returned) or a notification
    /// (`None`). Also returns the `Mcp-Session-Id` the response carried.
    async fn post(
        &self,
        era: &Era,
        method: &str,
        params: Option<Map<String, Value>>,
    ) -> Result<(Option<Value>, Option<String>), UpstreamError> {
        let notification = params.is_none();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (body, name) = self.body(era, id, method, params);
        let mut request = Request::builder().method(Method::POST).uri(self.config.url.clone());
        let headers = request.headers_mut().expect("a fresh builder");
        headers.extend(self.config.headers.clone());
        headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(http::header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        for (header, value) in era.headers(method, name.as_deref()) {
            headers.insert(header, value);
        }
        let request = request.body(Full::new(Bytes::from(body))).map_err(|e| self.protocol(e.to_string()))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| self.unreachable(e))?;
            let session =
                response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned).or_else(
                    || match era {
                        Era::Legacy { session, .. } => session.clone(),
                        Era::Modern => None,
                    },
                );
            let status = response.status();
            if notification && status.is_success() {
                return Ok((None, session));
            }
            let sse = response
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"));
            let result = self.read(response.into_body(), sse, status, RequestId::Number(id)).await?;
            Ok((Some(result), session))
        };
        match tokio::time::timeout(self.config.timeout, exchange).await {
            Ok(outcome) => outcome,
            Err(_) => {
                Err(UpstreamError::Timeout { upstream: self.config.name.clone(), secs: self.config.timeout.as_secs() })
            }
        }
    }

    fn body(&self, era: &Era, id: i64, method: &str, params: Option<Map<String, Value>>) -> (Vec<u8>, Option<String>) {
        let name = headers::name_param(method).and_then(|p| params.as_ref()?.get(p)?.as_str().map(str::to_owned));
        let message = match params {
            None => json!({"jsonrpc": "2.0", "method": method}),
            Some(mut params) => {
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
        };
        (serde_json::to_vec(&message).expect("JSON values serialize"), name)
    }

    /// The response to request `id`: one JSON object, or the SSE event that carries it
    /// (notifications before it are skipped).
    async fn read(
        &self,
        mut body: hyper::body::Incoming,
        sse: bool,
        status: StatusCode,
        id: RequestId,
    ) -> Result<Value, UpstreamError> {
        if !sse {
            let bytes = body.collect().await.map_err(|e| self.unreachable(e))?.to_bytes();
            return self.answer(&bytes, status, &id).unwrap_or_else(|| Err(self.status(status, &bytes)));
        }
        let mut events = EventReader::default();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| self.unreachable(e))?;
            let Some(data) = frame.data_ref() else { continue };
            for event in events.feed(data) {
                if let Some(answer) = self.answer(event.as_bytes(), status, &id) {
                    return answer;
                }
            }
        }
        if let Some(answer) = events.finish().and_then(|event| self.answer(event.as_bytes(), status, &id)) {
            return answer;
        }
        Err(self.protocol("its event stream ended without the response"))
    }

    /// `Some` when `bytes` are the response to `id`.
    fn answer(&self, bytes: &[u8], status: StatusCode, id: &RequestId) -> Option<Result<Value, UpstreamError>> {
        match jsonrpc::parse(bytes).ok()? {
            Message::Response { id: got, result } if &got == id => Some(Ok(result)),
            Message::Error { id: Some(got), error } if &got == id => Some(Err(self.refused(error))),
            Message::Error { id: None, error } if !status.is_success() => Some(Err(self.refused(error))),
            _ => None,
        }
    }

    fn refused(&self, error: ErrorObject) -> UpstreamError {
        UpstreamError::Refused { upstream: self.config.name.clone(), error: Box::new(error) }
    }

    fn status(&self, status: StatusCode, body: &[u8]) -> UpstreamError {
        let detail = String::from_utf8_lossy(&body[..body.len().min(200)]).trim().to_owned();
        UpstreamError::Status { upstream: self.config.name.clone(), status: status.as_u16(), detail }
    }

    fn unreachable(&self, error: impl std::fmt::Display) -> UpstreamError {
        UpstreamError::Unreachable { upstream: self.config.name.clone(), detail: error.to_string() }
    }

    fn protocol(&self, detail: impl Into<String>) -> UpstreamError {
        UpstreamError::Protocol { upstream: self.config.name.clone(), detail: detail.into() }
    }
}

impl Era {
    /// The headers of a request in this era.
    fn headers(&self, method: &str, name: Option<&str>) -> Vec<(HeaderName, HeaderValue)> {
        let value = |v: &str| HeaderValue::from_str(v).unwrap_or_else(|_| HeaderValue::from_static(""));
        match self {
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
}
