//! The embeddable server: agents, a store, a secret, options and your own tower layers,
//! served on a `TcpListener` until a shutdown future resolves.

use std::sync::Arc;
use std::time::Duration;

use hitl_interrupt::{
    Agent, Engine, Lifetimes, Limits, MemoryStore, Notes, PausedLedger, Records, Secret, Store, SystemClock,
};
use hitl_tower::{
    AllowedHosts, BodyLimits, Endpoint, HealthFn, HttpApp, MaxConcurrentRequestsLayer, McpBody, McpService,
    PrincipalFromHeaderLayer, ServerOptions, Tools,
};
use tokio::net::TcpListener;
use tower::{Layer, Service, ServiceBuilder};

use crate::listener;

/// The limits of the HTTP edge, with production defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// From a connection's start (or its previous response) to a complete request head;
    /// then the connection is closed.
    pub header_read_timeout: Duration,
    /// The request body's size and time to arrive (413, 408).
    pub body: BodyLimits,
    /// Connections served at once; past it the listener stops accepting.
    pub max_connections: usize,
    /// Requests served at once; past it 503 with `Retry-After`.
    pub max_concurrent_requests: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            body: BodyLimits::default(),
            max_connections: 10_000,
            max_concurrent_requests: 1_024,
        }
    }
}

type Wrap = Box<dyn FnOnce(Endpoint) -> Endpoint + Send>;

/// A JSON document made at each request, for [`ServerBuilder::admin_document`].
pub type DocumentFn = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// An answer to a JSON request, or why the request is not valid (a 400), for
/// [`ServerBuilder::admin_query`].
pub type QueryFn = Arc<dyn Fn(&serde_json::Value) -> Result<serde_json::Value, String> + Send + Sync>;

/// Builds a [`Server`]; see [`Server::builder`].
pub struct ServerBuilder {
    tools: Vec<Agent>,
    prompts: Vec<Agent>,
    store: Option<Arc<dyn Store>>,
    thread_store: Option<Arc<dyn PausedLedger>>,
    notes: Option<Arc<dyn Notes>>,
    records: Option<Arc<dyn Records>>,
    pages: Option<hitl_pages::PagesConfig>,
    secret: Option<Secret>,
    lifetimes: Lifetimes,
    limits: Limits,
    hold: hitl_interrupt::HoldPolicy,
    http: HttpLimits,
    allowed_hosts: Option<AllowedHosts>,
    principal_header: Option<http::HeaderName>,
    auth: Option<(hitl_auth::BearerAuthLayer, hitl_auth::Resource)>,
    options: ServerOptions,
    threads: bool,
    layers: Vec<Wrap>,
    health: Option<HealthFn>,
    metrics: bool,
    documents: Vec<(String, DocumentFn)>,
    queries: Vec<(String, QueryFn)>,
    /// Routes of their own (a public document such as the receipts' key).
    routes: Vec<(String, hitl_tower::RouteFn)>,
    /// What a configuration file makes at start ([`ServerBuilder::config_file`]), and
    /// how many of `tools` it put under its policies.
    startup: Option<(crate::configured::Startup, usize)>,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("tools", &self.tools.iter().map(|a| &a.name).collect::<Vec<_>>())
            .field("prompts", &self.prompts.iter().map(|a| &a.name).collect::<Vec<_>>())
            .field("limits", &self.limits)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

impl ServerBuilder {
    /// Serves `agent` as a tool (listed in the order added).
    #[must_use]
    pub fn agent(mut self, agent: Agent) -> Self {
        self.tools.push(agent);
        self
    }

    /// Serves each of `agents` as a tool.
    #[must_use]
    pub fn agents(mut self, agents: impl IntoIterator<Item = Agent>) -> Self {
        self.tools.extend(agents);
        self
    }

    /// Everything the configuration file at `path` says, as `hitl serve --config path`
    /// serves it (the `HITL_*` environment over it, as for the binary): its
    /// `[server]` options (the store, limits, hosts, secret), the gateway and its
    /// upstreams (listed when the server starts), the policies over every tool, the
    /// `[[agent]]`s, approvals by other people and their pages, `[auth]`, and reloads
    /// of the file while serving (`SIGHUP`, or a change). Every agent given to this
    /// builder, before or after, is under the file's policies. Builder calls after this
    /// one override the file. Fails as `hitl check` would.
    ///
    /// ```no_run
    /// # async fn demo() -> anyhow::Result<()> {
    /// let server = hitl_server::Server::builder().config_file("hitl.toml")?.build();
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8123").await?;
    /// server.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await?;
    /// # Ok(()) }
    /// ```
    pub fn config_file(self, path: impl AsRef<std::path::Path>) -> anyhow::Result<Self> {
        let (args, matches) = crate::cli::ServeArgs::for_file(path.as_ref())?;
        let store = match self.store.clone() {
            Some(store) => store,
            None => args.store()?,
        };
        args.configure(self, store, args.listen_addr(), Some(matches))
    }

    /// The agents given so far (a configuration puts them under its policies).
    pub(crate) fn take_tools(&mut self) -> Vec<Agent> {
        std::mem::take(&mut self.tools)
    }

    /// What a configuration makes at start; the tools given so far are under it.
    pub(crate) fn startup(mut self, startup: crate::configured::Startup) -> Self {
        self.startup = Some((startup, self.tools.len()));
        self
    }

    /// Serves `GET /metrics` (Prometheus text) on the server's listener: rounds by
    /// outcome, the people's answer time, agent run time, store operations, HTTP
    /// statuses. Installs the process's metrics recorder.
    #[must_use]
    pub fn metrics(mut self) -> Self {
        self.metrics = true;
        self
    }

    /// Serves `document` at `GET path` to `[admin] principals` only (the pages'
    /// `admins`, signed in with a bearer token; 401 without one, 403 for others and
    /// whenever authentication is off).
    #[must_use]
    pub fn admin_document(mut self, path: impl Into<String>, document: DocumentFn) -> Self {
        self.documents.push((path.into(), document));
        self
    }

    /// Answers `POST path` (a JSON body) with `query`'s JSON, to `[admin] principals`
    /// only, as [`ServerBuilder::admin_document`]; a body that is not JSON, or that
    /// `query` refuses, gets 400 with `{"error": …}`.
    #[must_use]
    pub fn admin_query(mut self, path: impl Into<String>, query: QueryFn) -> Self {
        self.queries.push((path.into(), query));
        self
    }

    /// Serves `route` at `path` to anyone the host check lets through (a public
    /// document: say, the public key of approval receipts).
    #[must_use]
    pub fn route(mut self, path: impl Into<String>, route: hitl_tower::RouteFn) -> Self {
        self.routes.push((path.into(), route));
        self
    }

    /// Adds `health`'s fields to `/healthz` (say, the state of each upstream).
    #[must_use]
    pub fn health(mut self, health: HealthFn) -> Self {
        self.health = Some(health);
        self
    }

    /// Serves each of `agents` as a prompt (`prompts/get` runs it with the same rounds).
    #[must_use]
    pub fn prompts(mut self, agents: impl IntoIterator<Item = Agent>) -> Self {
        self.prompts.extend(agents);
        self
    }

    /// Where everything kept between requests lives, one backend for all (default: this
    /// process's memory): paused calls, notes, approvals and the audit trail, as
    /// [`crate::store_from_url`] gives. [`ServerBuilder::threads`],
    /// [`ServerBuilder::notes`] and [`ServerBuilder::records`] put one part elsewhere.
    #[must_use]
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Where paused calls live and are counted, when not in [`ServerBuilder::store`].
    #[must_use]
    pub fn threads(mut self, threads: Arc<dyn PausedLedger>) -> Self {
        self.thread_store = Some(threads);
        self
    }

    /// Where notes between requests live (the round a client's dropped push stream left
    /// open, the pages' single-use marks), when not in [`ServerBuilder::store`]. Replicas
    /// must share them.
    #[must_use]
    pub fn notes(mut self, notes: Arc<dyn Notes>) -> Self {
        self.notes = Some(notes);
        self
    }

    /// Where the approvals listing and the audit trail live, when not in
    /// [`ServerBuilder::store`]. Replicas must share them.
    #[must_use]
    pub fn records(mut self, records: Arc<dyn Records>) -> Self {
        self.records = Some(records);
        self
    }

    /// Serves hitl's pages under `config.base_url`: approvals by other people, secret
    /// entry, sign-in callbacks, the approvals API, notifications and the audit trail.
    #[must_use]
    pub fn pages(mut self, config: hitl_pages::PagesConfig) -> Self {
        self.pages = Some(config);
        self
    }

    /// The secret that signs `requestState` (default: a random one, fine for one process
    /// on the memory store; replicas on a shared store must share theirs).
    #[must_use]
    pub fn secret(mut self, secret: Secret) -> Self {
        self.secret = Some(secret);
        self
    }

    /// How long paused and finished calls live.
    #[must_use]
    pub fn lifetimes(mut self, lifetimes: Lifetimes) -> Self {
        self.lifetimes = lifetimes;
        self
    }

    /// The limits on paused calls, records and agent time.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// How a retry of a call waiting for an approver is held (`[approvals] hold` and
    /// `max_held_per_caller`; 25 s and 8 by default).
    #[must_use]
    pub fn hold(mut self, policy: hitl_interrupt::HoldPolicy) -> Self {
        self.hold = policy;
        self
    }

    /// The limits of the HTTP edge.
    #[must_use]
    pub fn http_limits(mut self, http: HttpLimits) -> Self {
        self.http = http;
        self
    }

    /// The hosts requests may name (default: loopback names on the bound port when the
    /// listener is on loopback, else any).
    #[must_use]
    pub fn allowed_hosts(mut self, hosts: AllowedHosts) -> Self {
        self.allowed_hosts = Some(hosts);
        self
    }

    /// Reads each caller's principal from `header`, set by an authenticating proxy;
    /// requests without it get 401.
    #[must_use]
    pub fn principal_header(mut self, header: http::HeaderName) -> Self {
        self.principal_header = Some(header);
        self
    }

    /// Requires a bearer token that one of `verifiers` accepts on every MCP request
    /// (else 401 with MCP's `WWW-Authenticate` challenge) and serves `resource`'s
    /// protected resource metadata; the caller is the token's principal and groups.
    #[must_use]
    pub fn authentication(mut self, verifiers: Vec<Arc<dyn hitl_auth::Verify>>, resource: hitl_auth::Resource) -> Self {
        self.auth = Some((hitl_auth::BearerAuthLayer::new(verifiers, resource.clone()), resource));
        self
    }

    /// Who may use which tool and prompt: the others are neither listed to a caller
    /// nor callable by it.
    #[must_use]
    pub fn access(mut self, access: hitl_tower::Access) -> Self {
        self.options.access = Some(access);
        self
    }

    /// Serves `passthrough`'s resources and prompts (a gateway's upstreams') besides the
    /// agents, and tells clients' notification streams of list changes through
    /// `notifier` (give the same one to what changes the lists).
    #[must_use]
    pub fn passthrough(mut self, passthrough: hitl_tower::Relayed, notifier: hitl_tower::Notifier) -> Self {
        self.options.passthrough = Some(passthrough);
        self.options.notifier = notifier;
        self
    }

    /// `serverInfo`, instructions and list caching.
    #[must_use]
    pub fn options(mut self, options: ServerOptions) -> Self {
        self.options = options;
        self
    }

    /// Asks 2025-era clients the questions of a paused call by push (SSE requests
    /// answered by POST) instead of the seed's error result.
    #[must_use]
    pub fn legacy_elicitation(mut self) -> Self {
        self.options.legacy_elicitation = true;
        self
    }

    /// Keeps no threads: a tool that pauses ends with an error result.
    #[must_use]
    pub fn without_threads(mut self) -> Self {
        self.threads = false;
        self
    }

    /// Wraps the MCP endpoint in `layer` (an auth layer that inserts a `Principal`, a
    /// header, a metric). Layers added first are outermost; all run inside the built-in
    /// load shedding, host check and principal header.
    #[must_use]
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: Layer<Endpoint> + Send + 'static,
        L::Service: Service<http::Request<bytes::Bytes>, Response = http::Response<McpBody>, Error = std::convert::Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as Service<http::Request<bytes::Bytes>>>::Future: Send + 'static,
    {
        self.layers.push(Box::new(move |inner| Endpoint::new(layer.layer(inner))));
        self
    }

    /// The server, ready to serve.
    pub fn build(mut self) -> Server {
        let startup = self.startup.take().map(|(mut startup, configured)| {
            // Agents given after the configuration go under its policies too.
            let later = self.tools.split_off(configured.min(self.tools.len()));
            for agent in later {
                if let Some(gated) = startup.adopt(agent, &self.tools) {
                    self.tools.push(gated);
                }
            }
            startup
        });
        // Each part not given lives in the whole store, or else in this process's memory.
        let memory = Arc::new(MemoryStore::default());
        let whole: Arc<dyn Store> = self.store.unwrap_or(memory);
        let store: Arc<dyn PausedLedger> = self.thread_store.unwrap_or_else(|| whole.clone());
        let records: Arc<dyn Records> = self.records.unwrap_or_else(|| whole.clone());
        let notes: Arc<dyn Notes> = self.notes.unwrap_or(whole);
        let secret = self.secret.unwrap_or_else(Secret::generate);
        let admins = self.pages.as_ref().map(|config| config.admins.clone()).unwrap_or_default();
        let pages = self.pages.map(|config| {
            let base = config.base_url.clone();
            (hitl_pages::Pages::new(config, records.clone(), notes.clone(), &secret), base)
        });
        // Store operations are timed and counted (for /metrics, when served).
        let store: Arc<dyn PausedLedger> = Arc::new(hitl_interrupt::MeteredStore::new(store));
        let mut engine = Engine::new(store.clone(), Arc::new(SystemClock), secret, self.lifetimes)
            .with_limits(self.limits)
            .with_hold(self.hold);
        if let Some((pages, base)) = &pages {
            engine = engine.with_pages(base).with_observer(pages.observer());
        }
        let pages = pages.map(|(pages, _)| (pages, engine.clone()));
        let engine_handle = engine.clone();
        let tools = Tools::new(self.tools);
        let mut options = self.options;
        options.threads = self.threads;
        // A dropped push stream's notes are timed as the store's other operations.
        options.notes = Some(Arc::new(hitl_interrupt::MeteredStore::new(notes)));
        // Who asks is known, so what is listed may depend on it.
        options.private_lists |= self.auth.is_some() || self.principal_header.is_some();
        let service = McpService::with_tools(tools.clone(), self.prompts, engine, options);
        let mut mcp = Endpoint::new(service.clone());
        for wrap in self.layers.into_iter().rev() {
            mcp = wrap(mcp);
        }
        Server {
            mcp,
            service,
            engine: engine_handle,
            store,
            tools,
            http: self.http,
            allowed_hosts: self.allowed_hosts,
            principal_header: self.principal_header,
            auth: self.auth,
            health: self.health,
            pages,
            metrics: self.metrics,
            records,
            admins,
            documents: self.documents,
            queries: self.queries,
            routes: self.routes,
            startup,
        }
    }
}

/// hitl as a library: the MCP endpoint and `/healthz` over HTTP, with every limit of the
/// binary.
///
/// ```no_run
/// use hitl_graph::{Agent, START, StateGraph};
/// use serde_json::json;
///
/// # async fn demo() -> std::io::Result<()> {
/// let graph = StateGraph::new()
///     .add_step("ask", |_, ctx| async move { Ok(json!({ "ok": ctx.interrupt(json!("Proceed?"))? })) })
///     .add_edge(START, "ask")
///     .compile()
///     .unwrap();
/// let server = hitl_server::Server::builder().agent(Agent::new("proceed", "Asks first.", json!({"type": "object"}), graph)).build();
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// server.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await
/// # }
/// ```
pub struct Server {
    mcp: Endpoint,
    /// The endpoint inside the user's layers.
    service: McpService,
    /// The engine behind it (shared with the pages).
    engine: Engine,
    store: Arc<dyn PausedLedger>,
    tools: Tools,
    http: HttpLimits,
    allowed_hosts: Option<AllowedHosts>,
    principal_header: Option<http::HeaderName>,
    auth: Option<(hitl_auth::BearerAuthLayer, hitl_auth::Resource)>,
    health: Option<HealthFn>,
    pages: Option<(hitl_pages::Pages, Engine)>,
    metrics: bool,
    /// Where approvals are listed (for the pending-approvals gauge).
    records: Arc<dyn Records>,
    /// `[admin] principals`: who may read `/metrics` on the main listener when
    /// authentication is on.
    admins: Vec<String>,
    documents: Vec<(String, DocumentFn)>,
    queries: Vec<(String, QueryFn)>,
    routes: Vec<(String, hitl_tower::RouteFn)>,
    /// What a configuration file makes as the server starts ([`Server::start`]).
    startup: Option<crate::configured::Startup>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("http", &self.http).finish_non_exhaustive()
    }
}

impl Server {
    /// A builder with no agents, the memory store, a random secret and default limits.
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            tools: Vec::new(),
            prompts: Vec::new(),
            store: None,
            thread_store: None,
            notes: None,
            records: None,
            pages: None,
            secret: None,
            lifetimes: Lifetimes::default(),
            limits: Limits::default(),
            hold: hitl_interrupt::HoldPolicy::default(),
            http: HttpLimits::default(),
            allowed_hosts: None,
            principal_header: None,
            auth: None,
            options: ServerOptions::default(),
            threads: true,
            layers: Vec::new(),
            health: None,
            metrics: false,
            documents: Vec::new(),
            queries: Vec::new(),
            routes: Vec::new(),
            startup: None,
        }
    }

    /// The served tools, which may be changed while the server runs (a gateway lists
    /// its upstreams' tools here).
    pub fn tools(&self) -> Tools {
        self.tools.clone()
    }

    /// The pages' part of the configuration a reload replaces (none without pages).
    pub fn pages_reload(&self) -> Option<hitl_pages::Reload> {
        self.pages.as_ref().map(|(pages, _)| pages.reload())
    }

    /// The engine that runs the agents: to [wake](Engine::wake) retries held here when
    /// another replica stores a decision, and [relay](Engine::relay_decisions) this
    /// one's.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// With push elicitation on several replicas: answers reach the replica whose stream
    /// asked over `bus` (see [`hitl_tower::McpService::listen_for_answers`]).
    pub async fn listen_for_answers(&self, bus: Arc<dyn hitl_tower::PushBus>) -> Result<(), String> {
        self.service.listen_for_answers(bus).await
    }

    /// What a [configuration file](ServerBuilder::config_file) makes as the server
    /// starts: lists its upstreams (failing as `[gateway] unmatched = "error"` says),
    /// hears other replicas on a shared Redis store, and watches the file for reloads.
    /// [`Server::serve`] and [`Server::serve_stdio`] call it first, and
    /// [`Server::into_app`] runs it in the background when it was not called; once
    /// done, it does nothing.
    pub async fn start(&mut self) -> anyhow::Result<()> {
        match self.startup.take() {
            Some(startup) => startup.run(self.handles()).await,
            None => Ok(()),
        }
    }

    fn handles(&self) -> crate::configured::Handles {
        crate::configured::Handles {
            tools: self.tools.clone(),
            engine: self.engine.clone(),
            service: self.service.clone(),
            pages: self.pages_reload(),
        }
    }

    /// Serves `listener` until `shutdown` resolves, then lets open connections finish
    /// for up to 10 s.
    pub async fn serve(
        mut self,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> std::io::Result<()> {
        self.start().await.map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        let local = listener.local_addr()?;
        let http = self.http;
        let app = self.into_app(Some(local));
        listener::serve(listener, app, http, shutdown).await;
        Ok(())
    }

    /// Serves one MCP client over `input` and `output` (one JSON-RPC message per line;
    /// see [`hitl_tower::serve_stdio`]) until `input` ends or `shutdown` resolves, and,
    /// with a `listener`, the HTTP routes on it meanwhile (the pages, for approvals by
    /// other people). The client is `options.principal`; the HTTP layers of
    /// authentication do not apply to it.
    pub async fn serve_stdio<R, W>(
        mut self,
        options: hitl_tower::StdioOptions,
        input: R,
        output: W,
        listener: Option<TcpListener>,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> std::io::Result<()>
    where
        R: tokio::io::AsyncBufRead + Unpin,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        self.start().await.map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        // Requests in flight are bounded as over HTTP (503's error, as a line).
        let limit = MaxConcurrentRequestsLayer::new(self.http.max_concurrent_requests.max(1));
        let mcp = Endpoint::new(limit.layer(self.mcp.clone()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let http = match listener {
            Some(listener) => {
                let local = listener.local_addr()?;
                let limits = self.http;
                let app = self.into_app(Some(local));
                Some(tokio::spawn(async move {
                    listener::serve(listener, app, limits, async {
                        let _ = stopped.await;
                    })
                    .await;
                }))
            }
            None => None,
        };
        let served = tokio::select! {
            served = hitl_tower::serve_stdio(mcp, options, input, output) => served,
            () = shutdown => Ok(()),
        };
        let _ = stop.send(());
        if let Some(http) = http {
            // Open HTTP connections are not waited for: the host is gone.
            http.abort();
        }
        served
    }

    /// The whole HTTP application as a tower `Service` (`/mcp` behind the built-in
    /// layers, the probes, `/metrics`, the admin documents and the pages), to serve on
    /// your own listener or mount in your own app: with axum,
    /// `Router::new().nest_service("/hitl", server.into_app(None))` (set
    /// [`ServerBuilder::pages`]' base URL to the mounted URL, so links and cookies name
    /// it). `local` is the address it is served on, when hitl serves it: a loopback
    /// address admits only loopback host names, unless
    /// [`ServerBuilder::allowed_hosts`] says otherwise; mounted (`None`), every host
    /// name is admitted unless `allowed_hosts` is set (your app checks its own).
    pub fn into_app(mut self, local: Option<std::net::SocketAddr>) -> HttpApp {
        if let Some(startup) = self.startup.take() {
            // Not started by its owner: the upstreams are listed in the background.
            let handles = self.handles();
            tokio::spawn(async move {
                if let Err(error) = startup.run(handles).await {
                    tracing::error!("the configuration could not start: {error:#}");
                }
            });
        }
        let allowed = self.allowed_hosts.unwrap_or_else(|| match local {
            Some(local) if local.ip().is_loopback() => AllowedHosts::loopback(local.port()),
            _ => AllowedHosts::any(),
        });
        // One count of requests in flight for every route: the pages, the API and its
        // event streams, and /metrics take places from the same pool as /mcp.
        let limit = MaxConcurrentRequestsLayer::new(self.http.max_concurrent_requests.max(1));
        let limited = |service: Endpoint| -> Endpoint { Endpoint::new(limit.layer(service)) };
        let mcp = Endpoint::new(
            ServiceBuilder::new()
                .layer(limit.clone())
                .option_layer(self.principal_header.map(PrincipalFromHeaderLayer::new))
                .option_layer(self.auth.as_ref().map(|(layer, _)| layer.clone()))
                .service(self.mcp),
        );
        let store = self.store;
        // The host check covers every route but the probes.
        let mut app =
            HttpApp::new(mcp, hitl_tower::store_ready(store.clone()), self.http.body).with_allowed_hosts(allowed);
        if let Some((_, resource)) = self.auth.clone() {
            // Where RFC 9728 puts it for this host, and for the `/mcp` resource.
            let route = hitl_auth::metadata_route(resource);
            app = app
                .with_route(hitl_auth::METADATA_PATH, route.clone())
                .with_route(format!("{}/mcp", hitl_auth::METADATA_PATH), route);
        }
        for (path, route) in self.routes {
            app = app.with_route(path, route);
        }
        if let Some(health) = self.health {
            app = app.with_health(health);
        }
        let admins = crate::metrics::AdminsOnly(self.admins.into());
        // Admins only: named by a bearer token, and one of `[admin] principals`.
        let for_admins = |service: Endpoint| -> Endpoint {
            match &self.auth {
                Some((layer, _)) => Endpoint::new(layer.layer(hitl_tower::Admit::new(service, admins.clone()))),
                None => Endpoint::new(hitl_tower::Admit::new(service, crate::metrics::NoAdmins)),
            }
        };
        if self.metrics {
            let mut scrape = crate::metrics::Scrape::new(store, self.records).endpoint();
            if self.auth.is_some() {
                // With authentication on, the main listener's /metrics is for admins only
                // (a separate --metrics-listen stays open, for private networks).
                scrape = for_admins(scrape);
            }
            app = app.mount("/metrics", limited(scrape));
        }
        // Before the pages, which serve the rest of /api.
        for (path, document) in self.documents {
            app = app.mount(path, limited(for_admins(crate::metrics::document(document))));
        }
        for (path, query) in self.queries {
            app = app.mount(path, limited(for_admins(crate::metrics::query(query))));
        }
        if let Some((pages, engine)) = self.pages {
            let service = limited(pages.service(engine));
            for prefix in hitl_pages::Pages::PREFIXES {
                app = app.mount(prefix, service.clone());
            }
        }
        app
    }
}
