//! The hitl MCP endpoint as a tower [`Service`] over `http` types.
//!
//! [`McpService`] takes an `http::Request<Bytes>` (the server collects the body, with
//! its size limit) and answers an `http::Response<McpBody>`. It serves both eras on one
//! endpoint: a request whose `MCP-Protocol-Version` header names 2026-07-28 (or a
//! version hitl does not know) is modern and checked against its per-request `_meta`;
//! one without the header, or naming 2025-11-25 or earlier, is a legacy client's.
//!
//! The service never names hyper or a store implementation: wrap it in any tower
//! layers (auth that inserts a [`Principal`], rate limits, tracing) and mount it in
//! any server.
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use hitl_interrupt::{Engine, Lifetimes, MemoryStore, Secret, SystemClock};
//! use hitl_tower::{McpService, ServerOptions};
//! use http_body_util::BodyExt;
//! use tower::ServiceExt;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let engine = Engine::new(Arc::new(MemoryStore::default()), Arc::new(SystemClock), Secret::generate(), Lifetimes::default());
//! let service = McpService::new(Vec::new(), engine, ServerOptions::default());
//! let request = http::Request::post("/mcp")
//!     .header("content-type", "application/json")
//!     .header("mcp-protocol-version", "2026-07-28")
//!     .header("mcp-method", "server/discover")
//!     .body(Bytes::from(r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{
//!         "io.modelcontextprotocol/protocolVersion":"2026-07-28",
//!         "io.modelcontextprotocol/clientCapabilities":{}}}}"#))
//!     .unwrap();
//! let response = service.oneshot(request).await.unwrap();
//! assert_eq!(response.status(), 200);
//! let body = response.into_body().collect().await.unwrap().to_bytes();
//! let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
//! assert_eq!(json["result"]["supportedVersions"][0], "2026-07-28");
//! # });
//! ```

mod dispatch;
mod endpoint;
mod passthrough;
mod push;
mod session;
mod sse;
mod stdio;
mod tasks;
mod tools;
mod validate;

/// The HTTP edge the endpoint is served behind, re-exported: its body, who is calling,
/// the generic layers and the app (see `hitl-http`).
pub use hitl_http::{
    Admission, Admit, AllowedHosts, BodyLimits, Endpoint, Groups, HealthFn, HttpApp, MaxConcurrentRequests,
    MaxConcurrentRequestsLayer, PeerAddr, Principal, PrincipalFromHeader, PrincipalFromHeaderLayer, ReadyFn, RouteFn,
    ValidateOrigin, ValidateOriginLayer, body, forbidden, refusal,
};
pub use passthrough::{Asker, ListKind, Notifier, PassFuture, Passed, Passthrough, Relayed, Subscribed};
pub use push::PushBus;
pub use stdio::{StdioOptions, serve_stdio};
pub use tools::{Listing, Listings, Sets, Tools};

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use hitl_interrupt::{Agent, Engine, Notes};
use hitl_protocol::version::Era;
use hitl_protocol::{ErrorCode, ErrorObject, Implementation, RequestId, Response};
use http::StatusCode;
use indexmap::IndexMap;
use tower::Service;

/// The response body of the endpoint: `hitl_http::Body`.
pub type McpBody = hitl_http::Body;

/// Who may use which tool or prompt: `(name, principal, groups) -> allowed`. A tool a
/// caller may not use is not listed to it, and calling it fails as for a tool that
/// does not exist (`Unknown tool`), so names do not leak.
#[derive(Clone)]
pub struct Access(pub AccessFn, pub Option<PersonalFn>);

/// Whether an [`Access`] rule depends on who asks now (rules that are reloaded may
/// start or stop naming callers); without one it always may.
pub type PersonalFn = Arc<dyn Fn() -> bool + Send + Sync>;

impl Access {
    /// Access by `rule`, which may depend on who asks.
    pub fn new(rule: AccessFn) -> Self {
        Self(rule, None)
    }

    /// Whether what is listed may differ from one caller to another now.
    pub fn personal(&self) -> bool {
        self.1.as_ref().is_none_or(|personal| personal())
    }
}

/// The rule of an [`Access`]: `(name, principal, groups) -> allowed`.
pub type AccessFn = Arc<dyn Fn(&str, Option<&str>, &[String]) -> bool + Send + Sync>;

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Access(..)")
    }
}

/// Server-wide settings of the endpoint.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// `serverInfo`: name and version.
    pub server_info: Implementation,
    /// `instructions` of `server/discover` and `initialize`.
    pub instructions: Option<String>,
    /// How long clients may cache `tools/list` and `server/discover`, in milliseconds.
    pub list_ttl_ms: u64,
    /// Who may use which tool and prompt (`None`: every caller, every one).
    pub access: Option<Access>,
    /// Ask 2025-era clients the questions of a paused call by push: `elicitation/create`
    /// (and sampling, roots) requests on the call's SSE stream, answered by POST (off:
    /// the seed's error result for clients that can't answer a round).
    pub legacy_elicitation: bool,
    /// Whether the tool and prompt lists depend on who asks (authentication or
    /// per-caller [`Access`]): they are then marked `cacheScope: "private"`, so a shared
    /// cache never hands one caller's list to another. An [`Access`] implies it.
    pub private_lists: bool,
    /// Resources and prompts served from elsewhere (a gateway's upstreams).
    pub passthrough: Option<Relayed>,
    /// How many notification streams (`subscriptions/listen`, 2025-era GET) may be
    /// open at once; past it a stream is refused with 503.
    pub max_listeners: usize,
    /// Where list changes are told to the open notification streams (give the same
    /// one to whatever changes the lists).
    pub notifier: Notifier,
    /// Where the round a client's dropped push stream left open is noted for its next
    /// identical call, which then resumes it (`None`: nowhere, and that call starts
    /// anew). Give the store the replicas share, so the call resumes on any of them.
    pub notes: Option<Arc<dyn Notes>>,
    /// Whether the deployment keeps threads (off: a tool that pauses ends the call with
    /// an error result saying it can't be resumed).
    pub threads: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            server_info: Implementation::new("hitl", env!("CARGO_PKG_VERSION")),
            instructions: None,
            list_ttl_ms: 60_000,
            access: None,
            legacy_elicitation: false,
            private_lists: false,
            passthrough: None,
            max_listeners: 256,
            notifier: Notifier::default(),
            notes: None,
            threads: true,
        }
    }
}

struct Shared {
    tools: Tools,
    prompts: IndexMap<String, Agent>,
    engine: Engine,
    options: ServerOptions,
    /// `options.server_info` as JSON, stamped on every modern result (shared by them).
    server_info: Arc<serde_json::Value>,
    /// Pushed calls waiting for their clients' answers.
    pushes: Arc<push::Pushes>,
    /// Where a dropped push stream's round is noted ([`ServerOptions::notes`]).
    notes: Option<Arc<dyn Notes>>,
}

/// The MCP endpoint: `POST` JSON-RPC in, JSON out.
#[derive(Clone)]
pub struct McpService {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for McpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpService")
            .field("tools", &self.shared.tools)
            .field("prompts", &self.shared.prompts.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl McpService {
    /// An endpoint serving `agents` as tools (listed in this order) through `engine`.
    pub fn new(agents: Vec<Agent>, engine: Engine, options: ServerOptions) -> Self {
        Self::with_prompts(agents, Vec::new(), engine, options)
    }

    /// An endpoint serving `tools` as tools and `prompts` as prompts: `prompts/get` runs
    /// the agent with the same rounds as a tool call and returns its output as messages.
    pub fn with_prompts(tools: Vec<Agent>, prompts: Vec<Agent>, engine: Engine, options: ServerOptions) -> Self {
        Self::with_tools(Tools::new(tools), prompts, engine, options)
    }

    /// An endpoint serving `tools` (which may change while it runs) and `prompts`.
    pub fn with_tools(tools: Tools, prompts: Vec<Agent>, engine: Engine, options: ServerOptions) -> Self {
        let prompts = prompts.into_iter().map(|a| (a.name.clone(), a)).collect();
        // Names and versions are strings: this serialization cannot fail.
        let server_info = Arc::new(serde_json::to_value(&options.server_info).expect("serverInfo is strings"));
        let pushes = Arc::new(push::Pushes::default());
        let notes = options.notes.clone();
        Self { shared: Arc::new(Shared { tools, prompts, engine, options, server_info, pushes, notes }) }
    }

    /// Tells the clients' notification streams that a list changed.
    pub fn notifier(&self) -> Notifier {
        self.shared.options.notifier.clone()
    }
}

impl McpService {
    /// With push elicitation on several replicas: responses a client sends to this
    /// replica for a question another replica's stream asked go there over `bus`, and
    /// those for this replica's streams come from it. Returns once listening.
    pub async fn listen_for_answers(&self, bus: Arc<dyn PushBus>) -> Result<(), String> {
        self.shared.pushes.listen(bus).await
    }
}

impl Service<http::Request<Bytes>> for McpService {
    type Response = http::Response<McpBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Bytes>) -> Self::Future {
        // The handling's own future, not one that also keeps the request it moved on.
        Box::pin(self.shared.clone().handle(request))
    }
}

/// The HTTP status of a JSON-RPC error on the modern wire.
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        ErrorCode::INVALID_PARAMS
        | ErrorCode::HEADER_MISMATCH
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::PARSE_ERROR
        | ErrorCode::INVALID_REQUEST => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

/// `/healthz`'s readiness: the thread store answers a ping.
pub fn store_ready(store: Arc<dyn hitl_interrupt::ThreadStore>) -> ReadyFn {
    Arc::new(move || {
        let store = store.clone();
        Box::pin(async move {
            store.ping().await.map_err(|e| {
                tracing::warn!(error = %e, "health check: the thread store is unavailable");
                "the thread store is unavailable".to_owned()
            })
        })
    })
}

pub(crate) fn json_response(status: StatusCode, response: &Response) -> http::Response<McpBody> {
    hitl_http::typed_response(status, "application/json", body(response.to_bytes()))
}

pub(crate) fn error_response(era: Era, id: Option<RequestId>, error: ErrorObject) -> http::Response<McpBody> {
    // Legacy clients read errors from the body; only the modern wire defines statuses,
    // except for messages that are not JSON-RPC at all.
    let status = match era {
        Era::Modern => status_of(error.code),
        Era::Legacy if matches!(error.code, ErrorCode::PARSE_ERROR | ErrorCode::INVALID_REQUEST) => {
            StatusCode::BAD_REQUEST
        }
        Era::Legacy => StatusCode::OK,
    };
    json_response(status, &Response::Error { id, error })
}

/// What a client is told when the store failed: the detail (hosts, record ids) goes to
/// the log, not to the client.
pub(crate) fn store_unavailable() -> ErrorObject {
    ErrorObject::internal("Internal error: the thread store is unavailable")
}

/// `value` as JSON; a value that does not serialize is an internal error, never `null`.
pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, ErrorObject> {
    serde_json::to_value(value)
        .map_err(|e| ErrorObject::internal(format!("Internal error: the result could not be encoded: {e}")))
}

pub(crate) fn empty(status: StatusCode) -> http::Response<McpBody> {
    let mut out = http::Response::new(body(Bytes::new()));
    *out.status_mut() = status;
    out
}

#[cfg(test)]
mod tests;
