//! The walking skeleton: a 2026-07-28 client pauses and resumes `choose_region`, and
//! every header and `_meta` rule of the modern wire answers with its error.

use serde_json::{Value, json};

use crate::harness::{Reply, Server, modern_meta};

fn error(reply: &Reply) -> (u16, i64) {
    (reply.status, reply.body["error"]["code"].as_i64().unwrap_or_else(|| panic!("not an error: {:?}", reply.body)))
}

fn meta_without(key: &str) -> Value {
    let mut meta = modern_meta(json!({}));
    meta.as_object_mut().unwrap().remove(key);
    meta
}

#[tokio::test]
async fn choose_region_pauses_and_resumes_over_http() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, json!({"name": "choose_region", "arguments": {}})).await;
    assert_eq!(first.status, 200);
    let result = &first.body["result"];
    assert_eq!(result["resultType"], "input_required");
    let (key, request) = result["inputRequests"].as_object().unwrap().iter().next().unwrap();
    assert!(key.starts_with("answer-") && key.len() == 23, "{key}");
    assert_eq!(
        request,
        &json!({"method": "elicitation/create", "params": {
            "mode": "form",
            "message": "Which region should the service deploy to?",
            "requestedSchema": {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]}
        }})
    );
    let state = result["requestState"].as_str().unwrap();
    assert!(state.split_once('.').is_some_and(|(id, token)| id.len() == 36 && token.len() == 43), "{state}");

    let answer = json!({
        "name": "choose_region", "arguments": {},
        "inputResponses": {key.as_str(): {"action": "accept", "content": {"response": "eu-west-1"}}},
        "requestState": state,
    });
    let done = server.call_tool(2, answer).await;
    assert_eq!(done.status, 200);
    assert_eq!(done.body["id"], 2);
    assert_eq!(done.body["result"]["resultType"], "complete");
    assert_eq!(done.body["result"]["content"], json!([{"type": "text", "text": r#"{"region":"eu-west-1"}"#}]));
    assert_eq!(done.body["result"]["structuredContent"], json!({"region": "eu-west-1"}));
    assert_eq!(done.body["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "hitl");
}

#[tokio::test]
async fn discover_and_tools_list() {
    let server = Server::start(&[]).await;
    let discover = server.modern(1, "server/discover", json!({}), json!({})).await;
    assert_eq!(discover.status, 200);
    let result = &discover.body["result"];
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["supportedVersions"][0], "2026-07-28");
    assert!(result["capabilities"]["tools"].is_object());
    assert!(result["ttlMs"].is_u64() && result["cacheScope"].is_string());
    let list = server.modern(2, "tools/list", json!({}), json!({})).await;
    let tools = list.body["result"]["tools"].as_array().unwrap();
    let choose_region = tools.iter().find(|t| t["name"] == "choose_region").expect("choose_region is listed");
    assert_eq!(choose_region["inputSchema"]["type"], "object");
    assert!(choose_region["description"].is_string());
    assert!(list.body["result"]["ttlMs"].is_u64());
    assert_eq!(list.body["result"]["cacheScope"], "public");
}

#[tokio::test]
async fn missing_meta_is_400_and_32602() {
    let server = Server::start(&[]).await;
    let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "server/discover")];
    let reply = server.post_raw(&headers, r#"{"jsonrpc":"2.0","id":101,"method":"server/discover","params":{}}"#).await;
    assert_eq!(error(&reply), (400, -32602));
    assert_eq!(reply.body["id"], 101);
    let reply = server.post_raw(&headers, r#"{"jsonrpc":"2.0","id":102,"method":"server/discover"}"#).await;
    assert_eq!(error(&reply), (400, -32602));
}

#[tokio::test]
async fn meta_without_protocol_version_or_capabilities_is_400_and_32602() {
    let server = Server::start(&[]).await;
    let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "server/discover")];
    for key in ["io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities"] {
        let body =
            json!({"jsonrpc": "2.0", "id": 3, "method": "server/discover", "params": {"_meta": meta_without(key)}});
        let reply = server.post_raw(&headers, body.to_string()).await;
        assert_eq!(error(&reply), (400, -32602), "{key}");
        assert!(reply.body["error"]["message"].as_str().unwrap().contains(key));
    }
}

#[tokio::test]
async fn client_info_is_optional() {
    let server = Server::start(&[]).await;
    let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "server/discover")];
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "server/discover",
                      "params": {"_meta": meta_without("io.modelcontextprotocol/clientInfo")}});
    assert_eq!(server.post_raw(&headers, body.to_string()).await.status, 200);
}

#[tokio::test]
async fn version_header_differing_from_meta_is_400_and_32020() {
    let server = Server::start(&[]).await;
    let mut meta = modern_meta(json!({}));
    meta["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "server/discover", "params": {"_meta": meta}});
    let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "server/discover")];
    let reply = server.post_raw(&headers, body.to_string()).await;
    assert_eq!(error(&reply), (400, -32020));
    assert!(reply.body["error"].get("data").is_none());
}

#[tokio::test]
async fn unsupported_version_is_400_and_32022() {
    let server = Server::start(&[]).await;
    let mut meta = modern_meta(json!({}));
    meta["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let body = json!({"jsonrpc": "2.0", "id": 6, "method": "server/discover", "params": {"_meta": meta}});
    let headers = [("mcp-protocol-version", "v999.0.0"), ("mcp-method", "server/discover")];
    let reply = server.post_raw(&headers, body.to_string()).await;
    assert_eq!(error(&reply), (400, -32022));
    assert_eq!(reply.body["error"]["data"]["requested"], "v999.0.0");
    assert!(reply.body["error"]["data"]["supported"].as_array().unwrap().contains(&json!("2026-07-28")));
}

#[tokio::test]
async fn method_header_missing_or_different_is_400_and_32020() {
    let server = Server::start(&[]).await;
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": modern_meta(json!({}))}});
    for headers in [
        vec![("mcp-protocol-version", "2026-07-28")],
        vec![("mcp-protocol-version", "2026-07-28"), ("mcp-method", "prompts/list")],
        vec![("mcp-protocol-version", "2026-07-28"), ("mcp-method", "TOOLS/LIST")],
    ] {
        let reply = server.post_raw(&headers, body.to_string()).await;
        assert_eq!(error(&reply), (400, -32020), "{headers:?}");
    }
    let ok = [("mcp-protocol-version", "2026-07-28"), ("MCP-METHOD", " tools/list ")];
    assert_eq!(server.post_raw(&ok, body.to_string()).await.status, 200);
}

#[tokio::test]
async fn name_header_missing_or_different_is_400_and_32020() {
    let server = Server::start(&[]).await;
    let body = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                      "params": {"name": "choose_region", "arguments": {}, "_meta": modern_meta(json!({"elicitation": {}}))}});
    let base = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call")];
    let reply = server.post_raw(&base, body.to_string()).await;
    assert_eq!(error(&reply), (400, -32020));
    let mut wrong = base.to_vec();
    wrong.push(("mcp-name", "wrong_tool_name"));
    assert_eq!(error(&server.post_raw(&wrong, body.to_string()).await), (400, -32020));
    let mut encoded = base.to_vec();
    encoded.push(("mcp-name", "=?base64?Y2hvb3NlX3JlZ2lvbg==?="));
    assert_eq!(server.post_raw(&encoded, body.to_string()).await.status, 200, "base64 form is decoded");
}

#[tokio::test]
async fn unknown_methods_are_404_and_32601() {
    let server = Server::start(&[]).await;
    for method in ["initialize", "ping", "logging/setLevel", "resources/subscribe", "unknown/method"] {
        let reply = server.modern(9, method, json!({}), json!({})).await;
        assert_eq!(error(&reply), (404, -32601), "{method}");
        assert_eq!(reply.body["id"], 9);
    }
}

#[tokio::test]
async fn get_and_delete_are_405() {
    let server = Server::start(&[]).await;
    for method in [http::Method::GET, http::Method::DELETE] {
        let reply = server.request(method.clone(), "/mcp", &[], Default::default()).await.unwrap();
        assert_eq!(reply.status, 405, "{method}");
        assert_eq!(reply.headers["allow"], "POST");
    }
}

#[tokio::test]
async fn malformed_messages_get_precise_errors() {
    let server = Server::start(&[]).await;
    let h = [("mcp-protocol-version", "2026-07-28")];
    let reply = server.post_raw(&h, r#"{"jsonrpc":"2.0","#).await;
    assert_eq!(error(&reply), (400, -32700));
    assert!(reply.body["id"].is_null());
    let reply = server.post_raw(&h, r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#).await;
    assert_eq!(error(&reply), (400, -32600));
    let reply = server.post_raw(&h, r#"{"jsonrpc":"1.0","id":"x","method":"tools/list"}"#).await;
    assert_eq!(error(&reply), (400, -32600));
    assert_eq!(reply.body["id"], "x");
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let server = Server::start(&["--max-body-bytes", "1024"]).await;
    let big = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"pad":"{}"}}}}"#, "x".repeat(4096));
    let reply = server.post_raw(&[("mcp-protocol-version", "2026-07-28")], big).await;
    assert_eq!(error(&reply), (413, -32600));
}
