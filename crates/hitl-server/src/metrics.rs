//! `GET /metrics`: what hitl counts and times, in the Prometheus text format. The crates
//! record through the `metrics` facade; this installs the process's recorder
//! (`metrics-exporter-prometheus`) once, describes each metric, and renders them.
//!
//! A program that installed its own global recorder first keeps it: hitl's metrics then
//! go there, and `/metrics` shows none.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Histogram buckets for every `*_seconds` metric: from a store round trip (1 ms) to a
/// person answering a day later.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
    14400.0, 86400.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's Prometheus recorder, installed on first use (with its upkeep task when
/// a tokio runtime runs).
pub(crate) fn handle() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
                .expect("the buckets are not empty")
                .build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_ok() {
                describe();
            }
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                metrics::gauge!("hitl_runtime_workers").set(runtime.metrics().num_workers() as f64);
                let upkeep = handle.clone();
                runtime.spawn(async move {
                    loop {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        upkeep.run_upkeep();
                    }
                });
            }
            handle
        })
        .clone()
}

/// The help text of each metric.
fn describe() {
    use metrics::{Unit, describe_counter, describe_histogram};
    describe_counter!("hitl_http_responses_total", "HTTP responses, by status code.");
    describe_counter!(
        "hitl_rounds_total",
        "Rounds of questions, by tool and outcome: paused (asked), resumed (answered), replayed \
         (a resend), invalid_answer, invalid_state, expired, refused_capability."
    );
    describe_histogram!(
        "hitl_answer_seconds",
        Unit::Seconds,
        "Time from a round's questions to the answers that resumed it (the people's time), by tool."
    );
    describe_histogram!("hitl_agent_run_seconds", Unit::Seconds, "Time an agent ran for one request, by tool.");
    describe_histogram!(
        "hitl_store_operation_seconds",
        Unit::Seconds,
        "Time of thread store operations, by operation."
    );
    describe_counter!("hitl_store_errors_total", "Thread store operations that failed, by operation.");
    describe_histogram!(
        "hitl_upstream_call_seconds",
        Unit::Seconds,
        "Time of tools/call requests to upstream servers, by upstream and outcome (ok, error)."
    );
    metrics::describe_gauge!("hitl_approvals_pending", "Approvals waiting for an approver now.");
    describe_counter!(
        "hitl_approvals_decided_total",
        "Approvals decided, by status: approved, edited, rejected, responded."
    );
    metrics::describe_gauge!(
        "hitl_held_retries",
        "Retries of calls waiting for an approver that this process holds now ([approvals] hold)."
    );
    metrics::describe_gauge!("hitl_paused_calls", "Paused calls now, by tool (read from the store at each scrape).");
    metrics::describe_gauge!("hitl_runtime_workers", "Threads serving requests (--workers).");
    metrics::describe_gauge!(
        "hitl_unsaved_outcomes",
        "Outcomes of answered rounds this process holds but could not save yet (the store was out of reach)."
    );
    describe_counter!(
        "hitl_finished_calls_dropped_total",
        "Finished calls the memory store dropped, oldest first, to stay within --max-finished-calls and \
         --max-finished-bytes (a resend of one gets `Invalid or expired requestState`)."
    );
    // Shown at 0 before any drop, for alerts on its rate.
    metrics::counter!("hitl_finished_calls_dropped_total").increment(0);
    describe_counter!(
        "hitl_audit_dropped_total",
        "Audit entries dropped because a queue was full, by reason: behind (the ledger's events), store (entries \
         waiting for an unreachable store)."
    );
    describe_counter!(
        "hitl_config_reloads_total",
        "Reloads of the configuration file (SIGHUP or a change of the file), by result: success, error (the \
         rules in force stayed)."
    );
}

/// What a scrape reads: the recorder, and the store for the paused-calls gauge.
#[derive(Clone)]
pub(crate) struct Scrape {
    handle: PrometheusHandle,
    store: Arc<dyn hitl_interrupt::PausedLedger>,
    records: Arc<dyn hitl_interrupt::Records>,
}

impl Scrape {
    /// Scrapes of `store`'s paused calls, `records`' pending approvals and the
    /// process's metrics.
    pub(crate) fn new(store: Arc<dyn hitl_interrupt::PausedLedger>, records: Arc<dyn hitl_interrupt::Records>) -> Self {
        Self { handle: handle(), store, records }
    }

    /// The metrics now: the paused calls per tool are read from the store first (a
    /// store that does not answer within 2 s leaves the gauge as it was, and counts as
    /// a store error).
    pub(crate) async fn respond(&self) -> http::Response<hitl_tower::McpBody> {
        match tokio::time::timeout(Duration::from_secs(2), self.store.paused_by_tool()).await {
            Ok(Ok(counts)) => {
                for (tool, n) in counts {
                    metrics::gauge!("hitl_paused_calls", "tool" => tool).set(n as f64);
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot count the paused calls for /metrics"),
            Err(_) => tracing::warn!("the store did not count the paused calls within 2 s for /metrics"),
        }
        match tokio::time::timeout(Duration::from_secs(2), self.records.approvals()).await {
            Ok(Ok(listed)) => {
                let pending = listed.iter().filter(|entry| entry["status"] == "pending").count();
                metrics::gauge!("hitl_approvals_pending").set(pending as f64);
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot count the pending approvals for /metrics"),
            Err(_) => tracing::warn!("the store did not list the approvals within 2 s for /metrics"),
        }
        let mut response = http::Response::new(hitl_tower::body(bytes::Bytes::from(self.handle.render())));
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; version=0.0.4"));
        response
    }

    /// `/metrics` as a service to mount.
    pub(crate) fn endpoint(self) -> hitl_tower::Endpoint {
        hitl_tower::Endpoint::new(tower::service_fn(move |_: http::Request<bytes::Bytes>| {
            let scrape = self.clone();
            async move { Ok::<_, std::convert::Infallible>(scrape.respond().await) }
        }))
    }
}

/// Lets only `[admin] principals` (a `user:` entry, or a `group:` the caller is in)
/// through to `/metrics` on the main listener and the admin documents and queries; the
/// caller was named by the bearer layer in front of it. Others get 403.
#[derive(Clone)]
pub(crate) struct AdminsOnly(pub(crate) Arc<[String]>);

impl hitl_tower::Admission for AdminsOnly {
    fn admit(&self, request: &mut http::Request<bytes::Bytes>) -> Result<(), Box<http::Response<hitl_tower::McpBody>>> {
        let principal = request.extensions().get::<hitl_tower::Principal>().map(|p| p.0.as_str());
        let groups = request.extensions().get::<hitl_tower::Groups>().map(|g| g.0.as_slice()).unwrap_or_default();
        let admin = self.0.iter().any(|a| Some(a.as_str()) == principal || groups.contains(a));
        if admin {
            return Ok(());
        }
        let why = match request.uri().path() {
            "/metrics" => {
                "/metrics on this listener is for [admin] principals (or serve it apart with --metrics-listen)"
                    .to_owned()
            }
            path => format!("{path} is for [admin] principals"),
        };
        Err(Box::new(hitl_tower::forbidden(&why)))
    }
}

/// Refuses everyone: with authentication off, no one is known to be an admin.
#[derive(Clone, Copy)]
pub(crate) struct NoAdmins;

impl hitl_tower::Admission for NoAdmins {
    fn admit(&self, _: &mut http::Request<bytes::Bytes>) -> Result<(), Box<http::Response<hitl_tower::McpBody>>> {
        let why =
            "this is for [admin] principals, who sign in with bearer tokens: set [auth] tokens_file or [auth.jwt]";
        Err(Box::new(hitl_tower::forbidden(why)))
    }
}

/// `body` as a JSON response with `status`.
pub(crate) fn json_response(status: http::StatusCode, body: &serde_json::Value) -> http::Response<hitl_tower::McpBody> {
    let mut response = http::Response::new(hitl_tower::body(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

/// `document` as JSON to `GET`; other methods get 405.
pub(crate) fn document(document: crate::DocumentFn) -> hitl_tower::Endpoint {
    hitl_tower::Endpoint::new(tower::service_fn(move |request: http::Request<bytes::Bytes>| {
        let response = if request.method() == http::Method::GET {
            json_response(http::StatusCode::OK, &document())
        } else {
            let mut response = http::Response::new(hitl_tower::body("only GET is served here\n"));
            *response.status_mut() = http::StatusCode::METHOD_NOT_ALLOWED;
            response.headers_mut().insert(http::header::ALLOW, http::HeaderValue::from_static("GET"));
            response
        };
        std::future::ready(Ok::<_, std::convert::Infallible>(response))
    }))
}

/// `POST` of a JSON body answered by `query` (400 with `{"error"}` when the body is not
/// JSON or `query` refuses it); other methods get 405.
pub(crate) fn query(query: crate::QueryFn) -> hitl_tower::Endpoint {
    hitl_tower::Endpoint::new(tower::service_fn(move |request: http::Request<bytes::Bytes>| {
        let json = |status, body: serde_json::Value| json_response(status, &body);
        let response = if request.method() == http::Method::POST {
            let answered = serde_json::from_slice::<serde_json::Value>(request.body())
                .map_err(|e| format!("the body is not JSON: {e}"))
                .and_then(|body| query(&body));
            match answered {
                Ok(answer) => json(http::StatusCode::OK, answer),
                Err(error) => json(http::StatusCode::BAD_REQUEST, serde_json::json!({ "error": error })),
            }
        } else {
            let mut response =
                json(http::StatusCode::METHOD_NOT_ALLOWED, serde_json::json!({"error": "only POST is served here"}));
            response.headers_mut().insert(http::header::ALLOW, http::HeaderValue::from_static("POST"));
            response
        };
        std::future::ready(Ok::<_, std::convert::Infallible>(response))
    }))
}

/// `hitl_http_responses_total`, by status: the statuses hitl answers with registered
/// once (made when serving starts, after the recorder is installed), not looked up with
/// a new key at every response.
pub(crate) struct Responses {
    common: Vec<metrics::Counter>,
}

/// The statuses hitl answers with.
const COMMON_STATUSES: [u16; 14] = [200, 202, 204, 400, 401, 403, 404, 405, 406, 413, 415, 429, 500, 503];

impl Responses {
    pub(crate) fn new() -> Self {
        let common = COMMON_STATUSES
            .iter()
            .map(|status| metrics::counter!("hitl_http_responses_total", "status" => status.to_string()))
            .collect();
        Self { common }
    }

    /// Counts a response by its status.
    pub(crate) fn count(&self, status: http::StatusCode) {
        match COMMON_STATUSES.iter().position(|c| *c == status.as_u16()) {
            Some(i) => self.common[i].increment(1),
            None => metrics::counter!("hitl_http_responses_total", "status" => status.as_str().to_owned()).increment(1),
        }
    }
}

/// Serves `GET /metrics` alone on `listener` (`--metrics-listen`); other paths get 404.
pub(crate) async fn serve_apart(listener: tokio::net::TcpListener, scrape: Scrape) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let scrape = scrape.clone();
        let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
            let scrape = scrape.clone();
            async move {
                let response = if request.uri().path() == "/metrics" {
                    scrape.respond().await
                } else {
                    let mut missing = http::Response::new(hitl_tower::body(bytes::Bytes::from_static(b"not found\n")));
                    *missing.status_mut() = http::StatusCode::NOT_FOUND;
                    missing
                };
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        tokio::spawn(async move {
            let mut builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            // A scraper sends its head at once; a connection that does not is closed.
            builder.http1().timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(Duration::from_secs(10));
            let _ = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
        });
    }
}
