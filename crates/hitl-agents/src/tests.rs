//! Each example driven through its pauses with the runtime alone.

use hitl_graph::{Interrupt, Outcome, ResumeValues};
use serde_json::{Value, json};

use super::*;

/// Runs `agent` with `input`, answering each pause with `answer(interrupt)`.
async fn drive(agent: Agent, input: Value, mut answer: impl FnMut(&Interrupt) -> Value, context: Value) -> Value {
    let mut outcome = agent.graph.invoke(input, Value::Null).await.unwrap();
    for _ in 0..10 {
        match outcome {
            Outcome::Done(output) => return output,
            Outcome::Paused { interrupts, checkpoint } => {
                let values: ResumeValues = interrupts.iter().map(|i| (i.id.clone(), answer(i))).collect();
                outcome = agent.graph.resume(checkpoint, values, context.clone()).await.unwrap();
            }
            Outcome::Breakpoint { .. } => panic!("no breakpoint expected"),
        }
    }
    panic!("too many pauses")
}

fn first_pause(agent: &Agent, input: Value) -> Vec<Interrupt> {
    // Example steps never wait on anything, so one poll finishes a run.
    let run = futures_util::FutureExt::now_or_never(agent.graph.invoke(input, Value::Null));
    match run.expect("the run finishes in one poll").unwrap() {
        Outcome::Paused { interrupts, .. } => interrupts,
        other => panic!("expected a pause, got {other:?}"),
    }
}

fn reply(key: &str, answer: Value) -> Value {
    json!({ "responses": { key: answer } })
}

#[tokio::test]
async fn greeter_greets_by_name_or_stranger() {
    let ok = drive(
        greeter(),
        json!({}),
        |_| reply("user_name", json!({"action": "accept", "content": {"name": "Ada"}})),
        Value::Null,
    );
    assert_eq!(ok.await, json!({"greeting": "Hello, Ada!"}));
    let no = drive(greeter(), json!({}), |_| reply("user_name", json!({"action": "decline"})), Value::Null);
    assert_eq!(no.await, json!({"greeting": "Hello, stranger!"}));
}

#[test]
fn greeter_relays_the_seed_request() {
    let interrupts = first_pause(&greeter(), json!({}));
    assert_eq!(interrupts[0].value["type"], "mcp_elicitation");
    assert_eq!(interrupts[0].value["requests"][0]["key"], "user_name");
    assert_eq!(interrupts[0].value["requests"][0]["message"], "What is your name?");
}

#[tokio::test]
async fn choose_region_returns_the_region() {
    let out = drive(choose_region(), json!({}), |_| json!("eu-west-1"), Value::Null).await;
    assert_eq!(out, json!({"region": "eu-west-1"}));
}

#[tokio::test]
async fn plan_deployment_returns_the_typed_answer() {
    let interrupts = first_pause(&plan_deployment(), json!({}));
    let schema = interrupts[0].response_schema.clone().unwrap();
    assert_eq!(schema["properties"]["replicas"]["maximum"], 10);
    let out = drive(plan_deployment(), json!({}), |_| json!({"region": "eu-west-1", "replicas": 3}), Value::Null).await;
    assert_eq!(out, json!({"region": "eu-west-1", "replicas": 3}));
}

#[tokio::test]
async fn connect_calendar_reports_the_flow() {
    let yes =
        drive(connect_calendar(), json!({}), |_| reply("calendar_auth", json!({"action": "accept"})), Value::Null);
    assert_eq!(yes.await, json!({"status": "connected"}));
    let no = drive(connect_calendar(), json!({}), |_| reply("calendar_auth", json!({"action": "cancel"})), Value::Null);
    assert_eq!(no.await, json!({"status": "not connected"}));
}

#[tokio::test]
async fn deploy_production_release_needs_confirm_true() {
    let input = json!({"service": "api", "version": "1.2.3"});
    let interrupts = first_pause(&deploy_production_release(), input.clone());
    assert_eq!(interrupts[0].value["requests"][0]["message"], "Deploying api to PRODUCTION (1.2.3). Confirm release?");
    let ok = drive(
        deploy_production_release(),
        input.clone(),
        |_| reply("confirm_release", json!({"action": "accept", "content": {"confirm": true}})),
        Value::Null,
    );
    assert_eq!(ok.await, json!({"result": "Successfully released api v1.2.3 to prod."}));
    let no = drive(
        deploy_production_release(),
        input,
        |_| reply("confirm_release", json!({"action": "accept", "content": {"confirm": false}})),
        Value::Null,
    );
    assert_eq!(no.await, json!({"result": "Deployment aborted by user."}));
}

#[tokio::test]
async fn onboarding_asks_two_rounds() {
    let mut rounds = Vec::new();
    let out = drive(
        onboarding(),
        json!({}),
        |i| {
            rounds.push(i.value.clone());
            if i.response_schema.is_some() { json!(36) } else { json!("Ada") }
        },
        Value::Null,
    )
    .await;
    assert_eq!(rounds, vec![json!("What is your name?"), json!("How old are you?")]);
    assert_eq!(out, json!({"name": "Ada", "age": 36}));
}

#[tokio::test]
async fn survey_asks_both_in_one_pause() {
    assert_eq!(first_pause_len(&survey()), 2);
    let out = drive(
        survey(),
        json!({}),
        |i| if i.value == "What is your quest?" { json!("grail") } else { json!("blue") },
        Value::Null,
    );
    assert_eq!(out.await, json!({"color": "blue", "quest": "grail"}));
}

fn first_pause_len(agent: &Agent) -> usize {
    first_pause(agent, json!({})).len()
}

#[tokio::test]
async fn twin_questions_ask_the_same_text() {
    let interrupts = first_pause(&twin_questions(), json!({}));
    assert_eq!(interrupts[0].value, interrupts[1].value);
    let out = drive(twin_questions(), json!({}), |_| json!("eu-west-1"), Value::Null).await;
    assert_eq!(out, json!({"primary": "eu-west-1", "secondary": "eu-west-1"}));
}

#[tokio::test]
async fn relay_pair_relays_the_same_key_twice() {
    let interrupts = first_pause(&relay_pair(), json!({}));
    assert_eq!(interrupts.len(), 2);
    let out = drive(
        relay_pair(),
        json!({}),
        |i| {
            let name = if i.step == "first" { "Ada" } else { "Charles" };
            reply("user_name", json!({"action": "accept", "content": {"name": name}}))
        },
        Value::Null,
    )
    .await;
    assert_eq!(out, json!({"first": "Ada", "second": "Charles"}));
}

#[tokio::test]
async fn issue_ticket_draws_a_ticket_when_approved() {
    let yes = drive(
        issue_ticket(),
        json!({}),
        |_| reply("approve", json!({"action": "accept", "content": {"approve": true}})),
        Value::Null,
    )
    .await;
    assert!(uuid::Uuid::parse_str(yes["ticket"].as_str().unwrap()).is_ok());
    let no = drive(issue_ticket(), json!({}), |_| reply("approve", json!({"action": "decline"})), Value::Null).await;
    assert_eq!(no, json!({"ticket": null}));
}

#[tokio::test]
async fn echo_context_returns_the_resuming_context() {
    let out = drive(echo_context(), json!({}), |_| json!("hi"), json!({"k": 1})).await;
    assert_eq!(out, json!({"answer": "hi", "context": {"k": 1}}));
}

#[tokio::test]
async fn release_gate_stops_at_its_breakpoint() {
    match release_gate().graph.invoke(json!({}), Value::Null).await.unwrap() {
        Outcome::Breakpoint { state, .. } => assert_eq!(state, json!({"prepared": true})),
        other => panic!("expected a breakpoint, got {other:?}"),
    }
}

#[test]
fn unaskable_pauses_for_every_variant() {
    for variant in ["object", "pattern", "too_many_fields", "bad_url", "nested"] {
        let interrupts = first_pause(&unaskable(), json!({ "variant": variant }));
        assert_eq!(interrupts.len(), 1, "{variant}");
    }
}

#[test]
fn names_are_unique_and_match_the_examples_doc() {
    let names: Vec<String> = examples().into_iter().map(|a| a.name).collect();
    let unique: std::collections::BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len());
    let doc = include_str!("../../../docs/examples.md");
    for name in &names {
        assert!(doc.contains(&format!("| `{name}` |")), "{name} is not in docs/examples.md");
    }
}

#[test]
fn python_repr_matches_python() {
    use crate::tool_agent::python_repr;
    assert_eq!(
        python_repr(&json!({"to": "ada@example.com", "subject": "Launch"})),
        "{'to': 'ada@example.com', 'subject': 'Launch'}"
    );
    assert_eq!(python_repr(&json!([true, false, null, 1.5, "it's"])), "[True, False, None, 1.5, \"it's\"]");
    assert_eq!(python_repr(&json!("a\nb\\")), "'a\\nb\\\\'");
}

#[tokio::test]
async fn a_chat_model_proposes_calls_that_are_reviewed_then_run_and_it_sees_their_results() {
    use hitl_model::ModelClient;
    use hitl_model::testing::server;
    use tool_agent::{InterruptMode, Tool, ToolReview};

    let call = json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "db_count", "arguments": "{\"table\":\"orders\"}"}},
        {"id": "call_b", "type": "function", "function": {"name": "db_drop", "arguments": "{\"table\":\"tmp\"}"}}]}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 9}});
    let done = json!({"choices": [{"message": {"role": "assistant", "content": "42 orders; tmp kept."}}],
                      "usage": {"prompt_tokens": 60, "completion_tokens": 6}});
    let (base, received) = server(vec![(Some(200), call, None), (Some(200), done, None)]).await;
    let spec = serde_json::from_value(json!({"provider": "openai", "base_url": base, "model": "m"})).unwrap();
    let client = ModelClient::new(&spec, |_| None).unwrap();
    let tool = |name: &'static str, review: Option<ToolReview>| Tool {
        name: name.into(),
        description: format!("{name} a table"),
        args_schema: Some(json!({"type": "object", "properties": {"table": {"type": "string"}}})),
        review,
        gate: None,
        run: std::sync::Arc::new(move |args, _| {
            Box::pin(async move { Ok(format!("{name} ran on {}", args["table"].as_str().unwrap_or_default())) })
        }),
    };
    let toolbox: std::sync::Arc<dyn tool_agent::Toolbox> =
        std::sync::Arc::new(vec![tool("db.count", None), tool("db.drop", Some(ToolReview::all_decisions()))]);
    let model = ChatModel::new(client, Some("You help with the orders database.".into()), toolbox.clone());
    let agent = tool_agent::tool_agent(
        "db_assistant",
        "",
        json!({"type": "object"}),
        std::sync::Arc::new(model),
        toolbox,
        InterruptMode::Batched,
        |state| {
            json!({"answer": state["messages"].as_array().and_then(|m| m.last()).map(|m| m["content"].clone()),
                       "usage": state["usage"].clone()})
        },
    );
    // db.drop is reviewed (batched: one interrupt for the turn's reviewed calls) and
    // rejected; db.count runs as asked.
    let mut reviewed = Vec::new();
    let output = drive(
        agent,
        json!({"request": "How many orders? And drop tmp."}),
        |interrupt| {
            reviewed.push(interrupt.value.clone());
            json!({"decisions": [{"type": "reject", "message": "keep tmp"}]})
        },
        Value::Null,
    )
    .await;
    assert_eq!(reviewed.len(), 1);
    assert_eq!(reviewed[0]["action_requests"][0]["name"], "db.drop");
    assert_eq!(output["answer"], "42 orders; tmp kept.");
    assert_eq!(
        output["usage"],
        json!([{"input_tokens": 20, "output_tokens": 9}, {"input_tokens": 60, "output_tokens": 6}])
    );

    let bodies: Vec<Value> = received.lock().unwrap().iter().map(|r| r.body.clone()).collect();
    assert_eq!(bodies.len(), 2, "the model is asked once per turn, never again on resume");
    assert_eq!(bodies[0]["messages"][1], json!({"role": "user", "content": "How many orders? And drop tmp."}));
    let second = bodies[1]["messages"].as_array().unwrap();
    let tool_messages: Vec<(&str, &str)> = second
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| (m["tool_call_id"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(tool_messages, [("call_a", "db.count ran on orders"), ("call_b", "keep tmp")]);
    assert_eq!(second[2]["tool_calls"][1]["function"]["name"], "db_drop", "tools are sent under API-safe names");
}

/// A toolbox whose tools change while a call waits (an upstream listed late).
struct Changing(std::sync::Mutex<Vec<Vec<tool_agent::Tool>>>);

impl tool_agent::Toolbox for Changing {
    fn tools(&self) -> Vec<tool_agent::Tool> {
        let mut lists = self.0.lock().unwrap();
        if lists.len() > 1 { lists.remove(0) } else { lists[0].clone() }
    }
}

/// Proposes `db.drop` and `db.count` (with these call ids), then answers.
struct Proposer(&'static str, &'static str);

impl tool_agent::Model for Proposer {
    fn next<'a>(&'a self, state: &'a Value) -> tool_agent::Pending<'a, Result<tool_agent::Answer, StepError>> {
        let turns = state["messages"].as_array().map_or(0, Vec::len);
        Box::pin(async move {
            let call =
                |id: &str, name: &str| ToolCall { id: id.into(), name: name.into(), args: serde_json::Map::new() };
            Ok(if turns == 0 {
                Turn::ToolCalls(vec![call(self.0, "db.drop"), call(self.1, "db.count")]).into()
            } else {
                Turn::Message("done".into()).into()
            })
        })
    }
}

/// A tool `name` that notes in `ran` each time it runs.
fn recording_tool(
    ran: &std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    name: &'static str,
    review: Option<tool_agent::ToolReview>,
) -> tool_agent::Tool {
    let ran = ran.clone();
    tool_agent::Tool {
        name: name.into(),
        description: String::new(),
        args_schema: None,
        review,
        gate: None,
        run: std::sync::Arc::new(move |_, _| {
            ran.lock().unwrap().push(name.to_owned());
            Box::pin(async move { Ok(format!("{name} ran")) })
        }),
    }
}

#[tokio::test]
async fn a_call_is_gated_as_its_tool_was_when_the_model_asked() {
    use tool_agent::ToolReview;
    let ran = std::sync::Arc::default();
    let tool = |name: &'static str, review: Option<ToolReview>| recording_tool(&ran, name, review);
    // When the model asks, db.count is reviewed and db.drop is not listed; by the time
    // the review is answered, db.drop is listed (reviewed) and db.count is not reviewed.
    let lists = vec![
        vec![tool("db.count", Some(ToolReview::all_decisions()))],
        vec![tool("db.count", None), tool("db.drop", Some(ToolReview::all_decisions()))],
    ];
    let agent = tool_agent::tool_agent(
        "db_assistant",
        "",
        json!({"type": "object"}),
        std::sync::Arc::new(Proposer("a", "b")),
        std::sync::Arc::new(Changing(std::sync::Mutex::new(lists))),
        InterruptMode::Batched,
        |state| json!({"messages": state["messages"].clone()}),
    );
    let mut asked = Vec::new();
    let output = drive(
        agent,
        json!({}),
        |interrupt| {
            asked.push(interrupt.value["action_requests"].clone());
            json!({"decisions": [{"type": "reject", "message": "not now"}]})
        },
        Value::Null,
    )
    .await;
    assert_eq!(asked.len(), 1);
    let names: Vec<&str> = asked[0].as_array().unwrap().iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(names, ["db.count"], "the review asked is the one the model's turn had");
    assert!(
        ran.lock().unwrap().is_empty(),
        "the rejected call and the unknown one never ran: {:?}",
        ran.lock().unwrap()
    );
    let tool_messages: Vec<String> = output["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(tool_messages, ["Error: db.drop is not a valid tool", "not now"]);
}

#[tokio::test]
async fn two_calls_of_one_turn_that_share_an_id_never_run_under_each_others_decision() {
    use tool_agent::ToolReview;
    // The model gives a reviewed drop and a count one id: the review's one decision
    // could be taken for either, so neither runs; the model is told why.
    let ran = std::sync::Arc::default();
    let tools = vec![
        recording_tool(&ran, "db.count", None),
        recording_tool(&ran, "db.drop", Some(ToolReview::all_decisions())),
    ];
    let agent = tool_agent::tool_agent(
        "db_assistant",
        "",
        json!({"type": "object"}),
        std::sync::Arc::new(Proposer("same", "same")),
        std::sync::Arc::new(tools),
        InterruptMode::Batched,
        |state| json!({"messages": state["messages"].clone()}),
    );
    let output = drive(agent, json!({}), |_| json!({"decisions": [{"type": "approve"}]}), Value::Null).await;
    assert!(ran.lock().unwrap().is_empty(), "neither call ran: {:?}", ran.lock().unwrap());
    let told: Vec<&str> = output["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(told.len(), 2);
    assert!(told.iter().all(|t| t.contains("used by more than one call")), "{told:?}");
}
