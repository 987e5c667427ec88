//! Logs and traces. Logs go to stderr as text or, with `--log-format json`, one JSON
//! object per line. Spans: a
//! request, a round, an agent run, a store operation, an upstream call. With
//! `--otlp-endpoint URL` they are exported over OTLP/HTTP (JSON) to `URL/v1/traces`; a
//! request's W3C `traceparent` is its trace's parent, and upstream requests carry the
//! current span's.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HeaderExtractor, HeaderInjector, HttpError};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LogFormat {
    /// For people.
    #[default]
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// The tracer provider while spans are exported; shut down to flush them.
pub(crate) struct Telemetry(Option<SdkTracerProvider>);

impl Telemetry {
    /// Sends the spans not sent yet.
    pub(crate) fn shutdown(self) {
        if let Some(provider) = self.0
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "the last spans could not be exported");
        }
    }
}

/// Installs the process's subscriber: logs in `format`, spans exported to `otlp` when
/// given (inside a tokio runtime: the exporter's requests run on it).
pub(crate) fn init(format: LogFormat, otlp: Option<&str>) -> anyhow::Result<Telemetry> {
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer().with_writer(std::io::stderr).boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(false)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    // Log lines only: spans cost nothing unless they are exported (a round's log lines
    // name their thread themselves).
    let logs = logs
        .with_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with_filter(tracing_subscriber::filter::filter_fn(|metadata| metadata.is_event()));
    let provider = otlp.map(provider).transpose()?;
    // Spans are exported at info (and store operations, at debug) whatever RUST_LOG
    // keeps of the logs.
    let spans = provider.as_ref().map(|provider| {
        let exported = EnvFilter::new("info,hitl_thread::metered=debug");
        tracing_opentelemetry::layer().with_tracer(provider.tracer("hitl")).with_filter(exported)
    });
    // Without an exporter, no span layer at all: an absent (`None`) layer would still
    // have the registry make every span.
    let registry = tracing_subscriber::registry().with(logs);
    match spans {
        Some(spans) => registry.with(spans).init(),
        None => registry.init(),
    }
    let Some(provider) = provider else { return Ok(Telemetry(None)) };
    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    opentelemetry::global::set_tracer_provider(provider.clone());
    // Upstream requests carry the trace of the span they are made in.
    hitl_upstream::add_request_headers(Box::new(|headers| {
        let context = tracing::Span::current().context();
        opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&context, &mut HeaderInjector(headers)));
    }));
    Ok(Telemetry(Some(provider)))
}

/// The span of one HTTP request: a child of the trace its `traceparent` names, when
/// spans are exported.
pub(crate) fn request_span(request: &http::Request<hyper::body::Incoming>) -> tracing::Span {
    let span = tracing::info_span!("request", method = %request.method(), path = %request.uri().path());
    // Only spans that are exported are enabled: the logs take none.
    if !span.is_disabled() {
        let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(request.headers())));
        let _ = span.set_parent(parent);
    }
    span
}

/// The OTLP/HTTP exporter to `endpoint` (`…/v1/traces` added unless given), batching.
fn provider(endpoint: &str) -> anyhow::Result<SdkTracerProvider> {
    use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
    let url = endpoint.trim_end_matches('/');
    let url = if url.ends_with("/v1/traces") { url.to_owned() } else { format!("{url}/v1/traces") };
    let uri: http::Uri = url.parse().map_err(|e| anyhow::anyhow!("--otlp-endpoint {url:?}: {e}"))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => anyhow::bail!("--otlp-endpoint {url:?}: an http:// or https:// URL"),
    };
    let roots = if https { hitl_tls::Roots::System } else { hitl_tls::Roots::HttpOnly };
    let connector = hitl_tls::connector(roots).map_err(|e| anyhow::anyhow!("--otlp-endpoint: {e}"))?;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| anyhow::anyhow!("the OTLP exporter needs the tokio runtime"))?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpJson)
        .with_endpoint(url)
        .with_http_client(Exporter { client, runtime })
        .build()?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name("hitl").build();
    Ok(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build())
}

type HttpsClient = hyper_util::client::legacy::Client<hitl_tls::Connector, Full<Bytes>>;

/// The exporter's HTTP client: hitl's (rustls on ring, the system's roots), run on the
/// server's runtime (the batch exporter calls it from a thread of its own).
#[derive(Clone)]
struct Exporter {
    client: HttpsClient,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter").finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Exporter {
    async fn send_bytes(&self, request: http::Request<Bytes>) -> Result<http::Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let (parts, body) = request.into_parts();
        let request = http::Request::from_parts(parts, Full::new(body));
        self.runtime
            .spawn(async move {
                let response = tokio::time::timeout(Duration::from_secs(10), client.request(request)).await??;
                let (parts, body) = response.into_parts();
                let body = Limited::new(body, 4 * 1024 * 1024).collect().await?.to_bytes();
                Ok::<_, HttpError>(http::Response::from_parts(parts, body))
            })
            .await?
    }
}
