//! The app of the example on a loopback port: its own routes answer, and a paused call
//! to hitl under `/hitl` completes over HTTP.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};

use serde_json::{Value, json};

/// Sends one HTTP/1.1 request; the status line with the headers, and the body.
fn send(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    (head.to_owned(), body.to_owned())
}

fn order(addr: SocketAddr, extra: Value) -> Value {
    let mut params = json!({"name": "order_coffee", "arguments": {"drink": "flat white"}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    params.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string();
    let headers = "Content-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\n\
                   Mcp-Method: tools/call\r\nMcp-Name: order_coffee\r\n";
    let (head, body) = send(addr, "POST", "/hitl/mcp", headers, &body);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_serves_its_routes_and_a_paused_call_under_hitl() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum_embed::app(&format!("http://{addr}/hitl"));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    tokio::task::spawn_blocking(move || {
        let (head, body) = send(addr, "GET", "/orders", "", "");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body, "[]");
        let (head, body) = send(addr, "GET", "/hitl/livez", "", "");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body, r#"{"status":"ok"}"#);
        // hitl's own paths are not served outside its mount.
        let (head, _) = send(addr, "POST", "/mcp", "", "{}");
        assert!(head.starts_with("HTTP/1.1 404"), "{head}");

        // The pages' redirects, links and cookies name the mount.
        let (head, _) = send(addr, "GET", "/hitl/approvals", "", "");
        assert!(head.starts_with("HTTP/1.1 303"), "{head}");
        assert!(head.to_ascii_lowercase().contains("\r\nlocation: /hitl/login?next=%2fapprovals"), "{head}");
        let (head, page) = send(addr, "GET", "/hitl/login?next=%2Fapprovals", "", "");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(page.contains(r#"href="/hitl/pages/style.css""#) && page.contains(r#"action="/hitl/login""#), "{page}");
        let cookies: Vec<&str> = head.lines().filter(|l| l.to_ascii_lowercase().starts_with("set-cookie:")).collect();
        assert!(!cookies.is_empty() && cookies.iter().all(|c| c.contains("Path=/hitl;")), "{cookies:?}");
        let (head, css) = send(addr, "GET", "/hitl/pages/style.css", "", "");
        assert!(head.starts_with("HTTP/1.1 200") && !css.is_empty(), "{head}");

        let paused = order(addr, json!({}));
        let result = &paused["result"];
        assert_eq!(result["resultType"], "input_required", "{paused}");
        let (key, request) = result["inputRequests"].as_object().unwrap().iter().next().unwrap();
        assert_eq!(request["params"]["message"], "Which size of flat white: small, medium or large?");
        let answer = json!({"inputResponses": {key.clone(): {"action": "accept", "content": {"response": "large"}}},
                            "requestState": result["requestState"]});
        let done = order(addr, answer);
        assert_eq!(done["result"]["structuredContent"], json!({"order": "one large flat white"}), "{done}");
    })
    .await
    .unwrap();
}
