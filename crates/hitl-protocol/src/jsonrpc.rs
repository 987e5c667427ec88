//! The JSON-RPC 2.0 envelope, parsed by explicit rules rather than an untagged enum,
//! so that every malformed message gets an error that says what is wrong with it.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A JSON-RPC request id: a string or an integer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// A JSON-RPC error code. The codes hitl emits are the associated constants, assigned
/// here and nowhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ErrorCode(pub i64);

impl ErrorCode {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: Self = Self(-32700);
    /// The JSON sent is not a valid request object.
    pub const INVALID_REQUEST: Self = Self(-32600);
    /// The method does not exist or is not available.
    pub const METHOD_NOT_FOUND: Self = Self(-32601);
    /// Invalid method parameters.
    pub const INVALID_PARAMS: Self = Self(-32602);
    /// Internal error.
    pub const INTERNAL_ERROR: Self = Self(-32603);
    /// 2026-07-28: an `MCP-*` header is missing or does not match the body.
    pub const HEADER_MISMATCH: Self = Self(-32020);
    /// 2026-07-28: the request needs a client capability the client did not declare.
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: Self = Self(-32021);
    /// 2026-07-28: the protocol version is not one the server supports.
    pub const UNSUPPORTED_PROTOCOL_VERSION: Self = Self(-32022);
    /// 2025-11-25 only: the request needs URL-mode elicitation first.
    pub const URL_ELICITATION_REQUIRED: Self = Self(-32042);
    /// 2025-11-25 and earlier: a resource not found (2026-07-28 uses `-32602`; hitl
    /// only reads it from upstreams, never sends it).
    pub const RESOURCE_NOT_FOUND_LEGACY: Self = Self(-32002);
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The `error` member of a JSON-RPC error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The error code.
    pub code: ErrorCode,
    /// A short description of the error.
    pub message: String,
    /// Structured details, when the code defines them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error without `data`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }

    /// Adds `data`.
    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// `-32700`.
    pub fn parse_error(detail: impl fmt::Display) -> Self {
        Self::new(ErrorCode::PARSE_ERROR, format!("Parse error: {detail}"))
    }

    /// `-32600`.
    pub fn invalid_request(detail: impl fmt::Display) -> Self {
        Self::new(ErrorCode::INVALID_REQUEST, format!("Invalid request: {detail}"))
    }

    /// `-32601` for `method`.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(ErrorCode::METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }

    /// `-32602` with a message that says what is wrong.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::INVALID_PARAMS, message)
    }

    /// `-32603`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::INTERNAL_ERROR, message)
    }

    /// `-32020`, which carries no `data`.
    pub fn header_mismatch(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::HEADER_MISMATCH, message)
    }

    /// `-32021` with `data.requiredCapabilities`.
    pub fn missing_capability(message: impl Into<String>, required: &crate::ClientCapabilities) -> Self {
        let required = serde_json::to_value(required).unwrap_or_default();
        Self::new(ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY, message)
            .with_data(serde_json::json!({ "requiredCapabilities": required }))
    }

    /// `-32022` with `data.supported` and `data.requested`.
    pub fn unsupported_version(supported: &[&str], requested: &str) -> Self {
        Self::new(ErrorCode::UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version")
            .with_data(serde_json::json!({ "supported": supported, "requested": requested }))
    }
}

impl fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

/// One JSON-RPC message, after the envelope rules have been applied. Its params are a
/// JSON tree ([`parse_borrowed`] reads a request's as their text).
#[derive(Debug, Clone, PartialEq)]
pub enum Message<P = Value> {
    /// A request: it has an id and expects a response.
    Request(Request<P>),
    /// A notification: a method without an id.
    Notification(Notification<P>),
    /// A successful response.
    Response {
        /// The id of the request answered.
        id: RequestId,
        /// The result.
        result: Value,
    },
    /// An error response.
    Error {
        /// The id of the request answered, when it could be read.
        id: Option<RequestId>,
        /// The error.
        error: ErrorObject,
    },
}

/// A JSON-RPC request whose method and params are still untyped; see
/// [`crate::ClientRequest::parse`] for the typed form.
#[derive(Debug, Clone, PartialEq)]
pub struct Request<P = Value> {
    /// The request id.
    pub id: RequestId,
    /// The method name.
    pub method: String,
    /// The params, when present (an object or an array).
    pub params: Option<P>,
}

/// A JSON-RPC notification.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification<P = Value> {
    /// The method name.
    pub method: String,
    /// The params, when present.
    pub params: Option<P>,
}

/// What a message's params may be read as: a JSON tree, or their text.
pub trait Params {
    /// An object or an array, as params must be.
    fn structured(&self) -> bool;
}

impl Params for Value {
    fn structured(&self) -> bool {
        self.is_object() || self.is_array()
    }
}

impl Params for &serde_json::value::RawValue {
    fn structured(&self) -> bool {
        self.get().starts_with(['{', '['])
    }
}

/// Why a message could not be read, and the id to echo in the error response.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// The request id, when the message had a readable one.
    pub id: Option<RequestId>,
    /// The error to answer with.
    pub error: ErrorObject,
}

impl Rejection {
    fn new(id: Option<RequestId>, error: ErrorObject) -> Self {
        Self { id, error }
    }
}

/// The fields of any JSON-RPC message, read without judging which kind it is.
#[derive(Deserialize)]
struct RawMessage<P> {
    #[serde(default)]
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default)]
    method: Option<Value>,
    #[serde(default = "Option::default")]
    params: Option<P>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
}

/// A field that is there reads as its type: an explicit `null` is not absent (it is
/// `Some(Value::Null)`, or fails a type that takes no `null`), so that `"id": null`
/// differs from a missing id.
pub(crate) fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// Parses one JSON-RPC message from bytes.
///
/// Rules: bytes that are not JSON are `-32700`; a batch (a JSON array), a value that is
/// not an object, a `jsonrpc` other than `"2.0"`, an id that is neither a string nor an
/// integer, a method that is not a string, a response with both or neither of `result`
/// and `error`: `-32600`. The error carries the request id whenever one could be read.
#[allow(clippy::result_large_err, reason = "one parse per HTTP request; the error path is cold")]
pub fn parse(bytes: &[u8]) -> Result<Message, Rejection> {
    // An object (every message hitl takes) is read straight into its fields, without a
    // JSON tree of the whole message first. Anything else, and an object that does not
    // read so (bad JSON, a repeated key), takes the path below, whose errors are the rules'.
    if let Some(text) = object_text(bytes)
        && let Ok(raw) = serde_json::from_str::<RawMessage<Value>>(text)
    {
        return from_raw(raw);
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| Rejection::new(None, ErrorObject::parse_error(e)))?;
    from_value(value)
}

/// `bytes` as text when they open a JSON object (a derived struct also reads from an
/// array, by position) and are UTF-8 throughout: reading into fields skips an unknown
/// key's value unchecked, and bytes that are not UTF-8 anywhere are not JSON.
fn object_text(bytes: &[u8]) -> Option<&str> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

/// A request as [`parse`] reads it, borrowed from the message's text: its method a
/// slice of it, its params their text, so that they are read straight into their type
/// without a JSON tree first.
#[derive(Debug, Clone)]
pub struct Borrowed<'a> {
    /// The request id.
    pub id: RequestId,
    /// The method name.
    pub method: &'a str,
    /// The params, when present (an object or an array).
    pub params: Option<&'a serde_json::value::RawValue>,
}

/// A message's fields as their text: nothing is copied out of the message to read its
/// envelope.
#[derive(Deserialize)]
struct RawText<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    jsonrpc: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    method: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    params: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    result: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    error: Option<&'a serde_json::value::RawValue>,
}

/// The text of a JSON string with no escapes in it, without its quotes.
fn plain_string(text: &str) -> Option<&str> {
    text.strip_prefix('"')?.strip_suffix('"').filter(|inner| !inner.contains(['\\', '"']))
}

/// A request id written as `text`, as [`parse`] reads it; `None` for anything else.
fn id_of(text: &str) -> Option<RequestId> {
    match plain_string(text) {
        Some(id) => Some(RequestId::String(id.to_owned())),
        // JSON reads `-0` as a float, which is no id; Rust reads it as 0.
        None if text == "-0" => None,
        None => text.parse().ok().map(RequestId::Number),
    }
}

/// A request for `method` read in one pass, its params (an object) straight into `P`:
/// the id and `P`, when the message is an object of `jsonrpc`, `id`, `method` and
/// `params`, each once, in any order with `method` before `params` (as clients write
/// requests). `None` for anything else, or anything wrong: [`parse_borrowed`], then
/// [`parse`], read it and say what is wrong.
pub fn parse_request_of<'a, P: Deserialize<'a>>(bytes: &'a [u8], method: &str) -> Option<(RequestId, P)> {
    let mut reader = serde_json::Deserializer::from_str(object_text(bytes)?);
    let request =
        serde::de::DeserializeSeed::deserialize(OnePass { method, params: std::marker::PhantomData }, &mut reader);
    let request = request.ok()?;
    reader.end().ok()?;
    Some(request)
}

/// What [`parse_request_of`] reads with: the method the params' type is for.
struct OnePass<'m, P> {
    method: &'m str,
    params: std::marker::PhantomData<P>,
}

impl<'de, P: Deserialize<'de>> serde::de::DeserializeSeed<'de> for OnePass<'_, P> {
    type Value = (RequestId, P);

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, P: Deserialize<'de>> serde::de::Visitor<'de> for OnePass<'_, P> {
    type Value = (RequestId, P);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {} request", self.method)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        use serde::de::Error as _;
        use serde_json::value::RawValue;
        // The reason is never shown: the message is read again, by the rules.
        let other = || A::Error::custom("not read in one pass");
        let (mut jsonrpc, mut id, mut method, mut params) = (false, None, false, None);
        // A key written with escapes does not read as a borrowed `str`: read again.
        while let Some(key) = map.next_key::<&'de str>()? {
            match key {
                "jsonrpc" if !jsonrpc => {
                    jsonrpc = map.next_value::<&'de RawValue>()?.get() == "\"2.0\"";
                    if !jsonrpc {
                        return Err(other());
                    }
                }
                "id" if id.is_none() => id = Some(id_of(map.next_value::<&'de RawValue>()?.get()).ok_or_else(other)?),
                "method" if !method => {
                    method = plain_string(map.next_value::<&'de RawValue>()?.get()) == Some(self.method);
                    if !method {
                        return Err(other());
                    }
                }
                "params" if method && params.is_none() => params = Some(map.next_value::<Object<P>>()?.0),
                _ => return Err(other()),
            }
        }
        match (jsonrpc, id, params) {
            (true, Some(id), Some(params)) => Ok((id, params)),
            _ => Err(other()),
        }
    }
}

/// A value read only from a JSON object (a derived struct also reads from an array, by
/// position, which params by name must not be).
pub(crate) struct Object<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Fields<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }
        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}

/// A request as [`parse`] reads it, borrowed ([`Borrowed`]). `None` for anything else (a
/// notification, a response, a message that breaks a rule or does not read straight
/// into its fields, a `jsonrpc` or method written with escapes): [`parse`] reads it and
/// says what is wrong.
pub fn parse_borrowed(bytes: &[u8]) -> Option<Borrowed<'_>> {
    let raw = serde_json::from_str::<RawText<'_>>(object_text(bytes)?).ok()?;
    if raw.jsonrpc?.get() != "\"2.0\"" || raw.result.is_some() || raw.error.is_some() {
        return None;
    }
    let id = id_of(raw.id?.get())?;
    let method = plain_string(raw.method?.get())?;
    if let Some(params) = raw.params
        && !params.structured()
    {
        return None;
    }
    Some(Borrowed { id, method, params: raw.params })
}

/// Applies the envelope rules of [`parse`] to an already parsed JSON value.
#[allow(clippy::result_large_err, reason = "one parse per HTTP request; the error path is cold")]
pub fn from_value(value: Value) -> Result<Message, Rejection> {
    let invalid = |id: Option<RequestId>, why: &str| Rejection::new(id, ErrorObject::invalid_request(why));
    let raw = match value {
        Value::Array(_) => return Err(invalid(None, "batch requests are not supported")),
        Value::Object(map) => {
            RawMessage::<Value>::deserialize(Value::Object(map)).map_err(|e| invalid(None, &e.to_string()))?
        }
        _ => return Err(invalid(None, "a message must be a JSON object")),
    };
    from_raw(raw)
}

/// The envelope rules of [`parse`] on a message's fields.
#[allow(clippy::result_large_err, reason = "one parse per HTTP request; the error path is cold")]
fn from_raw<P: Params>(raw: RawMessage<P>) -> Result<Message<P>, Rejection> {
    let invalid = |id: Option<RequestId>, why: &str| Rejection::new(id, ErrorObject::invalid_request(why));
    let id = match raw.id {
        None => None,
        Some(Value::String(s)) => Some(RequestId::String(s)),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(n) => Some(RequestId::Number(n)),
            None => return Err(invalid(None, "id must be a string or an integer")),
        },
        Some(_) => return Err(invalid(None, "id must be a string or an integer")),
    };
    match raw.jsonrpc {
        Some(Value::String(v)) if v == "2.0" => {}
        Some(_) => return Err(invalid(id, "jsonrpc must be \"2.0\"")),
        None => return Err(invalid(id, "jsonrpc is missing")),
    }
    if let Some(method) = raw.method {
        let Value::String(method) = method else {
            return Err(invalid(id, "method must be a string"));
        };
        if raw.result.is_some() || raw.error.is_some() {
            return Err(invalid(id, "a request cannot carry result or error"));
        }
        if let Some(params) = &raw.params
            && !params.structured()
        {
            return Err(invalid(id, "params must be an object or an array"));
        }
        return Ok(match id {
            Some(id) => Message::Request(Request { id, method, params: raw.params }),
            None => Message::Notification(Notification { method, params: raw.params }),
        });
    }
    match (raw.result, raw.error) {
        (Some(_), Some(_)) => Err(invalid(id, "a response cannot carry both result and error")),
        (None, None) => Err(invalid(id, "a message needs a method, a result or an error")),
        (Some(result), None) => match id {
            Some(id) => Ok(Message::Response { id, result }),
            None => Err(invalid(None, "a response needs an id")),
        },
        (None, Some(error)) => {
            let error = ErrorObject::deserialize(error).map_err(|e| invalid(id.clone(), &e.to_string()))?;
            Ok(Message::Error { id, error })
        }
    }
}

/// A response to write: a result or an error for one request id.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// `{"jsonrpc":"2.0","id":…,"result":…}`
    Result {
        /// The id of the request answered.
        id: RequestId,
        /// The result object.
        result: Value,
    },
    /// A typed result, serialized once, when the message is written.
    Typed {
        /// The id of the request answered.
        id: RequestId,
        /// The result, stamped for its era.
        result: Box<crate::ServerResult>,
    },
    /// `{"jsonrpc":"2.0","id":…,"error":…}`; the id is `null` when the request's id
    /// could not be read.
    Error {
        /// The id of the request answered.
        id: Option<RequestId>,
        /// The error.
        error: ErrorObject,
    },
}

impl Response {
    /// The message as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("jsonrpc".into(), Value::from("2.0"));
        match self {
            Self::Result { id, result } => {
                map.insert("id".into(), serde_json::to_value(id).unwrap_or(Value::Null));
                map.insert("result".into(), result.clone());
            }
            Self::Typed { .. } => {
                return serde_json::from_slice(&self.to_bytes()).unwrap_or(Value::Null);
            }
            Self::Error { id, error } => {
                map.insert("id".into(), serde_json::to_value(id).unwrap_or(Value::Null));
                map.insert("error".into(), serde_json::to_value(error).unwrap_or(Value::Null));
            }
        }
        Value::Object(map)
    }

    /// The message as compact JSON bytes, written without copying the result. A typed
    /// result that cannot be written (which hitl's results never are) is written as an
    /// internal error for its id, never as an empty body.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Most messages fit the first buffer: written without growing it step by step.
        let mut out = Vec::with_capacity(512);
        let written = match self {
            Self::Result { id, result } => serde_json::to_writer(&mut out, &ResultOut { jsonrpc: "2.0", id, result }),
            Self::Typed { id, result } => {
                serde_json::to_writer(&mut out, &ResultOut { jsonrpc: "2.0", id, result: &**result }).or_else(|e| {
                    let error = ErrorObject::internal(format!("Internal error: the result could not be encoded: {e}"));
                    out.clear();
                    serde_json::to_writer(&mut out, &ErrorOut { jsonrpc: "2.0", id: &Some(id.clone()), error: &error })
                })
            }
            Self::Error { id, error } => serde_json::to_writer(&mut out, &ErrorOut { jsonrpc: "2.0", id, error }),
        };
        if written.is_err() {
            out.clear();
        }
        out
    }

    /// The error, when this is an error response.
    pub fn error(&self) -> Option<&ErrorObject> {
        match self {
            Self::Error { error, .. } => Some(error),
            Self::Result { .. } | Self::Typed { .. } => None,
        }
    }
}

/// A result response, serialized from borrowed parts.
#[derive(Serialize)]
struct ResultOut<'a, R: Serialize> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    result: &'a R,
}

/// An error response, serialized from borrowed parts (`id` is `null` when unknown).
#[derive(Serialize)]
struct ErrorOut<'a> {
    jsonrpc: &'static str,
    id: &'a Option<RequestId>,
    error: &'a ErrorObject,
}

/// Deserializes `params` into `T`, turning a failure into `-32602` with serde's message
/// and the JSON path of the offending value.
pub fn params<T: serde::de::DeserializeOwned>(params: Option<Value>) -> Result<T, ErrorObject> {
    let value = params.unwrap_or_else(|| Value::Object(Map::new()));
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            ErrorObject::invalid_params(format!("Invalid params: {inner}"))
        } else {
            ErrorObject::invalid_params(format!("Invalid params at {path}: {inner}"))
        }
    })
}
