//! The HTTP edge: accepting connections within limits, and serving each with
//! timeouts, body limits and the routes (`/mcp`, `/healthz`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hitl_interrupt::ThreadStore;
use hitl_protocol::{ErrorObject, Response};
use hitl_tower::{McpBody, PeerAddr};
use http::{StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt as _;
use tower::util::BoxCloneService;

/// The MCP endpoint with its layers.
pub(crate) type Endpoint = BoxCloneService<http::Request<Bytes>, http::Response<McpBody>, Infallible>;

/// The limits of the HTTP edge.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EdgeLimits {
    /// From a connection's start (or its previous response) to a complete request head.
    pub(crate) header_read: Duration,
    /// From a request head to its complete body.
    pub(crate) body_read: Duration,
    /// The largest request body.
    pub(crate) max_body: usize,
    /// Connections served at once; past it the listener stops accepting.
    pub(crate) max_connections: usize,
}

/// Serves `listener` until `shutdown` resolves, then lets open connections finish for
/// up to 10 s.
pub(crate) async fn serve(
    listener: TcpListener,
    mcp: Endpoint,
    store: Arc<dyn ThreadStore>,
    limits: EdgeLimits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.header_read)
        .keep_alive_timeout(limits.header_read);
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let mut accept_errors = AcceptErrors::default();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // A place first, then a connection: past the limit, new connections wait in the
        // kernel's backlog instead of being accepted and dropped in a loop.
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning on the error.
                let pause = accept_errors.failed(&e);
                tokio::select! {
                    () = tokio::time::sleep(pause) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        accept_errors.succeeded();
        let started = Arc::new(AtomicBool::new(false));
        let (mcp, store, seen) = (mcp.clone(), store.clone(), started.clone());
        let service = hyper::service::service_fn(move |request| {
            seen.store(true, Ordering::Relaxed);
            route(mcp.clone(), store.clone(), request, peer, limits)
        });
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service).into_owned());
        tokio::spawn(async move {
            let _permit = permit;
            // hyper times out slow HTTP/1 heads; this also closes a connection that never
            // sends a first request at all (or a slow HTTP/2 preface).
            let first_request = async {
                tokio::time::sleep(limits.header_read).await;
                if started.load(Ordering::Relaxed) {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                result = connection => if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                },
                () = first_request => tracing::debug!(%peer, "no request within the header read timeout; closed"),
            }
        });
    }
    tracing::info!("shutting down");
    if tokio::time::timeout(Duration::from_secs(10), graceful.shutdown()).await.is_err() {
        tracing::warn!("connections still open after 10 s; closing");
    }
}

/// Accept failures: an exponential pause, and a log line at most once a second.
#[derive(Default)]
struct AcceptErrors {
    pause: Option<Duration>,
    last_logged: Option<Instant>,
    unlogged: u64,
}

impl AcceptErrors {
    fn failed(&mut self, error: &std::io::Error) -> Duration {
        let pause = self.pause.map_or(Duration::from_millis(5), |p| (p * 2).min(Duration::from_secs(1)));
        self.pause = Some(pause);
        if self.last_logged.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
            tracing::warn!(%error, more = self.unlogged, "accept failed; backing off");
            (self.last_logged, self.unlogged) = (Some(Instant::now()), 0);
        } else {
            self.unlogged += 1;
        }
        pause
    }

    fn succeeded(&mut self) {
        self.pause = None;
    }
}

fn plain(status: StatusCode, content_type: &'static str, text: impl Into<Bytes>) -> http::Response<McpBody> {
    let mut out = http::Response::new(Full::new(text.into()).boxed_unsync());
    *out.status_mut() = status;
    out.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    out
}

/// A JSON-RPC error without an id, as the body of an HTTP error. The connection
/// closes after it: the rest of the body may still be on its way.
fn refused(status: StatusCode, why: String) -> http::Response<McpBody> {
    let error = Response::Error { id: None, error: ErrorObject::invalid_request(why) };
    let mut out = plain(status, "application/json", error.to_bytes());
    out.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    out
}

async fn route(
    mcp: Endpoint,
    store: Arc<dyn ThreadStore>,
    request: http::Request<Incoming>,
    peer: SocketAddr,
    limits: EdgeLimits,
) -> Result<http::Response<McpBody>, Infallible> {
    match request.uri().path() {
        "/healthz" => Ok(match store.ping().await {
            Ok(()) => plain(StatusCode::OK, "application/json", r#"{"status":"ok"}"#),
            Err(e) => {
                tracing::warn!(error = %e, "health check: the thread store is unavailable");
                let body = r#"{"status":"unavailable","reason":"the thread store is unavailable"}"#;
                plain(StatusCode::SERVICE_UNAVAILABLE, "application/json", body)
            }
        }),
        "/mcp" => {
            let (mut parts, body) = request.into_parts();
            let too_large =
                || refused(StatusCode::PAYLOAD_TOO_LARGE, format!("the body exceeds {} bytes", limits.max_body));
            let announced =
                parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            if announced.is_some_and(|n| n > limits.max_body as u64) {
                // Refused before a byte of it is read.
                return Ok(too_large());
            }
            let bytes = match tokio::time::timeout(limits.body_read, Limited::new(body, limits.max_body).collect())
                .await
            {
                Ok(Ok(collected)) => collected.to_bytes(),
                Ok(Err(e)) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => return Ok(too_large()),
                Ok(Err(e)) => return Ok(refused(StatusCode::BAD_REQUEST, format!("the body could not be read: {e}"))),
                Err(_) => {
                    let why = format!("the body did not arrive within {} s", limits.body_read.as_secs());
                    return Ok(refused(StatusCode::REQUEST_TIMEOUT, why));
                }
            };
            parts.extensions.insert(PeerAddr(peer));
            mcp.oneshot(http::Request::from_parts(parts, bytes)).await
        }
        _ => Ok(plain(StatusCode::NOT_FOUND, "text/plain", "not found; the MCP endpoint is POST /mcp\n")),
    }
}
