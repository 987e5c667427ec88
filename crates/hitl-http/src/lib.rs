//! hitl's HTTP edge, with no MCP endpoint and no engine in it: the response [`Body`],
//! who is calling ([`Principal`], [`Groups`], [`PeerAddr`], as extensions a layer
//! inserts), the generic tower layers ([`Admit`] over an [`Admission`] rule, the
//! host and origin check, the bound on requests in flight, a principal from a header
//! set by a proxy) and [`HttpApp`], which routes `/mcp`, `/healthz`, `/livez`, mounted
//! services and routes. Auth and the pages build on this crate alone, so they compile
//! without the endpoint or the engine.
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use hitl_http::{BodyLimits, Endpoint, HttpApp, ReadyFn, body};
//! use http_body_util::{BodyExt, Full};
//! use tower::ServiceExt;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! // Any service of `Request<Bytes>` can stand at /mcp.
//! let mcp = Endpoint::new(tower::service_fn(|_: http::Request<Bytes>| async {
//!     Ok::<_, std::convert::Infallible>(http::Response::new(body("{}")))
//! }));
//! let ready: ReadyFn = Arc::new(|| Box::pin(async { Err("warming up".to_owned()) }));
//! let app = HttpApp::new(mcp, ready, BodyLimits::default());
//! let health = app.oneshot(http::Request::get("/healthz").body(Full::new(Bytes::new())).unwrap()).await.unwrap();
//! assert_eq!(health.status(), 503);
//! let text = health.into_body().collect().await.unwrap().to_bytes();
//! assert_eq!(text, r#"{"status":"unavailable","reason":"warming up"}"#);
//! # });
//! ```

mod admit;
mod app;
mod limit;
mod origin;
mod principal;

pub use admit::{Admission, Admit};
pub use app::{BodyLimits, Endpoint, HealthFn, HttpApp, ReadyFn, RouteFn};
pub use limit::{MaxConcurrentRequests, MaxConcurrentRequestsLayer};
pub use origin::{AllowedHosts, ValidateOrigin, ValidateOriginLayer, forbidden};
pub use principal::{PrincipalFromHeader, PrincipalFromHeaderLayer};

use std::convert::Infallible;

use bytes::Bytes;
use hitl_protocol::{ErrorObject, Response};
use http::{HeaderValue, StatusCode, header};
use http_body_util::{BodyExt as _, Full, combinators::UnsyncBoxBody};

/// The response body of every hitl service: whole (JSON, a page) or streamed (SSE).
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Who is calling, as an auth layer established it: insert it into the request's
/// extensions. Paused calls are bound to it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(pub String);

/// The groups the caller belongs to (each written `group:<name>`), as an auth layer
/// established them: insert them next to the [`Principal`]; the endpoint's access rule
/// sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Groups(pub Vec<String>);

/// The client's socket address, as the server accepted the connection: insert it into
/// the request's extensions. Paused calls without a [`Principal`] count against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub std::net::SocketAddr);

/// A whole response body of `bytes`.
pub fn body(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

/// A response of `status` whose one header is its `content_type`, with `body`. Its
/// header map is made to hold that one header (a map's first insert makes room for six:
/// more than half a kilobyte a response).
pub fn typed_response(status: StatusCode, content_type: &'static str, body: Body) -> http::Response<Body> {
    let mut out = http::Response::new(body);
    *out.status_mut() = status;
    let mut headers = http::HeaderMap::with_capacity(1);
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    *out.headers_mut() = headers;
    out
}

/// A response refusing a request before it is served: `status` with a JSON-RPC error
/// without an id (what layers in front of the endpoint answer, such as auth's 401).
pub fn refusal(status: StatusCode, error: ErrorObject) -> http::Response<Body> {
    typed_response(status, "application/json", body(Response::Error { id: None, error }.to_bytes()))
}
