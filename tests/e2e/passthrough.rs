//! Everything an upstream serves, not only tools (issue #29): server-everything's
//! resources, resource templates and prompts through hitl, a resource link one of its
//! tools returns, `[[policy]]` on resources and prompts, and list changes reaching
//! hitl's own clients (a 2026-07-28 `subscriptions/listen` stream, a 2025-era session's
//! GET stream).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::field::Everything;
use crate::gateway::ConfigFile;
use crate::harness::{Client, Server, cannot_run};
use crate::upstream::PythonUpstream;

/// server-everything on a free port, and hitl in front of it as `ev` with `extra`
/// configuration (policies).
async fn everything(extra: &str, args: &[&str]) -> Option<(Everything, ConfigFile, Server)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let upstream = Everything::start(port).await?;
    let file =
        ConfigFile::write(&format!("[[upstream]]\nname = \"ev\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n{extra}"));
    let mut all = vec!["--config", file.0.to_str().unwrap()];
    all.extend_from_slice(args);
    let server = Server::start(&all).await;
    Some((upstream, file, server))
}

async fn modern(client: &Client, id: u64, method: &str, params: Value) -> Value {
    let reply = client.modern(id, method, params, json!({})).await;
    reply.body
}

fn uris(list: &Value, key: &str, field: &str) -> Vec<String> {
    list["result"][key]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter_map(|r| r[field].as_str())
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn resources_templates_and_prompts_of_server_everything_pass_through() {
    let Some((_upstream, _file, server)) = everything("", &[]).await else { return };

    let listed = modern(&server, 1, "resources/list", json!({})).await;
    let resources = uris(&listed, "resources", "uri");
    let document = resources.iter().find(|u| u.starts_with("demo://resource/static/document/")).cloned();
    let document =
        document.unwrap_or_else(|| panic!("its static documents are listed, URIs as it gave them: {listed}"));
    assert_eq!(listed["result"]["resultType"], "complete", "{listed}");
    assert_eq!(listed["result"]["cacheScope"], "public", "no caller decides what is listed: {listed}");
    assert!(listed["result"]["ttlMs"].is_u64(), "{listed}");

    let templates = modern(&server, 2, "resources/templates/list", json!({})).await;
    let shapes = uris(&templates, "resourceTemplates", "uriTemplate");
    assert!(shapes.iter().any(|t| t == "demo://resource/dynamic/text/{resourceId}"), "{templates}");

    let read = modern(&server, 3, "resources/read", json!({"uri": document})).await;
    let contents = &read["result"]["contents"][0];
    assert_eq!(contents["uri"], document.as_str(), "{read}");
    assert!(contents["text"].as_str().is_some_and(|t| !t.is_empty()), "{read}");
    assert_eq!(read["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "hitl", "hitl answers: {read}");

    // A resource link one of its tools returns is read from it.
    let links = server.call_tool(4, json!({"name": "ev.get-resource-links", "arguments": {"count": 2}})).await;
    let link = links.body["result"]["content"]
        .as_array()
        .and_then(|c| {
            c.iter().find(|b| b["type"] == "resource_link" && b["uri"].as_str().is_some_and(|u| u.contains("/text/")))
        })
        .and_then(|b| b["uri"].as_str())
        .unwrap_or_else(|| panic!("a text resource link: {}", links.body))
        .to_owned();
    let read = modern(&server, 5, "resources/read", json!({"uri": link})).await;
    let text_read = read["result"]["contents"][0]["text"].as_str().unwrap_or_default();
    assert!(text_read.starts_with("Resource 2: This is a plaintext resource"), "{read}");

    let unknown = modern(&server, 6, "resources/read", json!({"uri": "nowhere://x"})).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert_eq!(unknown["error"]["message"], "Resource not found: nowhere://x");

    // Prompts, named as tools are.
    let prompts = modern(&server, 7, "prompts/list", json!({})).await;
    let names = uris(&prompts, "prompts", "name");
    assert!(names.iter().any(|n| n == "ev.simple-prompt") && names.iter().any(|n| n == "ev.args-prompt"), "{prompts}");
    let got =
        modern(&server, 8, "prompts/get", json!({"name": "ev.args-prompt", "arguments": {"city": "Lisbon"}})).await;
    let message = got["result"]["messages"][0]["content"]["text"].as_str().unwrap_or_default();
    assert!(message.contains("Lisbon"), "its arguments reach it: {got}");
    let unknown = modern(&server, 9, "prompts/get", json!({"name": "simple-prompt"})).await;
    assert_eq!(unknown["error"]["message"], "Unknown prompt: simple-prompt", "unprefixed: {unknown}");

    // A 2025-era client is served the same, without the 2026-07-28 fields.
    let legacy = json!({"jsonrpc": "2.0", "id": 10, "method": "resources/read", "params": {"uri": document}});
    let reply = server.post_raw(&[], legacy.to_string()).await;
    assert_eq!(reply.body["result"]["contents"][0]["uri"], document.as_str(), "{}", reply.body);
    assert!(reply.body["result"].get("resultType").is_none(), "{}", reply.body);
}

#[tokio::test]
async fn denied_resources_and_prompts_are_neither_listed_nor_served() {
    let policies =
        "\n[[policy]]\nresources = [\"ev.demo://resource/static/*\"]\nprompts = [\"ev.simple-*\"]\naction = \"deny\"\n";
    let Some((_upstream, _file, server)) = everything(policies, &[]).await else { return };
    let listed = modern(&server, 1, "resources/list", json!({})).await;
    assert!(!uris(&listed, "resources", "uri").iter().any(|u| u.contains("/static/")), "{listed}");
    let document = "demo://resource/static/document/features.md";
    let read = modern(&server, 2, "resources/read", json!({"uri": document})).await;
    assert_eq!(read["error"]["code"], -32602, "{read}");
    assert!(read["error"]["message"].as_str().unwrap().contains("is denied by the policy resources = "), "{read}");
    let templates = modern(&server, 3, "resources/templates/list", json!({})).await;
    assert!(!uris(&templates, "resourceTemplates", "uriTemplate").is_empty(), "others stay: {templates}");

    let prompts = modern(&server, 4, "prompts/list", json!({})).await;
    let names = uris(&prompts, "prompts", "name");
    assert!(!names.iter().any(|n| n == "ev.simple-prompt") && names.iter().any(|n| n == "ev.args-prompt"), "{prompts}");
    let got = modern(&server, 5, "prompts/get", json!({"name": "ev.simple-prompt"})).await;
    assert_eq!(got["error"]["code"], -32602, "{got}");
    assert!(got["error"]["message"].as_str().unwrap().starts_with("Prompt ev.simple-prompt is denied"), "{got}");
}

#[tokio::test]
async fn callers_limit_who_reads_and_gets() {
    let policies =
        "\n[[policy]]\nresources = [\"ev.*\"]\nprompts = [\"ev.*\"]\naction = \"allow\"\ncallers = [\"user:alice\"]\n";
    let Some((_upstream, _file, server)) = everything(policies, &["--principal-header", "x-user"]).await else {
        return;
    };
    let as_user = |user: &'static str, id: u64, method: &'static str, params: Value| {
        let client: Client = *server;
        async move {
            let mut full = json!({ "_meta": crate::harness::modern_meta(json!({})) });
            full.as_object_mut().unwrap().extend(params.as_object().cloned().unwrap());
            let name = full.get("uri").or_else(|| full.get("name")).and_then(Value::as_str).map(str::to_owned);
            let mut headers = vec![("mcp-protocol-version", "2026-07-28"), ("mcp-method", method), ("x-user", user)];
            if let Some(name) = name.as_deref() {
                headers.push(("mcp-name", name));
            }
            let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": full});
            client.post_raw(&headers, body.to_string()).await.body
        }
    };
    let alice = as_user("user:alice", 1, "resources/list", json!({})).await;
    let document = uris(&alice, "resources", "uri").into_iter().next().unwrap_or_else(|| panic!("{alice}"));
    assert_eq!(alice["result"]["cacheScope"], "private", "what is listed depends on the caller: {alice}");
    let bob = as_user("user:bob", 2, "resources/list", json!({})).await;
    assert_eq!(bob["result"]["resources"], json!([]), "{bob}");
    let read = as_user("user:bob", 3, "resources/read", json!({"uri": document})).await;
    assert_eq!(read["error"]["message"], format!("Resource not found: {document}"), "no name leaks: {read}");
    let read = as_user("user:alice", 4, "resources/read", json!({"uri": document})).await;
    assert_eq!(read["result"]["cacheScope"], "private", "{read}");
    let prompts = as_user("user:bob", 5, "prompts/list", json!({})).await;
    assert!(!uris(&prompts, "prompts", "name").iter().any(|n| n.starts_with("ev.")), "{prompts}");
    let got = as_user("user:bob", 6, "prompts/get", json!({"name": "ev.simple-prompt"})).await;
    assert_eq!(got["error"]["message"], "Unknown prompt: ev.simple-prompt", "{got}");
    let got = as_user("user:alice", 7, "prompts/get", json!({"name": "ev.simple-prompt"})).await;
    assert!(got["result"]["messages"].as_array().is_some_and(|m| !m.is_empty()), "{got}");
}

/// An open SSE response, read event by event.
struct Stream {
    body: hyper::body::Incoming,
    buffer: String,
}

impl Stream {
    async fn open(client: &Client, method: http::Method, headers: &[(&str, &str)], body: String) -> (u16, Self) {
        let stream = tokio::net::TcpStream::connect(client.addr).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(connection);
        let mut request = http::Request::builder().method(method).uri("/mcp").header("host", client.addr.to_string());
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = sender.send_request(request.body(Full::new(Bytes::from(body))).unwrap()).await.unwrap();
        let status = response.status().as_u16();
        (status, Self { body: response.into_body(), buffer: String::new() })
    }

    /// The next JSON message on the stream (10 s at most).
    async fn next(&mut self) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) {
                    return serde_json::from_str(data).unwrap();
                }
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = tokio::time::timeout(left, self.body.frame()).await.expect("an event within 10 s");
            let data = frame.expect("the stream stays open").unwrap().into_data().unwrap_or_default();
            self.buffer.push_str(&String::from_utf8_lossy(&data));
        }
    }
}

#[tokio::test]
async fn list_changes_reach_both_eras_notification_streams() {
    if std::env::var("HITL_PYTHON").is_err() {
        cannot_run("passthrough", "HITL_PYTHON is not set");
        return;
    }
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let file = ConfigFile::write(&format!("[[upstream]]\nname = \"db\"\nurl = \"{}\"\n", upstream.url));
    let server = file.serve().await;

    // A 2026-07-28 client listens for tool and prompt list changes.
    let listen = json!({"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen", "params": {
        "_meta": crate::harness::modern_meta(json!({})),
        "notifications": {"toolsListChanged": true, "promptsListChanged": true}}});
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "subscriptions/listen"),
    ];
    // A resource no upstream serves cannot be subscribed to: no stream opens.
    let mut nowhere = listen.clone();
    nowhere["params"]["notifications"]["resourceSubscriptions"] = json!(["file:///x"]);
    let refused = server.post_raw(&headers, nowhere.to_string()).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(refused.body["error"]["message"], "Resource not found: file:///x", "{}", refused.body);
    let (status, mut modern) = Stream::open(&server, http::Method::POST, &headers, listen.to_string()).await;
    assert_eq!(status, 200);
    let ack = modern.next().await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(ack["params"]["notifications"], json!({"toolsListChanged": true, "promptsListChanged": true}), "{ack}");
    assert_eq!(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "listen-1");

    // A 2025-era client opens its session's GET stream.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}});
    let opened = server.post_raw(&[], init.to_string()).await;
    let session = opened.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let get = [("accept", "text/event-stream"), ("mcp-session-id", session.as_str())];
    let (status, mut legacy) = Stream::open(&server, http::Method::GET, &get, String::new()).await;
    assert_eq!(status, 200, "a session this server signed gets its stream");
    let (status, _) = Stream::open(&server, http::Method::GET, &[("mcp-session-id", "made-up")], String::new()).await;
    assert_eq!(status, 405, "any other GET is refused as before");

    let grown = server.call_tool(1, json!({"name": "db.grow", "arguments": {"name": "sprout"}})).await;
    assert_eq!(grown.text(), "added sprout", "{}", grown.body);
    let changed = modern.next().await;
    assert_eq!(changed["method"], "notifications/tools/list_changed", "{changed}");
    assert_eq!(changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "listen-1", "{changed}");
    let changed = legacy.next().await;
    assert_eq!(changed, json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
    // Told after the new listing: the new tool is listed now.
    let tools = server.modern(2, "tools/list", json!({}), json!({})).await;
    assert!(
        tools.body["result"]["tools"].as_array().unwrap().iter().any(|t| t["name"] == "db.sprout"),
        "{}",
        tools.body
    );
}

/// The official Python SDK lists and reads resources and gets a prompt through hitl
/// (`tests/python/sdk_passthrough.py`), on both eras.
#[tokio::test]
async fn the_python_sdk_reads_a_resource_and_gets_a_prompt() {
    let Some((_upstream, _file, server)) = everything("", &[]).await else { return };
    let Some((passed, log)) = crate::python_sdk::run_script("sdk_passthrough.py", &server).await else { return };
    assert!(passed, "the Python SDK passthrough script failed:\n{log}");
    assert!(log.contains("OK"), "{log}");
}

/// `[gateway] unmatched` judges resource and prompt globs as it judges tool globs: one
/// that matches no resource URI or template (by the upstream's prefix) or no prompt
/// server-everything lists is logged with its line and the name it meant, counted in
/// `/healthz`, named by `hitl check --connect`, and refused by `unmatched = "error"`.
#[tokio::test]
async fn resource_and_prompt_globs_that_match_nothing_are_named() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let Some(_upstream) = Everything::start(port).await else { return };
    let config = |head: &str| {
        format!(
            "{head}[[upstream]]\nname = \"ev\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n\n\
             [[policy]]\nresources = [\"demo://resource/static/document/architecture.md\"]\naction = \"deny\"\n\n\
             [[policy]]\nprompts = [\"ev.simple_prompt\"]\naction = \"deny\"\n\n\
             [[policy]]\nresources = [\"ev.demo://resource/dynamic/text/*\"]\nprompts = [\"ev.args-prompt\"]\naction = \"allow\"\n"
        )
    };
    let file = ConfigFile::write(&config(""));
    let (server, log) = crate::trust::serve_logged(&file.0);
    server.wait_healthy().await;
    let health = server.request(http::Method::GET, "/healthz", &[], Bytes::new()).await.unwrap();
    assert_eq!(health.body["unmatched_policies"], 2, "the third policy matches: {}", health.body);

    let path = file.0.display().to_string();
    let resource = format!(
        "policy at {path}:5 (resources = [\"demo://resource/static/document/architecture.md\"]): \
         \"demo://resource/static/document/architecture.md\" matches no listed resource or resource template; \
         did you mean \"ev.demo://resource/static/document/architecture.md\"?"
    );
    let prompt = format!(
        "policy at {path}:9 (prompts = [\"ev.simple_prompt\"]): \"ev.simple_prompt\" matches no listed prompt; \
         did you mean \"ev.simple-prompt\"?"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let said = log.lock().unwrap().clone();
        if said.contains(&resource) && said.contains(&prompt) {
            assert!(said.contains("WARN"), "{said}");
            assert!(said.contains("the resource it meant is read under the default action"), "{said}");
            assert!(!said.contains("\"ev.args-prompt\" matches"), "a glob that matches is not named: {said}");
            break;
        }
        assert!(Instant::now() < deadline, "not logged: {said}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let (ok, said) = crate::trust::check(&["--connect", "--config", &path]);
    assert!(!ok, "{said}");
    assert!(said.contains("2 policy glob(s) guard nothing"), "{said}");
    assert!(said.contains(&resource) && said.contains(&prompt), "{said}");

    let strict = ConfigFile::write(&config("[gateway]\nunmatched = \"error\"\n\n"));
    let output = std::process::Command::new(Server::program())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&strict.0)
        .env("HITL_SECRET", crate::harness::TEST_SECRET)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{said}");
    assert!(said.contains("[gateway] unmatched = \"error\": 2 policy glob(s) guard nothing"), "{said}");
    assert!(said.contains("did you mean \"ev.simple-prompt\"?"), "{said}");
}

/// The next message on `stream` with `method` (others, such as list changes, are
/// skipped), within 20 s (server-everything tells a subscribed resource's update at
/// once when its updates are turned on, then every 5 s).
async fn next_of(stream: &mut Stream, method: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "no {method} within 20 s");
        let message = stream.next().await;
        if message["method"] == method {
            return message;
        }
    }
}

/// `/healthz`'s subscription counts once they are `(clients, upstream)`, polled.
async fn subscriptions_become(server: &Server, want: (u64, u64)) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let health = server.request(http::Method::GET, "/healthz", &[], Bytes::new()).await.unwrap();
        let counts = (
            health.body["resource_subscriptions"].as_u64().unwrap_or(u64::MAX),
            health.body["upstream_subscriptions"].as_u64().unwrap_or(u64::MAX),
        );
        if counts == want {
            return;
        }
        assert!(Instant::now() < deadline, "subscriptions {counts:?}, not {want:?}: {}", health.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Resource subscriptions through hitl, to server-everything (which offers them and,
/// once `toggle-subscriber-updates` is called in a session, tells that session's
/// subscribed resources as updated every 5 s): a 2025-era client's
/// `resources/subscribe` and its GET stream, a 2026-07-28 client's
/// `subscriptions/listen`; each upstream subscription made in the caller's own session
/// and ended with its last subscriber; precise errors for what cannot be subscribed to.
#[tokio::test]
async fn resource_updates_reach_the_clients_that_subscribed_on_both_eras() {
    let denied = "demo://resource/static/document/features.md";
    let policy = format!("\n[[policy]]\nresources = [\"ev.{denied}\"]\naction = \"deny\"\n");
    let Some((_upstream, _file, server)) = everything(&policy, &[]).await else { return };
    let document = "demo://resource/static/document/architecture.md";

    // A 2025-era client: its session, its GET stream, then resources/subscribe.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}});
    let opened = server.post_raw(&[], init.to_string()).await;
    assert_eq!(opened.body["result"]["capabilities"]["resources"]["subscribe"], true, "{}", opened.body);
    let session = opened.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let in_session = [("mcp-session-id", session.as_str())];
    let legacy = |id: u64, method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    };
    let get = [("accept", "text/event-stream"), ("mcp-session-id", session.as_str())];
    let (status, mut stream) = Stream::open(&server, http::Method::GET, &get, String::new()).await;
    assert_eq!(status, 200);
    let subscribed = server.post_raw(&in_session, legacy(1, "resources/subscribe", json!({"uri": document}))).await;
    assert_eq!(subscribed.body["result"], json!({}), "{}", subscribed.body);
    let again = server.post_raw(&in_session, legacy(2, "resources/subscribe", json!({"uri": document}))).await;
    assert_eq!(again.body["result"], json!({}), "subscribing again is a no-op: {}", again.body);
    subscriptions_become(&server, (1, 1)).await;
    let toggle = legacy(3, "tools/call", json!({"name": "ev.toggle-subscriber-updates", "arguments": {}}));
    let toggled = server.post_raw(&in_session, toggle).await;
    let said = toggled.body["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(said.starts_with("Started simulated resource updated notifications"), "{}", toggled.body);
    let updated = next_of(&mut stream, "notifications/resources/updated").await;
    assert_eq!(
        updated,
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": document}})
    );

    // What cannot be subscribed to is refused, precisely.
    let nowhere = server.post_raw(&in_session, legacy(4, "resources/subscribe", json!({"uri": "nowhere://x"}))).await;
    assert_eq!(nowhere.body["error"]["code"], -32602, "{}", nowhere.body);
    assert_eq!(nowhere.body["error"]["message"], "Resource not found: nowhere://x");
    let refused = server.post_raw(&in_session, legacy(5, "resources/subscribe", json!({"uri": denied}))).await;
    assert_eq!(refused.body["error"]["code"], -32602, "{}", refused.body);
    let message = refused.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with(&format!("Resource {denied} is denied by the policy resources = ")), "{message}");
    let sessionless = server.post_raw(&[], legacy(6, "resources/subscribe", json!({"uri": document}))).await;
    assert_eq!(sessionless.body["error"]["code"], -32600, "{}", sessionless.body);
    let missing = server.post_raw(&in_session, legacy(7, "resources/subscribe", json!({}))).await;
    assert_eq!(missing.body["error"]["code"], -32602, "{}", missing.body);

    // A 2026-07-28 client listens for the same resource: its own upstream session.
    let listen = |uris: Vec<&str>| {
        json!({"jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen", "params": {
            "_meta": crate::harness::modern_meta(json!({})),
            "notifications": {"toolsListChanged": true, "resourceSubscriptions": uris}}})
        .to_string()
    };
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "subscriptions/listen"),
    ];
    let (status, mut modern_stream) = Stream::open(&server, http::Method::POST, &headers, listen(vec![document])).await;
    assert_eq!(status, 200);
    let ack = modern_stream.next().await;
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true, "resourceSubscriptions": [document]}),
        "{ack}"
    );
    subscriptions_become(&server, (2, 2)).await;
    // Called as the listening client (the same capabilities: the same upstream session).
    let toggle = json!({"name": "ev.toggle-subscriber-updates", "arguments": {}});
    let toggled = server.modern(8, "tools/call", toggle, json!({})).await;
    let said = toggled.body["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(said.starts_with("Started simulated resource updated notifications"), "{}", toggled.body);
    let updated = next_of(&mut modern_stream, "notifications/resources/updated").await;
    assert_eq!(updated["params"]["uri"], document, "{updated}");
    assert_eq!(updated["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "sub-1", "{updated}");

    // A listen naming a resource it may not read opens no stream and subscribes nothing.
    let denied_listen = server.post_raw(&headers, listen(vec![document, denied])).await;
    assert_eq!((denied_listen.status, denied_listen.body["error"]["code"].as_i64()), (400, Some(-32602)));
    subscriptions_become(&server, (2, 2)).await;

    // The last subscriber gone, the upstream is unsubscribed.
    drop(modern_stream);
    subscriptions_become(&server, (1, 1)).await;
    let gone = server.post_raw(&in_session, legacy(9, "resources/unsubscribe", json!({"uri": document}))).await;
    assert_eq!(gone.body["result"], json!({}), "{}", gone.body);
    subscriptions_become(&server, (0, 0)).await;
}
