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

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use hitl_interrupt::{Agent, Call, Engine};
use hitl_protocol::version::{self, Era};
use hitl_protocol::{
    CacheScope, CallToolParams, CallToolResponse, ClientCapabilities, ClientRequest, DiscoverResult, ErrorCode,
    ErrorObject, Implementation, InitializeResult, ListToolsResult, Message, Meta, RequestId, Response, ResultType,
    ServerCapabilities, Tool, headers, jsonrpc,
};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use indexmap::IndexMap;
use serde_json::{Map, Value};
use tower::Service;

/// The response body of the endpoint.
pub type McpBody = UnsyncBoxBody<Bytes, Infallible>;

/// Who is calling, as an auth layer established it: insert it into the request's
/// extensions. Paused calls are bound to it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(pub String);

/// Server-wide settings of the endpoint.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// `serverInfo`: name and version.
    pub server_info: Implementation,
    /// `instructions` of `server/discover` and `initialize`.
    pub instructions: Option<String>,
    /// How long clients may cache `tools/list` and `server/discover`, in milliseconds.
    pub list_ttl_ms: u64,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            server_info: Implementation::new("hitl", env!("CARGO_PKG_VERSION")),
            instructions: None,
            list_ttl_ms: 60_000,
        }
    }
}

struct Shared {
    agents: IndexMap<String, Agent>,
    engine: Engine,
    options: ServerOptions,
}

/// The MCP endpoint: `POST` JSON-RPC in, JSON out.
#[derive(Clone)]
pub struct McpService {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for McpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpService").field("agents", &self.shared.agents.keys().collect::<Vec<_>>()).finish()
    }
}

impl McpService {
    /// An endpoint serving `agents` (listed in this order) through `engine`.
    pub fn new(agents: Vec<Agent>, engine: Engine, options: ServerOptions) -> Self {
        let agents = agents.into_iter().map(|a| (a.name.clone(), a)).collect();
        Self { shared: Arc::new(Shared { agents, engine, options }) }
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
        let shared = self.shared.clone();
        Box::pin(async move { Ok(shared.handle(request).await) })
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

fn body(bytes: impl Into<Bytes>) -> McpBody {
    Full::new(bytes.into()).boxed_unsync()
}

fn json_response(status: StatusCode, response: &Response) -> http::Response<McpBody> {
    let mut out = http::Response::new(body(response.to_bytes()));
    *out.status_mut() = status;
    out.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    out
}

fn error_response(era: Era, id: Option<RequestId>, error: ErrorObject) -> http::Response<McpBody> {
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

fn empty(status: StatusCode) -> http::Response<McpBody> {
    let mut out = http::Response::new(body(Bytes::new()));
    *out.status_mut() = status;
    out
}

fn header_bytes<'a>(headers: &'a HeaderMap) -> impl Fn(&str) -> Option<&'a [u8]> {
    move |name| headers.get(name).map(HeaderValue::as_bytes)
}

impl Shared {
    async fn handle(&self, request: http::Request<Bytes>) -> http::Response<McpBody> {
        let (parts, bytes) = request.into_parts();
        if parts.method != Method::POST {
            let mut out = empty(StatusCode::METHOD_NOT_ALLOWED);
            out.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
            return out;
        }
        let version_header = match parts.headers.get(headers::PROTOCOL_VERSION) {
            None => None,
            Some(raw) => match headers::decode_value(raw.as_bytes()) {
                Some(v) => Some(v),
                None => {
                    let error =
                        ErrorObject::header_mismatch("Header mismatch: MCP-Protocol-Version header value is not valid");
                    return error_response(Era::Modern, None, error);
                }
            },
        };
        let era = version_header.as_deref().map_or(Era::Legacy, version::era_of);
        if let Some(content_type) = parts.headers.get(header::CONTENT_TYPE)
            && !content_type.to_str().is_ok_and(|v| v.trim_start().to_ascii_lowercase().starts_with("application/json"))
        {
            let mut out =
                error_response(era, None, ErrorObject::invalid_request("Content-Type must be application/json"));
            *out.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
            return out;
        }
        let message = match jsonrpc::parse(&bytes) {
            Ok(m) => m,
            Err(rejection) => return error_response(era, rejection.id, rejection.error),
        };
        let principal = parts.extensions.get::<Principal>().map(|p| p.0.clone());
        match era {
            Era::Modern => self.modern(&parts.headers, version_header.unwrap_or_default(), message, principal).await,
            Era::Legacy => self.legacy(message, principal).await,
        }
    }

    async fn modern(
        &self,
        http_headers: &HeaderMap,
        version_header: String,
        message: Message,
        principal: Option<String>,
    ) -> http::Response<McpBody> {
        let request = match message {
            Message::Request(r) => r,
            Message::Notification(_) => return empty(StatusCode::ACCEPTED),
            Message::Response { id, .. } | Message::Error { id: Some(id), .. } => {
                let error = ErrorObject::invalid_request("the 2026-07-28 transport takes no responses from clients");
                return error_response(Era::Modern, Some(id), error);
            }
            Message::Error { id: None, .. } => {
                let error = ErrorObject::invalid_request("the 2026-07-28 transport takes no responses from clients");
                return error_response(Era::Modern, None, error);
            }
        };
        let id = request.id.clone();
        let fail = |error: ErrorObject| error_response(Era::Modern, Some(id.clone()), error);
        if let Err(e) =
            headers::check_method_and_name(header_bytes(http_headers), &request.method, request.params.as_ref())
        {
            return fail(e);
        }
        if !matches!(request.method.as_str(), "server/discover" | "tools/list" | "tools/call") {
            return fail(ErrorObject::method_not_found(&request.method));
        }
        let meta: Meta = match request.params.as_ref().and_then(|p| p.get("_meta")) {
            None => Meta::new(),
            Some(raw) => match serde_json::from_value(raw.clone()) {
                Ok(meta) => meta,
                Err(_) => return fail(ErrorObject::invalid_params("Invalid params: _meta must be an object")),
            },
        };
        let modern = match meta.require_modern() {
            Ok(m) => m,
            Err(e) => return fail(e),
        };
        if let Err(e) = headers::check_version(&version_header, &modern.protocol_version) {
            return fail(e);
        }
        if modern.protocol_version != version::MODERN {
            return fail(ErrorObject::unsupported_version(version::SUPPORTED, &modern.protocol_version));
        }
        let typed = match ClientRequest::parse(&request.method, request.params) {
            Ok(t) => t,
            Err(e) => return fail(e),
        };
        let result = match typed {
            ClientRequest::Discover(_) => Ok(self.discover()),
            ClientRequest::ListTools(_) => Ok(self.list_tools(Era::Modern)),
            ClientRequest::CallTool(params) => {
                self.call_tool(params, modern.client_capabilities, principal, Era::Modern).await
            }
            other => Err(ErrorObject::method_not_found(other.method())),
        };
        match result {
            Ok(result) => {
                json_response(StatusCode::OK, &Response::Result { id, result: self.stamp(result, Era::Modern) })
            }
            Err(error) => fail(error),
        }
    }

    async fn legacy(&self, message: Message, principal: Option<String>) -> http::Response<McpBody> {
        let request = match message {
            Message::Request(r) => r,
            // Notifications and answers to server requests are accepted and need no body.
            _ => return empty(StatusCode::ACCEPTED),
        };
        let id = request.id.clone();
        let typed = match ClientRequest::parse(&request.method, request.params) {
            Ok(t) => t,
            Err(e) => return error_response(Era::Legacy, Some(id), e),
        };
        let result = match typed {
            ClientRequest::Initialize(params) => {
                let result = InitializeResult {
                    protocol_version: version::negotiate_legacy(&params.protocol_version).to_owned(),
                    capabilities: self.capabilities(),
                    server_info: self.options.server_info.clone(),
                    instructions: self.options.instructions.clone(),
                };
                Ok(serde_json::to_value(result).unwrap_or_default())
            }
            ClientRequest::Ping(_) => Ok(Value::Object(Map::new())),
            ClientRequest::ListTools(_) => Ok(self.list_tools(Era::Legacy)),
            ClientRequest::CallTool(params) => {
                self.call_tool(params, ClientCapabilities::default(), principal, Era::Legacy).await
            }
            other => Err(ErrorObject::method_not_found(other.method())),
        };
        match result {
            Ok(result) => {
                json_response(StatusCode::OK, &Response::Result { id, result: self.stamp(result, Era::Legacy) })
            }
            Err(error) => error_response(Era::Legacy, Some(id), error),
        }
    }

    /// Adds `serverInfo` to modern results; strips `resultType` from legacy ones.
    fn stamp(&self, mut result: Value, era: Era) -> Value {
        if let Value::Object(map) = &mut result {
            match era {
                Era::Modern => {
                    map.entry("resultType").or_insert_with(|| Value::from("complete"));
                    let info = serde_json::to_value(&self.options.server_info).unwrap_or_default();
                    let meta = map.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
                    if let Value::Object(meta) = meta {
                        meta.insert(hitl_protocol::meta_keys::SERVER_INFO.into(), info);
                    }
                }
                Era::Legacy => {
                    map.remove("resultType");
                }
            }
        }
        result
    }

    fn capabilities(&self) -> ServerCapabilities {
        ServerCapabilities { tools: Some(Map::new()), ..ServerCapabilities::default() }
    }

    fn discover(&self) -> Value {
        let result = DiscoverResult {
            result_type: ResultType::Complete,
            supported_versions: version::SUPPORTED.iter().map(|v| (*v).to_owned()).collect(),
            capabilities: self.capabilities(),
            instructions: self.options.instructions.clone(),
            ttl_ms: self.options.list_ttl_ms,
            cache_scope: CacheScope::Public,
            meta: None,
        };
        serde_json::to_value(result).unwrap_or_default()
    }

    fn list_tools(&self, era: Era) -> Value {
        let tools = self
            .agents
            .values()
            .map(|a| Tool {
                name: a.name.clone(),
                title: None,
                description: Some(a.description.clone()),
                input_schema: a.input_schema.clone(),
                output_schema: None,
                other: Map::new(),
            })
            .collect();
        let modern = era == Era::Modern;
        let result = ListToolsResult {
            result_type: modern.then_some(ResultType::Complete),
            tools,
            next_cursor: None,
            ttl_ms: modern.then_some(self.options.list_ttl_ms),
            cache_scope: modern.then_some(CacheScope::Public),
            meta: None,
        };
        serde_json::to_value(result).unwrap_or_default()
    }

    async fn call_tool(
        &self,
        params: CallToolParams,
        capabilities: ClientCapabilities,
        principal: Option<String>,
        era: Era,
    ) -> Result<Value, ErrorObject> {
        let Some(agent) = self.agents.get(&params.name) else {
            return Err(ErrorObject::invalid_params(format!("Unknown tool: {}", params.name)));
        };
        let call = Call {
            arguments: params.arguments.unwrap_or_default(),
            input_responses: params.input_responses,
            request_state: params.request_state,
            context: params.context,
            capabilities,
            principal,
            era,
        };
        match self.engine.call(agent, call).await {
            Ok(Ok(response)) => Ok(match response {
                CallToolResponse::Complete(r) => serde_json::to_value(r),
                CallToolResponse::InputRequired(r) => serde_json::to_value(r),
            }
            .unwrap_or_default()),
            Ok(Err(error)) => Err(error),
            Err(e) => {
                tracing::error!(error = %e, tool = %agent.name, "tools/call failed");
                Err(ErrorObject::internal(format!("Internal error: {e}")))
            }
        }
    }
}

#[cfg(test)]
mod tests;
