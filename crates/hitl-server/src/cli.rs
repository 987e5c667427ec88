//! The command line: `hitl serve` and its flags, turned into a [`Server`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use hitl_interrupt::{Agent, Lifetimes, Limits, PausedLimits};
use hitl_store_redis::redact_url;
use hitl_tower::{AllowedHosts, BodyLimits};
use tokio::net::TcpListener;

use crate::{HttpLimits, Server, open_store, secrets};

#[derive(Parser)]
#[command(name = "hitl", version, about = "Human-in-the-loop over MCP for agent graphs")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Serve the MCP endpoint.
    Serve(ServeArgs),
}

#[derive(Parser)]
pub(crate) struct ServeArgs {
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
    /// A file holding the server secret that signs requestState (at least 32 bytes,
    /// mode 600); `HITL_SECRET` may hold the secret itself instead (not both).
    /// Replicas must share it.
    #[arg(long, env = "HITL_SECRET_FILE")]
    secret_file: Option<PathBuf>,
    /// During a rotation, a file holding the secret before this one (or
    /// `HITL_PREVIOUS_SECRET`): rounds it issued stay valid, new ones use the new secret.
    #[arg(long, env = "HITL_PREVIOUS_SECRET_FILE")]
    previous_secret_file: Option<PathBuf>,
    /// Also serve the fixtures of the official MCP conformance suite (tools and
    /// prompts named `test_*`), listed first.
    #[arg(long)]
    conformance_fixtures: bool,
    /// A host requests may name in `Host` (or `:authority`) and `Origin` (repeatable):
    /// `name` for any port, `name:port` for one. By default a server on a loopback
    /// address accepts only `localhost`, `127.0.0.1` and `[::1]` on its own port
    /// (DNS-rebinding protection) and one on another address accepts any.
    #[arg(long = "allowed-host", value_name = "HOST")]
    allowed_hosts: Vec<String>,
    /// A header an authenticating proxy sets to the caller's identity (for example
    /// `X-Forwarded-User`): paused calls are bound to it, and another caller's
    /// `requestState` fails. Requests without it (or with it empty, repeated or not
    /// UTF-8) get 401. Only behind a proxy that sets and strips it.
    #[arg(long, env = "HITL_PRINCIPAL_HEADER", value_name = "HEADER")]
    principal_header: Option<String>,
    /// Keep no threads: a tool that pauses ends with an error result saying the call
    /// can't be resumed.
    #[arg(long)]
    no_threads: bool,
    /// The largest request body accepted, in bytes (a larger `Content-Length` gets 413
    /// before the body is read).
    #[arg(long, env = "HITL_MAX_BODY_BYTES", default_value_t = 4 * 1024 * 1024)]
    max_body_bytes: usize,
    /// Seconds a client has to send a complete request head; then the connection is
    /// closed.
    #[arg(long, env = "HITL_HEADER_READ_TIMEOUT", value_name = "SECONDS", default_value_t = 10)]
    header_read_timeout: u64,
    /// Seconds a client has to send a request's body after its head; then 408.
    #[arg(long, env = "HITL_BODY_READ_TIMEOUT", value_name = "SECONDS", default_value_t = 30)]
    body_read_timeout: u64,
    /// Connections served at once; past it new connections wait to be accepted.
    #[arg(long, env = "HITL_MAX_CONNECTIONS", default_value_t = 10_000)]
    max_connections: usize,
    /// Requests served at once; past it requests get 503 with `Retry-After`.
    #[arg(long, env = "HITL_MAX_CONCURRENT_REQUESTS", default_value_t = 1_024)]
    max_concurrent_requests: usize,
    /// Seconds one request may run agents; then the call fails with a JSON-RPC error
    /// and a paused call stays paused.
    #[arg(long, env = "HITL_REQUEST_TIMEOUT", value_name = "SECONDS", default_value_t = 300)]
    request_timeout: u64,
    /// Paused calls one caller may hold (its principal, or its IP address when there is
    /// none); a call that would pause beyond it fails.
    #[arg(long, env = "HITL_MAX_PAUSED_PER_CALLER", default_value_t = 1_000)]
    max_paused_per_caller: u64,
    /// Paused calls the server holds in all; a call that would pause beyond it fails.
    #[arg(long, env = "HITL_MAX_PAUSED_CALLS", default_value_t = 1_000_000)]
    max_paused_calls: u64,
    /// The largest thread record, in bytes; a call whose record would be larger fails.
    #[arg(long, env = "HITL_MAX_RECORD_BYTES", default_value_t = 1024 * 1024)]
    max_record_bytes: usize,
}

/// Serves `agents` (besides the examples and fixtures the flags ask for) as `args` say.
pub(crate) async fn serve(args: ServeArgs, agents: Vec<Agent>) -> anyhow::Result<()> {
    let shared_store = (args.store != "memory").then(|| redact_url(&args.store));
    let (env, previous_env) = secrets::Sources::env_values();
    let sources = secrets::Sources {
        env,
        file: args.secret_file.as_deref(),
        previous_env,
        previous_file: args.previous_secret_file.as_deref(),
    };
    let secret = secrets::load(&sources, shared_store.as_deref())?;
    let store = open_store(&args.store, args.redis_ca_file.as_deref()).await?;
    if args.max_connections == 0 || args.max_concurrent_requests == 0 {
        bail!("--max-connections and --max-concurrent-requests must be at least 1");
    }
    let mut builder = Server::builder()
        .store(store)
        .secret(secret)
        .lifetimes(Lifetimes::with_default_ttl(args.default_ttl.map(Duration::from_secs)))
        .limits(Limits {
            paused: PausedLimits { per_owner: args.max_paused_per_caller, total: args.max_paused_calls },
            max_record_bytes: args.max_record_bytes,
            request_timeout: Some(Duration::from_secs(args.request_timeout)),
        })
        .http_limits(HttpLimits {
            header_read_timeout: Duration::from_secs(args.header_read_timeout.max(1)),
            body: BodyLimits {
                max_bytes: args.max_body_bytes,
                read_timeout: Duration::from_secs(args.body_read_timeout.max(1)),
            },
            max_connections: args.max_connections,
            max_concurrent_requests: args.max_concurrent_requests,
        });
    if args.conformance_fixtures {
        builder = builder.agents(hitl_agents::conformance::tools()).prompts(hitl_agents::conformance::prompts());
    }
    if !args.no_examples {
        builder = builder.agents(hitl_agents::examples());
    }
    builder = builder.agents(agents);
    if args.no_threads {
        builder = builder.without_threads();
    }
    if !args.allowed_hosts.is_empty() {
        let hosts =
            AllowedHosts::new(args.allowed_hosts.iter().cloned()).map_err(|e| anyhow::anyhow!("--allowed-host {e}"))?;
        builder = builder.allowed_hosts(hosts);
    }
    if let Some(name) = &args.principal_header {
        let header =
            http::HeaderName::try_from(name.as_str()).with_context(|| format!("--principal-header {name:?}"))?;
        builder = builder.principal_header(header);
    }
    let listener = TcpListener::bind(args.listen).await.with_context(|| format!("binding {}", args.listen))?;
    let local = listener.local_addr()?;
    // The first line on stdout is the bound address, for scripts and tests.
    println!("hitl listening on http://{local}/mcp");
    tracing::info!(%local, "listening");
    builder.build().serve(listener, shutdown_signal()).await?;
    Ok(())
}

/// Ctrl-C or SIGTERM.
pub(crate) async fn shutdown_signal() {
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
