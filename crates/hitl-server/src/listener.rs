//! The HTTP edge: accepting connections within limits and serving each, with its
//! header timeout, to the [`HttpApp`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hitl_tower::{HttpApp, PeerAddr};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::HttpLimits;

/// Serves `listener` until `shutdown` resolves, then lets open connections finish for
/// up to 10 s.
pub(crate) async fn serve(
    listener: TcpListener,
    app: HttpApp,
    limits: HttpLimits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.header_read_timeout)
        .keep_alive_timeout(limits.header_read_timeout);
    let connections = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut accept_errors = AcceptErrors::default();
    let responses = Arc::new(crate::metrics::Responses::new());
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
        // A response goes out as soon as it is written (one in flight per connection).
        let _ = stream.set_nodelay(true);
        let started = Arc::new(AtomicBool::new(false));
        let (app, seen, responses) = (app.clone(), started.clone(), responses.clone());
        let service = hyper::service::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
            seen.store(true, Ordering::Relaxed);
            request.extensions_mut().insert(PeerAddr(peer));
            let span = crate::telemetry::request_span(&request);
            // Mapped, not awaited in an async block, which would hold the request's
            // future (over a kilobyte, copied at each move) twice.
            let served = tracing::Instrument::instrument(app.serve(request), span);
            let responses = responses.clone();
            futures_util::FutureExt::map(served, move |response| {
                responses.count(response.status());
                Ok::<_, std::convert::Infallible>(response)
            })
        });
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service).into_owned());
        tokio::spawn(async move {
            let _permit = permit;
            // hyper times out slow HTTP/1 heads; this also closes a connection that never
            // sends a first request at all (or a slow HTTP/2 preface).
            let first_request = async {
                tokio::time::sleep(limits.header_read_timeout).await;
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
