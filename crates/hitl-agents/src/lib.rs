//! Built-in agents: the example agents of `docs/examples.md`, served by `hitl serve`
//! unless `--no-examples` is given. Their names, questions and outputs are a contract
//! that the end-to-end tests rely on.
//!
//! They are also the seed's Python examples translated, and show the three ways an
//! agent asks: a text question (`ctx.interrupt(json!("…"))`), a typed question
//! (`ctx.interrupt_as::<Deployment>(…)`, the schema coming from schemars), and relayed
//! MCP requests (an interrupt value of type `mcp_elicitation`).
//!
//! ```
//! let agents = hitl_agents::examples();
//! assert_eq!(agents[0].name, "greeter");
//! assert!(agents.iter().any(|a| a.name == "plan_deployment"));
//! ```

pub mod conformance;

/// The tool-calling runtime the email assistant is built on (see `hitl-toolcall`).
pub use hitl_toolcall::{ChatModel, tool_agent};

use std::sync::Arc;

use hitl_graph::Agent;
use hitl_graph::payload::{Relay, RelayReply, RelayedRequest};
use hitl_graph::{END, START, StateGraph, StepContext, StepError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tool_agent::{HumanInTheLoop, InterruptMode, Model, Tool, ToolCall, Turn, python_repr, tool_calling_agent};

/// Every example agent, in the order `tools/list` shows them.
pub fn examples() -> Vec<Agent> {
    vec![
        greeter(),
        choose_region(),
        plan_deployment(),
        connect_calendar(),
        connect_github(),
        deploy_production_release(),
        onboarding(),
        survey(),
        twin_questions(),
        relay_pair(),
        issue_ticket(),
        echo_context(),
        release_gate(),
        unaskable(),
        email_assistant(InterruptMode::Batched),
        email_assistant(InterruptMode::PerCall),
    ]
}

/// The input schema of a tool without arguments: any extra property is refused before a
/// thread is made (it would be stored with the paused call).
fn no_arguments() -> Value {
    json!({"type": "object", "properties": {}, "additionalProperties": false})
}

fn agent(name: &str, description: &str, input_schema: Value, graph: StateGraph) -> Agent {
    let graph = graph.compile().unwrap_or_else(|e| panic!("example agent {name} does not compile: {e}"));
    Agent::new(name, description, input_schema, graph)
}

/// A one-step graph whose step asks `question` as text and stores the answer in `key`.
fn ask_text(graph: StateGraph, step: &str, question: &'static str, key: &'static str) -> StateGraph {
    graph
        .add_step(step, move |_, ctx| async move { Ok(json!({ key: ctx.interrupt(json!(question))? })) })
        .add_edge(START, step)
        .add_edge(step, END)
}

/// Relays `relay` to the client and reads its responses.
fn relay(ctx: &StepContext, relay: Relay) -> Result<RelayReply, StepError> {
    let reply = ctx.interrupt(relay.to_value())?;
    serde_json::from_value(reply).map_err(|e| StepError::msg(format!("the relay's reply is not valid: {e}")))
}

/// One relayed form request, in the list shape of the seed.
fn relay_form(key: &str, message: &str, schema: Value) -> Relay {
    Relay::elicitation([(key, RelayedRequest::form(message, schema))])
}

/// `greeter`: relays a form that asks for a name.
pub fn greeter() -> Agent {
    let graph = StateGraph::new()
        .add_step("ask_name", |_, ctx| async move {
            let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
            let reply = relay(&ctx, relay_form("user_name", "What is your name?", schema))?;
            let Some(content) = reply.accepted("user_name") else {
                return Ok(json!({"greeting": "Hello, stranger!"}));
            };
            let name = content.get("name").and_then(Value::as_str).unwrap_or_default();
            Ok(json!({ "greeting": format!("Hello, {name}!") }))
        })
        .add_edge(START, "ask_name")
        .add_edge("ask_name", END);
    agent("greeter", "Asks for your name and greets you.", no_arguments(), graph)
}

/// `choose_region`: a text question; output `{"region": <answer>}`.
pub fn choose_region() -> Agent {
    let graph = ask_text(StateGraph::new(), "choose_region", "Which region should the service deploy to?", "region");
    agent("choose_region", "Asks which region the service should deploy to.", no_arguments(), graph)
}

// Where a deployment goes: the seed's Pydantic `Deployment` model in Rust. Plain
// comments, not doc comments, on purpose: schemars turns doc comments into
// `description`s, and the seed's form has none.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
struct Deployment {
    #[schemars(title = "Region")]
    region: Region,
    #[schemars(title = "Replicas", range(min = 1, max = 10))]
    replicas: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
enum Region {
    #[serde(rename = "us-east-1")]
    UsEast1,
    #[serde(rename = "eu-west-1")]
    EuWest1,
}

impl Region {
    fn as_str(self) -> &'static str {
        match self {
            Self::UsEast1 => "us-east-1",
            Self::EuWest1 => "eu-west-1",
        }
    }
}

/// `plan_deployment`: a typed question with the `Deployment` type (region, replicas).
pub fn plan_deployment() -> Agent {
    let graph = StateGraph::new()
        .add_step("plan_deployment", |_, ctx| async move {
            let deployment: Deployment = ctx.interrupt_as(json!("Where should the service deploy?"))?;
            Ok(json!({ "region": deployment.region.as_str(), "replicas": deployment.replicas }))
        })
        .add_edge(START, "plan_deployment")
        .add_edge("plan_deployment", END);
    agent("plan_deployment", "Asks where and how wide the service should deploy.", no_arguments(), graph)
}

/// `connect_calendar`: relays a URL request (an OAuth consent page).
pub fn connect_calendar() -> Agent {
    let graph = StateGraph::new()
        .add_step("connect_calendar", |_, ctx| async move {
            let page =
                RelayedRequest::url("Connect your calendar to continue.", "https://example.com/oauth/calendar/start");
            let reply = relay(&ctx, Relay::elicitation([("calendar_auth", page)]))?;
            let status = if reply.action("calendar_auth") == Some("accept") { "connected" } else { "not connected" };
            Ok(json!({ "status": status }))
        })
        .add_edge(START, "connect_calendar")
        .add_edge("connect_calendar", END);
    agent("connect_calendar", "Sends you to a page to connect your calendar.", no_arguments(), graph)
}

/// `connect_github`: asks for a GitHub token on hitl's secret page, so the token never
/// passes through the MCP client; the result proves the agent got it without showing it
/// (its SHA-256).
pub fn connect_github() -> Agent {
    let graph = StateGraph::new()
        .add_step("connect_github", |_, ctx| async move {
            let message = "Enter a GitHub personal access token on hitl's page.";
            Ok(match ctx.ask_secret("GitHub token", message)? {
                Some(token) => {
                    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
                    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
                    json!({ "status": "connected", "token_sha256": hex })
                }
                None => json!({ "status": "not connected" }),
            })
        })
        .add_edge(START, "connect_github")
        .add_edge("connect_github", END);
    agent("connect_github", "Asks for a GitHub token on a secure page, never in the chat.", no_arguments(), graph)
}

/// `deploy_production_release`: the confirmation gate of seed 003.
pub fn deploy_production_release() -> Agent {
    let graph = StateGraph::new()
        .add_step("confirm", |state, ctx| async move {
            let service = state["service"].as_str().unwrap_or_default().to_owned();
            let version = state["version"].as_str().unwrap_or_default().to_owned();
            let schema = json!({
                "type": "object",
                "properties": {"confirm": {"type": "boolean", "title": "Confirm Production Release"}},
                "required": ["confirm"]
            });
            let message = format!("Deploying {service} to PRODUCTION ({version}). Confirm release?");
            let reply = relay(&ctx, relay_form("confirm_release", &message, schema))?;
            let confirmed =
                reply.accepted("confirm_release").and_then(|c| c.get("confirm")) == Some(&Value::Bool(true));
            let result = if confirmed {
                format!("Successfully released {service} v{version} to prod.")
            } else {
                "Deployment aborted by user.".to_owned()
            };
            Ok(json!({ "result": result }))
        })
        .add_edge(START, "confirm")
        .add_edge("confirm", END)
        .output_keys(["result"]);
    let input = json!({
        "type": "object",
        "properties": {"service": {"type": "string"}, "version": {"type": "string"}},
        "required": ["service", "version"],
        "additionalProperties": false
    });
    agent("deploy_production_release", "Deploys a service version to production with HITL approval", input, graph)
}

/// `onboarding`: two rounds, a text question then a typed integer.
pub fn onboarding() -> Agent {
    let graph = StateGraph::new()
        .add_step(
            "ask_name",
            |_, ctx| async move { Ok(json!({ "name": ctx.interrupt(json!("What is your name?"))? })) },
        )
        .add_step("ask_age", |_, ctx| async move {
            let schema = json!({"type": "integer", "minimum": 0, "maximum": 150});
            Ok(json!({ "age": ctx.interrupt_with_schema(json!("How old are you?"), schema)? }))
        })
        .add_edge(START, "ask_name")
        .add_edge("ask_name", "ask_age")
        .add_edge("ask_age", END);
    agent("onboarding", "Asks your name, then your age.", no_arguments(), graph)
}

/// `survey`: two parallel steps, asked in one round.
pub fn survey() -> Agent {
    let graph = ask_text(StateGraph::new(), "ask_color", "What is your favorite color?", "color");
    let graph = ask_text(graph, "ask_quest", "What is your quest?", "quest");
    agent("survey", "Asks two questions at once.", no_arguments(), graph)
}

/// `twin_questions`: two parallel steps that ask the same text; one answer resumes both.
pub fn twin_questions() -> Agent {
    let graph = ask_text(StateGraph::new(), "primary", "Which region should the service deploy to?", "primary");
    let graph = ask_text(graph, "secondary", "Which region should the service deploy to?", "secondary");
    agent("twin_questions", "Asks the same question from two steps.", no_arguments(), graph)
}

/// `relay_pair`: two parallel steps relay forms with the same key.
pub fn relay_pair() -> Agent {
    fn ask(message: &'static str, out: &'static str) -> impl Fn(Value, hitl_graph::StepContext) -> futures_step::Step {
        move |_, ctx| {
            Box::pin(async move {
                let schema =
                    json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
                let reply = relay(&ctx, relay_form("user_name", message, schema))?;
                let name = reply.accepted("user_name").and_then(|c| c.get("name")).cloned().unwrap_or(Value::Null);
                Ok(json!({ out: name }))
            })
        }
    }
    let graph = StateGraph::new()
        .add_step("first", ask("What is your name?", "first"))
        .add_step("second", ask("What is your partner's name?", "second"))
        .add_edge(START, "first")
        .add_edge(START, "second");
    agent("relay_pair", "Relays two forms that use the same key.", no_arguments(), graph)
}

/// `issue_ticket`: asks for approval, then a later step draws a random ticket id, so a
/// resent answer that resumed the agent twice would show two different tickets.
pub fn issue_ticket() -> Agent {
    let graph = StateGraph::new()
        .add_step("approve", |_, ctx| async move {
            let schema =
                json!({"type": "object", "properties": {"approve": {"type": "boolean"}}, "required": ["approve"]});
            let reply = relay(&ctx, relay_form("approve", "Issue a ticket?", schema))?;
            let approved = reply.accepted("approve").and_then(|c| c.get("approve")) == Some(&Value::Bool(true));
            Ok(json!({ "approved": approved }))
        })
        .add_step("issue", |state, _| async move {
            let ticket = if state["approved"] == true { json!(uuid::Uuid::new_v4().to_string()) } else { Value::Null };
            Ok(json!({ "ticket": ticket }))
        })
        .add_edge(START, "approve")
        .add_edge("approve", "issue")
        .add_edge("issue", END)
        .output_keys(["ticket"]);
    agent("issue_ticket", "Issues a ticket once you approve.", no_arguments(), graph)
}

/// `echo_context`: asks `Say something.` and returns the answer with the runtime
/// context of the request that resumed it.
pub fn echo_context() -> Agent {
    let graph = StateGraph::new()
        .add_step("echo", |_, ctx| async move {
            let answer = ctx.interrupt(json!("Say something."))?;
            Ok(json!({ "answer": answer, "context": ctx.runtime_context().clone() }))
        })
        .add_edge(START, "echo")
        .add_edge("echo", END);
    agent("echo_context", "Echoes an answer and the runtime context.", no_arguments(), graph)
}

/// `release_gate`: no interrupt, a static breakpoint before its `release` step.
pub fn release_gate() -> Agent {
    let graph = StateGraph::new()
        .add_step("prepare", |_, _| async move { Ok(json!({ "prepared": true })) })
        .add_step("release", |_, _| async move { Ok(json!({ "released": true })) })
        .add_edge(START, "prepare")
        .add_edge("prepare", "release")
        .add_edge("release", END)
        .interrupt_before("release");
    agent("release_gate", "Stops at a static breakpoint before releasing.", no_arguments(), graph)
}

/// `unaskable`: interrupts that cannot be asked over MCP, one per `variant`.
pub fn unaskable() -> Agent {
    let graph = StateGraph::new()
        .add_step("ask", |state, ctx| async move {
            let variant = state["variant"].as_str().unwrap_or_default().to_owned();
            let (value, schema) = match variant.as_str() {
                "object" => (json!({"question": "Which region?"}), None),
                "pattern" => (
                    json!("Which code?"),
                    Some(
                        json!({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}}}),
                    ),
                ),
                "too_many_fields" => {
                    let fields: serde_json::Map<String, Value> =
                        (0..101).map(|i| (format!("field_{i}"), json!({"type": "string"}))).collect();
                    (json!("Fill in 101 fields."), Some(json!({"type": "object", "properties": fields})))
                }
                "bad_url" => (
                    json!({"type": "mcp_elicitation", "requests": [{
                        "key": "download", "message": "Open this.", "mode": "url", "url": "ftp://example.com/file"
                    }]}),
                    None,
                ),
                "nested" => (
                    json!("Where do you live?"),
                    Some(json!({"type": "object", "properties": {
                        "address": {"type": "object", "properties": {"street": {"type": "string"}}}
                    }})),
                ),
                other => return Err(StepError::msg(format!("unknown variant {other}"))),
            };
            let answer = match schema {
                Some(schema) => ctx.interrupt_with_schema(value, schema)?,
                None => ctx.interrupt(value)?,
            };
            Ok(json!({ "answer": answer }))
        })
        .add_edge(START, "ask")
        .add_edge("ask", END);
    let input = json!({
        "type": "object",
        "properties": {"variant": {"type": "string", "enum": ["object", "pattern", "too_many_fields", "bad_url", "nested"]}},
        "required": ["variant"],
        "additionalProperties": false
    });
    agent("unaskable", "Asks questions that cannot be asked over MCP.", input, graph)
}

/// The scripted model of the email assistants: it proposes `send_email` with the call's
/// `to` and `subject`, then answers from the tool's message.
struct EmailModel;

impl Model for EmailModel {
    fn next<'a>(
        &'a self,
        state: &'a Value,
    ) -> tool_agent::Pending<'a, Result<tool_agent::Answer, hitl_graph::StepError>> {
        Box::pin(async move { Ok(Self::turn(state).into()) })
    }
}

impl EmailModel {
    fn turn(state: &Value) -> Turn {
        let messages = state["messages"].as_array().cloned().unwrap_or_default();
        match messages.iter().rev().find(|m| m["role"] == "tool") {
            None => Turn::ToolCalls(vec![ToolCall {
                id: "call_1".into(),
                name: "send_email".into(),
                args: [("to".to_owned(), state["to"].clone()), ("subject".to_owned(), state["subject"].clone())]
                    .into_iter()
                    .collect(),
            }]),
            Some(tool) => {
                let content = tool["content"].as_str().unwrap_or_default();
                Turn::Message(match tool["status"].as_str() {
                    Some("error") => format!("I did not send the email: {content}"),
                    _ => format!("Done: {content}"),
                })
            }
        }
    }
}

/// `email_assistant` (batched review) and `email_assistant_per_call`: the model
/// proposes `send_email`, a person reviews the call.
pub fn email_assistant(mode: InterruptMode) -> Agent {
    let args_schema = json!({"type": "object", "properties": {
        "to": {"type": "string", "format": "email"},
        "subject": {"type": "string"}
    }, "required": ["to", "subject"]});
    let send_email = Tool {
        name: "send_email".into(),
        description: "Sends an email.".into(),
        review: None,
        gate: None,
        // Batched mode relies on the tool's own check when it runs; per-call mode also
        // puts the types in the review's response schema.
        args_schema: Some(args_schema),
        run: Arc::new(|args, _| {
            Box::pin(async move {
                Ok(format!(
                    "Sent the email to {} with subject {}.",
                    args["to"].as_str().unwrap_or_default(),
                    python_repr(&args["subject"])
                ))
            })
        }),
    };
    let (name, description) = match mode {
        InterruptMode::Batched => ("email_assistant", "Drafts and sends an email after you review the call."),
        InterruptMode::PerCall => ("email_assistant_per_call", "The email assistant, with one review per tool call."),
    };
    let input = json!({"type": "object", "properties": {"to": {"type": "string"}, "subject": {"type": "string"}},
                       "required": ["to", "subject"], "additionalProperties": false});
    tool_calling_agent(
        name,
        description,
        input,
        Arc::new(EmailModel),
        vec![send_email],
        HumanInTheLoop::all_decisions(&["send_email"], mode),
        |state| {
            let sent = state["ran"]
                .as_array()
                .and_then(|ran| ran.iter().rev().find(|r| r["name"] == "send_email"))
                .map_or(Value::Null, |r| r["args"].clone());
            let reply =
                state["messages"].as_array().and_then(|m| m.last()).map_or(Value::Null, |m| m["content"].clone());
            json!({ "sent": sent, "reply": reply })
        },
    )
}

/// A boxed step future, for step functions built by other functions.
mod futures_step {
    use std::future::Future;
    use std::pin::Pin;

    use hitl_graph::StepError;
    use serde_json::Value;

    /// The future a step returns.
    pub(crate) type Step = Pin<Box<dyn Future<Output = Result<Value, StepError>> + Send>>;
}

#[cfg(test)]
mod tests;
