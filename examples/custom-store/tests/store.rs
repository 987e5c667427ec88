//! The store does what every hitl store must (the conformance suite), and a paused
//! `tools/call` is answered with the server keeping its thread in it.

use std::sync::Arc;

use custom_store::HashMapStore;
use hitl_thread::{Clock as _, PausedLedger as _, SystemClock, conformance};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[tokio::test]
async fn the_store_passes_the_conformance_suite() {
    let store = HashMapStore::default();
    let now = SystemClock.now_ms();
    conformance::run(&store, "hashmap", now).await;
    conformance::records(&store, "hashmap", now).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_call_is_answered_with_its_thread_in_the_store() {
    let store = Arc::new(HashMapStore::default());
    let server = hitl_server::Server::builder().agent(custom_agents::order_coffee()).store(store.clone()).build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(server.serve(listener, std::future::pending()));

    let paused = call(&addr, json!({})).await;
    let result = &paused["result"];
    assert_eq!(result["resultType"], "input_required", "{paused}");
    assert_eq!(store.paused(0, 10).await.unwrap().1, 1, "the paused call is counted in this store");

    let (key, _) = result["inputRequests"].as_object().unwrap().iter().next().unwrap();
    let answer = json!({"inputResponses": { key.clone(): {"action": "accept", "content": {"response": "large"}}},
                        "requestState": result["requestState"]});
    let done = call(&addr, answer).await;
    assert_eq!(done["result"]["structuredContent"], json!({"order": "one large flat white"}), "{done}");
    assert_eq!(store.paused(0, 10).await.unwrap().1, 0, "and no longer counted once answered");
}

/// POSTs a 2026-07-28 `tools/call` of `order_coffee` (with `extra` params) to `/mcp`;
/// the JSON body of the answer.
async fn call(addr: &str, extra: Value) -> Value {
    let mut params = json!({"name": "order_coffee", "arguments": {"drink": "flat white"}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    params.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap());
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: order_coffee\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    serde_json::from_str(reply.split_once("\r\n\r\n").unwrap().1).unwrap()
}
