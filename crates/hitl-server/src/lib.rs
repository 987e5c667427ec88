//! The `hitl` binary: serves agents as MCP tools, with human-in-the-loop over
//! elicitation. The only crate that knows hyper, clap and store URLs.
//!
//! `hitl serve` listens on `127.0.0.1:8123` and serves `POST /mcp` (the MCP endpoint)
//! and `GET /healthz`, with the example agents and an in-memory thread store. The
//! binary's `main` is [`main`] here, so that other packages (the end-to-end tests) can
//! build the very same program under another name.
//!
//! ```no_run
//! fn main() -> anyhow::Result<()> {
//!     hitl_server::main()
//! }
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use hitl_interrupt::{Engine, Lifetimes, MemoryStore, Secret, SystemClock, ThreadStore};
use hitl_protocol::{ErrorObject, Response};
use hitl_store_redis::RedisStore;
use hitl_tower::{AllowedHosts, McpBody, McpService, PrincipalFromHeaderLayer, ServerOptions, ValidateOriginLayer};
use http::{StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt as _};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "hitl", version, about = "Human-in-the-loop over MCP for agent graphs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the MCP endpoint.
    Serve(ServeArgs),
}

#[derive(Parser)]
struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the bound address is printed).
    #[arg(long, env = "HITL_LISTEN", default_value = "127.0.0.1:8123")]
    listen: SocketAddr,
    /// Where paused calls live: `memory` (this process only), `redis://host:port/db`,
    /// `rediss://…` (TLS) or `redis+cluster://host:port,host:port` (shared by every
    /// replica; needs a shared secret).
    #[arg(long, env = "HITL_STORE", default_value = "memory")]
    store: String,
    /// A PEM file of CA certificates to trust for `rediss://` (default: the system's).
    #[arg(long, env = "HITL_REDIS_CA_FILE")]
    redis_ca_file: Option<PathBuf>,
    /// Do not serve the example agents.
    #[arg(long)]
    no_examples: bool,
    /// The deployment's thread TTL, in seconds: shortens every thread lifetime.
    #[arg(long, env = "HITL_DEFAULT_TTL", value_name = "SECONDS")]
    default_ttl: Option<u64>,
    /// A file holding the server secret that signs requestState (at least 32 bytes);
    /// `HITL_SECRET` may hold the secret itself instead. Replicas must share it.
    #[arg(long, env = "HITL_SECRET_FILE")]
    secret_file: Option<PathBuf>,
    /// Also serve the fixtures of the official MCP conformance suite (tools and
    /// prompts named `test_*`), listed first.
    #[arg(long)]
    conformance_fixtures: bool,
    /// A host name requests may name in `Host` and `Origin` (repeatable). By default a
    /// server on a loopback address accepts only `localhost`, `127.0.0.1` and `[::1]`
    /// (DNS-rebinding protection) and one on another address accepts any.
    #[arg(long = "allowed-host", value_name = "HOST")]
    allowed_hosts: Vec<String>,
    /// A header an authenticating proxy sets to the caller's identity (for example
    /// `X-Forwarded-User`): paused calls are bound to it, and another caller's
    /// `requestState` fails. Only behind a proxy that sets and strips it.
    #[arg(long, env = "HITL_PRINCIPAL_HEADER", value_name = "HEADER")]
    principal_header: Option<String>,
    /// Keep no threads: a tool that pauses ends with an error result saying the call
    /// can't be resumed.
    #[arg(long)]
    no_threads: bool,
    /// The largest request body accepted, in bytes.
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    max_body_bytes: usize,
}

/// Parses the command line and runs the command.
pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args)),
    }
}

/// The server secret: `HITL_SECRET`, else `--secret-file`, else (in-memory store only)
/// a random one for this process.
fn secret(args: &ServeArgs, shared_store: bool) -> anyhow::Result<Secret> {
    if let Ok(value) = std::env::var("HITL_SECRET") {
        return Secret::new(value.as_bytes()).context("HITL_SECRET");
    }
    match &args.secret_file {
        Some(path) => {
            let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let trimmed = bytes.trim_ascii();
            Secret::new(trimmed).with_context(|| format!("secret file {}", path.display()))
        }
        None if shared_store => bail!(
            "--store {} is shared by every replica, so they must share the secret that signs requestState: \
             set HITL_SECRET or --secret-file (at least {} bytes)",
            args.store,
            Secret::MIN_LEN
        ),
        None => Ok(Secret::generate()),
    }
}

/// The thread store named by `--store`.
async fn store(url: &str, ca_file: Option<&std::path::Path>) -> anyhow::Result<Arc<dyn ThreadStore>> {
    if url == "memory" {
        return Ok(Arc::new(MemoryStore::default()));
    }
    let redis = ["redis://", "rediss://", "redis+cluster://", "redis+unix://"];
    if redis.iter().any(|scheme| url.starts_with(scheme)) {
        let ca = match ca_file {
            Some(path) => Some(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?),
            None => None,
        };
        let store = RedisStore::with_tls_roots(url, ca).map_err(|e| anyhow::anyhow!("--store {url}: {e}"))?;
        // Start even when Redis is down: /healthz says so, and service resumes with it.
        if let Err(e) = store.ping().await {
            tracing::warn!(error = %e, "Redis is not reachable yet; serving anyway, /healthz reports not ready");
        }
        return Ok(Arc::new(store));
    }
    bail!(
        "unsupported --store {url:?}: use `memory`, `redis://host:port/db`, `rediss://…` or `redis+cluster://host:port,…`"
    )
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let shared_store = args.store != "memory";
    let secret = secret(&args, shared_store)?;
    let store = store(&args.store, args.redis_ca_file.as_deref()).await?;
    let lifetimes = Lifetimes::with_default_ttl(args.default_ttl.map(Duration::from_secs));
    let mut engine = Engine::new(store.clone(), Arc::new(SystemClock), secret, lifetimes);
    if args.no_threads {
        engine = engine.without_threads();
    }
    let (mut tools, mut prompts) = (Vec::new(), Vec::new());
    if args.conformance_fixtures {
        tools.extend(hitl_agents::conformance::tools());
        prompts.extend(hitl_agents::conformance::prompts());
    }
    if !args.no_examples {
        tools.extend(hitl_agents::examples());
    }
    let allowed = if !args.allowed_hosts.is_empty() {
        AllowedHosts::new(args.allowed_hosts.iter().cloned())
    } else if args.listen.ip().is_loopback() {
        AllowedHosts::loopback()
    } else {
        AllowedHosts::any()
    };
    let principal = match &args.principal_header {
        Some(name) => {
            Some(http::HeaderName::try_from(name.as_str()).with_context(|| format!("--principal-header {name:?}"))?)
        }
        None => None,
    };
    let service = McpService::with_prompts(tools, prompts, engine, ServerOptions::default());
    let mcp: Endpoint = ServiceBuilder::new()
        .layer(ValidateOriginLayer::new(allowed))
        .option_layer(principal.map(PrincipalFromHeaderLayer::new))
        .service(service)
        .boxed_clone();
    let max_body = args.max_body_bytes;

    let listener = TcpListener::bind(args.listen).await.with_context(|| format!("binding {}", args.listen))?;
    let local = listener.local_addr()?;
    // The first line on stdout is the bound address, for scripts and tests.
    println!("hitl listening on http://{local}/mcp");
    tracing::info!(%local, "listening");

    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    let mut shutdown = std::pin::pin!(shutdown_signal());
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        continue;
                    }
                };
                let (mcp, store) = (mcp.clone(), store.clone());
                let service =
                    hyper::service::service_fn(move |request| route(mcp.clone(), store.clone(), request, max_body));
                let connection = builder.serve_connection(TokioIo::new(stream), service).into_owned();
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    tracing::info!("shutting down");
    if tokio::time::timeout(Duration::from_secs(10), graceful.shutdown()).await.is_err() {
        tracing::warn!("connections still open after 10 s; closing");
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

fn plain(status: StatusCode, content_type: &'static str, text: impl Into<Bytes>) -> http::Response<McpBody> {
    let mut out = http::Response::new(Full::new(text.into()).boxed_unsync());
    *out.status_mut() = status;
    out.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    out
}

/// The MCP endpoint with its layers.
type Endpoint = BoxCloneService<http::Request<Bytes>, http::Response<McpBody>, Infallible>;

async fn route(
    mcp: Endpoint,
    store: Arc<dyn ThreadStore>,
    request: http::Request<Incoming>,
    max_body: usize,
) -> Result<http::Response<McpBody>, Infallible> {
    match request.uri().path() {
        "/healthz" => Ok(match store.ping().await {
            Ok(()) => plain(StatusCode::OK, "application/json", r#"{"status":"ok"}"#),
            Err(e) => {
                let body = serde_json::json!({"status": "unavailable", "reason": e.to_string()}).to_string();
                plain(StatusCode::SERVICE_UNAVAILABLE, "application/json", body)
            }
        }),
        "/mcp" => {
            let (parts, body) = request.into_parts();
            let bytes = match Limited::new(body, max_body).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(e) => {
                    let too_large = e.downcast_ref::<http_body_util::LengthLimitError>().is_some();
                    let (status, why) = if too_large {
                        (StatusCode::PAYLOAD_TOO_LARGE, format!("the body exceeds {max_body} bytes"))
                    } else {
                        (StatusCode::BAD_REQUEST, format!("the body could not be read: {e}"))
                    };
                    let error = Response::Error { id: None, error: ErrorObject::invalid_request(why) };
                    return Ok(plain(status, "application/json", error.to_bytes()));
                }
            };
            mcp.oneshot(http::Request::from_parts(parts, bytes)).await
        }
        _ => Ok(plain(StatusCode::NOT_FOUND, "text/plain", "not found; the MCP endpoint is POST /mcp\n")),
    }
}
