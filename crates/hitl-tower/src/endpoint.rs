//! Serving one request: the era, the header and `_meta` rules, dispatch, statuses.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use hitl_interrupt::{Agent, Call};
use hitl_protocol::version::{self, Era};
use hitl_protocol::{
    CacheScope, CallToolResponse, CallToolResult, ClientCapabilities, ClientRequest, ContentBlock, DiscoverResult,
    ErrorObject, GetPromptResult, InitializeResult, ListPromptsResult, ListToolsResult, Message, Meta, Prompt,
    PromptArgument, PromptMessage, Response, ResultType, Role, ServerCapabilities, Tool, headers, jsonrpc,
};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde_json::{Map, Value, json};

use crate::{McpBody, PeerAddr, Principal, Shared, empty, error_response, json_response, sse};

/// Methods served on the modern wire.
const MODERN_METHODS: &[&str] = &[
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

fn header_bytes<'a>(headers: &'a HeaderMap) -> impl Fn(&str) -> Option<&'a [u8]> {
    move |name| headers.get(name).map(HeaderValue::as_bytes)
}

/// Does the client take an SSE response?
fn accepts_sse(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT).iter().any(|v| v.to_str().is_ok_and(|v| v.contains("text/event-stream")))
}

/// Who sent a request, from its extensions.
struct Who {
    principal: Option<String>,
    peer: Option<String>,
}

/// What the dispatch of one request needs besides its params.
pub(crate) struct Caller {
    pub(crate) era: Era,
    pub(crate) capabilities: ClientCapabilities,
    pub(crate) principal: Option<String>,
    /// The client's IP address, when the server gave it.
    pub(crate) peer: Option<String>,
}

impl Shared {
    pub(crate) async fn handle(self: Arc<Self>, request: http::Request<Bytes>) -> http::Response<McpBody> {
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
        let who = Who {
            principal: parts.extensions.get::<Principal>().map(|p| p.0.clone()),
            peer: parts.extensions.get::<PeerAddr>().map(|p| p.0.ip().to_string()),
        };
        match era {
            Era::Modern => self.modern(&parts.headers, version_header.unwrap_or_default(), message, who).await,
            Era::Legacy => self.legacy(&parts.headers, message, who).await,
        }
    }

    async fn modern(
        self: Arc<Self>,
        http_headers: &HeaderMap,
        version_header: String,
        message: Message,
        who: Who,
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
        if !MODERN_METHODS.contains(&request.method.as_str()) {
            return fail(ErrorObject::method_not_found(&request.method));
        }
        // `_meta` is read once, here; the typed params below go without it.
        let mut params = request.params;
        let meta: Meta = match params.as_mut().and_then(Value::as_object_mut).and_then(|p| p.remove("_meta")) {
            None => Meta::new(),
            Some(raw) => match serde_json::from_value(raw) {
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
        let typed = match ClientRequest::parse(&request.method, params) {
            Ok(t) => t,
            Err(e) => return fail(e),
        };
        if let ClientRequest::CallTool(params) = &typed
            && let Some(agent) = self.tools.get(&params.name)
            && let Err(e) =
                headers::check_params(header_bytes(http_headers), &agent.input_schema, params.arguments.as_ref())
        {
            return fail(e);
        }
        let caller = Caller {
            era: Era::Modern,
            capabilities: modern.client_capabilities,
            principal: who.principal,
            peer: who.peer,
        };
        let runs_agent = matches!(typed, ClientRequest::CallTool(_) | ClientRequest::GetPrompt(_));
        if runs_agent
            && accepts_sse(http_headers)
            && let Some(token) = meta.progress_token().cloned()
        {
            return sse::respond(self, id, typed, caller, token);
        }
        let result = self.dispatch(typed, caller, None, None).await;
        self.respond(id, Era::Modern, result)
    }

    async fn legacy(self: Arc<Self>, http_headers: &HeaderMap, message: Message, who: Who) -> http::Response<McpBody> {
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
        let caller = Caller {
            era: Era::Legacy,
            capabilities: ClientCapabilities::default(),
            principal: who.principal,
            peer: who.peer,
        };
        let runs_agent = matches!(typed, ClientRequest::CallTool(_) | ClientRequest::GetPrompt(_));
        if runs_agent
            && accepts_sse(http_headers)
            && let Some(token) = typed.meta().progress_token().cloned()
        {
            return sse::respond(self, id, typed, caller, token);
        }
        let initialize = matches!(typed, ClientRequest::Initialize(_));
        let result = self.dispatch(typed, caller, None, None).await;
        let ok = result.is_ok();
        let mut response = self.respond(id, Era::Legacy, result);
        if initialize && ok {
            // Legacy clients expect a session: hitl keeps no per-session state, so the id
            // only names the client's session and every request is served without it.
            let session = uuid::Uuid::new_v4().simple().to_string();
            if let Ok(value) = HeaderValue::from_str(&session) {
                response.headers_mut().insert("mcp-session-id", value);
            }
        }
        response
    }

    /// The JSON-RPC response of a dispatched request, as HTTP.
    fn respond(
        &self,
        id: hitl_protocol::RequestId,
        era: Era,
        result: Result<Value, ErrorObject>,
    ) -> http::Response<McpBody> {
        match result {
            Ok(result) => json_response(StatusCode::OK, &Response::Result { id, result: self.stamp(result, era) }),
            Err(error) => error_response(era, Some(id), error),
        }
    }

    /// The response message of a dispatched request (for SSE streams).
    pub(crate) fn message(
        &self,
        id: hitl_protocol::RequestId,
        era: Era,
        result: Result<Value, ErrorObject>,
    ) -> Response {
        match result {
            Ok(result) => Response::Result { id, result: self.stamp(result, era) },
            Err(error) => Response::Error { id: Some(id), error },
        }
    }

    /// Serves a typed request.
    pub(crate) async fn dispatch(
        &self,
        request: ClientRequest,
        caller: Caller,
        progress: Option<hitl_graph::ProgressFn>,
        cancel: Option<Arc<AtomicBool>>,
    ) -> Result<Value, ErrorObject> {
        let era = caller.era;
        // The engine's view of a tools/call or prompts/get; each request makes one.
        let call = move |arguments: Option<Map<String, Value>>, input_responses, request_state, context, prompt| Call {
            arguments: arguments.unwrap_or_default(),
            input_responses,
            request_state,
            context,
            capabilities: caller.capabilities,
            principal: caller.principal,
            peer: caller.peer,
            era,
            prompt,
            progress,
            cancel,
        };
        match (request, era) {
            (ClientRequest::Discover(_), Era::Modern) => Ok(self.discover()),
            (ClientRequest::ListTools(_), _) => Ok(self.list_tools(era)),
            (ClientRequest::ListPrompts(_), _) => Ok(self.list_prompts(era)),
            (ClientRequest::Complete(_), _) => Ok(json!({"completion": {"values": [], "total": 0, "hasMore": false}})),
            // hitl serves no resources: the lists are empty (and cacheable), reads fail.
            (ClientRequest::ListResources(_), _) => Ok(self.empty_list("resources", era)),
            (ClientRequest::ListResourceTemplates(_), _) => Ok(self.empty_list("resourceTemplates", era)),
            (ClientRequest::ReadResource(params), _) => {
                Err(ErrorObject::invalid_params(format!("Resource not found: {}", params.uri))
                    .with_data(json!({ "uri": params.uri })))
            }
            (ClientRequest::CallTool(params), _) => {
                let Some(agent) = self.tools.get(&params.name) else {
                    return Err(ErrorObject::invalid_params(format!("Unknown tool: {}", params.name)));
                };
                let call = call(params.arguments, params.input_responses, params.request_state, params.context, false);
                self.run(agent, call).await.map(|response| match response {
                    CallToolResponse::Complete(r) => serde_json::to_value(r).unwrap_or_default(),
                    CallToolResponse::InputRequired(r) => serde_json::to_value(r).unwrap_or_default(),
                })
            }
            (ClientRequest::GetPrompt(params), _) => {
                let Some(agent) = self.prompts.get(&params.name) else {
                    return Err(ErrorObject::invalid_params(format!("Unknown prompt: {}", params.name)));
                };
                let call = call(params.arguments, params.input_responses, params.request_state, None, true);
                match self.run(agent, call).await? {
                    CallToolResponse::InputRequired(r) => Ok(serde_json::to_value(r).unwrap_or_default()),
                    CallToolResponse::Complete(r) => {
                        prompt_result(agent, r).map(|p| serde_json::to_value(p).unwrap_or_default())
                    }
                }
            }
            (ClientRequest::Initialize(params), Era::Legacy) => {
                let result = InitializeResult {
                    protocol_version: version::negotiate_legacy(&params.protocol_version).to_owned(),
                    capabilities: self.capabilities(),
                    server_info: self.options.server_info.clone(),
                    instructions: self.options.instructions.clone(),
                };
                Ok(serde_json::to_value(result).unwrap_or_default())
            }
            (ClientRequest::Ping(_) | ClientRequest::SetLevel(_), Era::Legacy) => Ok(Value::Object(Map::new())),
            (other, _) => Err(ErrorObject::method_not_found(other.method())),
        }
    }

    async fn run(&self, agent: &Agent, call: Call) -> Result<CallToolResponse, ErrorObject> {
        match self.engine.call(agent, call).await {
            Ok(answer) => answer,
            Err(e) => {
                // The detail (hosts, record ids) goes to the log, not to the client.
                tracing::error!(error = %e, agent = %agent.name, "call failed");
                Err(ErrorObject::internal("Internal error: the thread store is unavailable"))
            }
        }
    }

    /// Adds `serverInfo` to modern results; strips `resultType` from legacy ones.
    fn stamp(&self, mut result: Value, era: Era) -> Value {
        if let Value::Object(map) = &mut result {
            match era {
                Era::Modern => {
                    map.entry("resultType").or_insert_with(|| Value::from("complete"));
                    let meta = map.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
                    if let Value::Object(meta) = meta {
                        meta.insert(hitl_protocol::meta_keys::SERVER_INFO.into(), self.server_info.clone());
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
        let mut caps = ServerCapabilities { tools: Some(Map::new()), ..ServerCapabilities::default() };
        if !self.prompts.is_empty() {
            caps.prompts = Some(Map::new());
        }
        caps.other.insert("completions".into(), json!({}));
        caps
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
            .tools
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

    fn empty_list(&self, key: &str, era: Era) -> Value {
        let mut result = json!({ key: [] });
        if era == Era::Modern {
            result["ttlMs"] = json!(self.options.list_ttl_ms);
            result["cacheScope"] = json!("public");
        }
        result
    }

    fn list_prompts(&self, era: Era) -> Value {
        let prompts = self
            .prompts
            .values()
            .map(|a| {
                let required: Vec<&str> = a.input_schema["required"]
                    .as_array()
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let arguments: Vec<PromptArgument> = a.input_schema["properties"]
                    .as_object()
                    .map(|props| {
                        props
                            .iter()
                            .map(|(name, schema)| PromptArgument {
                                name: name.clone(),
                                description: schema["description"].as_str().map(str::to_owned),
                                required: Some(required.contains(&name.as_str())),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                Prompt {
                    name: a.name.clone(),
                    title: None,
                    description: Some(a.description.clone()),
                    arguments: (!arguments.is_empty()).then_some(arguments),
                }
            })
            .collect();
        let modern = era == Era::Modern;
        let result = ListPromptsResult {
            result_type: modern.then_some(ResultType::Complete),
            prompts,
            next_cursor: None,
            ttl_ms: modern.then_some(self.options.list_ttl_ms),
            cache_scope: modern.then_some(CacheScope::Public),
            meta: None,
        };
        serde_json::to_value(result).unwrap_or_default()
    }
}

/// An agent's final output as prompt messages: its `messages` when it returns some
/// (`[{role, content}]`, content a block or a string), else one user message with the
/// output as JSON text. An error result becomes a JSON-RPC error: prompts have no
/// error results.
fn prompt_result(agent: &Agent, result: CallToolResult) -> Result<GetPromptResult, ErrorObject> {
    let text = result.content.iter().filter_map(ContentBlock::as_text).collect::<Vec<_>>().join("\n");
    if result.is_error == Some(true) {
        return Err(ErrorObject::internal(text));
    }
    let messages = match result.structured_content.as_ref().and_then(|o| o.get("messages")) {
        Some(Value::Array(list)) => {
            list.iter()
                .map(|m| {
                    let role = if m["role"] == "assistant" { Role::Assistant } else { Role::User };
                    let content = match &m["content"] {
                        Value::String(s) => ContentBlock::text(s.clone()),
                        other => serde_json::from_value(other.clone())
                            .unwrap_or_else(|_| ContentBlock::text(other.to_string())),
                    };
                    PromptMessage { role, content }
                })
                .collect()
        }
        _ => vec![PromptMessage { role: Role::User, content: ContentBlock::text(text) }],
    };
    Ok(GetPromptResult {
        result_type: Some(ResultType::Complete),
        description: Some(agent.description.clone()),
        messages,
        meta: None,
    })
}
