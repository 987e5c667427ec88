//! One upstream session per caller: the hitl program in front of a 2025-era upstream
//! that keeps state per session (the Python SDK's `MCPServer`, spoken to in 2025-11-25,
//! `tests/python/upstream_server.py`: `session_id`, `remember`, `recall`, `ended`).
//! Two callers (two tokens, two 2025-era client sessions) never share an upstream
//! session, a caller keeps its own across calls and a review (resumed on another
//! replica too: in that replica's session for the same caller), and an idle one is
//! ended.

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};

use crate::auth::{Setup, request_as};
use crate::gateway::ConfigFile;
use crate::harness::{Reply, Server};
use crate::upstream::PythonUpstream;

/// The configuration: `db` spoken to in 2025-11-25 (so it gives sessions), its
/// `recall` reviewed, with `extra` after it.
fn config(upstream: &PythonUpstream, extra: &str) -> String {
    format!(
        r#"[[upstream]]
name = "db"
url = "{}"
protocol = "2025-11-25"
{extra}

[[policy]]
tools = ["db.recall"]
action = "review"
"#,
        upstream.url
    )
}

/// A 2026-07-28 caller: its token (none without auth) and declared capabilities.
#[derive(Clone, Copy)]
struct Modern<'a> {
    token: Option<&'a str>,
    capabilities: &'a str,
}

impl Modern<'_> {
    async fn call(&self, server: &Server, tool: &str, arguments: Value) -> Reply {
        let capabilities: Value = serde_json::from_str(self.capabilities).unwrap();
        let params = json!({"name": tool, "arguments": arguments});
        let reply = request_as(server, self.token, capabilities, 1, "tools/call", params).await;
        assert_eq!(reply.status, 200, "{tool}: {}", reply.body);
        reply
    }

    /// The text `tool` answers with.
    async fn text(&self, server: &Server, tool: &str, arguments: Value) -> String {
        self.call(server, tool, arguments).await.text()
    }
}

/// A 2025-11-25 client of hitl: its token and the session `initialize` gave it (or
/// one it presents).
struct Legacy<'a> {
    token: Option<&'a str>,
    session: String,
}

impl<'a> Legacy<'a> {
    async fn open(server: &Server, token: Option<&'a str>) -> Legacy<'a> {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}});
        let reply = post(server, token, None, &init).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let session = reply.headers["mcp-session-id"].to_str().unwrap().to_owned();
        Legacy { token, session }
    }

    async fn text(&self, server: &Server, tool: &str, arguments: Value) -> String {
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": tool, "arguments": arguments}});
        let reply = post(server, self.token, Some(&self.session), &call).await;
        assert_eq!(reply.status, 200, "{tool}: {}", reply.body);
        reply.text()
    }
}

/// A 2025-era POST of `message`, with `token` and `session` when given.
async fn post(server: &Server, token: Option<&str>, session: Option<&str>, message: &Value) -> Reply {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
    if let Some(session) = session {
        headers.extend([("mcp-session-id", session), ("mcp-protocol-version", "2025-11-25")]);
    }
    if let Some(bearer) = &bearer {
        headers.push(("authorization", bearer.as_str()));
    }
    let (status, headers, body) =
        server.raw(http::Method::POST, "/mcp", &headers, Bytes::from(message.to_string())).await;
    let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
    Reply { status, headers, body }
}

#[tokio::test]
async fn two_tokens_get_two_upstream_sessions_and_each_keeps_its_own() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let auth = "[auth]\ntokens_file = \"tokens.txt\"\nauthorization_servers = [\"https://idp.example\"]\n";
    let setup = Setup::new(&format!("{auth}\n{}", config(&upstream, "")));
    let server = setup.serve().await;
    let alice = Modern { token: Some("tok-alice"), capabilities: r#"{"elicitation": {}}"# };
    let bob = Modern { token: Some("tok-bob"), capabilities: r#"{"elicitation": {}}"# };

    let a = alice.text(&server, "db.session_id", json!({})).await;
    let b = bob.text(&server, "db.session_id", json!({})).await;
    assert!(!a.is_empty() && !b.is_empty(), "the upstream gives sessions: {a:?} {b:?}");
    assert_ne!(a, b, "two callers, two upstream sessions");
    assert_eq!(alice.text(&server, "db.session_id", json!({})).await, a, "a caller keeps its session");

    assert_eq!(alice.text(&server, "db.remember", json!({"note": "alice's secret"})).await, "remembered");
    // bob's recall is reviewed too: approved, it runs in bob's session, which has no note.
    assert_eq!(recall(&server, bob).await, "", "one caller cannot read another's session state");
    assert_eq!(recall(&server, alice).await, "alice's secret", "a reviewed call resumes in its caller's session");
    assert_eq!(bob.text(&server, "db.session_id", json!({})).await, b);

    // The same principal declaring other capabilities is another caller to the upstream.
    let plain = Modern { token: Some("tok-alice"), capabilities: "{}" };
    let other = plain.text(&server, "db.session_id", json!({})).await;
    assert!(other != a && other != b, "{other:?}");

    // A 2025-era client's session with hitl is its own too; bob presenting alice's
    // session id (taken from her traffic) still gets a session of his own.
    let legacy = Legacy::open(&server, Some("tok-alice")).await;
    let in_legacy = legacy.text(&server, "db.session_id", json!({})).await;
    assert!(![&a, &b, &other].contains(&&in_legacy), "{in_legacy:?}");
    assert_eq!(legacy.text(&server, "db.remember", json!({"note": "legacy note"})).await, "remembered");
    let thief = Legacy { token: Some("tok-bob"), session: legacy.session.clone() };
    let stolen = thief.text(&server, "db.session_id", json!({})).await;
    assert!(![&a, &in_legacy].contains(&&stolen), "bob with alice's session id: {stolen:?}");
    assert_eq!(legacy.text(&server, "db.session_id", json!({})).await, in_legacy);
}

/// Calls the reviewed `db.recall` as `caller`, approves it, and returns its result.
async fn recall(server: &Server, caller: Modern<'_>) -> String {
    let paused = caller.call(server, "db.recall", json!({})).await;
    let result = &paused.body["result"];
    assert_eq!(result["resultType"], "input_required", "{result}");
    let key = result["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let answer = json!({ key.as_str(): {"action": "accept", "content": {"decision": "approve"}} });
    let capabilities: Value = serde_json::from_str(caller.capabilities).unwrap();
    let params = json!({"name": "db.recall", "arguments": {}, "inputResponses": answer,
                        "requestState": result["requestState"]});
    let done = request_as(server, caller.token, capabilities, 2, "tools/call", params).await;
    assert_ne!(done.body["result"]["isError"], true, "{}", done.body);
    done.text()
}

#[tokio::test]
async fn two_2025_era_client_sessions_get_two_upstream_sessions() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let file = ConfigFile::write(&config(&upstream, ""));
    let server = file.serve().await;
    let (first, second) = (Legacy::open(&server, None).await, Legacy::open(&server, None).await);
    assert_ne!(first.session, second.session);

    let one = first.text(&server, "db.session_id", json!({})).await;
    let two = second.text(&server, "db.session_id", json!({})).await;
    assert!(!one.is_empty() && one != two, "{one:?} {two:?}");
    assert_eq!(first.text(&server, "db.remember", json!({"note": "first"})).await, "remembered");
    assert_eq!(first.text(&server, "db.session_id", json!({})).await, one, "a client session keeps its own");

    // A session id hitl did not issue names no session: it is not the first's.
    let forged = Legacy { token: None, session: format!("{}x", first.session) };
    let unsigned = forged.text(&server, "db.session_id", json!({})).await;
    assert!(unsigned != one && unsigned != two, "{unsigned:?}");
}

#[tokio::test]
async fn an_idle_upstream_session_is_ended_and_a_new_one_opened_on_the_next_call() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let file = ConfigFile::write(&config(&upstream, "session_idle = 1"));
    let server = file.serve().await;
    let caller = Modern { token: None, capabilities: r#"{"elicitation": {}}"# };
    let watcher = Modern { token: None, capabilities: "{}" };

    let first = caller.text(&server, "db.session_id", json!({})).await;
    assert!(!first.is_empty());
    assert_eq!(caller.text(&server, "db.remember", json!({"note": "kept"})).await, "remembered");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ended = watcher.text(&server, "db.ended", json!({})).await;
        if ended.split(',').any(|s| s == first) {
            break;
        }
        assert!(Instant::now() < deadline, "the idle session {first} was never ended: {ended:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let next = caller.text(&server, "db.session_id", json!({})).await;
    assert!(!next.is_empty() && next != first, "a new session after the idle one was ended: {next:?}");
    let ended = watcher.text(&server, "db.ended", json!({})).await;
    assert!(!ended.split(',').any(|s| s == next), "the new session is open: {ended:?}");
}

#[tokio::test]
async fn a_reviewed_call_resumed_on_another_replica_runs_in_its_callers_session_there() {
    let Some(url) = crate::harness::redis_url("trust_sessions") else { return };
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let file = ConfigFile::write(&config(&upstream, ""));
    // The suite's Redis outlives a run: one caller's default share of paused calls is
    // too small for all of them.
    let args = ["--config", file.0.to_str().unwrap(), "--max-paused-per-caller", "1000000"];
    let one = Server::start_on(&url, &args).await;
    let two = Server::start_on(&url, &args).await;
    let alice = Modern { token: None, capabilities: r#"{"elicitation": {}}"# };
    let bob = Modern { token: None, capabilities: "{}" };

    // alice's session on replica two holds her note; bob's there holds his.
    assert_eq!(alice.text(&two, "db.remember", json!({"note": "alice on two"})).await, "remembered");
    assert_eq!(bob.text(&two, "db.remember", json!({"note": "bob on two"})).await, "remembered");
    // Paused for review on replica one, approved through replica two: it runs there, in
    // a session for alice's key (hers, not bob's, not one of its own).
    let paused = alice.call(&one, "db.recall", json!({})).await;
    let result = &paused.body["result"];
    assert_eq!(result["resultType"], "input_required", "{result}");
    let key = result["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let answer = json!({ key.as_str(): {"action": "accept", "content": {"decision": "approve"}} });
    let params = json!({"name": "db.recall", "arguments": {}, "inputResponses": answer,
                        "requestState": result["requestState"]});
    let done = request_as(&two, None, json!({"elicitation": {}}), 2, "tools/call", params).await;
    assert_eq!(done.text(), "alice on two", "{}", done.body);
}

/// The text of an upstream's tool result, from `hitl-upstream` directly.
fn upstream_text(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("a text result: {result}")).to_owned()
}

#[tokio::test]
async fn a_flood_of_callers_keeps_at_most_the_cap_of_upstream_sessions() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let client =
        std::sync::Arc::new(upstream.client("db", Some("2025-11-25")).with_sessions(Duration::from_secs(300), 2));
    let call = |key: String, tool: &'static str| {
        let client = client.clone();
        async move {
            let call = client.call_tool_for(Some(&key), tool, serde_json::Map::new(), serde_json::Map::new());
            upstream_text(&call.await.unwrap())
        }
    };
    let mut seen = Vec::new();
    for n in 0..5 {
        seen.push(call(format!("caller-{n}"), "session_id").await);
        assert!(client.sessions() <= 2, "{} sessions after {} callers", client.sessions(), n + 1);
    }
    seen.dedup();
    assert_eq!(seen.len(), 5, "each caller its own session: {seen:?}");
    // The three least recently used were ended upstream, the two latest were not.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ended = upstream_text(&client.call_tool("ended", serde_json::Map::new()).await.unwrap());
        let ended: Vec<&str> = ended.split(',').collect();
        if seen[..3].iter().all(|s| ended.contains(&s.as_str())) {
            assert!(!ended.contains(&seen[3].as_str()) && !ended.contains(&seen[4].as_str()), "{ended:?}");
            break;
        }
        assert!(Instant::now() < deadline, "the sessions past the cap were never ended: {ended:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(call("caller-4".into(), "session_id").await, seen[4], "a kept session is kept");
}
