//! The endpoint without sockets: requests through `oneshot`.

use std::sync::Arc;

use hitl_graph::{START, StateGraph};
use hitl_interrupt::{Lifetimes, MemoryStore, Secret, SystemClock};
use http::Method;
use http_body_util::BodyExt as _;
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
    let agent =
        Agent::new("choose_region", "Asks where to deploy.", json!({"type": "object", "properties": {}}), graph);
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
    let check = |allowed: AllowedHosts, cases: &[(&'static str, &'static str, Option<&'static str>, StatusCode)]| {
        let svc = ValidateOriginLayer::new(allowed).layer(service());
        let cases = cases.to_vec();
        async move {
            for (uri, host, origin, status) in cases {
                let mut r = http::Request::post(uri).header("content-type", "application/json");
                if !host.is_empty() {
                    r = r.header("host", host);
                }
                if let Some(o) = origin {
                    r = r.header("origin", o);
                }
                let request = r.body(Bytes::from(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)).unwrap();
                let response = svc.clone().oneshot(request).await.unwrap();
                assert_eq!(response.status(), status, "{uri} {host} {origin:?}");
            }
        }
    };
    let (ok, forbidden) = (StatusCode::OK, StatusCode::FORBIDDEN);
    check(
        AllowedHosts::loopback(8123),
        &[
            ("/mcp", "127.0.0.1:8123", None, ok),
            ("/mcp", "LOCALHOST:8123", Some("http://localhost:3000"), ok),
            ("/mcp", "[::1]:8123", None, ok),
            ("/mcp", "localhost:9999", None, forbidden),
            ("/mcp", "localhost", None, forbidden),
            ("/mcp", "evil.example.com", None, forbidden),
            ("/mcp", "evil.example.com:8123", None, forbidden),
            ("/mcp", "127.0.0.1:8123", Some("http://evil.example.com"), forbidden),
            ("/mcp", "127.0.0.1:8123", Some("null"), forbidden),
            // HTTP/1.0 without Host; HTTP/2 names its authority in the URI.
            ("/mcp", "", None, forbidden),
            ("http://localhost:8123/mcp", "", None, ok),
            ("http://evil.example:8123/mcp", "", None, forbidden),
            ("http://evil.example:8123/mcp", "localhost:8123", None, forbidden),
        ],
    )
    .await;
    assert!(AllowedHosts::new(["localhost:http"]).is_err(), "a port must be a number");
    assert!(AllowedHosts::new(["https://hitl.example.com/"]).is_err(), "a URL is not a host");
    check(
        AllowedHosts::new(["hitl.example.com", "localhost:9999"]).unwrap(),
        &[
            ("/mcp", "hitl.example.com", None, ok),
            ("/mcp", "hitl.example.com:443", None, ok),
            ("/mcp", "localhost:9999", None, ok),
            ("/mcp", "localhost:8123", None, forbidden),
        ],
    )
    .await;
    check(AllowedHosts::any(), &[("/mcp", "", None, ok), ("/mcp", "evil.example", None, ok)]).await;
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
    let send = |values: Vec<http::HeaderValue>| {
        let svc = svc.clone();
        async move {
            let mut request = http::Request::post("/mcp").body(Bytes::new()).unwrap();
            for v in values {
                request.headers_mut().append("x-user", v);
            }
            // A principal set by someone else upstream never survives.
            request.extensions_mut().insert(Principal("mallory".into()));
            let response = svc.oneshot(request).await.unwrap();
            let status = response.status();
            let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
            let body: Value = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
            (status, body["error"]["message"].as_str().unwrap_or_default().to_owned())
        }
    };
    let value = |bytes: &[u8]| http::HeaderValue::from_bytes(bytes).unwrap();
    assert_eq!(send(vec![value(b" alice ")]).await.0, StatusCode::OK);
    assert_eq!(send(vec![value("jos\u{e9}".as_bytes())]).await.0, StatusCode::OK, "UTF-8 names are principals");
    for (values, why) in [
        (vec![], "the x-user header is missing"),
        (vec![value(b"  ")], "the x-user header is empty"),
        (vec![value(b"\xff\xfe")], "the x-user header is not UTF-8"),
        (vec![value(b"alice"), value(b"bob")], "the x-user header is repeated"),
    ] {
        let (status, message) = send(values).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(message, format!("Invalid request: Unauthorized: {why}"));
    }
    let principals = seen.0.lock().unwrap().clone();
    assert_eq!(principals, vec![Some(Principal("alice".into())), Some(Principal("jos\u{e9}".into()))]);
}

#[tokio::test]
async fn past_the_concurrency_limit_requests_get_503_until_a_body_ends() {
    use tower::Layer as _;
    let svc = MaxConcurrentRequestsLayer::new(1).layer(service());
    let ping = || {
        http::Request::post("/mcp")
            .header("content-type", "application/json")
            .body(Bytes::from(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#))
            .unwrap()
    };
    let first = svc.clone().oneshot(ping()).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    // The first response's body is not read yet: its request still counts.
    let busy = svc.clone().oneshot(ping()).await.unwrap();
    assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(busy.headers()["retry-after"], "1");
    let body: Value = serde_json::from_slice(&busy.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("busy"), "{body}");
    drop(first);
    assert_eq!(svc.clone().oneshot(ping()).await.unwrap().status(), StatusCode::OK);
}

/// A body that sends `first` and then never ends: a client that stopped mid-body.
struct Stalled(Option<Bytes>);

impl http_body::Body for Stalled {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        match self.0.take() {
            Some(bytes) => std::task::Poll::Ready(Some(Ok(http_body::Frame::data(bytes)))),
            None => std::task::Poll::Pending,
        }
    }
}

#[tokio::test]
async fn the_http_app_routes_and_limits_bodies_without_sockets() {
    use std::time::Duration;
    let store: Arc<dyn hitl_interrupt::ThreadStore> = Arc::new(MemoryStore::default());
    let limits = BodyLimits { max_bytes: 64, read_timeout: Duration::from_millis(50) };
    let app = HttpApp::new(Endpoint::new(service()), crate::store_ready(store), limits);
    let send = |uri: &str, content_length: Option<&str>, body: Stalled| {
        let mut request = http::Request::post(uri).header("content-type", "application/json");
        if let Some(n) = content_length {
            request = request.header("content-length", n);
        }
        app.clone().oneshot(request.body(body).unwrap())
    };
    let ping = Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    let health = send("/healthz", None, Stalled(None)).await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    assert_eq!(send("/elsewhere", None, Stalled(None)).await.unwrap().status(), StatusCode::NOT_FOUND);
    // Announced too large: refused without reading (the body would never end).
    let announced = send("/mcp", Some("65"), Stalled(None)).await.unwrap();
    assert_eq!(announced.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(announced.headers()["connection"], "close");
    // Larger than announced (or not announced): refused as it arrives.
    let sent = send("/mcp", None, Stalled(Some(Bytes::from(vec![b' '; 65])))).await.unwrap();
    assert_eq!(sent.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // A body that stops arriving: 408 after the read timeout.
    let stalled = send("/mcp", Some("40"), Stalled(Some(ping.slice(..10)))).await.unwrap();
    assert_eq!(stalled.status(), StatusCode::REQUEST_TIMEOUT);
    // A body that arrives reaches the endpoint.
    let served = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(ping))
        .unwrap();
    assert_eq!(app.clone().oneshot(served).await.unwrap().status(), StatusCode::OK);
}

#[test]
fn progress_on_a_token_strictly_increases_and_relayed_values_move_past_hitls_own() {
    let own = hitl_graph::Progress::at;
    let step = |value: f64, total: f64| hitl_graph::Progress {
        total: Some(total),
        message: Some(format!("{value}/{total}")),
        from_step: true,
        ..hitl_graph::Progress::at(value)
    };
    let mut sent = crate::sse::Sent::default();
    let shown: Vec<Option<(f64, Option<f64>)>> =
        [own(0.0), own(1.0), step(1.0, 3.0), step(2.0, 3.0), step(3.0, 3.0), own(2.0)]
            .iter()
            .map(|report| sent.next(report))
            .collect();
    let expected = vec![
        Some((0.0, None)),
        Some((1.0, None)),
        Some((2.0, Some(4.0))),
        Some((3.0, Some(4.0))),
        Some((4.0, Some(4.0))),
        None,
    ];
    assert_eq!(shown, expected, "the upstream's 1/3 after hitl's 1 is sent as 2/4, its next ones likewise");
    let mut fresh = crate::sse::Sent::default();
    assert_eq!(fresh.next(&step(5.0, 10.0)), Some((5.0, Some(10.0))), "a value already larger is sent as it is");
    assert_eq!(fresh.next(&step(5.0, 10.0)), Some((6.0, Some(11.0))), "a repeated one is moved past");
    assert_eq!(fresh.next(&own(3.0)), None, "hitl's own value that would not increase is dropped");
    assert_eq!(fresh.next(&step(f64::NAN, 1.0)), None, "a value that is no number is never sent");
}

#[tokio::test]
async fn a_call_that_does_not_read_straight_into_its_types_gets_the_trees_reading_and_errors() {
    // A `tools/call` is read straight into its types; one that does not read so (a
    // repeated key, a wrong type) is read as a JSON tree, whose rules say what is wrong
    // with it, as before there was a straight reading.
    let svc = service();
    let h = modern("tools/call", Some("choose_region"));
    let body = |params: &str| {
        let text = format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{params}}}"#);
        serde_json::from_str::<Value>(&text).map(|_| text).unwrap()
    };
    let meta = meta().to_string();
    let post_text = |text: String| {
        let svc = svc.clone();
        let h = h.clone();
        async move {
            let mut request = http::Request::post("/mcp").header("content-type", "application/json");
            for (k, v) in &h {
                request = request.header(*k, v.as_str());
            }
            let response = svc.oneshot(request.body(Bytes::from(text)).unwrap()).await.unwrap();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            serde_json::from_slice::<Value>(&bytes).unwrap()
        }
    };
    // A repeated name: the tree keeps the last, which the header does not match.
    let twice = post_text(body(&format!(r#"{{"name":"choose_region","name":"other","_meta":{meta}}}"#))).await;
    assert_eq!(twice["error"]["code"], -32020, "{twice}");
    let message = twice["error"]["message"].as_str().unwrap();
    assert!(message.contains("'choose_region' does not match body value 'other'"), "{message}");
    let with = |meta: &str, key: &str| format!("{},{key}}}", &meta[..meta.len() - 1]);
    let rows = [
        (r#"{"name":"choose_region","_meta":"x"}"#.to_owned(), -32602, "Invalid params: _meta must be an object"),
        (format!(r#"{{"name":"choose_region","arguments":[],"_meta":{meta}}}"#), -32602, "Invalid params at arguments"),
        (
            format!(r#"{{"name":"choose_region","requestState":5,"_meta":{meta}}}"#),
            -32602,
            "Invalid params at requestState",
        ),
        (format!(r#"{{"name":5,"_meta":{meta}}}"#), -32020, "does not match body value ''"),
        // `_meta` is read straight into the keys the server acts on; one of a wrong
        // type (`null` too) is left to the tree, which names it.
        (r#"{"name":"choose_region","_meta":null}"#.to_owned(), -32602, "Invalid params: _meta must be an object"),
        (
            r#"{"name":"choose_region","_meta":["2026-07-28",{}]}"#.to_owned(),
            -32602,
            "Invalid params: _meta must be an object",
        ),
        (r#"{"name":"choose_region","_meta":[]}"#.to_owned(), -32602, "Invalid params: _meta must be an object"),
        (
            r#"{"name":"choose_region","_meta":{"io.modelcontextprotocol/protocolVersion":3}}"#.to_owned(),
            -32602,
            r#"_meta["io.modelcontextprotocol/protocolVersion"] must be a string"#,
        ),
        (
            format!(r#"{{"name":"choose_region","_meta":{}}}"#, with(&meta, r#""io.modelcontextprotocol/clientInfo":null"#)),
            -32602,
            r#"Invalid params at _meta["io.modelcontextprotocol/clientInfo"]"#,
        ),
        (
            r#"{"name":"choose_region","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":[]}}"#.to_owned(),
            -32602,
            r#"Invalid params at _meta["io.modelcontextprotocol/clientCapabilities"]"#,
        ),
        (
            r#"{"name":"choose_region","_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}"#.to_owned(),
            -32602,
            r#"_meta["io.modelcontextprotocol/protocolVersion"] is required"#,
        ),
        (
            r#"{"name":"choose_region","_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}}"#.to_owned(),
            -32020,
            "Header mismatch",
        ),
        // Params as an array (a struct reads from one, by position): the tree finds no
        // name in them for the header to match.
        (format!(r#"["choose_region",{{}},null,null,null,{meta}]"#), -32020, "does not match body value ''"),
    ];
    for (params, code, said) in rows {
        let out = post_text(body(&params)).await;
        assert_eq!(out["id"], 7, "{params}: {out}");
        assert_eq!(out["error"]["code"], code, "{params}: {out}");
        let message = out["error"]["message"].as_str().unwrap();
        assert!(message.contains(said), "{params}: {message}");
    }
    // Read straight: the same call pauses, `_meta` read with it.
    let straight = post_text(body(&format!(r#"{{"name":"choose_region","arguments":{{}},"_meta":{meta}}}"#))).await;
    assert_eq!(straight["result"]["resultType"], "input_required", "{straight}");
}

/// A body must be JSON: `application/json` in any case, parameters allowed; anything
/// else is `415`, before the body is read.
#[tokio::test]
async fn a_body_that_is_not_json_by_its_content_type_is_refused() {
    let svc = service();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}).to_string();
    let post = |content_type: &'static [u8]| {
        let svc = svc.clone();
        let body = body.clone();
        async move {
            let request = http::Request::post("/mcp")
                .header("content-type", http::HeaderValue::from_bytes(content_type).unwrap())
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/list")
                .body(Bytes::from(body))
                .unwrap();
            svc.oneshot(request).await.unwrap().status()
        }
    };
    for taken in [&b"application/json"[..], b"Application/JSON; charset=utf-8", b"  application/json"] {
        assert_eq!(post(taken).await, StatusCode::OK, "{}", String::from_utf8_lossy(taken));
    }
    for refused in [&b"text/plain"[..], b"application/jso", b"", b"application/\xe9json"] {
        assert_eq!(post(refused).await, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{}", String::from_utf8_lossy(refused));
    }
}
