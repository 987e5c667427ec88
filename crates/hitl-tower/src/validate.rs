//! Request validation, without I/O: the era, the header and `_meta` rules of the seed
//! in order, and the JSON-RPC envelope, turned into a typed request and its caller, or
//! the HTTP response that refuses it.

use std::sync::Arc;

use bytes::Bytes;
use hitl_graph::Agent;
use hitl_protocol::version::{self, Era};
use hitl_protocol::{
    CallToolParams, ClientCapabilities, ClientRequest, ErrorObject, InputResponses, Message, Meta, RequestId,
    RequestMeta, headers, jsonrpc,
};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::{Access, Groups, McpBody, PeerAddr, Principal, empty, error_response};

/// The media type a body must have (any case; parameters may follow).
const JSON: &str = "application/json";

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
    "subscriptions/listen",
    // The Tasks extension.
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
];

fn header_bytes<'a>(headers: &'a HeaderMap) -> impl Fn(&str) -> Option<&'a [u8]> {
    move |name| headers.get(name).map(HeaderValue::as_bytes)
}

/// Does the client take an SSE response?
fn accepts_sse(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT).iter().any(|v| v.to_str().is_ok_and(|v| v.contains("text/event-stream")))
}

/// What the dispatch of one request needs besides its params.
#[derive(Clone)]
pub(crate) struct Caller {
    pub(crate) era: Era,
    pub(crate) capabilities: Arc<ClientCapabilities>,
    pub(crate) principal: Option<String>,
    /// The caller's groups ([`crate::Groups`]).
    pub(crate) groups: Vec<String>,
    /// The client's IP address, when the server gave it.
    pub(crate) peer: Option<String>,
    /// A 2025-era client's session with hitl, once checked as one hitl issued.
    pub(crate) session: Option<String>,
}

/// A request that passed every rule.
pub(crate) struct Valid {
    pub(crate) id: RequestId,
    pub(crate) request: ClientRequest,
    pub(crate) caller: Caller,
    /// The progress token, when the request runs an agent and the client takes SSE:
    /// the response is then a stream.
    pub(crate) stream: Option<Value>,
    /// A legacy client's `Mcp-Session-Id`, and whether it takes an SSE response.
    pub(crate) session: Option<String>,
    pub(crate) takes_sse: bool,
}

/// What a POST carried.
#[allow(
    clippy::large_enum_variant,
    reason = "read once per request and taken apart at once: a box would be an allocation more"
)]
pub(crate) enum Incoming {
    /// A request to serve.
    Request(Valid),
    /// A legacy client's response to a request the server sent it, and who sent it.
    Answer(RequestId, Result<Value, ErrorObject>, Option<String>),
}

/// The response that refuses a request (boxed: it is the rare path).
pub(crate) type Refused = Box<http::Response<McpBody>>;

/// Who sent a request, from its extensions.
struct Who {
    principal: Option<String>,
    groups: Vec<String>,
    peer: Option<String>,
}

/// Checks `request` against the rules of its era. `Err` is the response that refuses
/// it (or acknowledges a notification).
pub(crate) fn validate(
    tools: &IndexMap<String, Agent>,
    access: Option<&Access>,
    request: &http::Request<Bytes>,
) -> Result<Incoming, Refused> {
    if request.method() != Method::POST {
        let mut out = empty(StatusCode::METHOD_NOT_ALLOWED);
        out.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
        return Err(Box::new(out));
    }
    let headers = request.headers();
    let version_header = match headers.get(headers::PROTOCOL_VERSION) {
        None => None,
        Some(raw) => match headers::decode_value(raw.as_bytes()) {
            Some(v) => Some(v),
            None => {
                let error =
                    ErrorObject::header_mismatch("Header mismatch: MCP-Protocol-Version header value is not valid");
                return Err(Box::new(error_response(Era::Modern, None, error)));
            }
        },
    };
    let era = version_header.as_deref().map_or(Era::Legacy, version::era_of);
    if let Some(content_type) = headers.get(header::CONTENT_TYPE)
        && !content_type
            .to_str()
            .is_ok_and(|v| v.trim_start().get(..JSON.len()).is_some_and(|start| start.eq_ignore_ascii_case(JSON)))
    {
        let mut out = error_response(era, None, ErrorObject::invalid_request("Content-Type must be application/json"));
        *out.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
        return Err(Box::new(out));
    }
    let who = Who {
        principal: request.extensions().get::<Principal>().map(|p| p.0.clone()),
        groups: request.extensions().get::<Groups>().map(|g| g.0.clone()).unwrap_or_default(),
        peer: request.extensions().get::<PeerAddr>().map(|p| address_text(p.0.ip())),
    };
    // Over stdio there are no HTTP headers to hold the body's method, name and
    // arguments: only the body says them.
    let headerless = request.extensions().get::<crate::stdio::FromStdio>().is_some();
    let tree = || {
        jsonrpc::parse(request.body()).map_err(|rejection| Box::new(error_response(era, rejection.id, rejection.error)))
    };
    match era {
        Era::Modern => {
            // A `tools/call` (the round's request) read straight into its types;
            // anything else, or one that does not read so, as a JSON tree (whose errors
            // are the rules').
            let body = match fast_call(request.body()) {
                Some(call) => Body::Call(call),
                None => Body::Tree(tree()?),
            };
            modern(tools, access, headers, version_header.as_deref().unwrap_or_default(), body, who, headerless)
                .map(Incoming::Request)
        }
        Era::Legacy => legacy(headers, tree()?, who),
    }
}

/// `ip` as text, allocated once (`to_string` grows its buffer as the parts are written).
fn address_text(ip: std::net::IpAddr) -> String {
    use std::fmt::Write as _;
    // The longest IPv6 address as text.
    let mut text = String::with_capacity(45);
    let _ = write!(text, "{ip}");
    text
}

/// A request's body as read (on the stack, taken apart at once: not boxed).
#[allow(
    clippy::large_enum_variant,
    reason = "read once per request and taken apart at once: a box would be an allocation more"
)]
enum Body<'a> {
    /// A JSON-RPC message, its params a JSON tree.
    Tree(Message),
    /// A `tools/call` request read straight into its params.
    Call(FastCall<'a>),
}

/// A `tools/call` request read straight into its types, its `_meta` into the keys the
/// server acts on (borrowed from the body).
struct FastCall<'a> {
    id: RequestId,
    params: CallToolParams,
    meta: RequestMeta<'a>,
}

/// The params of a `tools/call` as [`CallToolParams`] reads them, but for `_meta`:
/// no map of it is built.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CallParams<'a> {
    name: String,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    #[serde(default)]
    input_responses: Option<InputResponses>,
    #[serde(default)]
    request_state: Option<String>,
    #[serde(default)]
    context: Option<Value>,
    #[serde(rename = "_meta", default, borrow)]
    meta: RequestMeta<'a>,
}

/// `bytes` as a `tools/call` request whose params read straight into their type, or
/// `None` (anything else, or anything wrong: the tree's reading says what).
fn fast_call(bytes: &[u8]) -> Option<FastCall<'_>> {
    // In one pass, as clients write a request; else its envelope first, then its params.
    let (id, params) = jsonrpc::parse_request_of::<CallParams<'_>>(bytes, "tools/call").or_else(|| {
        let request = jsonrpc::parse_borrowed(bytes)?;
        if request.method != "tools/call" {
            return None;
        }
        // An object only: a struct also reads from an array, which params of a request
        // by name must not be (the tree's reading says so).
        let params = request.params.filter(|p| p.get().starts_with('{'))?;
        Some((request.id, serde_json::from_str(params.get()).ok()?))
    })?;
    let CallParams { name, arguments, input_responses, request_state, context, meta } = params;
    let params = CallToolParams { name, arguments, input_responses, request_state, context, meta: Meta::new() };
    Some(FastCall { id, params, meta })
}

fn modern(
    tools: &IndexMap<String, Agent>,
    access: Option<&Access>,
    http_headers: &HeaderMap,
    version_header: &str,
    body: Body<'_>,
    who: Who,
    headerless: bool,
) -> Result<Valid, Refused> {
    let message = match body {
        Body::Tree(message) => message,
        Body::Call(call) => {
            let FastCall { id, params, mut meta } = call;
            let fail = |error: ErrorObject| Box::new(error_response(Era::Modern, Some(id.clone()), error));
            if !headerless {
                headers::check_method_and_named(header_bytes(http_headers), "tools/call", Some(&params.name))
                    .map_err(fail)?;
            }
            let (version, capabilities) = meta.require_modern().map_err(fail)?;
            modern_version(&version, version_header).map_err(fail)?;
            let typed = ClientRequest::CallTool(params);
            let stream = stream_token(&typed, http_headers, meta.progress_token());
            return checked(tools, access, http_headers, (id, typed, capabilities, stream), who, headerless);
        }
    };
    let request = match message {
        Message::Request(r) => r,
        Message::Notification(_) => return Err(Box::new(empty(StatusCode::ACCEPTED))),
        Message::Response { id, .. } | Message::Error { id: Some(id), .. } => {
            let error = ErrorObject::invalid_request("the 2026-07-28 transport takes no responses from clients");
            return Err(Box::new(error_response(Era::Modern, Some(id), error)));
        }
        Message::Error { id: None, .. } => {
            let error = ErrorObject::invalid_request("the 2026-07-28 transport takes no responses from clients");
            return Err(Box::new(error_response(Era::Modern, None, error)));
        }
    };
    let id = request.id.clone();
    let fail = |error: ErrorObject| Box::new(error_response(Era::Modern, Some(id.clone()), error));
    if !headerless {
        headers::check_method_and_name(header_bytes(http_headers), &request.method, request.params.as_ref())
            .map_err(fail)?;
    }
    if !MODERN_METHODS.contains(&request.method.as_str()) {
        return Err(fail(ErrorObject::method_not_found(&request.method)));
    }
    // `_meta` is read once, here; the typed params below go without it.
    let mut params = request.params;
    let meta: Meta = match params.as_mut().and_then(Value::as_object_mut).and_then(|p| p.remove("_meta")) {
        None => Meta::new(),
        Some(raw) => serde_json::from_value(raw)
            .map_err(|_| fail(ErrorObject::invalid_params("Invalid params: _meta must be an object")))?,
    };
    let modern = meta.require_modern().map_err(fail)?;
    modern_version(&modern.protocol_version, version_header).map_err(fail)?;
    let typed = ClientRequest::parse(&request.method, params).map_err(fail)?;
    let stream = stream_token(&typed, http_headers, meta.progress_token());
    let capabilities = Arc::new(modern.client_capabilities);
    checked(tools, access, http_headers, (id, typed, capabilities, stream), who, headerless)
}

/// The protocol version `_meta` says, against the `MCP-Protocol-Version` header and the
/// revision served.
fn modern_version(protocol_version: &str, version_header: &str) -> Result<(), ErrorObject> {
    headers::check_version(version_header, protocol_version)?;
    if protocol_version != version::MODERN {
        return Err(ErrorObject::unsupported_version(version::SUPPORTED, protocol_version));
    }
    Ok(())
}

/// The checks of a 2026-07-28 request after its typing (the `Mcp-Param-*` headers), and
/// what it becomes.
fn checked(
    tools: &IndexMap<String, Agent>,
    access: Option<&Access>,
    http_headers: &HeaderMap,
    (id, typed, capabilities, stream): (RequestId, ClientRequest, Arc<ClientCapabilities>, Option<Value>),
    who: Who,
    headerless: bool,
) -> Result<Valid, Refused> {
    let fail = |error: ErrorObject| Box::new(error_response(Era::Modern, Some(id.clone()), error));
    if let ClientRequest::CallTool(params) = &typed
        && !headerless
        && let Some(agent) = tools.get(&params.name)
        && allowed(access, &params.name, who.principal.as_deref(), &who.groups)
    {
        headers::check_params(header_bytes(http_headers), &agent.input_schema, params.arguments.as_ref())
            .map_err(fail)?;
    }
    let caller = Caller {
        era: Era::Modern,
        capabilities,
        principal: who.principal,
        groups: who.groups,
        peer: who.peer,
        session: None,
    };
    Ok(Valid { id, request: typed, caller, stream, session: None, takes_sse: accepts_sse(http_headers) })
}

fn legacy(http_headers: &HeaderMap, message: Message, who: Who) -> Result<Incoming, Refused> {
    let request = match message {
        Message::Request(r) => r,
        Message::Response { id, result } => return Ok(Incoming::Answer(id, Ok(result), who.principal)),
        Message::Error { id: Some(id), error } => return Ok(Incoming::Answer(id, Err(error), who.principal)),
        // Notifications are accepted and need no body.
        _ => return Err(Box::new(empty(StatusCode::ACCEPTED))),
    };
    let id = request.id.clone();
    let typed = ClientRequest::parse(&request.method, request.params)
        .map_err(|e| Box::new(error_response(Era::Legacy, Some(id.clone()), e)))?;
    let caller = Caller {
        era: Era::Legacy,
        capabilities: Arc::default(),
        principal: who.principal,
        groups: who.groups,
        peer: who.peer,
        session: None,
    };
    let stream = stream_token(&typed, http_headers, typed.meta().progress_token());
    let session = http_headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let takes_sse = accepts_sse(http_headers);
    Ok(Incoming::Request(Valid { id, request: typed, caller, stream, session, takes_sse }))
}

/// Whether the caller may use tool or prompt `name`.
pub(crate) fn allowed(access: Option<&Access>, name: &str, principal: Option<&str>, groups: &[String]) -> bool {
    access.is_none_or(|access| (access.0)(name, principal, groups))
}

/// The progress token (`token`) of a request that runs an agent, from a client that
/// takes SSE.
fn stream_token(request: &ClientRequest, http_headers: &HeaderMap, token: Option<&Value>) -> Option<Value> {
    let runs_agent = matches!(request, ClientRequest::CallTool(_) | ClientRequest::GetPrompt(_));
    (runs_agent && accepts_sse(http_headers)).then(|| token.cloned()).flatten()
}
