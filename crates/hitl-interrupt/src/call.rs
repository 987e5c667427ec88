//! One `tools/call` as the engine sees it, and the checks of its arguments made before
//! any thread is.

use std::sync::Arc;

use hitl_graph::Agent;
use hitl_protocol::{
    CallToolResponse, CallToolResult, ClientCapabilities, ErrorObject, InputRequiredResult, InputResponses,
};
use serde_json::{Map, Value};

use crate::StoreError;

/// The message of every `requestState` that does not verify.
pub const INVALID_STATE: &str = "Invalid or expired requestState";

/// The message of a call whose thread was saved by a newer build.
pub const NEWER_FORMAT: &str = "this paused call was saved by a newer hitl";

/// The first text block of the error result a legacy client gets when a tool pauses.
pub const LEGACY_CANNOT_ANSWER: &str = "This tool paused to ask for human input, and this client can't answer it.";
/// The first text block of the error result when the call cannot keep a thread.
pub const CANNOT_RESUME: &str = "This tool paused to ask for human input, and this call can't be resumed.";
/// The error result of a graph that stopped at a static breakpoint, for clients that
/// can elicit (others get the state at the breakpoint as the result).
pub const BREAKPOINT: &str =
    "This tool stopped at a static breakpoint (interrupt_before or interrupt_after), which can't be resumed over MCP.";

/// An infrastructure failure (the store), as opposed to a protocol error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a call is answered, typed: its result, the round it paused at (with its
/// thread, which the endpoint makes a task of for a client that follows tasks), or a
/// JSON-RPC error.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The call's result (a tool's error result too).
    Complete(CallToolResult),
    /// The call is paused at a round to answer.
    Paused {
        /// The paused call's thread.
        thread_id: String,
        /// The round (`resultType: "input_required"`, with its `requestState`).
        round: InputRequiredResult,
    },
    /// The call is answered with a JSON-RPC error.
    Refused(ErrorObject),
}

impl Reply {
    /// The reply of `thread_id`'s call that was `answered`.
    pub(crate) fn of(answered: Answered, thread_id: &str) -> Self {
        match answered {
            Ok(CallToolResponse::Complete(result)) => Self::Complete(result),
            Ok(CallToolResponse::InputRequired(round)) => Self::Paused { thread_id: thread_id.to_owned(), round },
            Err(error) => Self::Refused(error),
        }
    }

    /// The reply as the drivers answer it (tests read it so).
    #[cfg(test)]
    pub(crate) fn answered(self) -> Answered {
        match self {
            Self::Complete(result) => Ok(CallToolResponse::Complete(result)),
            Self::Paused { round, .. } => Ok(CallToolResponse::InputRequired(round)),
            Self::Refused(error) => Err(error),
        }
    }
}

/// What the drivers answer a call: a response, or a JSON-RPC error.
pub(crate) type Answered = Result<CallToolResponse, ErrorObject>;

/// The reply to a `requestState` that does not verify.
pub(crate) fn invalid_state() -> Answered {
    Err(ErrorObject::invalid_params(INVALID_STATE))
}

/// What a call's thread is bound to: the agent as a tool (`tools/call`), or as a
/// prompt (`prompts/get`), whose thread a tool of the same name can't answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Binding {
    /// The agent as a tool.
    #[default]
    Tool,
    /// The agent as a prompt.
    Prompt,
}

/// Whether the client can answer a round it is asked, as the endpoint decides it (the
/// client's protocol, the deployment's threads): when it can't, a pause ends the call
/// with an error result whose first text block is the reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Resumable {
    /// The call can pause and be answered.
    #[default]
    Yes,
    /// It can't: why (the first text block of the error result a pause ends it with).
    No(&'static str),
}

impl Resumable {
    /// A 2025-era client that is not pushed its questions: it can't answer a round.
    pub const LEGACY: Self = Self::No(LEGACY_CANNOT_ANSWER);
    /// A deployment that keeps no threads: a pause can't be resumed.
    pub const NO_THREADS: Self = Self::No(CANNOT_RESUME);
}

/// One `tools/call` (or `prompts/get`) as the engine sees it: no protocol era, the
/// endpoint has decided what the call may do ([`Resumable`]).
#[derive(Clone, Default)]
pub struct ToolCall {
    /// The arguments (an object).
    pub arguments: Map<String, Value>,
    /// Answers, by question key.
    pub input_responses: Option<InputResponses>,
    /// The `requestState` echoed by the client.
    pub request_state: Option<String>,
    /// The runtime context for the run.
    pub context: Option<Value>,
    /// What the client declared it can do: shared (the run's extensions hold the
    /// same value), not copied per run.
    pub capabilities: Arc<ClientCapabilities>,
    /// Who is calling, when an auth layer said so.
    pub principal: Option<String>,
    /// The caller's groups (`group:<name>`), as its auth layer said.
    pub groups: Vec<String>,
    /// The caller's network address, which paused calls count against when there is no
    /// principal.
    pub peer: Option<String>,
    /// Whether a pause can be answered (else it ends the call with an error result).
    pub resumable: Resumable,
    /// What the call's thread is bound to: the agent as a tool, or as a prompt.
    pub binding: Binding,
    /// Called as the agent's supersteps finish (for `notifications/progress`).
    pub progress: Option<hitl_graph::ProgressFn>,
    /// Set when the client went away: the run stops before its next superstep and the
    /// round stays as it was.
    pub cancel: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// A 2025-era client's session with hitl (its `Mcp-Session-Id`, which hitl issued
    /// and checked): state an agent keeps per caller is kept per session.
    pub session: Option<String>,
}

impl std::fmt::Debug for ToolCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolCall")
            .field("arguments", &self.arguments)
            .field("input_responses", &self.input_responses)
            .field("request_state", &self.request_state.as_ref().map(|_| ".."))
            .field("context", &self.context)
            .field("capabilities", &self.capabilities)
            .field("principal", &self.principal)
            .field("peer", &self.peer)
            .field("resumable", &self.resumable)
            .field("binding", &self.binding)
            .field("session", &self.session.as_ref().map(|_| ".."))
            .finish_non_exhaustive()
    }
}

impl ToolCall {
    /// The graph run options of this call: its runtime context, the client's
    /// capabilities (so an agent can ask only for what the client takes: typed, as the
    /// run's `ClientCapabilities` extension, and as JSON in the metadata for agents that
    /// name no protocol type)
    /// with the caller's key ([`ToolCall::caller_key`]), progress and cancellation (effects
    /// are marked only on a stored thread).
    pub(crate) fn run(&self, agent: &Agent) -> hitl_graph::Run {
        // A 2025-era client (the only kind with a session, pushed to or not) may be
        // answered otherwise than a 2026-07-28 one (the gateway relays an upstream's
        // `-32042` to it as that error).
        let legacy = self.resumable == Resumable::LEGACY || self.session.is_some();
        let caller = agent.per_caller.then(|| self.caller_key());
        // Made as JSON only for a step that reads it, from the capabilities the run's
        // extensions hold.
        let metadata = hitl_graph::Metadata::lazy(move |extensions| {
            let capabilities = extensions.get::<ClientCapabilities>();
            let mut metadata = serde_json::json!({ "clientCapabilities": capabilities });
            if legacy {
                metadata["legacyClient"] = Value::Bool(true);
            }
            if let Some(caller) = &caller {
                metadata["caller"] = caller.as_str().into();
            }
            metadata
        });
        let mut extensions = hitl_graph::Extensions::default();
        extensions.insert_shared(self.capabilities.clone());
        extensions.insert(hitl_graph::Caller {
            principal: self.principal.clone(),
            groups: self.groups.clone(),
            peer: self.peer.clone(),
        });
        hitl_graph::Run {
            context: self.context.clone().unwrap_or(Value::Null),
            metadata,
            extensions,
            progress: self.progress.clone(),
            cancel: self.cancel.clone(),
            effects: None,
        }
    }

    /// The name a thread is bound to.
    pub(crate) fn bound_to<'a>(&self, agent: &'a Agent) -> std::borrow::Cow<'a, str> {
        match self.binding {
            Binding::Tool => std::borrow::Cow::Borrowed(&agent.name),
            Binding::Prompt => std::borrow::Cow::Owned(format!("prompt:{}", agent.name)),
        }
    }

    /// Who the call is made for, as an opaque key (a digest) for what an agent keeps
    /// per caller (the gateway: an upstream session): the owner (principal, else
    /// address) with its 2025-era session with hitl, or else with the capabilities it
    /// declared. It comes from the server's view of the caller, so no caller can name
    /// another's key; a different session or capabilities give a different key.
    pub fn caller_key(&self) -> String {
        let who = match &self.session {
            Some(session) => serde_json::json!({"owner": self.owner(), "session": session}),
            None => serde_json::json!({"owner": self.owner(), "capabilities": &*self.capabilities}),
        };
        crate::digest_hex(&who)
    }

    /// Whose paused calls this call's thread counts among.
    pub(crate) fn owner(&self) -> Arc<str> {
        let (kind, name) = match (&self.principal, &self.peer) {
            (Some(principal), _) => ("principal:", principal),
            (None, Some(peer)) => ("peer:", peer),
            (None, None) => return Arc::from("anonymous"),
        };
        shared_text(&[kind, name])
    }
}

/// `parts` joined as a shared string, in one allocation when they are short (joined on
/// the stack first; `Arc<str>` from a `String` copies it).
fn shared_text(parts: &[&str]) -> Arc<str> {
    let len = parts.iter().map(|p| p.len()).sum::<usize>();
    let mut buffer = [0u8; 256];
    if len > buffer.len() {
        return Arc::from(parts.concat());
    }
    let mut end = 0;
    for part in parts {
        buffer[end..end + part.len()].copy_from_slice(part.as_bytes());
        end += part.len();
    }
    // Whole strings were copied: the bytes are UTF-8.
    Arc::from(std::str::from_utf8(&buffer[..end]).unwrap_or_default())
}

/// A call's `arguments` as one JSON value, checked against the agent's input schema,
/// and their digest (what a thread is bound to).
pub(crate) fn checked_arguments(
    agent: &Agent,
    arguments: Map<String, Value>,
) -> Result<(Value, Arc<str>), ErrorObject> {
    if let Some(reserved) = reserved_argument(agent, &arguments) {
        let message = format!("{reserved}: argument names beginning with {RESERVED_PREFIX} are reserved");
        return Err(ErrorObject::invalid_params(format!("Invalid arguments for tool {}: {message}", agent.name))
            .with_data(serde_json::json!({ "errors": [{ "path": reserved, "message": message }] })));
    }
    let arguments = Value::Object(arguments);
    if let Err(violations) = hitl_schema::validate_value(&agent.input_schema, &arguments) {
        let details: Vec<String> = violations
            .iter()
            .map(|v| if v.field.is_empty() { v.message.clone() } else { format!("{}: {}", v.field, v.message) })
            .collect();
        let errors: Vec<Value> =
            violations.iter().map(|v| serde_json::json!({ "path": v.field, "message": v.message })).collect();
        let error =
            ErrorObject::invalid_params(format!("Invalid arguments for tool {}: {}", agent.name, details.join("; ")))
                .with_data(serde_json::json!({ "errors": errors }));
        return Err(error);
    }
    let digest = hitl_thread::digest_hex_shared(&arguments);
    Ok((arguments, digest))
}

/// The prefix of the state keys agents and the gateway keep beside a call's arguments
/// (a review's decision, a relayed round): a caller may not send them.
const RESERVED_PREFIX: &str = "hitl:";

/// The first argument that names a reserved state key the agent's input schema does not
/// itself declare: sent by a caller, it would stand in for a reviewer's decision.
fn reserved_argument<'a>(agent: &Agent, arguments: &'a serde_json::Map<String, Value>) -> Option<&'a str> {
    let declared = agent.input_schema.get("properties").and_then(Value::as_object);
    arguments
        .keys()
        .find(|name| name.starts_with(RESERVED_PREFIX) && !declared.is_some_and(|p| p.contains_key(name.as_str())))
        .map(String::as_str)
}
