//! The HTTP application: `POST /mcp` (the endpoint, behind a body that must arrive in
//! time and within a size), `GET /healthz` (readiness, as a [`ReadyFn`] says), `GET /livez` (the
//! process answers), mounted services and routes, and 404 elsewhere. With
//! [`HttpApp::with_allowed_hosts`], every path but the two probes is refused when it
//! names a host the server does not serve (DNS-rebinding protection for the pages and
//! the API too, not only `/mcp`). It takes any `http_body::Body`, so any server (hyper,
//! or a test) can mount it.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{BoxFuture, Either};
use hitl_protocol::ErrorObject;
use http::{HeaderValue, StatusCode, header};
use http_body_util::{BodyExt as _, Limited};
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceExt as _};

use crate::{Body, body, refusal};

/// The MCP endpoint with its layers, boxed: what [`HttpApp`] serves at `/mcp`.
pub type Endpoint = BoxCloneSyncService<http::Request<Bytes>, http::Response<Body>, Infallible>;

/// How much of a request body the app waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimits {
    /// The largest body: a larger `Content-Length` is refused before a byte is read.
    pub max_bytes: usize,
    /// How long the body may take to arrive after the head.
    pub read_timeout: Duration,
}

impl Default for BodyLimits {
    fn default() -> Self {
        Self { max_bytes: 4 * 1024 * 1024, read_timeout: Duration::from_secs(30) }
    }
}

/// Routes requests to the endpoint and the health check.
#[derive(Clone)]
pub struct HttpApp {
    mcp: Endpoint,
    ready: ReadyFn,
    limits: BodyLimits,
    health: Option<HealthFn>,
    routes: Vec<(String, RouteFn)>,
    mounts: Vec<(String, Endpoint)>,
    hosts: Option<crate::AllowedHosts>,
}

/// A document served at a path of its own (say, the OAuth protected resource metadata),
/// made from the request's head.
pub type RouteFn = Arc<dyn Fn(&http::request::Parts) -> http::Response<Body> + Send + Sync>;

/// Whether the server can serve now (say, its store answers): `Err(reason)` makes
/// `/healthz` answer 503 with the reason.
pub type ReadyFn = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// More of `/healthz`'s body (say, each upstream's state): fields added next to
/// `status`, which they never change.
pub type HealthFn = Arc<dyn Fn() -> serde_json::Map<String, serde_json::Value> + Send + Sync>;

impl std::fmt::Debug for HttpApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpApp").field("limits", &self.limits).finish_non_exhaustive()
    }
}

impl HttpApp {
    /// Serves `mcp` at `/mcp` and what `ready` says at `/healthz`.
    pub fn new(mcp: Endpoint, ready: ReadyFn, limits: BodyLimits) -> Self {
        Self { mcp, ready, limits, health: None, routes: Vec::new(), mounts: Vec::new(), hosts: None }
    }

    /// Serves every path under `prefix` (`/approvals` serves `/approvals` and
    /// `/approvals/…`) with `service`, which gets the whole body, read within the
    /// app's limits (say, web pages and their forms).
    #[must_use]
    pub fn mount(mut self, prefix: impl Into<String>, service: Endpoint) -> Self {
        self.mounts.push((prefix.into(), service));
        self
    }

    /// Serves `route` at `path` (any method; the body is not read).
    #[must_use]
    pub fn with_route(mut self, path: impl Into<String>, route: RouteFn) -> Self {
        self.routes.push((path.into(), route));
        self
    }

    /// Refuses (403) every request whose `Host` or `Origin` names a host `hosts` does
    /// not allow, on every path but `/healthz` and `/livez` (which probes reach by a
    /// pod's address).
    #[must_use]
    pub fn with_allowed_hosts(mut self, hosts: crate::AllowedHosts) -> Self {
        self.hosts = Some(hosts);
        self
    }

    /// Adds `health`'s fields to `/healthz`.
    #[must_use]
    pub fn with_health(mut self, health: HealthFn) -> Self {
        self.health = Some(health);
        self
    }

    /// Serves one request. Only the endpoint is cloned (once), so a server can call this
    /// on a shared app without cloning the app per request. A request to `/mcp` has a
    /// future that is not boxed (a server holding it in its connection's task spares an
    /// allocation per request); every other path's is.
    pub fn serve<B>(
        &self,
        request: http::Request<B>,
    ) -> impl Future<Output = http::Response<Body>> + Send + 'static + use<B>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        match self.route(request) {
            Ok(request) => Either::Left(collected(self.mcp.clone(), self.limits, request)),
            Err(other) => Either::Right(other),
        }
    }

    /// `request` back if it is the endpoint's, or the future of its response on any
    /// other path.
    fn route<B>(&self, request: http::Request<B>) -> Result<http::Request<B>, BoxFuture<'static, http::Response<Body>>>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = request.uri().path();
        let probe = matches!(path, "/healthz" | "/livez");
        if !probe && let Some(why) = self.hosts.as_ref().and_then(|hosts| hosts.refuse_origin(&request, path != "/mcp"))
        {
            return Err(Box::pin(std::future::ready(crate::origin::forbidden(&why))));
        }
        if let Some(route) = self.routes.iter().find(|(p, _)| p == path).map(|(_, r)| r.clone()) {
            let (parts, _) = request.into_parts();
            return Err(Box::pin(std::future::ready(route(&parts))));
        }
        let mounted = self.mounts.iter().find(|(prefix, _)| {
            path.strip_prefix(prefix.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        });
        if let Some((_, service)) = mounted {
            return Err(Box::pin(collected(service.clone(), self.limits, request)));
        }
        Err(match request.uri().path() {
            "/mcp" => return Ok(request),
            "/healthz" => {
                let (ready, health) = (self.ready.clone(), self.health.clone());
                Box::pin(async move {
                    let mut body = serde_json::Map::new();
                    let status = match ready().await {
                        Ok(()) => {
                            body.insert("status".into(), "ok".into());
                            StatusCode::OK
                        }
                        Err(reason) => {
                            body.insert("status".into(), "unavailable".into());
                            body.insert("reason".into(), reason.into());
                            StatusCode::SERVICE_UNAVAILABLE
                        }
                    };
                    for (key, value) in health.map(|f| f()).unwrap_or_default() {
                        body.entry(key).or_insert(value);
                    }
                    plain(status, "application/json", serde_json::Value::Object(body).to_string())
                })
            }
            // Alive: no store or upstream is asked (a liveness probe restarts only a
            // process that no longer answers at all).
            "/livez" => Box::pin(std::future::ready(plain(StatusCode::OK, "application/json", r#"{"status":"ok"}"#))),
            _ => Box::pin(std::future::ready(plain(
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found; the MCP endpoint is POST /mcp\n",
            ))),
        })
    }
}

/// `service`'s response to `request`, its body read whole within `limits` first.
async fn collected<B>(service: Endpoint, limits: BodyLimits, request: http::Request<B>) -> http::Response<Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (parts, incoming) = request.into_parts();
    match limits.collect(&parts.headers, incoming).await {
        Ok(bytes) => match service.oneshot(http::Request::from_parts(parts, bytes)).await {
            Ok(response) => response,
            Err(never) => match never {},
        },
        Err(refused) => refused,
    }
}

impl BodyLimits {
    /// The whole body, or the response that refuses it (413, 408 or 400).
    async fn collect<B>(&self, headers: &http::HeaderMap, incoming: B) -> Result<Bytes, http::Response<Body>>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let too_large = || refused(StatusCode::PAYLOAD_TOO_LARGE, format!("the body exceeds {} bytes", self.max_bytes));
        let announced = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if announced.is_some_and(|n| n > self.max_bytes as u64) {
            // Refused before a byte of it is read.
            return Err(too_large());
        }
        match tokio::time::timeout(self.read_timeout, Limited::new(incoming, self.max_bytes).collect()).await {
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
            Ok(Err(e)) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => Err(too_large()),
            Ok(Err(e)) => Err(refused(StatusCode::BAD_REQUEST, format!("the body could not be read: {e}"))),
            Err(_) => {
                let why = format!("the body did not arrive within {} s", self.read_timeout.as_secs());
                Err(refused(StatusCode::REQUEST_TIMEOUT, why))
            }
        }
    }
}

impl<B> Service<http::Request<B>> for HttpApp
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let served = self.serve(request);
        Box::pin(async move { Ok(served.await) })
    }
}

fn plain(status: StatusCode, content_type: &'static str, text: impl Into<Bytes>) -> http::Response<Body> {
    crate::typed_response(status, content_type, body(text))
}

/// A JSON-RPC error without an id, as the body of an HTTP error. The connection
/// closes after it: the rest of the body may still be on its way.
fn refused(status: StatusCode, why: String) -> http::Response<Body> {
    let mut out = refusal(status, ErrorObject::invalid_request(why));
    out.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    out
}
