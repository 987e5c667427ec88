//! What the conformance issue added to the product, over HTTP: agents as prompts with
//! `input_required` rounds, progress over SSE, Host/Origin checks, resources and
//! completions answered.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::harness::{Server, modern_meta};

#[tokio::test]
async fn prompts_run_agents_with_rounds() {
    let server = Server::start(&["--conformance-fixtures"]).await;
    let list = server.modern(1, "prompts/list", json!({}), json!({})).await;
    let prompts = list.body["result"]["prompts"].as_array().unwrap();
    assert!(prompts.iter().any(|p| p["name"] == "test_input_required_result_prompt"));
    assert_eq!(list.body["result"]["cacheScope"], "public");
    let first = server
        .modern(2, "prompts/get", json!({"name": "test_input_required_result_prompt"}), json!({"elicitation": {}}))
        .await;
    assert_eq!(first.body["result"]["resultType"], "input_required");
    let state = first.body["result"]["requestState"].clone();
    let answer = json!({"name": "test_input_required_result_prompt", "requestState": state,
                        "inputResponses": {"user_context": {"action": "accept", "content": {"context": "tests"}}}});
    let done = server.modern(3, "prompts/get", answer, json!({"elicitation": {}})).await;
    assert_eq!(done.body["result"]["messages"][0]["content"]["text"], "Context: tests");
    let args = server
        .modern(
            4,
            "prompts/get",
            json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "a", "arg2": "b"}}),
            json!({}),
        )
        .await;
    assert_eq!(args.body["result"]["messages"][0]["content"]["text"], "Prompt with arguments: arg1='a', arg2='b'");
}

#[tokio::test]
async fn progress_streams_over_sse_and_ends_with_the_response() {
    let server = Server::start(&["--conformance-fixtures"]).await;
    let mut meta = modern_meta(json!({}));
    meta["progressToken"] = json!("progress-test-1");
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "test_tool_with_progress", "arguments": {}, "_meta": meta}});
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "test_tool_with_progress"),
    ];
    let raw = server.raw(http::Method::POST, "/mcp", &headers, Bytes::from(body.to_string())).await;
    assert_eq!(raw.0, 200);
    assert_eq!(raw.1["content-type"], "text/event-stream");
    let messages: Vec<Value> =
        raw.2.lines().filter_map(|l| l.strip_prefix("data: ")).map(|l| serde_json::from_str(l).unwrap()).collect();
    let progress: Vec<u64> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["progress"].as_u64().unwrap())
        .collect();
    assert_eq!(progress, vec![0, 1, 2, 3]);
    let last = messages.last().unwrap();
    assert_eq!(last["id"], 7);
    assert_eq!(last["result"]["resultType"], "complete");
}

#[tokio::test]
async fn foreign_hosts_and_origins_are_refused() {
    let server = Server::start(&[]).await;
    let body = Bytes::from(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    let evil = server
        .raw(
            http::Method::POST,
            "/mcp",
            &[("host", "evil.example.com"), ("content-type", "application/json")],
            body.clone(),
        )
        .await;
    assert_eq!(evil.0, 403);
    let origin = server
        .raw(
            http::Method::POST,
            "/mcp",
            &[("origin", "http://evil.example.com"), ("content-type", "application/json")],
            body,
        )
        .await;
    assert_eq!(origin.0, 403);
}

#[tokio::test]
async fn resources_are_empty_and_completions_answer() {
    let server = Server::start(&[]).await;
    let list = server.modern(1, "resources/list", json!({}), json!({})).await;
    assert_eq!(list.body["result"]["resources"], json!([]));
    assert!(list.body["result"]["ttlMs"].is_u64());
    let read = server.modern(2, "resources/read", json!({"uri": "test://nothing"}), json!({})).await;
    assert_eq!((read.status, read.body["error"]["code"].clone()), (400, json!(-32602)));
    assert_eq!(read.body["error"]["data"]["uri"], "test://nothing");
    let complete = server
        .modern(
            3,
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "x"}, "argument": {"name": "a", "value": ""}}),
            json!({}),
        )
        .await;
    assert_eq!(complete.body["result"]["completion"]["values"], json!([]));
}

#[tokio::test]
async fn legacy_initialize_names_a_session() {
    let server = Server::start(&[]).await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let reply = server.post_raw(&[], init.to_string()).await;
    let session = reply.headers["mcp-session-id"].to_str().unwrap();
    assert!(!session.is_empty() && session.bytes().all(|b| (0x21..=0x7e).contains(&b)));
}

#[tokio::test]
async fn arguments_declared_as_headers_must_match_them() {
    let server = Server::start(&["--conformance-fixtures"]).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "test_custom_header", "arguments": {"region": "Hello"}, "_meta": modern_meta(json!({}))}});
    let base =
        [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "test_custom_header")];
    let with = |value: &'static str| {
        let mut h = base.to_vec();
        h.push(("mcp-param-region", value));
        h
    };
    let ok = server.post_raw(&with("=?base64?SGVsbG8=?="), body.to_string()).await;
    assert_eq!(ok.body["result"]["content"][0]["text"], r#"{"region":"Hello"}"#);
    for headers in [base.to_vec(), with("Bye"), with("=?base64?SGVsbG8?=")] {
        let reply = server.post_raw(&headers, body.to_string()).await;
        assert_eq!((reply.status, reply.body["error"]["code"].clone()), (400, json!(-32020)), "{headers:?}");
    }
}
