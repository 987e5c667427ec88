//! Multi round-trip requests (2026-07-28): the input a server asks for inside an
//! `input_required` result, and the answers a client sends back. The same request
//! types are the server-to-client requests of the legacy revisions.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{ErrorObject, Meta, ResultType};

/// Input requests by key.
pub type InputRequests = IndexMap<String, InputRequest>;

/// Answers by key. Values stay untyped until the server matches them with the request
/// they answer ([`ElicitResult::from_value`] and friends), so that one bad answer gets
/// a precise error instead of failing the whole params.
pub type InputResponses = IndexMap<String, Value>;

/// One request for input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", content = "params")]
pub enum InputRequest {
    /// `elicitation/create`: ask the user.
    #[serde(rename = "elicitation/create")]
    Elicit(ElicitRequestParams),
    /// `sampling/createMessage`: ask the client's model.
    #[serde(rename = "sampling/createMessage")]
    CreateMessage(CreateMessageParams),
    /// `roots/list`: ask for the client's roots.
    #[serde(rename = "roots/list")]
    ListRoots(Meta),
}

impl InputRequest {
    /// The method name.
    pub fn method(&self) -> &'static str {
        match self {
            Self::Elicit(_) => "elicitation/create",
            Self::CreateMessage(_) => "sampling/createMessage",
            Self::ListRoots(_) => "roots/list",
        }
    }
}

/// The interim result that asks for input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputRequiredResult {
    /// Always `input_required`.
    pub result_type: ResultType,
    /// The questions, by key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_requests: Option<InputRequests>,
    /// Opaque state the client echoes on its retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Meta>,
}

impl InputRequiredResult {
    /// Questions and the state to echo.
    pub fn new(input_requests: InputRequests, request_state: impl Into<String>) -> Self {
        Self {
            result_type: ResultType::InputRequired,
            input_requests: Some(input_requests),
            request_state: Some(request_state.into()),
            meta: None,
        }
    }
}

/// Params of `elicitation/create`, by mode.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitRequestParams {
    /// Ask with a form.
    Form(FormElicitation),
    /// Send the user to a page.
    Url(UrlElicitation),
}

impl ElicitRequestParams {
    /// The question shown to the user.
    pub fn message(&self) -> &str {
        match self {
            Self::Form(form) => &form.message,
            Self::Url(url) => &url.message,
        }
    }
}

/// A form-mode elicitation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FormElicitation {
    /// The question.
    pub message: String,
    /// The form.
    pub requested_schema: RequestedSchema,
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Meta>,
}

/// A URL-mode elicitation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UrlElicitation {
    /// Why the user should open the page.
    pub message: String,
    /// The page.
    pub url: String,
    /// 2025-11-25 only: the id that correlates the completion notification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation_id: Option<String>,
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Meta>,
}

/// A flat object form, as MCP allows it. Properties stay JSON: `hitl-schema` owns the
/// rules of what a property may be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestedSchema {
    /// `$schema`, when given.
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// Always `"object"`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The fields, in order.
    pub properties: Map<String, Value>,
    /// The required fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ElicitWire {
    #[serde(default)]
    mode: Option<Mode>,
    message: String,
    #[serde(default)]
    requested_schema: Option<RequestedSchema>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    elicitation_id: Option<String>,
    #[serde(rename = "_meta", default)]
    meta: Option<Meta>,
}

/// An elicitation's `mode`, read without a copy of the two MCP names (it is read on
/// every decode of a round); another is kept to be named in the error.
enum Mode {
    Form,
    Url,
    Other(String),
}

impl<'de> Deserialize<'de> for Mode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = Mode;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, mode: &str) -> Result<Mode, E> {
                Ok(match mode {
                    "form" => Mode::Form,
                    "url" => Mode::Url,
                    other => Mode::Other(other.to_owned()),
                })
            }
        }
        d.deserialize_str(Name)
    }
}

impl TryFrom<ElicitWire> for ElicitRequestParams {
    type Error = String;

    fn try_from(w: ElicitWire) -> Result<Self, String> {
        match w.mode {
            None | Some(Mode::Form) => Ok(Self::Form(FormElicitation {
                message: w.message,
                requested_schema: w.requested_schema.ok_or("a form elicitation needs requestedSchema")?,
                meta: w.meta,
            })),
            Some(Mode::Url) => Ok(Self::Url(UrlElicitation {
                message: w.message,
                url: w.url.ok_or("a url elicitation needs url")?,
                elicitation_id: w.elicitation_id,
                meta: w.meta,
            })),
            Some(Mode::Other(other)) => Err(format!("unknown elicitation mode {other:?}")),
        }
    }
}

/// [`ElicitWire`] written from borrowed parts: a request is written without a copy.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ElicitWireOut<'a> {
    mode: &'static str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    requested_schema: Option<&'a RequestedSchema>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    elicitation_id: Option<&'a str>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<&'a Meta>,
}

impl Serialize for ElicitRequestParams {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let wire = match self {
            Self::Form(f) => ElicitWireOut {
                mode: "form",
                message: &f.message,
                requested_schema: Some(&f.requested_schema),
                url: None,
                elicitation_id: None,
                meta: f.meta.as_ref(),
            },
            Self::Url(u) => ElicitWireOut {
                mode: "url",
                message: &u.message,
                requested_schema: None,
                url: Some(&u.url),
                elicitation_id: u.elicitation_id.as_deref(),
                meta: u.meta.as_ref(),
            },
        };
        wire.serialize(s)
    }
}

impl<'de> Deserialize<'de> for ElicitRequestParams {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ElicitWire::deserialize(d)?.try_into().map_err(serde::de::Error::custom)
    }
}

/// How the user answered an elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElicitAction {
    /// Submitted (form) or finished the flow (URL).
    Accept,
    /// Explicitly said no.
    Decline,
    /// Dismissed without choosing.
    Cancel,
}

/// The answer to an elicitation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElicitResult {
    /// What the user did.
    pub action: ElicitAction,
    /// The form's values, for an accepted form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Map<String, Value>>,
    /// Result metadata (legacy revisions).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Meta>,
}

impl ElicitResult {
    /// Reads an answer from `inputResponses[key]`: `-32602` naming the key when it is
    /// not an elicitation result.
    pub fn from_value(key: &str, value: &Value) -> Result<Self, ErrorObject> {
        answer(key, value)
    }
}

/// Params of `sampling/createMessage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateMessageParams {
    /// The conversation.
    pub messages: Vec<SamplingMessage>,
    /// The most tokens to sample.
    pub max_tokens: u64,
    /// A system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Everything else (modelPreferences, temperature, stopSequences, tools, …).
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// A message of a sampling conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingMessage {
    /// `user` or `assistant`.
    pub role: crate::Role,
    /// A content block, or an array of them.
    pub content: Value,
}

/// The answer to `sampling/createMessage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateMessageResult {
    /// Who speaks (the model: `assistant`).
    pub role: crate::Role,
    /// The sampled content.
    pub content: Value,
    /// The model that answered.
    pub model: String,
    /// Why sampling stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Anything else.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl CreateMessageResult {
    /// Reads an answer from `inputResponses[key]`.
    pub fn from_value(key: &str, value: &Value) -> Result<Self, ErrorObject> {
        answer(key, value)
    }
}

/// A root the client exposes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Root {
    /// A `file://` URI.
    pub uri: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The answer to `roots/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListRootsResult {
    /// The roots.
    pub roots: Vec<Root>,
}

impl ListRootsResult {
    /// Reads an answer from `inputResponses[key]`.
    pub fn from_value(key: &str, value: &Value) -> Result<Self, ErrorObject> {
        answer(key, value)
    }
}

fn answer<T: serde::de::DeserializeOwned>(key: &str, value: &Value) -> Result<T, ErrorObject> {
    // Read plainly first: tracking the path costs allocations on every answer, and is
    // needed only to say where a wrong one is wrong.
    if let Ok(read) = T::deserialize(value) {
        return Ok(read);
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." { String::new() } else { format!(".{path}") };
        ErrorObject::invalid_params(format!("Invalid params at inputResponses[\"{key}\"]{at}: {}", e.into_inner()))
    })
}

/// The `data` of the 2025-11-25 `-32042` error: URL elicitations the client must
/// complete first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UrlElicitationRequiredData {
    /// The URL elicitations, each with an `elicitationId`.
    pub elicitations: Vec<UrlElicitation>,
}

impl ErrorObject {
    /// The 2025-11-25 `-32042` error.
    pub fn url_elicitation_required(message: impl Into<String>, elicitations: Vec<UrlElicitation>) -> Self {
        let data =
            serde_json::to_value(UrlElicitationRequiredData { elicitations }).expect("URL elicitations are plain JSON");
        Self::new(crate::ErrorCode::URL_ELICITATION_REQUIRED, message).with_data(data)
    }
}
