//! The endpoint without sockets: requests through `oneshot`.

use std::sync::Arc;

use hitl_graph::{START, StateGraph};
use hitl_interrupt::{Lifetimes, MemoryStore, Secret, SystemClock};
use http::Method;
use serde_json::{Value, json};
use tower::ServiceExt as _;

use super::*;

fn service() -> McpService {
    let graph = StateGraph::new()
        .add_step("choose_region", |_, ctx| async move {
            Ok(json!({ "region": ctx.interrupt(json!("Which region should the service deploy to?"))? }))
        })
        .add_edge(START, "choose_region")
        .compile()
        .unwrap();
    let agent = Agent {
        name: "choose_region".into(),
        description: "Asks where to deploy.".into(),
        input_schema: json!({"type": "object", "properties": {}}),
        graph,
    };
    let engine =
        Engine::new(Arc::new(MemoryStore::default()), Arc::new(SystemClock), Secret::generate(), Lifetimes::default());
    McpService::new(vec![agent], engine, ServerOptions::default())
}

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
           "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}})
}

async fn post(svc: &McpService, headers: &[(&str, &str)], body: Value) -> (StatusCode, Value) {
    let mut request = http::Request::post("/mcp").header("content-type", "application/json");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = svc.clone().oneshot(request.body(Bytes::from(body.to_string())).unwrap()).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() })
}

fn modern(method: &str, name: Option<&str>) -> Vec<(&'static str, String)> {
    let mut h = vec![("mcp-protocol-version", "2026-07-28".to_owned()), ("mcp-method", method.to_owned())];
    if let Some(n) = name {
        h.push(("mcp-name", n.to_owned()));
    }
    h
}

fn refs<'a>(h: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    h.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[tokio::test]
async fn pause_and_resume_through_the_service() {
    let svc = service();
    let h = modern("tools/call", Some("choose_region"));
    let call = |extra: Value| {
        let mut params = json!({"name": "choose_region", "arguments": {}, "_meta": meta()});
        params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    };
    let (status, first) = post(&svc, &refs(&h), call(json!({}))).await;
    assert_eq!(status, 200);
    assert_eq!(first["result"]["resultType"], "input_required");
    assert_eq!(first["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "hitl");
    let requests = first["result"]["inputRequests"].as_object().unwrap();
    let key = requests.keys().next().unwrap().clone();
    let state = first["result"]["requestState"].clone();
    let answer = json!({"inputResponses": {key: {"action": "accept", "content": {"response": "eu-west-1"}}}, "requestState": state});
    let (status, done) = post(&svc, &refs(&h), call(answer)).await;
    assert_eq!(status, 200);
    assert_eq!(done["result"]["resultType"], "complete");
    assert_eq!(done["result"]["content"][0]["text"], r#"{"region":"eu-west-1"}"#);
}

#[tokio::test]
async fn get_and_delete_are_405() {
    for method in [Method::GET, Method::DELETE] {
        let request = http::Request::builder().method(method).uri("/mcp").body(Bytes::new()).unwrap();
        let response = service().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    }
}

#[tokio::test]
async fn unknown_methods_are_404_and_unknown_tools_400() {
    let svc = service();
    let h = modern("initialize", None);
    let (status, body) =
        post(&svc, &refs(&h), json!({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {"_meta": meta()}}))
            .await;
    assert_eq!(
        (status, body["error"]["code"].clone(), body["id"].clone()),
        (StatusCode::NOT_FOUND, json!(-32601), json!(7))
    );
    let h = modern("tools/call", Some("nope"));
    let (status, body) = post(
        &svc,
        &refs(&h),
        json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "nope", "_meta": meta()}}),
    )
    .await;
    assert_eq!((status, body["error"]["message"].clone()), (StatusCode::BAD_REQUEST, json!("Unknown tool: nope")));
}

#[tokio::test]
async fn legacy_clients_get_the_error_result() {
    let svc = service();
    let (status, body) = post(
        &svc,
        &[],
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "choose_region"}}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(body["result"].get("resultType").is_none());
    assert_eq!(body["result"]["isError"], true);
    assert_eq!(body["result"]["content"][0]["text"], hitl_interrupt::LEGACY_CANNOT_ANSWER);
    let pending: Value = serde_json::from_str(body["result"]["content"][1]["text"].as_str().unwrap()).unwrap();
    assert_eq!(pending[0]["value"], "Which region should the service deploy to?");
}

#[tokio::test]
async fn legacy_initialize_negotiates() {
    let svc = service();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let (status, body) = post(&svc, &[], init).await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(body["result"]["serverInfo"]["name"], "hitl");
    let (status, _) = post(&svc, &[], json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn foreign_hosts_and_origins_are_403() {
    use tower::Layer as _;
    let svc = ValidateOriginLayer::new(AllowedHosts::loopback()).layer(service());
    let request = |host: &str, origin: Option<&str>| {
        let mut r = http::Request::post("/mcp").header("host", host).header("content-type", "application/json");
        if let Some(o) = origin {
            r = r.header("origin", o);
        }
        r.body(Bytes::from(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)).unwrap()
    };
    for (host, origin, status) in [
        ("127.0.0.1:8123", None, StatusCode::OK),
        ("localhost:8123", Some("http://localhost:3000"), StatusCode::OK),
        ("[::1]:8123", None, StatusCode::OK),
        ("evil.example.com", None, StatusCode::FORBIDDEN),
        ("127.0.0.1:8123", Some("http://evil.example.com"), StatusCode::FORBIDDEN),
        ("127.0.0.1:8123", Some("null"), StatusCode::FORBIDDEN),
    ] {
        let response = svc.clone().oneshot(request(host, origin)).await.unwrap();
        assert_eq!(response.status(), status, "{host} {origin:?}");
    }
}

#[tokio::test]
async fn progress_streams_as_server_sent_events() {
    let svc = service();
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "choose_region", "arguments": {},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}, "progressToken": "p"}}});
    let request = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "choose_region")
        .body(Bytes::from(body.to_string()))
        .unwrap();
    let response = svc.oneshot(request).await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.headers()["x-accel-buffering"], "no");
    let text = String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    let messages: Vec<Value> =
        text.lines().filter_map(|l| l.strip_prefix("data: ")).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(messages[0]["method"], "notifications/progress");
    assert_eq!(messages[0]["params"]["progressToken"], "p");
    let last = messages.last().unwrap();
    assert_eq!(last["id"], 3);
    assert_eq!(last["result"]["resultType"], "input_required");
}

#[tokio::test]
async fn the_principal_comes_from_the_configured_header_only() {
    use tower::Layer as _;
    #[derive(Clone)]
    struct Seen(std::sync::Arc<std::sync::Mutex<Vec<Option<Principal>>>>);
    impl tower::Service<http::Request<Bytes>> for Seen {
        type Response = http::Response<McpBody>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;
        fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn call(&mut self, request: http::Request<Bytes>) -> Self::Future {
            self.0.lock().unwrap().push(request.extensions().get::<Principal>().cloned());
            std::future::ready(Ok(http::Response::new(body(Bytes::new()))))
        }
    }
    let seen = Seen(Default::default());
    let svc = PrincipalFromHeaderLayer::new(http::HeaderName::from_static("x-user")).layer(seen.clone());
    for header in [Some(" alice "), None, Some("")] {
        let mut request = http::Request::post("/mcp");
        if let Some(h) = header {
            request = request.header("x-user", h);
        }
        let mut request = request.body(Bytes::new()).unwrap();
        // A principal set by someone else upstream does not survive without the header.
        request.extensions_mut().insert(Principal("mallory".into()));
        svc.clone().oneshot(request).await.unwrap();
    }
    assert_eq!(*seen.0.lock().unwrap(), vec![Some(Principal("alice".into())), None, None]);
}
