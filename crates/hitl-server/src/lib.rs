//! hitl's server: agents served as MCP tools with human-in-the-loop over elicitation,
//! as the `hitl` binary or as a library. The only crate that knows hyper, clap and
//! store URLs.
//!
//! `hitl serve` listens on `127.0.0.1:8123` and serves `POST /mcp` (the MCP endpoint)
//! and `GET /healthz`, with the example agents and an in-memory thread store. A program
//! of your own serves its agents, with its own tower layers, through [`Server`]:
//!
//! ```no_run
//! use hitl_graph::{Agent, START, StateGraph};
//! use serde_json::json;
//!
//! # async fn demo() -> std::io::Result<()> {
//! let graph = StateGraph::new()
//!     .add_step("ask", |_, ctx| async move { Ok(json!({ "ok": ctx.interrupt(json!("Proceed?"))? })) })
//!     .add_edge(START, "ask")
//!     .compile()
//!     .unwrap();
//! let agent = Agent::new("proceed", "Asks before it proceeds.", json!({"type": "object"}), graph);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! hitl_server::Server::builder().agent(agent).build().serve(listener, std::future::pending()).await
//! # }
//! ```
//!
//! The binary's `main` is [`main`] here, so that other packages (the end-to-end tests)
//! can build the very same program under another name.

mod audit;
mod bus;
mod cli;
mod config;
mod configured;
mod explain;
mod limits;
mod listener;
mod metrics;
mod passthrough;
mod reload;
mod secrets;
mod server;
mod telemetry;
mod threads;
mod workers;

pub use hitl_pages::PagesConfig;
pub use hitl_tower::{BodyLimits, Endpoint};

/// docs/embedding.md, whose Rust examples run as this crate's doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/embedding.md")]
pub struct Embedding;
pub use server::{DocumentFn, HttpLimits, QueryFn, Server, ServerBuilder};

use std::sync::Arc;

use anyhow::{Context as _, bail};
use hitl_interrupt::MemoryStore;
use hitl_store_redis::{RedisStore, redact_url};

/// Parses the command line and runs the command.
pub fn main() -> anyhow::Result<()> {
    main_with(Vec::new())
}

/// [`main`], also serving `agents` as tools (after the others): a program that adds its
/// own agents to the `hitl` command line.
pub fn main_with(agents: Vec<hitl_interrupt::Agent>) -> anyhow::Result<()> {
    let matches = <cli::Cli as clap::CommandFactory>::command().get_matches();
    let cli = <cli::Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.command {
        cli::Command::Serve(args) => {
            let serve_matches = matches.subcommand_matches("serve").expect("the serve subcommand");
            let args = args.with_file(serve_matches)?;
            let workers = args.threads()?;
            let runtime = runtime(workers.count())?;
            let stdio = args.stdio;
            let served = runtime.block_on(async {
                let telemetry = telemetry::init(args.log_format, args.otlp_endpoint.as_deref())?;
                if let workers::Workers::BesideRedis { workers, cores } = workers {
                    tracing::info!(
                        workers,
                        cores,
                        "the Redis store runs on this machine: one core left to it (--workers to choose)"
                    );
                }
                let served = cli::serve(args, serve_matches.clone(), agents).await;
                telemetry.shutdown();
                served
            });
            if stdio {
                // The host closed its end: dropping every task now ends hitl's own stdio
                // upstreams (killed on drop), and nothing waits on a blocked read.
                runtime.shutdown_timeout(std::time::Duration::from_millis(500));
            }
            served
        }
        cli::Command::Check(args) => {
            telemetry::init(telemetry::LogFormat::Text, None)?;
            // A verdict, not a crash: the reason on stderr, exit status 1.
            if let Err(e) = cli::check(args, &runtime(None)?) {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
            Ok(())
        }
        cli::Command::Policy(cli::PolicyArgs { command: cli::PolicyCommand::Explain(args) }) => {
            telemetry::init(telemetry::LogFormat::Text, None)?;
            if let Err(e) = cli::explain(&args, &mut std::io::stdout()) {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
            Ok(())
        }
        cli::Command::Audit(crate::audit::AuditArgs { command: crate::audit::AuditCommand::Verify(args) }) => {
            telemetry::init(telemetry::LogFormat::Text, None)?;
            match runtime(None)?.block_on(audit::verify(&args)) {
                Ok(intact) => println!("{intact}"),
                Err(e) => {
                    eprintln!("error: {e:#}");
                    std::process::exit(1);
                }
            }
            Ok(())
        }
        cli::Command::Threads(args) => {
            telemetry::init(telemetry::LogFormat::Text, None)?;
            if let Err(e) = runtime(None)?.block_on(threads::run(args, &mut std::io::stdout())) {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

/// The thread store a URL names: `memory`, `redis://…`, `rediss://…` (TLS, trusting
/// `ca_file` or the system's roots) or `redis+cluster://…`. Connects on first use, so it
/// fails only on a malformed URL or an unreadable CA file; errors show the URL with its
/// password masked.
pub fn store_from_url(url: &str, ca_file: Option<&std::path::Path>) -> anyhow::Result<Arc<dyn hitl_interrupt::Store>> {
    if url == "memory" {
        return Ok(Arc::new(MemoryStore::default()));
    }
    let shown = redact_url(url);
    if !is_redis(url) {
        bail!(
            "unsupported --store {shown:?}: use `memory`, `redis://host:port/db`, `rediss://…` or `redis+cluster://host:port,…`"
        );
    }
    let ca = match ca_file {
        Some(path) => Some(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?),
        None => None,
    };
    let store = RedisStore::with_tls_roots(url, ca).map_err(|e| anyhow::anyhow!("--store {shown}: {e}"))?;
    Ok(Arc::new(store))
}

/// Whether `url` names a Redis store (`redis://`, `rediss://`, `redis+cluster://`,
/// `redis+unix://`).
fn is_redis(url: &str) -> bool {
    ["redis://", "rediss://", "redis+cluster://", "redis+unix://"].iter().any(|scheme| url.starts_with(scheme))
}

/// The runtime that runs the command: `workers` threads, or tokio's default (one per
/// core, or `TOKIO_WORKER_THREADS`).
fn runtime(workers: Option<std::num::NonZeroUsize>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = workers {
        builder.worker_threads(workers.get());
    }
    builder.enable_all().build()
}
