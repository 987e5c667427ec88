//! Logs and traces over the real program: `--log-format json` writes one JSON object
//! per line with the thread id of the span it is in; `--otlp-endpoint` exports the
//! spans (request, round, agent run, store operation, upstream call) to a local
//! OTLP/HTTP receiver, in the trace a request's `traceparent` names, and the upstream
//! (the Python SDK's) gets that trace's `traceparent`.

use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::gateway::ConfigFile;
use crate::harness::{Server, TEST_SECRET};
use crate::upstream::PythonUpstream;

const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// A local OTLP/HTTP receiver: keeps every JSON body POSTed to `/v1/traces`.
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let sink = sink.clone();
                let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let sink = sink.clone();
                    async move {
                        let path = request.uri().path().to_owned();
                        let body = request.into_body().collect().await.unwrap().to_bytes();
                        if path == "/v1/traces" {
                            sink.lock().unwrap().push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                        }
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from_static(b"{}"))))
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        Self { url, got }
    }

    /// `(name, traceId, attributes)` of every span received.
    fn spans(&self) -> Vec<(String, String, Value)> {
        let got = self.got.lock().unwrap();
        let mut spans = Vec::new();
        for body in got.iter() {
            for resource in body["resourceSpans"].as_array().into_iter().flatten() {
                for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                    for span in scope["spans"].as_array().into_iter().flatten() {
                        let name = span["name"].as_str().unwrap_or_default().to_owned();
                        let trace = span["traceId"].as_str().unwrap_or_default().to_lowercase();
                        spans.push((name, trace, span["attributes"].clone()));
                    }
                }
            }
        }
        spans
    }
}

fn attribute<'a>(attributes: &'a Value, key: &str) -> Option<&'a str> {
    attributes.as_array()?.iter().find(|a| a["key"] == key)?["value"]["stringValue"].as_str()
}

#[tokio::test]
async fn spans_reach_an_otlp_receiver_in_the_callers_trace_and_the_upstream_gets_it() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let receiver = Receiver::start().await;
    let config = ConfigFile::write(&format!("[[upstream]]\nname = \"db\"\nurl = \"{}\"\n", upstream.url));
    let mut command = Command::new(Server::program());
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--config", config.0.to_str().unwrap()])
        .args(["--otlp-endpoint", &receiver.url, "--log-format", "json"])
        .stderr(Stdio::piped());
    let mut server = Server::spawn_command_with_env(
        command,
        &[("HITL_SECRET", TEST_SECRET), ("OTEL_BSP_SCHEDULE_DELAY", "100"), ("RUST_LOG", "warn,hitl_server=info")],
    );
    server.wait_healthy().await;
    let stderr = server.take_stderr().unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });

    // A paused call and its answer, and an upstream call, each with the caller's traceparent.
    let traced = |id: u64, params: Value| {
        let server = &server;
        async move {
            let mut full = json!({ "_meta": crate::harness::modern_meta(json!({"elicitation": {}})) });
            full.as_object_mut().unwrap().extend(params.as_object().cloned().unwrap());
            let name = full["name"].as_str().unwrap().to_owned();
            let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": full});
            let headers = [
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", name.as_str()),
                ("traceparent", TRACEPARENT),
            ];
            server.post_raw(&headers, body.to_string()).await.body
        }
    };
    let paused = traced(1, json!({"name": "greeter", "arguments": {}})).await;
    let state = paused["result"]["requestState"].as_str().unwrap_or_else(|| panic!("{paused}")).to_owned();
    let thread = state.split_once('.').unwrap().0.to_owned();
    let answer = json!({"user_name": {"action": "accept", "content": {"name": "Ada"}}});
    let done =
        traced(2, json!({"name": "greeter", "arguments": {}, "requestState": state, "inputResponses": answer})).await;
    assert_eq!(done["result"]["structuredContent"]["greeting"], "Hello, Ada!", "{done}");
    let seen = traced(3, json!({"name": "db.traceparent", "arguments": {}})).await;
    let upstream_traceparent = seen["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{seen}"));
    assert!(upstream_traceparent.starts_with(&format!("00-{TRACE_ID}-")), "the upstream got {upstream_traceparent:?}");
    assert!(!upstream_traceparent.contains("b7ad6b7169203331"), "a span of hitl's is its parent");

    let mut spans = Vec::new();
    for _ in 0..150 {
        spans = receiver.spans();
        let names: Vec<&str> = spans.iter().filter(|(_, t, _)| t == TRACE_ID).map(|(n, _, _)| n.as_str()).collect();
        if ["request", "round", "agent_run", "store", "upstream_call"].iter().all(|n| names.contains(n)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let in_trace: Vec<&(String, String, Value)> = spans.iter().filter(|(_, t, _)| t == TRACE_ID).collect();
    for name in ["request", "round", "agent_run", "store", "upstream_call"] {
        assert!(in_trace.iter().any(|(n, _, _)| n == name), "no {name} span in the caller's trace: {spans:?}");
    }
    let round = in_trace.iter().find(|(n, _, a)| n == "round" && attribute(a, "tool") == Some("greeter")).unwrap();
    assert_eq!(attribute(&round.2, "thread_id"), Some(thread.as_str()), "{round:?}");
    let store = in_trace.iter().find(|(n, _, a)| n == "store" && attribute(a, "thread_id") == Some(thread.as_str()));
    assert!(store.is_some(), "a store operation on the thread: {in_trace:?}");

    // JSON logs: every line an object with its level and time.
    server.kill();
    let lines = lines.lock().unwrap().clone();
    assert!(!lines.is_empty());
    for line in &lines {
        let parsed: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(parsed["level"].is_string() && parsed["timestamp"].is_string(), "{line}");
    }
}
