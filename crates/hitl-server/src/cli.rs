//! The command line: `hitl serve` and its flags, turned into a [`Server`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use std::ffi::OsString;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use hitl_interrupt::{Agent, Lifetimes, Limits, PausedLimits, Store};
use hitl_store_redis::redact_url;
use hitl_tower::{AllowedHosts, BodyLimits};
use tokio::net::TcpListener;

use crate::reload::Live;
use crate::workers::Workers;
use crate::{HttpLimits, Server, ServerBuilder, config, secrets};

mod rules;

pub(crate) use rules::Rules;

#[derive(Parser)]
#[command(name = "hitl", version, about = "Human-in-the-loop over MCP for agent graphs")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Serve the MCP endpoint.
    Serve(Box<ServeArgs>),
    /// Check a configuration file (and the flags and environment given with it) without
    /// serving: exit status 0 when `hitl serve` would start with it, 1 with the reason.
    Check(CheckArgs),
    /// List, show or cancel the paused calls of a shared store.
    Threads(crate::threads::ThreadsArgs),
    /// Ask the policies of a configuration file.
    Policy(PolicyArgs),
    /// Check the audit trail.
    Audit(crate::audit::AuditArgs),
}

#[derive(Parser)]
pub(crate) struct PolicyArgs {
    #[command(subcommand)]
    pub(crate) command: PolicyCommand,
}

#[derive(Subcommand)]
pub(crate) enum PolicyCommand {
    /// Which policy decides a call (file:line), its action, and why each earlier
    /// policy did not (its glob, its `when` false, or its expression failing); the
    /// call is not made.
    Explain(ExplainArgs),
}

#[derive(Parser)]
pub(crate) struct ExplainArgs {
    /// The configuration file.
    #[arg(long, env = "HITL_CONFIG", value_name = "FILE")]
    config: PathBuf,
    /// The tool's listed name (`db.drop_partition`).
    #[arg(long)]
    tool: String,
    /// The call's arguments, a JSON object.
    #[arg(long, default_value = "{}")]
    args: String,
    /// The caller (`user:<id>`); none: an anonymous caller.
    #[arg(long)]
    caller: Option<String>,
    /// The caller's groups (`group:<name>`), repeated or comma-separated.
    #[arg(long, value_delimiter = ',')]
    groups: Vec<String>,
    /// Print `{"policy", "action", "skipped": [{"policy", "reason", "detail"}]}`.
    #[arg(long)]
    json: bool,
}

/// `hitl policy explain`: what the policies of `--config` would do with the call.
pub(crate) fn explain(args: &ExplainArgs, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let (serve, _) = ServeArgs::for_file(&args.config)?;
    let policies = serve.gateway.policies()?;
    let call: serde_json::Value =
        serde_json::from_str(&args.args).with_context(|| format!("--args {:?}: not JSON", args.args))?;
    let serde_json::Value::Object(call) = call else { bail!("--args: give a JSON object") };
    let explained = crate::explain::explain(
        &policies,
        &serve.gateway.upstream,
        &args.tool,
        &call,
        args.caller.as_deref(),
        &args.groups,
    );
    if args.json {
        writeln!(out, "{explained}")?;
        return Ok(());
    }
    for skipped in explained["skipped"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "{}: skipped ({}): {}",
            skipped["policy"].as_str().unwrap_or_default(),
            skipped["reason"].as_str().unwrap_or_default(),
            skipped["detail"].as_str().unwrap_or_default()
        )?;
    }
    let failed = explained["error"].as_str().map(|why| format!(" (its `when` failed, which counts as true: {why})"));
    writeln!(
        out,
        "{}: decides: {}{}",
        explained["policy"].as_str().unwrap_or_default(),
        explained["action"].as_str().unwrap_or_default(),
        failed.unwrap_or_default()
    )?;
    Ok(())
}

#[derive(Parser)]
pub(crate) struct CheckArgs {
    /// The configuration file to check.
    #[arg(long, env = "HITL_CONFIG", value_name = "FILE")]
    config: PathBuf,
    /// Also list every upstream's tools and apply the policies to them: exit status 1
    /// naming each policy glob that matches no listed tool and no agent (or whose
    /// upstream cannot be listed). Without it, nothing is connected to.
    #[arg(long)]
    connect: bool,
}

#[derive(Parser)]
pub(crate) struct ServeArgs {
    /// A configuration file (TOML) with these options under `[server]`; flags and
    /// environment variables override it. See docs/configuration.md.
    #[arg(long, env = "HITL_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// The gateway's sections of the configuration file.
    #[arg(skip)]
    gateway: config::GatewayFile,
    /// The `[[agent]]`s of the configuration file.
    #[arg(skip)]
    declared: Vec<hitl_declared::AgentSpec>,
    /// `[receipts]` of the configuration file.
    #[arg(skip)]
    receipts: config::ReceiptsSection,
    /// Where the approvers' decision tools find the pages (`[approvals] mcp_decisions`).
    #[arg(skip)]
    pub(crate) decision_desk: hitl_pages::decisions::DecisionDesk,
    /// Address to listen on (port 0 picks a free port; the bound address is printed).
    #[arg(long, env = "HITL_LISTEN", default_value = "127.0.0.1:8123")]
    listen: SocketAddr,
    /// Serve `GET /metrics` (Prometheus text) on this address of its own instead of on
    /// `--listen` (say, a port only the monitoring network reaches).
    #[arg(long, env = "HITL_METRICS_LISTEN", value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// How log lines are written to stderr: `text`, or `json` (one object per line:
    /// timestamp, level, fields, target).
    #[arg(long, env = "HITL_LOG_FORMAT", value_enum, default_value_t = crate::telemetry::LogFormat::Text)]
    pub(crate) log_format: crate::telemetry::LogFormat,
    /// Export spans (requests, rounds, agent runs, store operations, upstream calls)
    /// over OTLP/HTTP to this collector (`http://localhost:4318`; `/v1/traces` is added).
    /// A request's W3C `traceparent` becomes its parent; upstreams get the current one.
    #[arg(long, env = "HITL_OTLP_ENDPOINT", value_name = "URL")]
    pub(crate) otlp_endpoint: Option<String>,
    /// The base URL clients reach this server at (`https://hitl.example.com`), for the
    /// links hitl hands out (the bearer challenge's metadata document). Default:
    /// `http://` and the request's `Host`.
    #[arg(long, env = "HITL_PUBLIC_URL", value_name = "URL")]
    public_url: Option<String>,
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
    /// mode 600, or 640 when root owns it); `HITL_SECRET` may hold the secret itself instead (not both).
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
    /// Bearer tokens, one `user-id token` or `user-id sha256:<hex of the token>` per
    /// line (`#` comments); read again on SIGHUP or when it changes. Every MCP request
    /// then needs `Authorization: Bearer <token>` (else 401); the caller is `user:<id>`.
    #[arg(long, env = "HITL_TOKENS_FILE", value_name = "FILE")]
    tokens_file: Option<PathBuf>,
    /// `[auth]` of the configuration file (beyond `tokens_file`).
    #[arg(skip)]
    auth: config::AuthSection,
    /// `[[notify]]`, `[audit]` and `[approvals]` of the configuration file.
    #[arg(skip)]
    pages: config::PagesFile,
    /// The token checkers, once made.
    #[arg(skip)]
    verifiers: std::sync::OnceLock<Vec<Arc<dyn hitl_auth::Verify>>>,
    /// Keep no threads: a tool that pauses ends with an error result saying the call
    /// can't be resumed.
    #[arg(long)]
    no_threads: bool,
    /// Ask 2025-era clients (2025-11-25, 2025-06-18) the questions of a paused call by
    /// push: `elicitation/create` (and sampling, roots) requests on the call's SSE
    /// stream, answered by POST in the session `initialize` issued. Off: such clients
    /// get the seed's error result when a call pauses.
    #[arg(long, env = "HITL_LEGACY_ELICITATION")]
    legacy_elicitation: bool,
    /// Speak MCP over standard input and output (one JSON-RPC message per line) to the
    /// one client that started hitl (a desktop host), instead of serving HTTP; the HTTP
    /// routes (the pages) are served too only when `--listen` or `[server] listen` is
    /// set. Push elicitation is on for this client unless `legacy_elicitation = false`.
    /// hitl exits when its input ends. Logs go to standard error only.
    #[arg(long)]
    pub(crate) stdio: bool,
    /// The caller of the `--stdio` client (`user:<id>`): policies' `callers`, quotas and
    /// the two-person rule apply to it.
    #[arg(long, env = "HITL_STDIO_PRINCIPAL", value_name = "PRINCIPAL", default_value = "user:local")]
    stdio_principal: String,
    /// Made for a check of the file (a reload's): token files and keys are not watched.
    #[arg(skip)]
    checking: bool,
    /// Whether `--listen` or `[server] listen` was given (`--stdio` serves HTTP only then).
    #[arg(skip)]
    listen_set: bool,
    /// Whether push elicitation was turned off explicitly (`legacy_elicitation = false`).
    #[arg(skip)]
    push_off: bool,
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
    /// Finished calls the memory store keeps for resends (each for 10 minutes); past
    /// it the oldest are dropped first, and a resend of one gets `Invalid or expired
    /// requestState`. A Redis store keeps them for their lifetime (its own memory).
    #[arg(long, env = "HITL_MAX_FINISHED_CALLS", default_value_t = 1_000_000)]
    max_finished_calls: u64,
    /// The bytes the memory store's finished calls may take; past it the oldest are
    /// dropped first.
    #[arg(long, env = "HITL_MAX_FINISHED_BYTES", default_value_t = 1 << 30)]
    max_finished_bytes: u64,
    /// Threads that serve requests (default: one per core, or `TOKIO_WORKER_THREADS`;
    /// with a Redis store on this machine and no CPU limit, one core is left to Redis).
    /// On a small machine shared with Redis, fewer serve more: on 2 cores with Redis and
    /// the load generator beside it, 1 served 13–34% more rounds than 2
    /// (docs/performance.md, stops 53 and 55).
    #[arg(long, env = "HITL_WORKERS", value_name = "N")]
    pub(crate) workers: Option<std::num::NonZeroUsize>,
}

/// The most `--workers` a server takes: each is a thread, made before anything else.
const MAX_WORKERS: usize = 1024;

/// Was `id` given on the command line or in the environment (which override the file)?
fn explicit(matches: &ArgMatches, id: &str) -> bool {
    matches!(matches.value_source(id), Some(ValueSource::CommandLine | ValueSource::EnvVariable))
}

impl ServeArgs {
    /// These arguments with the configuration file's values where neither a flag nor an
    /// environment variable gave one.
    pub(crate) fn with_file(mut self, matches: &ArgMatches) -> anyhow::Result<Self> {
        self.listen_set = explicit(matches, "listen");
        self.push_off = explicit(matches, "legacy_elicitation") && !self.legacy_elicitation;
        let Some(path) = &self.config else { return Ok(self) };
        let loaded = config::load(path)?;
        self.listen_set |= loaded.server.listen.is_some();
        self.push_off |= !explicit(matches, "legacy_elicitation") && loaded.server.legacy_elicitation == Some(false);
        self.gateway = config::GatewayFile {
            upstream: loaded.upstream,
            policy: loaded.policy,
            gateway: loaded.gateway,
            policy_at: loaded.policy_at,
        };
        if !explicit(matches, "tokens_file") && loaded.auth.tokens_file.is_some() {
            self.tokens_file = loaded.auth.tokens_file.clone();
        }
        self.auth = loaded.auth;
        self.receipts = loaded.receipts;
        self.declared = loaded.agent;
        self.pages = config::PagesFile {
            admin: loaded.admin,
            notify: loaded.notify,
            audit: loaded.audit,
            approvals: loaded.approvals,
            slack: loaded.slack,
        };
        let file = loaded.server;
        macro_rules! take {
            ($($field:ident),*) => {$(
                if !explicit(matches, stringify!($field)) && let Some(value) = file.$field {
                    self.$field = value;
                }
            )*};
        }
        macro_rules! take_some {
            ($($field:ident),*) => {$(
                if !explicit(matches, stringify!($field)) && let Some(value) = file.$field {
                    self.$field = Some(value);
                }
            )*};
        }
        take!(listen, store, max_body_bytes, header_read_timeout, body_read_timeout, max_connections);
        take!(max_concurrent_requests, request_timeout, max_paused_per_caller, max_paused_calls, max_record_bytes);
        take!(max_finished_calls, max_finished_bytes);
        take!(conformance_fixtures, allowed_hosts, legacy_elicitation, log_format, stdio_principal);
        take_some!(redis_ca_file, default_ttl, principal_header, public_url, metrics_listen, otlp_endpoint, workers);
        if !explicit(matches, "no_examples")
            && let Some(examples) = file.examples
        {
            self.no_examples = !examples;
        }
        if !explicit(matches, "no_threads")
            && let Some(threads) = file.threads
        {
            self.no_threads = !threads;
        }
        // A secret in the environment overrides a secret file named in the file.
        let (env, previous_env) = secrets::Sources::env_values();
        if !explicit(matches, "secret_file") && env.is_none() {
            self.secret_file = file.secret_file.or(self.secret_file);
        }
        if !explicit(matches, "previous_secret_file") && previous_env.is_none() {
            self.previous_secret_file = file.previous_secret_file.or(self.previous_secret_file);
        }
        Ok(self)
    }

    /// Everything the server needs but its store and listener, checked: the secret,
    /// the limits, hosts, header names and the rules (the gateway not connected yet).
    /// `store` is the store it will use; `own` hitl's own agents besides the
    /// examples and fixtures; a reload passes the `previous` rules.
    fn prepare(
        &self,
        base: ServerBuilder,
        store: Arc<dyn Store>,
        own: &[Agent],
        local: SocketAddr,
        previous: Option<&Rules>,
        notifier: &hitl_tower::Notifier,
    ) -> anyhow::Result<(ServerBuilder, Live)> {
        if let Some(url) = &self.public_url {
            let uri: http::Uri = url.parse().with_context(|| format!("--public-url {url:?}"))?;
            if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
                bail!("--public-url {url:?}: give an http:// or https:// URL");
            }
        }
        // Checked even without --stdio: `hitl check` tells of a bad `[server] stdio_principal`.
        stdio_principal(&self.stdio_principal)?;
        let shared_store = (self.store != "memory").then(|| redact_url(&self.store));
        let (env, previous_env) = secrets::Sources::env_values();
        let sources = secrets::Sources {
            env,
            file: self.secret_file.as_deref(),
            previous_env,
            previous_file: self.previous_secret_file.as_deref(),
        };
        let secret = secrets::load(&sources, shared_store.as_deref())?;
        // The audit chain's key, from a secret that outlives this process: a chain
        // under a secret drawn at start could never be verified.
        let audit_key = match self.pages.audit.chain {
            false => None,
            true if sources.env.is_none() && sources.file.is_none() => bail!(
                "[audit] chain = true keys the chain with the server secret, which must outlive this process: set HITL_SECRET or --secret-file"
            ),
            true => Some(secret.derive(hitl_pages::chain::KEY_LABEL)),
        };
        self.workers()?;
        if self.max_connections == 0 || self.max_concurrent_requests == 0 {
            bail!("--max-connections and --max-concurrent-requests must be at least 1");
        }
        if self.max_finished_calls == 0 || self.max_finished_bytes == 0 {
            bail!(
                "--max-finished-calls and --max-finished-bytes must be at least 1: a finished call is kept so that a \
                 client that lost its answer can send its request again"
            );
        }
        if shared_store.is_some() && self.finished_limits() != hitl_interrupt::FinishedLimits::default() {
            tracing::warn!(
                "--max-finished-calls and --max-finished-bytes bound the memory store only: a Redis store keeps \
                 finished calls for their lifetime, in its own memory (bound it with Redis's maxmemory)"
            );
        }
        let mut builder = base
            .store(store)
            .secret(secret)
            .lifetimes(Lifetimes::with_default_ttl(self.default_ttl.map(Duration::from_secs)))
            .limits(Limits {
                paused: PausedLimits { per_owner: self.max_paused_per_caller, total: self.max_paused_calls },
                max_record_bytes: self.max_record_bytes,
                request_timeout: Some(Duration::from_secs(self.request_timeout)),
            })
            .http_limits(HttpLimits {
                header_read_timeout: Duration::from_secs(self.header_read_timeout.max(1)),
                body: BodyLimits {
                    max_bytes: self.max_body_bytes,
                    read_timeout: Duration::from_secs(self.body_read_timeout.max(1)),
                },
                max_connections: self.max_connections,
                max_concurrent_requests: self.max_concurrent_requests,
            })
            .hold(self.hold_policy());
        if self.conformance_fixtures {
            builder = builder.prompts(hitl_agents::conformance::prompts());
        }
        let rules = self.rules(&self.own_agents(own), notifier, previous)?;
        let file = match &self.config {
            Some(path) => Some(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?),
            None => None,
        };
        let policies = rules.policies.clone();
        let reloadable = self.config.is_some();
        // A file that may be reloaded may bring upstreams (and their resources and
        // prompts, and list changes) where there were none.
        let passed = rules.gateway.is_some() || reloadable;
        let limit_callers = policies.limit_callers();
        builder = builder.agents(rules.agents.clone());
        if let Some(receipts) = &rules.receipts {
            let jwks = receipts.jwks();
            let route: hitl_tower::RouteFn =
                Arc::new(move |_: &http::request::Parts| crate::metrics::json_response(http::StatusCode::OK, &jwks));
            builder = builder.route(hitl_gateway::receipts::JWKS_PATH, route);
        }
        let live = Live::new(rules, file.as_deref(), self.authenticates());
        if self.authenticates() {
            live.verifiers.set(self.verifiers()?);
        }
        if passed {
            let relayed = hitl_tower::Relayed(Arc::new(crate::passthrough::Upstreams(live.clone())));
            builder = builder.passthrough(relayed, notifier.clone());
        }
        if self.no_threads {
            builder = builder.without_threads();
        }
        if self.legacy_elicitation {
            builder = builder.legacy_elicitation();
        }
        if !self.allowed_hosts.is_empty() {
            let hosts = AllowedHosts::new(self.allowed_hosts.iter().cloned())
                .map_err(|e| anyhow::anyhow!("--allowed-host {e}"))?;
            builder = builder.allowed_hosts(hosts);
        }
        if let Some(name) = &self.principal_header {
            let header =
                http::HeaderName::try_from(name.as_str()).with_context(|| format!("--principal-header {name:?}"))?;
            builder = builder.principal_header(header);
        }
        builder = self.authentication(builder, &live)?;
        let decisions = self.pages.approvals.mcp_decisions;
        if limit_callers || reloadable || decisions {
            let access = live.clone();
            let personal = live.clone();
            builder = builder.access(hitl_tower::Access(
                Arc::new(move |name, principal, groups| {
                    let policies = &access.now().rules.policies;
                    match name {
                        // The approvers' own tools: listed to approvers only, whatever
                        // the policies say of other tools.
                        hitl_pages::decisions::PENDING_TOOL | hitl_pages::decisions::DECIDE_TOOL => {
                            policies.is_approver(principal, groups)
                        }
                        _ => policies.may_call(name, principal, groups),
                    }
                }),
                // Lists differ by caller while a policy names callers, or while the
                // decision tools are listed to approvers only.
                Some(Arc::new(move || decisions || personal.now().rules.policies.limit_callers())),
            ));
        }
        builder = builder.pages(self.pages_config(&policies, local, &live, audit_key)?);
        let health = live.clone();
        builder = builder.health(Arc::new(move || health.health()));
        let explaining = live.clone();
        builder = builder.admin_query(
            EXPLAIN_PATH,
            Arc::new(move |body| {
                let rules = &explaining.now().rules;
                crate::explain::explain_request(&rules.policies, &rules.upstreams, body)
            }),
        );
        let listing = live.clone();
        builder = builder.admin_document(
            UNMATCHED_PATH,
            Arc::new(move || {
                let judged = listing.now().rules.unmatched();
                serde_json::json!({
                    "unmatched_policies": judged.unmatched_policies(),
                    "unmatched": judged.unmatched,
                    "pending": judged.pending,
                })
            }),
        );
        Ok((builder, live))
    }

    /// The examples and conformance fixtures the flags ask for, then `own`.
    fn own_agents(&self, own: &[Agent]) -> Vec<Agent> {
        let mut agents = Vec::new();
        if self.conformance_fixtures {
            agents.extend(hitl_agents::conformance::tools());
        }
        if !self.no_examples {
            agents.extend(hitl_agents::examples());
        }
        agents.extend(own.iter().cloned());
        agents
    }

    /// `base` as these arguments and the file under them say, serving the agents
    /// given to it (under the policies) on `store`, its pages at `local`; with the
    /// command line it was parsed from, it reloads the file while serving.
    pub(crate) fn configure(
        &self,
        mut base: ServerBuilder,
        store: Arc<dyn Store>,
        local: SocketAddr,
        matches: Option<ArgMatches>,
    ) -> anyhow::Result<ServerBuilder> {
        let own = base.take_tools();
        let notifier = hitl_tower::Notifier::default();
        let (builder, live) = self.prepare(base, store, &own, local, None, &notifier)?;
        let loaded = live.now();
        if let Some(judged) = &loaded.rules.judged {
            // No upstream: the policies are judged on hitl's own agents alone, now.
            let mode = loaded.rules.mode;
            for found in &judged.unmatched {
                found.log(mode);
            }
            let problems = judged.problems();
            if mode == hitl_gateway::UnmatchedMode::Error && !problems.is_empty() {
                bail!(
                    "[gateway] unmatched = \"error\": {} policy glob(s) guard nothing:\n  {}",
                    problems.len(),
                    problems.join("\n  ")
                );
            }
        }
        drop(loaded);
        let startup = crate::configured::Startup {
            own,
            live,
            notifier,
            local,
            store: self.store.clone(),
            redis_ca_file: self.redis_ca_file.clone(),
            push: self.legacy_elicitation,
            declared: self.declared.clone(),
            reload: self.config.clone().zip(matches),
        };
        Ok(builder.startup(startup))
    }

    /// These arguments for `hitl serve --config path` (the environment applies as to
    /// the binary), checked.
    pub(crate) fn for_file(path: &std::path::Path) -> anyhow::Result<(Self, ArgMatches)> {
        let argv = [OsString::from("hitl"), "serve".into(), "--config".into(), path.as_os_str().to_owned()];
        let matches = Cli::command().try_get_matches_from(argv)?;
        let serve = matches.subcommand_matches("serve").expect("the serve subcommand").clone();
        let args = ServeArgs::from_arg_matches(&serve)?.with_file(&serve)?;
        Ok((args, serve))
    }

    /// The rules of the file as it is now, checked as `hitl check` checks it, for a
    /// reload from `previous`.
    pub(crate) fn checked_rules(
        mut self,
        own: &[Agent],
        notifier: &hitl_tower::Notifier,
        previous: &Rules,
        local: SocketAddr,
    ) -> anyhow::Result<Rules> {
        // Token files and keys are not watched again for a check.
        self.checking = true;
        let store: Arc<dyn Store> = Arc::new(hitl_interrupt::MemoryStore::default());
        let (_, live) = self.prepare(Server::builder(), store, own, local, Some(previous), notifier)?;
        Ok(live.now().rules.clone())
    }
}

impl ServeArgs {
    /// `--workers` (or `[server] workers`), at most [`MAX_WORKERS`]: read before the
    /// runtime is made, so a mistyped count is refused instead of spawning its threads.
    pub(crate) fn workers(&self) -> anyhow::Result<Option<std::num::NonZeroUsize>> {
        match self.workers {
            Some(n) if n.get() > MAX_WORKERS => {
                bail!("--workers must be at most {MAX_WORKERS} (each is a thread), not {n}")
            }
            workers => Ok(workers),
        }
    }

    /// The threads that serve requests: `--workers` as asked, else one per core, one
    /// fewer beside a Redis store on this machine ([`Workers::choose`]).
    pub(crate) fn threads(&self) -> anyhow::Result<Workers> {
        let redis = crate::is_redis(&self.store).then_some(self.store.as_str());
        Ok(Workers::choose(self.workers()?, redis))
    }

    /// The pages as `[server] public_url`, `[[notify]]`, `[audit]` and `[approvals]`
    /// say, for a server bound to `local`; approvers need sign-in.
    fn pages_config(
        &self,
        policies: &hitl_gateway::Policies,
        local: SocketAddr,
        live: &Live,
        audit_key: Option<[u8; 32]>,
    ) -> anyhow::Result<hitl_pages::PagesConfig> {
        if !self.pages.admin.principals.is_empty() && !self.authenticates() {
            bail!(
                "[admin] principals sign in with bearer tokens: set [auth] tokens_file (--tokens-file) or [auth.jwt]"
            );
        }
        let base = match &self.public_url {
            Some(url) => url.clone(),
            // The address it is bound to; one on every address is reached as localhost.
            None if local.ip().is_unspecified() => format!("http://localhost:{}", local.port()),
            None => format!("http://{local}"),
        };
        let uri: http::Uri = base.parse().with_context(|| format!("public URL {base:?}"))?;
        let local_host = matches!(uri.host(), Some("localhost" | "127.0.0.1" | "[::1]" | "::1"));
        if uri.scheme_str() != Some("https") && !local_host {
            tracing::warn!(
                public_url = %base,
                "MCP clients are sent only to https:// pages (or http:// on localhost): approvals by other people, \
                 secret entry and sign-ins will fail until [server] public_url is https://"
            );
        }
        let mut config = hitl_pages::PagesConfig::new(&base);
        config.verifiers = live.verifiers_if(self.authenticates());
        // `approvers_now` stays unset: until a reload changes the rules, the approvers
        // named when a call paused are the rules' own (a reload sets it, `reload.rs`).
        config.two_person = self.pages.approvals.two_person_rule.unwrap_or(true);
        if self.pages.approvals.mcp_decisions {
            config.decision_desk = Some(self.decision_desk.clone());
        }
        if let Some(ttl) = self.pages.approvals.session_ttl {
            if ttl == 0 {
                bail!("[approvals] session_ttl: give a number of seconds above 0");
            }
            config.session_ttl = ttl;
        }
        config.notify = self.pages.targets()?;
        if let Some(slack) = &self.pages.slack {
            let slack = slack.config()?;
            if !policies.have_approvers() {
                tracing::warn!(
                    "[slack] is set, but no [[policy]] names approvers: no approval will be posted to Slack"
                );
            }
            for (id, user) in &slack.users {
                if !policies.is_approver(Some(&user.principal), &user.groups) {
                    tracing::warn!(
                        slack_user = %id,
                        principal = %user.principal,
                        "[slack] users maps a Slack user to a principal no [[policy]] names an approver: \
                         its presses will decide nothing"
                    );
                }
            }
            config.slack = Some(slack);
        }
        if self.stdio && self.pages.audit.file.as_deref() == Some("-") {
            bail!("[audit] file = \"-\" writes to standard output, which --stdio keeps for MCP messages: name a file");
        }
        if self.stdio && !self.listen_set && self.public_url.is_none() && policies.have_approvers() {
            tracing::warn!(
                "a [[policy]] names approvers, but with --stdio hitl serves its pages only when [server] listen is set \
                 (or public_url names a server that shares this store): approvals by other people cannot be made yet"
            );
        }
        config.audit_file = self.pages.audit.file.as_deref().map(hitl_pages::AuditFile::parse);
        if let Some(key) = audit_key {
            if config.audit_file.is_none() {
                bail!("[audit] chain = true chains the lines of the audit file: set [audit] file too");
            }
            config.audit_chain = Some(hitl_pages::chain::Chain::new(&key, &crate::audit::replica()));
        }
        config.auditors = policies.approvers();
        config.admins = self.pages.admin.principals.iter().map(|p| p.0.clone()).collect();
        let approvals = &self.pages.approvals;
        config.max_event_streams_per_principal = approvals.max_event_streams_per_principal.unwrap_or(4);
        // Each stream holds a connection and a request's place: three quarters of the
        // smaller pool stay for everything else.
        let pool = self.max_connections.min(self.max_concurrent_requests);
        config.max_event_streams = approvals.max_event_streams.unwrap_or((pool / 4).max(1));
        let defaults = hitl_pages::Retention::default();
        config.retention = hitl_pages::Retention {
            keep_ended: approvals.keep_ended.map_or(defaults.keep_ended, Duration::from_secs),
            max_ended_per_caller: approvals.max_ended_per_caller.unwrap_or(defaults.max_ended_per_caller),
            max_argument_bytes: approvals.max_argument_bytes.unwrap_or(defaults.max_argument_bytes),
            audit_max_bytes: self.pages.audit.max_bytes.unwrap_or(defaults.audit_max_bytes),
        };
        if config.retention.max_argument_bytes < 256 {
            bail!("[approvals] max_argument_bytes: give at least 256 (room for a value's start, size and SHA-256)");
        }
        Ok(config)
    }

    /// How retries waiting for an approver are held, as `[approvals]` says.
    fn hold_policy(&self) -> hitl_interrupt::HoldPolicy {
        let approvals = &self.pages.approvals;
        let defaults = hitl_interrupt::HoldPolicy::default();
        hitl_interrupt::HoldPolicy {
            hold: approvals.hold.map_or(defaults.hold, Duration::from_secs),
            max_per_caller: approvals.max_held_per_caller.unwrap_or(defaults.max_per_caller),
            ..defaults
        }
    }

    /// Bearer authentication as `--tokens-file` and `[auth]` say (none without them).
    fn authentication(&self, builder: ServerBuilder, live: &Live) -> anyhow::Result<ServerBuilder> {
        if !self.authenticates() {
            return Ok(builder);
        }
        if self.principal_header.is_some() {
            bail!("--principal-header and [auth] exclude each other: the caller comes from one of them");
        }
        let verifiers = live.verifiers_if(true);
        let resource = match &self.public_url {
            Some(url) => hitl_auth::Resource::at(url),
            None => hitl_auth::Resource::from_request(),
        }
        .with_authorization_servers(self.auth.authorization_servers.clone());
        Ok(builder.authentication(verifiers, resource))
    }

    /// The token checkers `--tokens-file` and `[auth.jwt]` name, made once and shared by
    /// the MCP endpoint and the pages.
    pub(crate) fn verifiers(&self) -> anyhow::Result<Vec<Arc<dyn hitl_auth::Verify>>> {
        if let Some(made) = self.verifiers.get() {
            return Ok(made.clone());
        }
        // Keys and tokens are read again while the server runs (not by `hitl check`).
        let watch = !self.checking && tokio::runtime::Handle::try_current().is_ok();
        let mut verifiers: Vec<Arc<dyn hitl_auth::Verify>> = Vec::new();
        if let Some(path) = &self.tokens_file {
            let tokens = hitl_auth::TokenFile::load(path).map_err(anyhow::Error::msg)?;
            if watch {
                tokens.watch();
            }
            verifiers.push(tokens);
        }
        if let Some(config) = &self.auth.jwt {
            let jwt = hitl_auth::Jwt::new(config.clone()).map_err(anyhow::Error::msg)?;
            if watch {
                jwt.watch();
            }
            verifiers.push(jwt);
        }
        Ok(self.verifiers.get_or_init(|| verifiers).clone())
    }

    /// The store's URL (`memory`, or Redis).
    /// The thread store `--store` names; the memory store within the finished-call limits.
    pub(crate) fn store(&self) -> anyhow::Result<Arc<dyn Store>> {
        if self.store == "memory" {
            return Ok(Arc::new(hitl_interrupt::MemoryStore::default().with_finished_limits(self.finished_limits())));
        }
        crate::store_from_url(&self.store, self.redis_ca_file.as_deref())
    }

    /// `--max-finished-calls` and `--max-finished-bytes`.
    fn finished_limits(&self) -> hitl_interrupt::FinishedLimits {
        hitl_interrupt::FinishedLimits { calls: self.max_finished_calls, bytes: self.max_finished_bytes }
    }

    /// Where the server listens (`--listen`, `[server] listen`): its pages' address
    /// when no `public_url` is given.
    pub(crate) fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    /// `[slack] users`, checked (none: no `[slack]`).
    pub(crate) fn slack_users(
        &self,
    ) -> anyhow::Result<Option<std::collections::BTreeMap<String, hitl_pages::slack::SlackUser>>> {
        self.pages.slack.as_ref().map(|slack| slack.users()).transpose()
    }

    /// The `[[notify]]` webhooks, checked.
    pub(crate) fn notify_targets(&self) -> anyhow::Result<Vec<hitl_pages::notify::Target>> {
        self.pages.targets()
    }

    /// Whether callers must present a bearer token.
    pub(crate) fn authenticates(&self) -> bool {
        self.tokens_file.is_some() || self.auth.jwt.is_some()
    }
}

/// Serves `agents` (besides the examples and fixtures the flags ask for) as `args` say.
pub(crate) async fn serve(args: ServeArgs, matches: ArgMatches, agents: Vec<Agent>) -> anyhow::Result<()> {
    let store = args.store()?;
    let principal = args.stdio.then(|| stdio_principal(&args.stdio_principal)).transpose()?;
    // Read from the start: a host that gives up while hitl still lists its upstreams
    // ends it at once, and what it sent meanwhile waits in the pipe.
    let mut stdin = args.stdio.then(StdinPump::start);
    // Bound first: the pages' links name the address when no public URL is given. Over
    // stdio only when asked, so two hosts starting hitl do not fight over a port.
    let listener = match args.stdio && !args.listen_set {
        true => None,
        false => Some(TcpListener::bind(args.listen).await.with_context(|| format!("binding {}", args.listen))?),
    };
    let local = match &listener {
        Some(listener) => listener.local_addr()?,
        None => args.listen,
    };
    let builder = args.configure(Server::builder().agents(agents), store.clone(), local, Some(matches))?;
    let mut server = match args.metrics_listen {
        None => builder.metrics().build(),
        Some(addr) => {
            let metrics = TcpListener::bind(addr).await.with_context(|| format!("binding {addr} for /metrics"))?;
            tracing::info!(local = %metrics.local_addr()?, "serving /metrics");
            tokio::spawn(crate::metrics::serve_apart(
                metrics,
                crate::metrics::Scrape::new(store.clone(), store.clone()),
            ));
            builder.build()
        }
    };
    // The upstreams are listed before serving.
    let started = server.start();
    match &mut stdin {
        Some(pump) => tokio::select! {
            started = started => started?,
            () = pump.closed() => {
                tracing::info!("standard input closed before hitl was ready; exiting");
                return Ok(());
            }
        },
        None => started.await?,
    }
    // Start even when the store is down: /healthz says so, and service resumes with it.
    if let Err(e) = store.ping().await {
        let shown = redact_url(&args.store);
        tracing::warn!(store = %shown, error = %e, "the thread store is not reachable yet; serving anyway, /healthz reports not ready");
    }
    if let Some(principal) = principal {
        // Standard output carries MCP messages only.
        let options = hitl_tower::StdioOptions {
            principal: hitl_tower::Principal(principal),
            push: !args.push_off,
            max_message_bytes: args.max_body_bytes,
        };
        match &listener {
            Some(_) => tracing::info!(%local, "serving MCP on stdio, and HTTP"),
            None => tracing::info!("serving MCP on stdio"),
        }
        let input = tokio::io::BufReader::new(stdin.context("standard input")?.reader);
        server.serve_stdio(options, input, tokio::io::stdout(), listener, shutdown_signal()).await?;
        tracing::info!("standard input closed; exiting");
        return Ok(());
    }
    let listener = listener.context("no listener")?;
    // The first line on stdout is the bound address, for scripts and tests.
    println!("hitl listening on http://{local}/mcp");
    tracing::info!(%local, "listening");
    server.serve(listener, shutdown_signal()).await?;
    Ok(())
}

/// Standard input copied into a pipe from the start, so its end is seen even before
/// the stdio loop reads it.
struct StdinPump {
    reader: tokio::io::DuplexStream,
    ended: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl StdinPump {
    fn start() -> Self {
        let (mut writer, reader) = tokio::io::duplex(64 * 1024);
        let (end, ended) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            // Ended by the input's end (or a read error, which ends it as well).
            if let Err(error) = tokio::io::copy(&mut tokio::io::stdin(), &mut writer).await {
                tracing::warn!(%error, "reading standard input failed; ending as if it closed");
            }
            let _ = end.send(());
        });
        Self { reader, ended: Some(ended) }
    }

    /// Resolves once the input has ended (at once if it was seen to end before).
    async fn closed(&mut self) {
        if let Some(ended) = self.ended.as_mut() {
            let _ = ended.await;
            self.ended = None;
        }
    }
}

/// `--stdio-principal`, checked: `user:<id>`.
fn stdio_principal(given: &str) -> anyhow::Result<String> {
    match given.strip_prefix("user:") {
        Some(id) if !id.is_empty() && !id.chars().any(|c| c.is_control() || c.is_whitespace()) => Ok(given.to_owned()),
        _ => bail!("--stdio-principal {given:?}: give user:<id> (no spaces)"),
    }
}

/// Where `[admin]` principals ask which policy decides a call.
pub(crate) const EXPLAIN_PATH: &str = "/api/policy/explain";

/// Where `[admin]` principals read the policy globs that match nothing.
pub(crate) const UNMATCHED_PATH: &str = "/api/policies/unmatched";

/// `hitl check --config F`: what `hitl serve --config F` would check before it binds;
/// with `--connect`, every upstream listed and the policies applied to its tools.
pub(crate) fn check(args: CheckArgs, runtime: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    let (serve, _) = ServeArgs::for_file(&args.config)?;
    let store = crate::store_from_url(&serve.store, serve.redis_ca_file.as_deref())?;
    let notifier = hitl_tower::Notifier::default();
    let (_, live) = serve.prepare(Server::builder(), store, &[], serve.listen, None, &notifier)?;
    let loaded = live.now();
    if args.connect {
        if let Some(gateway) = &loaded.rules.gateway {
            runtime.block_on(async {
                let publish: hitl_gateway::Publish = Arc::new(|_, _| Ok(()));
                gateway.start(&publish).await.map_err(anyhow::Error::msg)?;
                let health = gateway.health();
                for (name, state) in health["upstreams"].as_object().into_iter().flatten() {
                    match state["tools"].as_u64() {
                        Some(tools) => println!("upstream {name}: {tools} tools listed"),
                        None => println!("upstream {name}: not listed: {}", state["error"].as_str().unwrap_or("")),
                    }
                }
                anyhow::Ok(())
            })?;
        }
        let judged = loaded.rules.unmatched();
        let problems = judged.problems();
        if !problems.is_empty() {
            bail!(
                "{}: {} policy glob(s) guard nothing:\n  {}",
                args.config.display(),
                problems.len(),
                problems.join("\n  ")
            );
        }
    }
    println!("{}: ok", args.config.display());
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
