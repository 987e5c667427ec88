//! The interrupt values an MCP server understands beyond plain questions, as serde
//! types defined once: agents build them and the engine parses them.
//!
//! - [`Relay`]: MCP requests relayed to the client as they are (`mcp_elicitation`,
//!   `mcp_input`), answered with [`RelayReply`];
//! - [`ReviewRequest`] (batched) and [`ToolApproval`] (one call): tool calls a person
//!   reviews (LangChain's `HumanInTheLoopMiddleware` shapes), answered with
//!   [`ReviewReply`] or one [`Decision`];
//! - [`ToolResult`]: an agent's output that is an MCP tool result, returned as is.
//!
//! Parsing is lenient where the Python shapes are (both field spellings, a missing
//! `args`), and every field the engine must report on is kept, so a bad value gets a
//! precise error instead of a serde message.
//!
//! ```
//! use hitl_graph::payload::{Relay, RelayedRequest};
//! use serde_json::json;
//!
//! let relay = Relay::elicitation([(
//!     "name",
//!     RelayedRequest::form("What is your name?", json!({"type": "object", "properties": {"name": {"type": "string"}}})),
//! )]);
//! let value = relay.to_value();
//! assert_eq!(value["type"], "mcp_elicitation");
//! assert_eq!(value["requests"][0]["key"], "name");
//! assert_eq!(Relay::parse(&value), Some(Ok(relay)));
//! ```

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// MCP requests relayed to the client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Relay {
    /// `mcp_elicitation` (elicitations only) or `mcp_input` (any request the client
    /// answers: elicitation, sampling, roots).
    #[serde(rename = "type")]
    pub kind: RelayKind,
    /// The requests, in the list shape (`[{key, ...}]`) or the object shape
    /// (`{key: {...}}`). Absent reads as none (which the engine refuses).
    #[serde(default)]
    pub requests: Requests,
}

/// Which requests a relay may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RelayKind {
    /// Elicitations only.
    McpElicitation,
    /// Elicitation, sampling and roots requests.
    McpInput,
}

/// The two shapes of a relay's requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Requests {
    /// `[{"key": …, "message": …, …}]`, each entry naming its key.
    List(Vec<RelayedRequest>),
    /// `{key: {"message": …, …}}`, MCP's field names.
    Map(Map<String, Value>),
}

impl Default for Requests {
    fn default() -> Self {
        Self::List(Vec::new())
    }
}

/// One relayed request: an elicitation written flat (`message`, `mode`,
/// `requested_schema` or `requestedSchema`, `url`), or any MCP request as `method` and
/// `params`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RelayedRequest {
    /// The question key (list shape only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The MCP method (`elicitation/create`, `sampling/createMessage`, `roots/list`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The method's params.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
    /// The elicitation's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Value>,
    /// `form` (the default) or `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Value>,
    /// A form's schema.
    #[serde(default, alias = "requestedSchema", skip_serializing_if = "Option::is_none")]
    pub requested_schema: Option<Value>,
    /// A URL elicitation's page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<Value>,
}

impl Relay {
    /// A relay of elicitations, in the list shape.
    pub fn elicitation<K: Into<String>>(requests: impl IntoIterator<Item = (K, RelayedRequest)>) -> Self {
        Self::list(RelayKind::McpElicitation, requests)
    }

    /// A relay of any requests the client answers, in the list shape.
    pub fn input<K: Into<String>>(requests: impl IntoIterator<Item = (K, RelayedRequest)>) -> Self {
        Self::list(RelayKind::McpInput, requests)
    }

    fn list<K: Into<String>>(kind: RelayKind, requests: impl IntoIterator<Item = (K, RelayedRequest)>) -> Self {
        let requests = requests.into_iter().map(|(key, r)| RelayedRequest { key: Some(key.into()), ..r }).collect();
        Self { kind, requests: Requests::List(requests) }
    }

    /// The interrupt value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a relay is plain JSON")
    }

    /// `Some` when `value` is a relay (its `type` says so); the error says what is wrong
    /// with one that does not parse.
    pub fn parse(value: &Value) -> Option<Result<Self, String>> {
        match value.get("type").and_then(Value::as_str) {
            Some("mcp_elicitation" | "mcp_input") => {}
            _ => return None,
        }
        Some(Self::deserialize(value).map_err(|e| e.to_string()))
    }

    /// The requests with their keys, in order; `Err(index)` names a list entry without
    /// a key. An object-shape entry that is not a request reads as an empty one, so the
    /// engine reports what it lacks.
    pub fn keyed(&self) -> Result<Vec<(String, RelayedRequest)>, usize> {
        match &self.requests {
            Requests::List(list) => {
                list.iter().enumerate().map(|(i, r)| r.key.clone().map(|key| (key, r.clone())).ok_or(i)).collect()
            }
            Requests::Map(map) => Ok(map
                .iter()
                .map(|(key, entry)| (key.clone(), RelayedRequest::deserialize(entry).unwrap_or_default()))
                .collect()),
        }
    }
}

impl RelayedRequest {
    /// A form elicitation.
    pub fn form(message: impl Into<String>, schema: Value) -> Self {
        Self {
            message: Some(Value::String(message.into())),
            mode: Some(Value::String("form".into())),
            requested_schema: Some(schema),
            ..Self::default()
        }
    }

    /// A URL elicitation.
    pub fn url(message: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            message: Some(Value::String(message.into())),
            mode: Some(Value::String("url".into())),
            url: Some(Value::String(url.into())),
            ..Self::default()
        }
    }

    /// Any MCP request the client answers.
    pub fn method(method: impl Into<String>, params: Value) -> Self {
        Self { method: Some(method.into()), params: Some(params), ..Self::default() }
    }

    /// The elicitation fields: the entry itself, or its `params` when it names the
    /// `elicitation/create` method.
    pub fn elicitation(&self) -> Self {
        match (&self.method, &self.params) {
            (Some(_), Some(params)) => Self::deserialize(params).unwrap_or_default(),
            _ => self.clone(),
        }
    }
}

/// The answer to a relay: each request's response, by key (an elicitation's
/// `{"action", "content"}`, a sampling result, a roots list).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RelayReply {
    /// The responses, by request key.
    #[serde(default)]
    pub responses: Map<String, Value>,
}

impl RelayReply {
    /// The response to request `key` (`Null` when there is none).
    pub fn response(&self, key: &str) -> &Value {
        self.responses.get(key).unwrap_or(&Value::Null)
    }

    /// The action the user took on elicitation `key` (`accept`, `decline`, `cancel`).
    pub fn action(&self, key: &str) -> Option<&str> {
        self.response(key).get("action").and_then(Value::as_str)
    }

    /// Was form elicitation `key` accepted? Then its content.
    pub fn accepted(&self, key: &str) -> Option<&Map<String, Value>> {
        if self.action(key) != Some("accept") {
            return None;
        }
        self.response(key).get("content").and_then(Value::as_object)
    }
}

/// An agent output that is an MCP tool result to return as it is (a gateway's
/// upstream result: its content blocks, `structuredContent`, `isError`), written
/// `{"type": "mcp_tool_result", "result": {...}}`. Any other output becomes a JSON
/// result.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult(pub Map<String, Value>);

impl ToolResult {
    /// The output value.
    pub fn to_value(&self) -> Value {
        json!({"type": "mcp_tool_result", "result": self.0})
    }

    /// `Some` when `output` is a tool result.
    pub fn parse(output: &Value) -> Option<Self> {
        if output.get("type").and_then(Value::as_str) != Some("mcp_tool_result") {
            return None;
        }
        output.get("result").and_then(Value::as_object).map(|result| Self(result.clone()))
    }

    /// An error result made of one text block.
    pub fn error(text: impl Into<String>) -> Self {
        Self::text(text, true)
    }

    /// A result made of one text block.
    pub fn text(text: impl Into<String>, is_error: bool) -> Self {
        let mut result = Map::new();
        result.insert("content".into(), json!([{"type": "text", "text": text.into()}]));
        if is_error {
            result.insert("isError".into(), Value::Bool(true));
        }
        Self(result)
    }
}

/// An agent output that is a JSON-RPC error to answer the call with instead of a tool
/// result (a gateway relaying an upstream's error that a 2025-era client must see as
/// one: `-32042`, URL elicitation required), written
/// `{"type": "mcp_error", "error": {"code", "message", "data"}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorReply(pub Map<String, Value>);

impl ErrorReply {
    /// The output value.
    pub fn to_value(&self) -> Value {
        json!({"type": "mcp_error", "error": self.0})
    }

    /// `Some` when `output` is an error reply.
    pub fn parse(output: &Value) -> Option<Self> {
        if output.get("type").and_then(Value::as_str) != Some("mcp_error") {
            return None;
        }
        output.get("error").and_then(Value::as_object).map(|error| Self(error.clone()))
    }
}

/// One tool call offered for review.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ActionRequest {
    /// The tool.
    #[serde(default)]
    pub name: Option<String>,
    /// Its arguments (an object; `null` or absent means none).
    #[serde(default)]
    pub args: Value,
    /// The text shown to the reviewer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl ActionRequest {
    /// A call of `name` with `args`.
    pub fn new(name: impl Into<String>, args: Map<String, Value>, description: Option<String>) -> Self {
        Self { name: Some(name.into()), args: Value::Object(args), description }
    }
}

/// What a reviewer may decide for a tool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewConfig {
    /// The tool.
    #[serde(default, alias = "actionName")]
    pub action_name: Option<String>,
    /// `approve`, `edit`, `reject`, `respond` (absent: all four). Unknown names are
    /// ignored.
    #[serde(default, alias = "allowedDecisions", skip_serializing_if = "Option::is_none")]
    pub allowed_decisions: Option<Vec<Value>>,
}

impl ReviewConfig {
    /// The decisions allowed for `name`.
    pub fn new<D: Into<String>>(name: impl Into<String>, allowed: impl IntoIterator<Item = D>) -> Self {
        Self {
            action_name: Some(name.into()),
            allowed_decisions: Some(allowed.into_iter().map(|d| Value::String(d.into())).collect()),
        }
    }

    /// The allowed decision names (`None`: all).
    pub fn allowed(&self) -> Option<Vec<&str>> {
        self.allowed_decisions.as_ref().map(|names| names.iter().filter_map(Value::as_str).collect())
    }
}

/// Batched review: every gated call of a step in one interrupt, resumed with a
/// [`ReviewReply`] in the same order. The JavaScript middleware writes
/// `actionRequests` / `reviewConfigs` and expects edits as `editedAction`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewRequest {
    /// The calls.
    #[serde(alias = "actionRequests")]
    pub action_requests: Vec<ActionRequest>,
    /// The decisions each tool allows.
    #[serde(default, alias = "reviewConfigs")]
    pub review_configs: Vec<ReviewConfig>,
}

impl ReviewRequest {
    /// `Some` when `value` is a batched review; `camel_case` says which spelling it used.
    pub fn parse(value: &Value) -> Option<(Result<Self, String>, bool)> {
        let camel_case = match (value.get("action_requests"), value.get("actionRequests")) {
            (Some(Value::Array(_)), _) => false,
            (None, Some(Value::Array(_))) => true,
            _ => return None,
        };
        Some((Self::deserialize(value).map_err(|e| e.to_string()), camel_case))
    }

    /// The config for tool `name`, if any.
    pub fn config(&self, name: &str) -> Option<&ReviewConfig> {
        self.review_configs.iter().find(|c| c.action_name.as_deref() == Some(name))
    }

    /// The interrupt value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a review request is plain JSON")
    }
}

/// Review of one call, resumed with one [`Decision`]; usually asked with a response
/// schema of the decisions the call allows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolApproval {
    /// The call.
    #[serde(alias = "actionRequest")]
    pub action_request: ActionRequest,
    /// What the reviewer may decide.
    #[serde(default, alias = "reviewConfig")]
    pub review_config: Option<ReviewConfig>,
    /// Who decides, when not the MCP client's user: the call is then decided on hitl's
    /// approval page by one of them (hitl's extension; LangChain never writes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalBy>,
    /// What an approval covers besides this call (`[[policy]] approval_ttl`): the
    /// review then offers to cover later calls, which the reviewer may decline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub covers: Option<Covers>,
}

/// What an approval covers besides its own call: the same caller's later calls of the
/// tool under the same policy, with identical arguments or any, for a while
/// (`[[policy]] approval_ttl` and `approval_scope`). The reviewer may narrow it to the
/// call alone (the decision's `cover: false`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Covers {
    /// The tool, as listed.
    pub tool: String,
    /// Later calls are covered only with identical arguments (else: any arguments).
    pub same_arguments: bool,
    /// For how long after the approval.
    pub ttl_seconds: u64,
    /// The caller whose later calls are covered (a principal).
    pub caller: String,
}

impl Covers {
    /// What an approval covers, in words: to the caller ("this call, and your calls of
    /// fs.write_file with these arguments for 15 min") or, naming the caller, to an
    /// approver.
    pub fn text(&self, to_caller: bool) -> String {
        let whose = if to_caller { "your".to_owned() } else { format!("{}'s", self.caller) };
        let arguments = if self.same_arguments { "these arguments" } else { "any arguments" };
        let ttl = self.ttl_seconds;
        let span = match ttl {
            t if t % 3600 == 0 => format!("{} h", t / 3600),
            t if t % 60 == 0 => format!("{} min", t / 60),
            t => format!("{t} s"),
        };
        format!("this call, and {whose} calls of {} with {arguments} for {span}", self.tool)
    }
}

/// The people who decide a [`ToolApproval`] on hitl's approval page, the policy that
/// says so, and what the page shows of the tool besides the call, so the approver knows
/// what will run it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalBy {
    /// `user:<id>` and `group:<name>` entries.
    pub approvers: Vec<String>,
    /// The policy, as shown to the approver.
    #[serde(default)]
    pub policy: String,
    /// The upstream server that runs the call (none: hitl itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// The tool's own description, as its server lists it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_description: Option<String>,
    /// The tool's annotations, as its server lists them (`destructiveHint`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Map<String, Value>>,
    /// Where the policy is written (`hitl.toml:12`), for the audit trail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_at: Option<String>,
    /// A digest of the policy's text: which version of the rules asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_digest: Option<String>,
}

/// `Some` when `value` is an interrupt of `type` `kind`: it read as `T`, or why not.
fn typed<T: serde::de::DeserializeOwned>(value: &Value, kind: &str) -> Option<Result<T, String>> {
    (value.get("type").and_then(Value::as_str) == Some(kind)).then(|| T::deserialize(value).map_err(|e| e.to_string()))
}

/// A value the person types on hitl's secret page (a token, an API key): asked by URL
/// so it never passes through the MCP client, kept sealed in the thread, and resumed
/// with `{"action": "accept", "value": …}` (or the `decline`/`cancel` answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretRequest {
    /// What the value is ("GitHub token").
    pub label: String,
    /// The question shown in the MCP client.
    pub message: String,
}

impl SecretRequest {
    /// The interrupt's `type`.
    pub const TYPE: &'static str = "hitl_secret";

    /// `Some` when `value` asks for a secret.
    pub fn parse(value: &Value) -> Option<Result<Self, String>> {
        typed(value, Self::TYPE)
    }

    /// The interrupt value.
    pub fn to_value(&self) -> Value {
        json!({ "type": Self::TYPE, "label": self.label, "message": self.message })
    }
}

/// A sign-in on a third party's page (OAuth): the client is sent to `url`, in which
/// `{state}` is replaced by a value bound to the round; the provider's redirect to
/// hitl's callback completes the question, and the agent resumes with
/// `{"action": "accept", "params": {code, state, …}}` (the callback's query).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignInRequest {
    /// The question shown in the MCP client.
    pub message: String,
    /// The provider's authorization URL, with `{state}` where the state goes.
    pub url: String,
}

impl SignInRequest {
    /// The interrupt's `type`.
    pub const TYPE: &'static str = "hitl_sign_in";

    /// `Some` when `value` asks for a sign-in.
    pub fn parse(value: &Value) -> Option<Result<Self, String>> {
        typed(value, Self::TYPE)
    }

    /// The interrupt value.
    pub fn to_value(&self) -> Value {
        json!({ "type": Self::TYPE, "message": self.message, "url": self.url })
    }
}

impl ToolApproval {
    /// `Some` when `value` is a per-call review (`type: tool_approval`).
    pub fn parse(value: &Value) -> Option<Result<Self, String>> {
        typed(value, "tool_approval")
    }

    /// The interrupt value, `type` first as the Python middleware writes it.
    pub fn to_value(&self) -> Value {
        let mut value = Map::from_iter([("type".to_owned(), Value::String("tool_approval".into()))]);
        if let Value::Object(fields) = serde_json::to_value(self).expect("a tool approval is plain JSON") {
            value.extend(fields);
        }
        Value::Object(value)
    }
}

/// The response schema of a per-call review ([`ToolApproval`]): one branch per allowed
/// decision (`approve`, `edit`, `reject`, `respond`; others are left out), the edit
/// branch pinned to `tool` and, when given, its argument schema.
pub fn decision_schema(tool: &str, args_schema: Option<&Value>, allowed: &[&str]) -> Value {
    let branches: Vec<Value> = allowed
        .iter()
        .filter_map(|d| {
            Some(match *d {
                "approve" => json!({"type": "object", "properties": {"type": {"const": "approve"}}, "required": ["type"]}),
                "reject" => json!({"type": "object", "properties": {"type": {"const": "reject"}, "message": {"type": "string"}}, "required": ["type"]}),
                "respond" => json!({"type": "object", "properties": {"type": {"const": "respond"}, "message": {"type": "string"}}, "required": ["type", "message"]}),
                "edit" => json!({"type": "object", "properties": {
                    "type": {"const": "edit"},
                    "edited_action": {"type": "object", "properties": {
                        "name": {"const": tool},
                        "args": args_schema.cloned().unwrap_or_else(|| json!({"type": "object"}))
                    }, "required": ["name", "args"]}
                }, "required": ["type", "edited_action"]}),
                _ => return None,
            })
        })
        .collect();
    json!({ "oneOf": branches })
}

/// A reviewer's decision on one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Decision {
    /// Run the call as asked.
    Approve,
    /// Run the call with other arguments.
    Edit {
        /// The call to run instead.
        #[serde(alias = "editedAction")]
        edited_action: EditedAction,
    },
    /// Do not run it; the model is told why.
    Reject {
        /// The reason.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// Do not run it; the message is the call's result.
    Respond {
        /// The result the model gets.
        message: String,
    },
}

/// The call an edit runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EditedAction {
    /// The tool.
    pub name: String,
    /// The arguments.
    #[serde(default)]
    pub args: Map<String, Value>,
}

impl Decision {
    /// The decision as the middleware reads it; `camel_case` writes an edit as
    /// `editedAction` (the JavaScript middleware).
    pub fn to_value(&self, camel_case: bool) -> Value {
        let mut value = serde_json::to_value(self).expect("a decision is plain JSON");
        if camel_case
            && let Some(map) = value.as_object_mut()
            && let Some(edited) = map.remove("edited_action")
        {
            map.insert("editedAction".into(), edited);
        }
        value
    }
}

/// The answer to a batched review: one decision per call, in order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewReply {
    /// The decisions.
    #[serde(default)]
    pub decisions: Vec<Decision>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn relays_parse_in_both_shapes_and_round_trip() {
        let list = json!({"type": "mcp_elicitation", "requests": [
            {"key": "a", "message": "A?", "mode": "form", "requested_schema": {"type": "object"}}]});
        let relay = Relay::parse(&list).unwrap().unwrap();
        assert_eq!(relay.kind, RelayKind::McpElicitation);
        let keyed = relay.keyed().unwrap();
        assert_eq!(keyed[0].0, "a");
        assert_eq!(keyed[0].1.requested_schema, Some(json!({"type": "object"})));
        assert_eq!(relay.to_value(), list);

        let map = json!({"type": "mcp_input", "requests": {
            "b": {"message": "B?", "requestedSchema": {"type": "object"}},
            "c": {"method": "roots/list", "params": {}}}});
        let relay = Relay::parse(&map).unwrap().unwrap();
        let keyed = relay.keyed().unwrap();
        assert_eq!(keyed.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(keyed[0].1.requested_schema, Some(json!({"type": "object"})), "camelCase schema");
        assert_eq!(keyed[1].1.method.as_deref(), Some("roots/list"));

        let unkeyed = json!({"type": "mcp_elicitation", "requests": [{"message": "x"}]});
        assert_eq!(Relay::parse(&unkeyed).unwrap().unwrap().keyed(), Err(0));
        assert!(Relay::parse(&json!("a question")).is_none());
        assert!(Relay::parse(&json!({"type": "mcp_input", "requests": 3})).unwrap().is_err());
    }

    #[test]
    fn elicitation_fields_come_from_params_when_a_method_is_named() {
        let request = RelayedRequest::method("elicitation/create", json!({"message": "M", "url": "https://x"}));
        assert_eq!(request.elicitation().message, Some(json!("M")));
        assert_eq!(RelayedRequest::form("F", json!({})).elicitation().message, Some(json!("F")));
    }

    #[test]
    fn reviews_parse_both_spellings() {
        let snake = json!({"action_requests": [{"name": "t", "args": {"x": 1}}],
            "review_configs": [{"action_name": "t", "allowed_decisions": ["approve", "nope"]}]});
        let (request, camel) = ReviewRequest::parse(&snake).unwrap();
        let request = request.unwrap();
        assert!(!camel);
        assert_eq!(request.config("t").unwrap().allowed(), Some(vec!["approve", "nope"]));
        assert_eq!(request.to_value(), snake);

        let camel_value = json!({"actionRequests": [{"name": "t"}], "reviewConfigs": [{"actionName": "t"}]});
        let (request, camel) = ReviewRequest::parse(&camel_value).unwrap();
        assert!(camel);
        assert_eq!(request.unwrap().action_requests[0].args, Value::Null);
        assert!(ReviewRequest::parse(&json!({"type": "tool_approval"})).is_none());

        let approval = ToolApproval {
            action_request: ActionRequest::new("t", Map::new(), Some("Run t?".into())),
            review_config: Some(ReviewConfig::new("t", ["approve"])),
            approval: None,
            covers: None,
        };
        let value = approval.to_value();
        assert_eq!(value["type"], "tool_approval");
        assert!(value.get("covers").is_none(), "nothing new on the wire without approval_ttl");
        assert_eq!(ToolApproval::parse(&value).unwrap().unwrap(), approval);
    }

    #[test]
    fn what_an_approval_covers_is_said_to_the_caller_and_to_an_approver() {
        let covers = |same_arguments, ttl_seconds| Covers {
            tool: "fs.write_file".into(),
            same_arguments,
            ttl_seconds,
            caller: "user:alice".into(),
        };
        assert_eq!(
            covers(true, 900).text(true),
            "this call, and your calls of fs.write_file with these arguments for 15 min"
        );
        assert_eq!(
            covers(false, 7200).text(false),
            "this call, and user:alice's calls of fs.write_file with any arguments for 2 h"
        );
        assert!(covers(true, 90).text(true).ends_with("for 90 s"));
    }

    #[test]
    fn tool_results_round_trip_and_nothing_else_is_one() {
        let result = ToolResult::error("no");
        let value = result.to_value();
        assert_eq!(value["result"]["isError"], true);
        assert_eq!(ToolResult::parse(&value), Some(result));
        assert_eq!(ToolResult::parse(&json!({"type": "mcp_tool_result"})), None);
        assert_eq!(ToolResult::parse(&json!({"result": {}})), None);
    }

    #[test]
    fn decisions_spell_edits_for_either_middleware() {
        let edit = Decision::Edit { edited_action: EditedAction { name: "t".into(), args: Map::new() } };
        assert_eq!(edit.to_value(false), json!({"type": "edit", "edited_action": {"name": "t", "args": {}}}));
        assert_eq!(edit.to_value(true), json!({"type": "edit", "editedAction": {"name": "t", "args": {}}}));
        let parsed: Decision = serde_json::from_value(json!({"type": "edit", "editedAction": {"name": "t"}})).unwrap();
        assert_eq!(parsed, edit);
        assert_eq!(Decision::Reject { message: None }.to_value(false), json!({"type": "reject"}));
        let reply: ReviewReply = serde_json::from_value(json!({"decisions": [{"type": "approve"}]})).unwrap();
        assert_eq!(reply.decisions, [Decision::Approve]);
    }
}
