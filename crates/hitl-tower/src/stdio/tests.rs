//! The stdio transport over in-memory pipes: both eras, push elicitation answered on
//! the input, bad lines, and the end of input.

use std::sync::Arc;
use std::time::Duration;

use hitl_graph::{START, StateGraph};
use hitl_interrupt::{Agent, Engine, Lifetimes, MemoryStore, Secret, SystemClock};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, DuplexStream};

use super::*;
use crate::{McpService, ServerOptions};

fn endpoint() -> Endpoint {
    let graph = StateGraph::new()
        .add_step("ask", |_, ctx| async move { Ok(json!({ "name": ctx.interrupt(json!("What is your name?"))? })) })
        .add_edge(START, "ask")
        .compile()
        .unwrap();
    let agent = Agent::new("greeter", "Asks a name.", json!({"type": "object", "properties": {}}), graph);
    let engine =
        Engine::new(Arc::new(MemoryStore::default()), Arc::new(SystemClock), Secret::generate(), Lifetimes::default());
    Endpoint::new(McpService::new(vec![agent], engine, ServerOptions::default()))
}

/// A client's ends of a connection served with `max` bytes per message.
struct Client {
    input: DuplexStream,
    output: tokio::io::Lines<BufReader<DuplexStream>>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Client {
    fn start(max: usize) -> Self {
        let (input, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, output) = tokio::io::duplex(1 << 16);
        let options = StdioOptions { principal: Principal("user:local".into()), push: true, max_message_bytes: max };
        let served = tokio::spawn(serve_stdio(endpoint(), options, BufReader::new(server_in), server_out));
        Self { input, output: BufReader::new(output).lines(), served }
    }

    async fn send(&mut self, message: &str) {
        self.input.write_all(message.as_bytes()).await.unwrap();
        self.input.write_all(b"\n").await.unwrap();
    }

    /// The next line, which must be one JSON-RPC message.
    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.output.next_line()).await.unwrap().unwrap();
        let line = line.expect("a line before the output ends");
        let message: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert_eq!(message["jsonrpc"], "2.0", "{line}");
        message
    }
}

fn modern(id: u64, method: &str, params: Value) -> String {
    let mut params = params;
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}});
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

#[tokio::test]
async fn a_2026_client_completes_a_round_without_headers() {
    let mut client = Client::start(1 << 20);
    client.send(&modern(1, "server/discover", json!({}))).await;
    assert_eq!(client.next().await["result"]["supportedVersions"][0], "2026-07-28");
    client.send(&modern(2, "tools/call", json!({"name": "greeter", "arguments": {}}))).await;
    let round = client.next().await;
    assert_eq!(round["id"], 2);
    assert_eq!(round["result"]["resultType"], "input_required", "{round}");
    let key = round["result"]["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let retry = json!({"name": "greeter", "arguments": {}, "requestState": round["result"]["requestState"],
                       "inputResponses": {key: {"action": "accept", "content": {"response": "Ada"}}}});
    client.send(&modern(3, "tools/call", retry)).await;
    let done = client.next().await;
    assert_eq!(done["id"], 3);
    assert_eq!(done["result"]["structuredContent"], json!({"name": "Ada"}), "{done}");
}

#[tokio::test]
async fn a_2025_client_is_asked_by_push_and_answers_on_its_input() {
    let mut client = Client::start(1 << 20);
    client
        .send(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "t", "version": "0"}}})
            .to_string(),
        )
        .await;
    let init = client.next().await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    client.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
    client.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"greeter","arguments":{}}}"#).await;
    let asked = client.next().await;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert_eq!(asked["params"]["message"], "What is your name?");
    // Another request is served while the call waits for its answer.
    client.send(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    assert_eq!(client.next().await, json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept",
                        "content": {"response": "Ada"}}});
    client.send(&answer.to_string()).await;
    let done = client.next().await;
    assert_eq!(done["id"], 1, "{done}");
    assert_eq!(done["result"]["structuredContent"], json!({"name": "Ada"}), "{done}");
}

#[tokio::test]
async fn bad_lines_get_parse_errors_and_the_loop_goes_on() {
    let mut client = Client::start(64);
    client.send("this is not json").await;
    let error = client.next().await;
    assert_eq!((error["id"].clone(), error["error"]["code"].clone()), (Value::Null, json!(-32700)), "{error}");
    client
        .send(&format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(200)))
        .await;
    let error = client.next().await;
    assert_eq!((error["id"].clone(), error["error"]["code"].clone()), (Value::Null, json!(-32700)), "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains("exceeds 64 bytes"), "{error}");
    client.send("").await;
    client.send(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#).await;
    assert_eq!(client.next().await, json!({"jsonrpc": "2.0", "id": 3, "result": {}}));
    drop(client.input);
    let served = tokio::time::timeout(Duration::from_secs(2), client.served).await.unwrap().unwrap();
    assert!(served.is_ok(), "{served:?}");
    assert!(client.output.next_line().await.unwrap().is_none(), "the output ends with the input");
}
