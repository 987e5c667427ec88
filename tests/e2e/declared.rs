//! Agents declared in `hitl.toml` (`[[agent]]`), served by the hitl program in front of
//! a real upstream (the Python SDK's `MCPServer`, `tests/python/upstream_server.py`,
//! whose destructive tools count their executions), with a model API served by a
//! scripted server (`hitl_model::testing`) speaking the wire format of Chat Completions
//! or Anthropic Messages. Each test checks what the model API received.

use std::process::{Command, Stdio};

use hitl_model::testing::{Received, Scripted, server as model_server};
use serde_json::{Value, json};

use crate::gateway::ConfigFile;
use crate::harness::{Paused, Server, TEST_SECRET};
use crate::upstream::PythonUpstream;

/// The key the model's API key is read from, and its value.
const KEY_ENV: &str = "HITL_E2E_MODEL_KEY";
const KEY: &str = "sk-e2e-0123";

/// The hitl program serving `config` (written to a file), with the model's key in its
/// environment.
async fn serve(config: &str) -> (Server, ConfigFile) {
    let file = ConfigFile::write(config);
    let mut command = Command::new(Server::program());
    command.args(["serve", "--listen", "127.0.0.1:0", "--config", file.0.to_str().unwrap()]);
    if let Ok(store) = std::env::var("HITL_E2E_STORE") {
        command.args(["--store", &store]);
    }
    command.stderr(Stdio::inherit());
    let server = Server::spawn_command_with_env(command, &[("HITL_SECRET", TEST_SECRET), (KEY_ENV, KEY)]);
    server.wait_healthy().await;
    (server, file)
}

/// The upstream as `db` (drops reviewed with a description, `fail` denied) and `deploy`.
fn upstreams(upstream: &PythonUpstream) -> String {
    format!(
        r#"[[upstream]]
name = "db"
url = "{url}"

[[upstream]]
name = "deploy"
url = "{url}"

[[policy]]
tools = ["db.drop_*"]
action = "review"
description = "Drop {{partition}} on {{database}}?"

[[policy]]
tools = ["db.fail"]
action = "deny"
"#,
        url = upstream.url
    )
}

/// The seed 003 release gate, as the issue declares it.
const RELEASE: &str = r#"
[[agent]]
name = "release"
description = "Deploy a service version to production after confirmation"
kind = "workflow"
input_schema = { type = "object", properties = { service = { type = "string" }, version = { type = "string" } }, required = ["service", "version"] }
steps = [
  { ask = { message = "Deploying {service} to PRODUCTION ({version}). Confirm release?", schema = { type = "object", properties = { confirm = { type = "boolean", title = "Confirm Production Release" } }, required = ["confirm"] } } },
  { stop_unless = "confirm", result = "Deployment aborted by user." },
  { call = "deploy.release", args = { service = "{service}", version = "{version}" } },
]
"#;

async fn executions(server: &Server, tool: &str) -> u64 {
    let reply = server.call_tool(90, json!({"name": "db.executions", "arguments": {"tool": tool}})).await;
    reply.text().parse().unwrap_or_else(|_| panic!("a count: {}", reply.body))
}

fn approve() -> Value {
    json!({"action": "accept", "content": {"decision": "approve"}})
}

#[tokio::test]
async fn the_release_gate_as_a_workflow_confirms_aborts_and_declines() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let (server, _file) = serve(&format!("{}{RELEASE}", upstreams(&upstream))).await;
    let tools = server.modern(1, "tools/list", json!({}), json!({})).await;
    let release = tools.body["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "release").cloned();
    let release = release.unwrap_or_else(|| panic!("release is listed: {}", tools.body));
    assert_eq!(release["description"], "Deploy a service version to production after confirmation");
    assert_eq!(release["inputSchema"]["required"], json!(["service", "version"]));

    let args = json!({"service": "api", "version": "1.2.3"});
    let start = || server.call_tool(1, json!({"name": "release", "arguments": args}));
    let paused = Paused::of("release", args.clone(), &start().await).only();
    let (key, request) = (paused.key().to_owned(), paused.question());
    assert!(key.starts_with("answer-") && key.len() == "answer-".len() + 16, "keyed by the question: {key}");
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "Deploying api to PRODUCTION (1.2.3). Confirm release?");
    assert_eq!(
        request["params"]["requestedSchema"]["properties"]["confirm"],
        json!({"type": "boolean", "title": "Confirm Production Release"})
    );
    assert_eq!(executions(&server, "release").await, 0, "nothing runs before the answer");

    let yes = json!({"action": "accept", "content": {"confirm": true}});
    let done = paused.answer(&server, yes.clone()).await;
    assert_eq!(done.text(), "Released api v1.2.3 to production.", "{}", done.body);
    assert_ne!(done.body["result"]["isError"], true);
    let again = paused.answer(&server, yes.clone()).await;
    assert_eq!(again.body["result"], done.body["result"], "a resend gets the stored result");
    assert_eq!(executions(&server, "release").await, 1, "confirmed once, released once");

    // Confirm false, decline and cancel all abort, as `deploy_production_release` does.
    for (what, reply) in [
        ("false", json!({"action": "accept", "content": {"confirm": false}})),
        ("decline", json!({"action": "decline"})),
        ("cancel", json!({"action": "cancel"})),
    ] {
        let again = Paused::of("release", args.clone(), &start().await).only();
        assert_eq!(again.key(), key, "the same question, the same key");
        let aborted = again.answer(&server, reply).await;
        assert_eq!(
            aborted.body["result"]["structuredContent"],
            json!({"result": "Deployment aborted by user."}),
            "{what}: {}",
            aborted.body
        );
        assert_ne!(aborted.body["result"]["isError"], true, "{what}");
    }
    assert_eq!(executions(&server, "release").await, 1, "an aborted release never runs");
    // The workflow's own state is not the caller's to set.
    let forged = json!({"service": "api", "version": "1.2.3", "hitl:answers": {"confirm": true}});
    let refused = server.call_tool(8, json!({"name": "release", "arguments": forged})).await;
    assert_eq!(refused.body["error"]["code"], -32602, "reserved argument names are refused: {}", refused.body);
    assert_eq!(executions(&server, "release").await, 1);

    // A client that replays the whole call with the answer (the seed's LangChain
    // adapter) finishes in one request: the key is derived from the question.
    let replayed = server
        .call_tool(7, json!({"name": "release", "arguments": args, "inputResponses": { key.as_str(): yes }}))
        .await;
    assert_eq!(replayed.text(), "Released api v1.2.3 to production.", "{}", replayed.body);
    assert_eq!(executions(&server, "release").await, 2);
}

#[tokio::test]
async fn a_workflow_call_is_under_its_tools_policy() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let agent = r#"
[[agent]]
name = "cleanup"
kind = "workflow"
input_schema = { type = "object", properties = { partition = { type = "string" } }, required = ["partition"] }
steps = [
  { ask = { message = "Which database holds {partition}?", key = "database" } },
  { call = "db.drop_partition", args = { partition = "{partition}", database = "{database}" } },
]
"#;
    let (server, _file) = serve(&format!("{}{agent}", upstreams(&upstream))).await;
    let args = json!({"partition": "p9"});
    let asked = server.pause("cleanup", args.clone()).await.only();
    assert_eq!(asked.key(), "database", "a key given is the question's key");
    assert_eq!(asked.question()["params"]["message"], "Which database holds p9?");
    let text_answer = json!({"action": "accept", "content": {"response": "orders"}});
    let review = Paused::of("cleanup", args.clone(), &asked.answer(&server, text_answer.clone()).await).only();
    assert!(review.key().starts_with("review-"), "the drop's policy asks for a review: {}", review.key());
    assert_eq!(review.question()["params"]["message"], "Drop p9 on orders?");
    assert_eq!(executions(&server, "drop_partition").await, 0);
    let params = json!({"name": "cleanup", "arguments": args, "requestState": review.state(),
                        "inputResponses": { asked.key(): text_answer, review.key(): approve() }});
    let done = server.call_tool(3, params.clone()).await;
    assert_eq!(done.text(), "dropped p9 on orders", "{}", done.body);
    assert_eq!(server.call_tool(4, params).await.body["result"], done.body["result"]);
    assert_eq!(executions(&server, "drop_partition").await, 1, "approved once, run once");
}

/// A Chat Completions answer that calls `calls` (`(id, name, arguments)`).
fn openai_calls(calls: &[(&str, &str, Value)]) -> Scripted {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}))
        .collect();
    let body = json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": calls},
                      "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 50, "completion_tokens": 10}});
    (Some(200), body, None)
}

fn openai_text(text: &str) -> Scripted {
    let body = json!({"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 90, "completion_tokens": 8}});
    (Some(200), body, None)
}

fn db_assistant(base: &str, extra: &str) -> String {
    format!(
        r#"
[[agent]]
name = "db_assistant"
description = "Answers questions about the orders database"
kind = "tool_calling"
model = {{ provider = "openai", base_url = "{base}/v1", model = "llama3.1", api_key_env = "{KEY_ENV}"{extra} }}
system_prompt = "You help with the orders database."
tools = ["db.*"]
review_mode = "batched"
max_steps = 10
"#
    )
}

fn bodies(received: &Received) -> Vec<Value> {
    received.lock().unwrap().iter().map(|r| r.body.clone()).collect()
}

#[tokio::test]
async fn a_tool_calling_agent_runs_allowed_calls_reviews_and_denies_through_the_policies() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let script = vec![
        openai_calls(&[
            ("call_1", "db_echo", json!({"text": "hi"})),
            ("call_2", "db_drop_partition", json!({"partition": "p1", "database": "orders"})),
            ("call_3", "db_fail", json!({"reason": "x"})),
        ]),
        openai_text("Dropped p1 on orders."),
    ];
    let (base, received) = model_server(script).await;
    let (server, _file) = serve(&format!("{}{}", upstreams(&upstream), db_assistant(&base, ""))).await;
    let args = json!({"request": "Say hi, then drop p1 of orders."});
    let paused = server.pause("db_assistant", args.clone()).await.only();
    let (key, request) = (paused.key(), paused.question());
    assert!(key.starts_with("review-") && key.ends_with(".1"), "one batched review question: {key}");
    assert_eq!(request["params"]["message"], "Drop p1 on orders?", "the policy's text: {request}");
    assert_eq!(executions(&server, "drop_partition").await, 0, "nothing of the turn runs before the review");

    let done = paused.answer(&server, approve()).await;
    assert_eq!(done.text(), "Dropped p1 on orders.", "{}", done.body);
    let structured = &done.body["result"]["structuredContent"];
    assert_eq!(structured["usage"], json!({"input_tokens": 140, "output_tokens": 18, "model_turns": 2}));
    let ran: Vec<&str> =
        structured["tool_calls"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(ran, ["db.echo", "db.drop_partition"], "the denied call never ran");
    let again = paused.answer(&server, approve()).await;
    assert_eq!(again.body["result"], done.body["result"], "a resend gets the stored result");
    assert_eq!(executions(&server, "drop_partition").await, 1, "approved once, run once");

    let requests = received.lock().unwrap().clone();
    assert_eq!(requests.len(), 2, "one request per model turn, none on the resend");
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].headers["authorization"], format!("Bearer {KEY}"));
    let first = &requests[0].body;
    assert_eq!(first["model"], "llama3.1");
    assert_eq!(first["messages"][0], json!({"role": "system", "content": "You help with the orders database."}));
    assert_eq!(first["messages"][1], json!({"role": "user", "content": "Say hi, then drop p1 of orders."}));
    let offered: Vec<&str> =
        first["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    for name in ["db_echo", "db_drop_partition", "db_fail", "db_executions"] {
        assert!(offered.contains(&name), "{name} offered under an API-safe name: {offered:?}");
    }
    assert!(!offered.iter().any(|n| n.starts_with("deploy_")), "only the tools the agent names: {offered:?}");
    let echo = first["tools"].as_array().unwrap().iter().find(|t| t["function"]["name"] == "db_echo").unwrap();
    assert_eq!(echo["type"], "function");
    assert_eq!(echo["function"]["parameters"]["properties"]["text"]["type"], "string", "{echo}");

    let second = requests[1].body["messages"].as_array().unwrap().clone();
    assert_eq!(second[2]["role"], "assistant");
    let ids: Vec<&str> = second[2]["tool_calls"].as_array().unwrap().iter().filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(ids, ["call_1", "call_2", "call_3"]);
    assert_eq!(second[2]["tool_calls"][1]["function"]["name"], "db_drop_partition");
    let tool_messages: Vec<(&str, &str)> = second[3..]
        .iter()
        .map(|m| {
            assert_eq!(m["role"], "tool", "{m}");
            (m["tool_call_id"].as_str().unwrap(), m["content"].as_str().unwrap())
        })
        .collect();
    assert_eq!(tool_messages[0], ("call_1", "hi"));
    assert_eq!(tool_messages[1], ("call_2", "dropped p1 on orders"));
    assert_eq!(tool_messages[2].0, "call_3");
    assert!(tool_messages[2].1.contains("db.fail is denied by the policy"), "{:?}", tool_messages[2]);
}

#[tokio::test]
async fn an_anthropic_agent_reviews_each_call_and_the_model_sees_the_rejection() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let tool_use = |id: &str, partition: &str| json!({"type": "tool_use", "id": id, "name": "db_drop_partition", "input": {"partition": partition, "database": "orders"}});
    let script = vec![
        (
            Some(200),
            json!({"type": "message", "role": "assistant", "stop_reason": "tool_use",
                   "content": [{"type": "text", "text": "Dropping both."}, tool_use("toolu_1", "p1"), tool_use("toolu_2", "p2")],
                   "usage": {"input_tokens": 30, "output_tokens": 12}}),
            None,
        ),
        (
            Some(200),
            json!({"type": "message", "role": "assistant", "stop_reason": "end_turn",
                   "content": [{"type": "text", "text": "Dropped p2; p1 is kept."}],
                   "usage": {"input_tokens": 70, "output_tokens": 9}}),
            None,
        ),
    ];
    let (base, received) = model_server(script).await;
    let agent = format!(
        r#"
[[agent]]
name = "ops_assistant"
kind = "tool_calling"
model = {{ provider = "anthropic", base_url = "{base}", model = "claude-test", api_key_env = "{KEY_ENV}", max_tokens = 512 }}
system_prompt = "You run database operations."
tools = ["db.drop_*"]
review_mode = "per_call"
"#
    );
    let (server, _file) = serve(&format!("{}{agent}", upstreams(&upstream))).await;
    let args = json!({"request": "Drop p1 and p2 of orders."});
    let first = server.pause("ops_assistant", args.clone()).await.only();
    assert_eq!(first.question()["params"]["message"], "Drop p1 on orders?");
    let rejected = json!({"action": "accept", "content": {"decision": "reject", "message": "p1 is still in use"}});
    let second = Paused::of("ops_assistant", args.clone(), &first.answer(&server, rejected.clone()).await).only();
    assert_eq!(second.question()["params"]["message"], "Drop p2 on orders?", "per call: one round per call");
    let params = json!({"name": "ops_assistant", "arguments": args, "requestState": second.state(),
                        "inputResponses": { first.key(): rejected, second.key(): approve() }});
    let done = server.call_tool(3, params).await;
    assert_eq!(done.text(), "Dropped p2; p1 is kept.", "{}", done.body);
    assert_eq!(executions(&server, "drop_partition").await, 1, "the rejected call never ran");

    let requests = received.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].headers["x-api-key"], KEY);
    assert_eq!(requests[0].headers["anthropic-version"], "2023-06-01");
    let first = &requests[0].body;
    assert_eq!((&first["model"], &first["max_tokens"]), (&json!("claude-test"), &json!(512)));
    assert_eq!(first["system"], "You run database operations.");
    let offered: Vec<&str> = first["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(offered, ["db_drop_partition"]);
    assert_eq!(first["tools"][0]["input_schema"]["properties"]["partition"]["type"], "string");
    let messages = requests[1].body["messages"].as_array().unwrap().clone();
    assert_eq!(messages[1]["role"], "assistant");
    let results = messages[2]["content"].as_array().unwrap();
    assert_eq!(messages[2]["role"], "user", "a turn's tool results in one user message");
    assert_eq!((&results[0]["tool_use_id"], &results[0]["is_error"]), (&json!("toolu_1"), &json!(true)));
    assert_eq!(results[0]["content"], "p1 is still in use", "{results:?}");
    assert_eq!(results[1]["tool_use_id"], "toolu_2");
    assert_eq!(results[1]["content"], "dropped p2 on orders");
}

#[tokio::test]
async fn model_errors_and_timeouts_end_the_call_with_an_error_result_and_keep_the_round() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let script = vec![
        (Some(500), json!({"error": {"message": "the model is overloaded"}}), None),
        openai_calls(&[("call_9", "db_drop_partition", json!({"partition": "p3", "database": "orders"}))]),
        // Held unanswered: the model times out.
        (None, Value::Null, None),
        openai_text("Dropped p3."),
    ];
    let (base, received) = model_server(script).await;
    let config = db_assistant(&base, ", timeout = 1, max_retries = 0");
    let (server, _file) = serve(&format!("{}{config}", upstreams(&upstream))).await;
    let args = json!({"request": "Drop p3 of orders."});
    let failed = server.call_tool(1, json!({"name": "db_assistant", "arguments": args})).await;
    assert_eq!(failed.body["result"]["isError"], true, "{}", failed.body);
    assert!(failed.text().contains("answered HTTP 500"), "{}", failed.body);

    let paused = server.pause("db_assistant", args.clone()).await.only();
    let timed_out = paused.answer(&server, approve()).await;
    assert_eq!(timed_out.body["result"]["isError"], true, "{}", timed_out.body);
    let message = timed_out.text();
    assert!(message.contains("did not answer within 1 s") && message.contains("still paused"), "{message}");
    assert_eq!(executions(&server, "drop_partition").await, 1, "the approved call ran before the model stalled");

    // The round is still there: the same answers try the model again, and the drop is
    // not done twice.
    let done = paused.answer(&server, approve()).await;
    assert_eq!(done.text(), "Dropped p3.", "{}", done.body);
    assert_eq!(paused.answer(&server, approve()).await.body["result"], done.body["result"]);
    assert_eq!(executions(&server, "drop_partition").await, 1);
    assert_eq!(bodies(&received).len(), 4, "the failed turn, the call, the stalled turn, its retry");
}

#[tokio::test]
async fn declared_agents_with_problems_are_refused_at_their_line() {
    let agent = r#"
[[agent]]
name = "release"
kind = "workflow"
steps = [
  { ask = { message = "Release {service}?" } },
]
"#;
    let file = ConfigFile::write(agent);
    let output =
        Command::new(Server::program()).args(["check", "--config", file.0.to_str().unwrap()]).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(":6:23: agent[0].steps[0].ask.message: {service} names no argument of the tool"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_workflow_sends_people_to_a_page_and_takes_a_secret_only_to_its_call() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let agent = r#"
[[agent]]
name = "connect_orders"
kind = "workflow"
steps = [
  { ask = { message = "Sign in to the orders console", url = "https://console.example.com/login", key = "signed_in" } },
  { stop_unless = "signed_in", result = "Not signed in." },
  { ask = { message = "Paste the orders API token", secret = "Orders API token", key = "token" } },
  { call = "db.digest", args = { text = "{token}" } },
]
"#;
    let (server, _file) = serve(&format!("{}{agent}", upstreams(&upstream))).await;
    let client = crate::approvals::url_client();
    let call = |id: u64, extra: Value| {
        let mut params = json!({"name": "connect_orders", "arguments": {}});
        params.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
        server.modern(id, "tools/call", params, client.clone())
    };
    let sign_in = Paused::of("connect_orders", json!({}), &call(1, json!({})).await).only();
    let (key, visit, state) = (sign_in.key(), sign_in.question(), sign_in.state());
    assert_eq!(key, "signed_in");
    assert_eq!(
        (&visit["params"]["mode"], &visit["params"]["url"]),
        (&json!("url"), &json!("https://console.example.com/login"))
    );
    let declined = call(2, json!({"requestState": state, "inputResponses": { key: {"action": "decline"} }})).await;
    assert_eq!(declined.body["result"]["structuredContent"], json!({"result": "Not signed in."}), "{}", declined.body);

    let visit = Paused::of("connect_orders", json!({}), &call(3, json!({})).await).only();
    let visited = json!({ visit.key(): {"action": "accept"} });
    let asked = call(4, json!({"requestState": visit.state(), "inputResponses": visited})).await;
    let typed = Paused::of("connect_orders", json!({}), &asked).only();
    let (secret_key, page) = (typed.key(), typed.question());
    let url = page["params"]["url"].as_str().unwrap();
    let path = url.strip_prefix(&format!("http://{}", server.addr)).expect("hitl's secret page").to_owned();
    assert!(path.starts_with("/secrets/"), "{path}");
    let (status, headers, html) = server.raw(http::Method::GET, &path, &[], bytes::Bytes::new()).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Orders API token"), "the page names the secret: {html}");
    let (cookie, csrf) = crate::approvals::csrf_of(&headers, &html);
    let form = [("content-type", "application/x-www-form-urlencoded"), ("cookie", cookie.as_str())];
    let secret = "orders-tok-5ecr3t";
    let body = bytes::Bytes::from(format!("csrf={csrf}&value={secret}"));
    let (status, _, saved) = server.raw(http::Method::POST, &path, &form, body).await;
    assert_eq!(status, 200, "{saved}");

    let answers = json!({ visit.key(): {"action": "accept"}, secret_key: {"action": "accept"} });
    let done = call(5, json!({"requestState": typed.state(), "inputResponses": answers})).await;
    assert_eq!(done.text(), crate::auth::sha256_hex(secret), "the call got the secret: {}", done.body);
    assert!(!format!("{}{}", asked.body, done.body).contains(secret), "and no MCP response shows it");
}

#[tokio::test]
async fn a_model_that_never_answers_stops_at_max_steps() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let echo = |id: &str| openai_calls(&[(id, "db_echo", json!({"text": id}))]);
    let (base, received) = model_server(vec![echo("call_1"), echo("call_2")]).await;
    let config = db_assistant(&base, "").replace("max_steps = 10", "max_steps = 2");
    let (server, _file) = serve(&format!("{}{config}", upstreams(&upstream))).await;
    let stopped = server.call_tool(1, json!({"name": "db_assistant", "arguments": {"request": "Echo forever."}})).await;
    assert_eq!(stopped.body["result"]["isError"], true, "{}", stopped.body);
    assert!(stopped.text().contains("2 turns without a final answer (max_steps = 2)"), "{}", stopped.body);
    assert_eq!(bodies(&received).len(), 2, "the model is not asked a third time");
}

/// Policies that see the call (`when`, `rate_limit`), and a declared agent's own calls
/// of the gateway's tools: each call is decided by the policy that decides it, as a
/// client's would be, in a tool-calling agent (when the model proposes it) and in a
/// workflow.
#[tokio::test]
async fn a_declared_agents_calls_are_decided_per_call_by_when_and_counted_by_rate_limits() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    // The nonce keeps the rate limit's count this test's own on a shared Redis.
    let nonce = format!("{:x}-{}", crate::approvals::now_ms(), std::process::id());
    let policies = format!(
        r#"[[upstream]]
name = "db"
url = "{url}"

[[policy]]
tools = ["db.drop_*"]
when = 'args.database == "prod"'
action = "review"
description = "Drop {{partition}} on {{database}}?"

[[policy]]
tools = ["db.drop_*"]
when = 'args.database.startsWith("tmp")'
action = "deny"

[[policy]]
tools = ["db.echo"]
action = "allow"
rate_limit = "2/minute"
description = "{nonce}"

[[policy]]
tools = ["db.*"]
action = "allow"

[[agent]]
name = "cleanup"
kind = "workflow"
input_schema = {{ type = "object", properties = {{ database = {{ type = "string" }} }}, required = ["database"] }}
steps = [
  {{ call = "db.drop_partition", args = {{ partition = "w1", database = "{{database}}" }} }},
]
"#,
        url = upstream.url
    );
    let drop =
        |id: &str, database: &str| (id.to_owned(), "db_drop_partition", json!({"partition": id, "database": database}));
    let calls = [
        ("e1".to_owned(), "db_echo", json!({"text": "one"})),
        ("e2".to_owned(), "db_echo", json!({"text": "two"})),
        ("e3".to_owned(), "db_echo", json!({"text": "three"})),
        drop("d_staging", "staging"),
        drop("d_tmp", "tmp_1"),
        drop("d_prod", "prod"),
    ];
    let calls: Vec<(&str, &str, Value)> =
        calls.iter().map(|(id, name, args)| (id.as_str(), *name, args.clone())).collect();
    let (base, received) = model_server(vec![openai_calls(&calls), openai_text("Done.")]).await;
    let (server, _file) = serve(&format!("{policies}{}", db_assistant(&base, ""))).await;

    // Only the drop on prod is reviewed: staging runs, tmp is denied, by their `when`.
    let args = json!({"request": "Clean up."});
    let paused = server.pause("db_assistant", args).await.only();
    assert_eq!(paused.question()["params"]["message"], "Drop d_prod on prod?", "{}", paused.question());
    let done = paused.answer(&server, approve()).await;
    assert_eq!(done.text(), "Done.", "{}", done.body);
    let second = bodies(&received)[1]["messages"].as_array().unwrap().clone();
    let told: std::collections::HashMap<&str, &str> = second
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| (m["tool_call_id"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!((told["e1"], told["e2"]), ("one", "two"), "{told:?}");
    assert!(told["e3"].contains("rate limit of 2/minute for tools = [\"db.echo\"] reached"), "{told:?}");
    assert_eq!(told["d_staging"], "dropped d_staging on staging", "{told:?}");
    assert!(told["d_tmp"].contains("db.drop_partition is denied by the policy"), "{told:?}");
    assert_eq!(told["d_prod"], "dropped d_prod on prod", "{told:?}");
    assert_eq!(executions(&server, "drop_partition").await, 2, "staging and the approved prod");

    // A workflow's call too: staging runs at once, tmp is denied, prod is asked.
    let staging = server.call_tool(5, json!({"name": "cleanup", "arguments": {"database": "staging"}})).await;
    assert_eq!(staging.text(), "dropped w1 on staging", "{}", staging.body);
    let tmp = server.call_tool(6, json!({"name": "cleanup", "arguments": {"database": "tmp_2"}})).await;
    assert!(tmp.text().contains("is denied by the policy"), "{}", tmp.body);
    let prod = server.pause("cleanup", json!({"database": "prod"})).await.only();
    assert_eq!(prod.question()["params"]["message"], "Drop w1 on prod?");
    assert_eq!(executions(&server, "drop_partition").await, 3, "staging's only");
}

#[tokio::test]
async fn a_tool_calling_agents_call_a_person_approved_carries_its_receipt_upstream() {
    let dir = std::env::temp_dir().join(format!("hitl-e2e-declared-receipts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (key, jwks) = (dir.join("receipt-key.pem"), dir.join("hitl-jwks.json"));
    std::fs::write(&key, crate::receipts::new_key()).unwrap();
    let jwks_arg = jwks.to_str().unwrap().to_owned();
    let Some(upstream) = PythonUpstream::start(&["--receipt-jwks", &jwks_arg, "--receipt-audience", "db"]) else {
        return;
    };
    let script = vec![
        openai_calls(&[("call_1", "db_verified_drop", json!({"partition": "p1", "database": "prod"}))]),
        openai_text("Dropped p1 on prod."),
    ];
    let (base, received) = model_server(script).await;
    let config = format!(
        r#"{}
[[policy]]
tools = ["db.verified_drop"]
action = "review"

[receipts]
key_file = "{}"
{}"#,
        upstreams(&upstream),
        key.display(),
        db_assistant(&base, "")
    );
    let (server, _file) = serve(&config).await;
    let (_, _, body) = server.raw(http::Method::GET, "/.well-known/hitl-receipts.jwks", &[], Default::default()).await;
    std::fs::write(&jwks, &body).unwrap();

    let paused = server.pause("db_assistant", json!({"request": "Drop p1 of prod."})).await.only();
    let done = paused.answer(&server, approve()).await;
    let told = bodies(&received)[1]["messages"][3].clone();
    assert_eq!(told["content"], "dropped p1 on prod, approved by ", "what the model was told: {told}");
    let ran = done.body["result"]["structuredContent"]["tool_calls"].clone();
    assert_eq!(
        ran,
        json!([{"name": "db.verified_drop", "args": {"partition": "p1", "database": "prod"}}]),
        "{}",
        done.body
    );
    assert_eq!(executions(&server, "verified_drop").await, 1, "the upstream took the receipt and ran it");
    let seen = server.call_tool(9, json!({"name": "db.receipt_seen", "arguments": {}})).await.text();
    let claims = crate::receipts::claims_of(&seen);
    assert_eq!((&claims["aud"], &claims["tool"]), (&json!("db"), &json!("verified_drop")), "{claims}");
    assert!(claims.get("sub").is_none(), "an anonymous caller is no subject: {claims}");
}

#[tokio::test]
async fn a_tool_calling_agents_call_edited_into_arguments_a_policy_denies_is_not_run() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let script = vec![
        openai_calls(&[("call_1", "db_drop_partition", json!({"partition": "p1", "database": "orders"}))]),
        openai_text("Not dropped."),
    ];
    let (base, received) = model_server(script).await;
    // First match wins: drops on prod are denied, the others reviewed.
    let deny = "[[policy]]\ntools = [\"db.drop_*\"]\nwhen = 'args.database == \"prod\"'\naction = \"deny\"\n\n";
    let (server, _file) = serve(&format!("{deny}{}{}", upstreams(&upstream), db_assistant(&base, ""))).await;
    let paused = server.pause("db_assistant", json!({"request": "Drop p1 of orders."})).await.only();
    let edit = json!({"action": "accept", "content": {"decision": "edit",
                      "args": r#"{"partition": "p1", "database": "prod"}"#}});
    let done = paused.answer(&server, edit).await;
    assert_eq!(done.text(), "Not dropped.", "{}", done.body);
    assert_eq!(executions(&server, "drop_partition").await, 0, "the edit into a denied call never ran");
    let told = bodies(&received)[1]["messages"][3].clone();
    assert!(told["content"].as_str().unwrap().contains("db.drop_partition is denied by the policy"), "{told}");
}
