//! The edge holds: each attack of issue 10, over real sockets against the binary.
//! Slow or oversized requests, connection floods, paused-call floods, endless first
//! calls, missing principals, dropped streams, legacy resends, foreign hosts, leaked
//! secrets and records of a newer format.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::harness::{Client, Server, TEST_SECRET, modern_meta, redis_url};

/// Reads from `stream` until the peer closes it or `limit` passes; returns what came
/// and whether it closed.
async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (String, bool) {
    let deadline = tokio::time::Instant::now() + limit;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&seen).into_owned(), false),
            Ok(Ok(0) | Err(_)) => return (String::from_utf8_lossy(&seen).into_owned(), true),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// One raw HTTP/1 exchange: `head` (without the blank line) and `body`, then what the
/// server sends until it closes.
async fn raw_exchange(client: Client, head: &[u8], body: &[u8]) -> String {
    let mut stream = TcpStream::connect(client.addr).await.unwrap();
    stream.write_all(head).await.unwrap();
    stream
        .write_all(format!("\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).as_bytes())
        .await
        .unwrap();
    stream.write_all(body).await.unwrap();
    let (text, closed) = read_until_closed(&mut stream, Duration::from_secs(20)).await;
    assert!(closed, "the server answers and closes: {text}");
    text
}

fn tool_call(name: &str, params: Value) -> Value {
    let mut params = params;
    params["name"] = json!(name);
    params["_meta"] = modern_meta(json!({"elicitation": {}}));
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
}

fn modern_head(name: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {{host}}\r\nContent-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: {name}"
    )
}

#[tokio::test]
async fn a_client_that_sends_a_partial_head_or_nothing_is_closed_after_the_header_timeout() {
    let server = Server::start(&["--header-read-timeout", "1"]).await;
    let started = Instant::now();
    let mut partial = TcpStream::connect(server.addr).await.unwrap();
    partial.write_all(b"POST /mcp HTTP/1.1\r\nHost: localhost\r\n").await.unwrap();
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    let (_, closed) = read_until_closed(&mut partial, Duration::from_secs(6)).await;
    assert!(closed, "a partial head is cut off");
    let (_, closed) = read_until_closed(&mut silent, Duration::from_secs(6)).await;
    assert!(closed, "a connection that says nothing is cut off");
    assert!(started.elapsed() < Duration::from_secs(6), "within the timeout plus a margin");
}

#[tokio::test]
async fn an_announced_oversized_body_gets_413_before_it_is_sent() {
    let server = Server::start(&[]).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 67108864\r\n\r\n",
        server.addr
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // Not one byte of the body is sent: the answer cannot wait for it.
    let (text, closed) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("the body exceeds 4194304 bytes"), "{text}");
    assert!(closed, "the connection closes after the 413");
}

#[tokio::test]
async fn a_body_that_stops_arriving_gets_408() {
    let server = Server::start(&["--body-read-timeout", "1"]).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"jsonrpc\"",
        server.addr
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (text, closed) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("the body did not arrive within 1 s"), "{text}");
    assert!(closed);
}

/// CPU seconds the process has used, from `/proc/PID/stat`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

#[tokio::test]
async fn running_out_of_file_descriptors_backs_off_instead_of_spinning() {
    // Few descriptors, and idle connections held for 4 s: accept fails with EMFILE.
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(r#"ulimit -n 48 && exec "$0" serve --listen 127.0.0.1:0 --header-read-timeout 4"#)
        .arg(Server::program())
        .stderr(Stdio::piped());
    let mut server = Server::spawn_command(command);
    server.wait_healthy().await;
    let stderr = server.take_stderr().unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    let mut held = Vec::new();
    for _ in 0..60 {
        held.push(TcpStream::connect(server.addr).await.unwrap());
    }
    let before = cpu_seconds(server.pid());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_seconds(server.pid()) - before;
    assert!(used < 0.5, "the server used {used:.2} s of CPU in 2 s while out of descriptors");
    let failures = lines.lock().unwrap().iter().filter(|l| l.contains("accept failed")).count();
    assert!((1..=4).contains(&failures), "accept failures are logged at most once a second: {failures}");
    drop(held);
    // Service comes back as the idle connections time out.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(Ok(reply)) = tokio::time::timeout(
            Duration::from_secs(2),
            server.request(http::Method::GET, "/healthz", &[], Bytes::new()),
        )
        .await
            && reply.status == 200
        {
            break;
        }
        assert!(Instant::now() < deadline, "/healthz answers again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Resident memory of the process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_flood_of_paused_calls_meets_its_limits_and_memory_stays_bounded() {
    // A caller of its own (a proxy's user), so that other tests sharing the store (the
    // suite also runs on one Redis) do not count against it.
    let args = ["--max-paused-per-caller", "20", "--max-record-bytes", "100000", "--principal-header", "x-user"];
    let server = Server::start(&args).await;
    let user = format!("flood-{}-{:?}", std::process::id(), Instant::now());
    let call = |id: u64, params: Value| {
        let (server, user) = (&server, user.clone());
        async move {
            let mut body = tool_call(params["name"].as_str().unwrap(), params.clone());
            body["id"] = json!(id);
            let name = params["name"].as_str().unwrap().to_owned();
            let headers = [
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", name.as_str()),
                ("x-user", user.as_str()),
            ];
            server.post_raw(&headers, body.to_string()).await
        }
    };
    for id in 0..20 {
        let reply = call(id, json!({"name": "choose_region", "arguments": {}})).await;
        assert_eq!(reply.body["result"]["resultType"], "input_required", "{:?}", reply.body);
    }
    let refused = call(21, json!({"name": "choose_region", "arguments": {}})).await;
    assert_eq!(refused.body["error"]["code"], -32603, "{:?}", refused.body);
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("paused calls from this caller") && message.contains("20 (--max-paused-per-caller)"),
        "{message}"
    );

    // 4 MB of padding is refused by the tool's schema, before any thread is made.
    let before = rss_kib(server.pid());
    let padding = "x".repeat(4_000_000);
    for id in 0..50 {
        let reply = call(100 + id, json!({"name": "greeter", "arguments": {"padding": padding}})).await;
        assert_eq!(reply.body["error"]["code"], -32602, "{:?}", reply.body["error"]["message"]);
    }
    let grown = rss_kib(server.pid()).saturating_sub(before);
    assert!(grown < 100 * 1024, "RSS grew by {grown} KiB");

    // Arguments the schema takes, but too large to keep with a paused call.
    let service = "s".repeat(200_000);
    let big =
        call(200, json!({"name": "deploy_production_release", "arguments": {"service": service, "version": "1"}}))
            .await;
    let message = big.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("--max-record-bytes"), "{:?}", big.body);
}

#[tokio::test]
async fn answers_in_a_first_call_resolve_at_most_ten_rounds() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, json!({"name": "test_nag", "arguments": {}})).await;
    let key = first.body["result"]["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    // The same answer fits every round the agent asks: without a bound the request
    // would never end.
    let params = json!({"name": "test_nag", "arguments": {},
                        "inputResponses": { key: {"action": "accept", "content": {"response": "yes"}}}});
    let reply = tokio::time::timeout(Duration::from_secs(20), server.call_tool(2, params)).await.expect("it answers");
    assert_eq!(reply.body["result"]["resultType"], "input_required", "{:?}", reply.body);
    assert!(reply.body["result"]["requestState"].is_string());
}

#[tokio::test]
async fn the_principal_header_fails_closed() {
    let server = Server::start(&["--principal-header", "x-user"]).await;
    let body = tool_call("choose_region", json!({"arguments": {}})).to_string();
    let head = |user: &[u8]| {
        let mut head = modern_head("choose_region").replace("{host}", &server.addr.to_string()).into_bytes();
        head.extend_from_slice(user);
        head
    };
    for (user, why) in [
        (&b""[..], "missing"),
        (&b"\r\nX-User: "[..], "empty"),
        (&b"\r\nX-User: \xff\xfe"[..], "not UTF-8"),
        (&b"\r\nX-User: alice\r\nX-User: bob"[..], "repeated"),
    ] {
        let text = raw_exchange(*server, &head(user), body.as_bytes()).await;
        assert!(text.starts_with("HTTP/1.1 401"), "{why}: {text}");
        assert!(text.contains(&format!("the x-user header is {why}")), "{why}: {text}");
    }
    // A UTF-8 name is a principal, and its paused call is its own.
    let text = raw_exchange(*server, &head("\r\nX-User: josé".as_bytes()), body.as_bytes()).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let result: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    let state = result["result"]["requestState"].as_str().unwrap();
    let key = result["result"]["inputRequests"].as_object().unwrap().keys().next().unwrap();
    let answer = tool_call(
        "choose_region",
        json!({"arguments": {}, "requestState": state,
        "inputResponses": { key: {"action": "accept", "content": {"response": "eu-west-1"}}}}),
    )
    .to_string();
    let text = raw_exchange(*server, &head(b"\r\nX-User: jose"), answer.as_bytes()).await;
    assert!(text.contains("Invalid or expired requestState"), "another caller can't resume it: {text}");
    let text = raw_exchange(*server, &head("\r\nX-User: josé".as_bytes()), answer.as_bytes()).await;
    assert!(text.contains(r#"{\"region\":\"eu-west-1\"}"#), "{text}");
}

#[tokio::test]
async fn closing_a_progress_stream_never_repeats_a_finished_step() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, json!({"name": "test_send_once", "arguments": {}})).await;
    let key = first.body["result"]["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let state = first.body["result"]["requestState"].clone();
    let answers = json!({ key: {"action": "accept", "content": {"response": "yes"}}});
    // Resume with a progress stream, and go away while the send step runs.
    let mut body =
        tool_call("test_send_once", json!({"arguments": {}, "requestState": state, "inputResponses": answers}));
    body["params"]["_meta"]["progressToken"] = json!("p");
    let body = body.to_string();
    let head = modern_head("test_send_once").replace("{host}", &server.addr.to_string());
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let request = format!(
        "{head}\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains(r#""progress":1"#) {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "the stream reports the first superstep: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    drop(stream);
    // The resend (waiting for the cancelled run to give the round back) continues after
    // the send step: it ran once.
    let params = json!({"name": "test_send_once", "arguments": {}, "requestState": state, "inputResponses": answers});
    let done = server.call_tool(2, params.clone()).await;
    assert_eq!(done.body["result"]["structuredContent"], json!({"sends": 1}), "{:?}", done.body);
    let again = server.call_tool(3, params).await;
    assert_eq!(again.body["result"]["structuredContent"], json!({"sends": 1}));
}

#[tokio::test]
async fn a_legacy_resend_of_a_modern_call_leaves_it_paused() {
    let server = Server::start(&[]).await;
    let first = server.call_tool(1, json!({"name": "choose_region", "arguments": {}})).await;
    let key = first.body["result"]["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let state = first.body["result"]["requestState"].clone();
    let answers = json!({ key: {"action": "accept", "content": {"response": "eu-west-1"}}});
    let legacy = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "choose_region", "arguments": {}, "requestState": state, "inputResponses": answers}});
    let reply = server.post_raw(&[], legacy.to_string()).await;
    let result = &reply.body["result"];
    assert_eq!(result["isError"], true, "{:?}", reply.body);
    assert_eq!(
        result["content"][0]["text"],
        "This tool paused to ask for human input, and this client can't answer it."
    );
    let done = server
        .call_tool(
            3,
            json!({"name": "choose_region", "arguments": {}, "requestState": state, "inputResponses": answers}),
        )
        .await;
    assert_eq!(done.body["result"]["content"][0]["text"], r#"{"region":"eu-west-1"}"#, "{:?}", done.body);
}

#[tokio::test]
async fn hosts_are_checked_with_ports_on_http_1_0_1_1_and_2() {
    let server = Server::start(&[]).await;
    let port = server.addr.port();
    let ping = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    for (head, status) in [
        (format!("POST /mcp HTTP/1.1\r\nHost: localhost:{port}\r\nContent-Type: application/json"), "200"),
        ("POST /mcp HTTP/1.1\r\nHost: localhost:9999\r\nContent-Type: application/json".to_owned(), "403"),
        ("POST /mcp HTTP/1.0\r\nContent-Type: application/json".to_owned(), "403"),
        (format!("POST /mcp HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json"), "200"),
    ] {
        let text = raw_exchange(*server, head.as_bytes(), ping).await;
        assert!(
            text.starts_with(&format!("HTTP/1.1 {status}")) || text.starts_with(&format!("HTTP/1.0 {status}")),
            "{head}: {text}"
        );
    }
    for (authority, status) in [(format!("evil.example:{port}"), 403), (format!("localhost:{port}"), 200)] {
        let stream = TcpStream::connect(server.addr).await.unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
        tokio::spawn(connection);
        let request = http::Request::post(format!("http://{authority}/mcp"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(ping)))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status().as_u16(), status, "HTTP/2 :authority {authority}");
        let _ = response.into_body().collect().await;
    }
}

/// Runs `hitl serve` with `args` and `env` (and no other secret), expecting it to fail
/// at start; returns its stderr.
pub(crate) fn failed_start(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut command = Command::new(Server::program());
    command.args(["serve", "--listen", "127.0.0.1:0"]).args(args).env_remove("HITL_SECRET");
    for (k, v) in env {
        command.env(k, v);
    }
    let output = command.output().unwrap();
    assert!(!output.status.success(), "{args:?} must not start");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn secret_file(name: &str, contents: &str, mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = std::env::temp_dir().join(format!("hitl-e2e-{name}-{}", std::process::id()));
    std::fs::write(&path, contents).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

#[tokio::test]
async fn secrets_are_given_one_way_kept_private_and_never_shown() {
    let open = secret_file("open", TEST_SECRET, 0o644);
    let stderr = failed_start(&["--secret-file", open.to_str().unwrap()], &[]);
    assert!(stderr.contains("chmod 600"), "{stderr}");
    let private = secret_file("private", TEST_SECRET, 0o600);
    let stderr = failed_start(&["--secret-file", private.to_str().unwrap()], &[("HITL_SECRET", TEST_SECRET)]);
    assert!(stderr.contains("both HITL_SECRET and --secret-file"), "{stderr}");
    let stderr = failed_start(&["--store", "redis://:hunter2-password@[::1/0"], &[("HITL_SECRET", TEST_SECRET)]);
    assert!(!stderr.contains("hunter2"), "{stderr}");
    assert!(stderr.contains("***"), "{stderr}");
    // A server on an unreachable Redis logs the URL masked.
    let mut command = Command::new(Server::program());
    command.args(["serve", "--listen", "127.0.0.1:0", "--store", "redis://:hunter2-password@127.0.0.1:1/0"]);
    command.stderr(Stdio::piped());
    let mut server = Server::spawn_command(command);
    let reply = server.call_tool(1, json!({"name": "choose_region", "arguments": {}})).await;
    assert_eq!(reply.body["error"]["message"], "Internal error: the thread store is unavailable");
    let stderr = server.take_stderr().unwrap();
    server.kill();
    let log = std::io::read_to_string(stderr).unwrap();
    assert!(log.contains("redis://***@127.0.0.1:1/0") && !log.contains("hunter2"), "{log}");
    let _ = std::fs::remove_file(open);
    let _ = std::fs::remove_file(private);
}

#[tokio::test]
async fn secrets_given_two_ways_agree_and_a_rotation_keeps_open_rounds() {
    let Some(url) = redis_url("secrets on Redis") else { return };
    let old = "old-secret-0123456789abcdef0123456789";
    let new = "new-secret-0123456789abcdef0123456789";
    // One replica has the secret in the environment, the other in a file with a
    // trailing newline: the same key.
    let file = secret_file("trailing", &format!("{TEST_SECRET}\n"), 0o600);
    let a = Server::start_on(&url, &[]).await;
    let b = {
        let mut command = Command::new(Server::program());
        command.args(["serve", "--listen", "127.0.0.1:0", "--store", &url, "--secret-file"]).arg(&file);
        let server = Server::spawn_command_with_env(command, &[]);
        server.wait_healthy().await;
        server
    };
    let first = a.call_tool(1, json!({"name": "choose_region", "arguments": {}})).await;
    let key = first.body["result"]["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let answer = |state: &Value| {
        json!({"name": "choose_region", "arguments": {}, "requestState": state,
               "inputResponses": { key.clone(): {"action": "accept", "content": {"response": "eu"}}}})
    };
    let done = b.call_tool(2, answer(&first.body["result"]["requestState"])).await;
    assert_eq!(done.body["result"]["content"][0]["text"], r#"{"region":"eu"}"#, "{:?}", done.body);

    // Rotation: a round issued under the old secret resumes on a replica with the new
    // one; the new replica's rounds are not valid under the old secret alone.
    let before = with_secrets(&url, &[("HITL_SECRET", old)]).await;
    let after = with_secrets(&url, &[("HITL_SECRET", new), ("HITL_PREVIOUS_SECRET", old)]).await;
    let paused = before.call_tool(3, json!({"name": "choose_region", "arguments": {}})).await;
    let done = after.call_tool(4, answer(&paused.body["result"]["requestState"])).await;
    assert_eq!(done.body["result"]["content"][0]["text"], r#"{"region":"eu"}"#, "{:?}", done.body);
    let fresh = after.call_tool(5, json!({"name": "choose_region", "arguments": {}})).await;
    let refused = before.call_tool(6, answer(&fresh.body["result"]["requestState"])).await;
    assert_eq!(refused.body["error"]["message"], "Invalid or expired requestState", "{:?}", refused.body);
    let _ = std::fs::remove_file(file);
}

async fn with_secrets(url: &str, env: &[(&str, &str)]) -> Server {
    let mut command = Command::new(Server::program());
    command.args(["serve", "--listen", "127.0.0.1:0", "--store", url]).stderr(Stdio::inherit());
    let server = Server::spawn_command_with_env(command, env);
    server.wait_healthy().await;
    server
}

/// One Redis command over RESP; the reply as text (`None` for a nil).
async fn redis_command(url: &str, args: &[&str]) -> Option<String> {
    redis_reply(url, args).await.map(|reply| String::from_utf8(reply).expect("a reply in text"))
}

/// One Redis command over RESP; the reply's bytes (`None` for a nil).
async fn redis_reply(url: &str, args: &[&str]) -> Option<Vec<u8>> {
    let authority = url.trim_start_matches("redis://").split('/').next().unwrap();
    let mut stream = TcpStream::connect(authority).await.unwrap();
    let mut out = format!("*{}\r\n", args.len());
    for a in args {
        out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    stream.write_all(out.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "Redis closed the connection after {reply:?}");
        reply.extend_from_slice(&buf[..n]);
        if reply.first() == Some(&b'$') {
            let Some(end) = reply.windows(2).position(|w| w == b"\r\n") else { continue };
            let len: i64 = std::str::from_utf8(&reply[1..end]).unwrap().parse().unwrap();
            let data = &reply[end + 2..];
            if len < 0 {
                return None;
            }
            if data.len() >= len as usize + 2 {
                return Some(data[..len as usize].to_vec());
            }
        } else if reply.ends_with(b"\r\n") {
            return Some(reply.trim_ascii_end().to_vec());
        }
    }
}

/// A thread's record in Redis (`d`), as the server packs it (MessagePack).
async fn packed_record(url: &str, redis_key: &str) -> Value {
    let packed = redis_reply(url, &["HGET", redis_key, "d"]).await.expect("the thread has a record");
    rmp_serde::from_slice(&packed).expect("a packed record")
}

#[tokio::test]
async fn a_record_of_a_newer_format_is_left_untouched() {
    let Some(url) = redis_url("newer records") else { return };
    let server = Server::start_on(&url, &[]).await;
    let first = server.call_tool(1, json!({"name": "choose_region", "arguments": {}})).await;
    let key = first.body["result"]["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let state = first.body["result"]["requestState"].as_str().unwrap().to_owned();
    let id = state.split_once('.').unwrap().0;
    let redis_key = format!("hitl:{{{id}}}:thread");
    // What a future hitl might write: another format, with fields this one lacks, at a
    // version of its own (every write moves the version on).
    let newer =
        json!({"format": 99, "id": id, "version": 2, "tool": "choose_region", "rounds": [{"n": 1}]}).to_string();
    redis_command(&url, &["HSET", &redis_key, "d", &newer, "v", "2"]).await;
    let reply = server
        .call_tool(
            2,
            json!({"name": "choose_region", "arguments": {}, "requestState": state,
            "inputResponses": { key: {"action": "accept", "content": {"response": "eu"}}}}),
        )
        .await;
    assert_eq!(reply.body["error"]["code"], -32603, "{:?}", reply.body);
    assert_eq!(reply.body["error"]["message"], "this paused call was saved by a newer hitl");
    assert_eq!(redis_command(&url, &["HGET", &redis_key, "d"]).await.as_deref(), Some(newer.as_str()), "untouched");
    assert_eq!(redis_command(&url, &["HGET", &redis_key, "v"]).await.as_deref(), Some("2"), "not claimed");
    // Operators' listing still lists the others, and names this one as unreadable.
    let listing = std::process::Command::new(Server::program())
        .args(["threads", "list", "--json", "--limit", "1000000", "--store", &url])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&listing.stderr);
    assert!(listing.status.success(), "{stderr}");
    assert!(stderr.contains("cannot read") && stderr.contains(id), "{stderr}");
}

/// The first round of `choose_region` on `server`: its question key, `requestState`
/// and the thread's Redis key.
async fn paused_on_redis(server: &Server) -> (String, String, String) {
    let first = server.call_tool(1, json!({"name": "choose_region", "arguments": {}})).await;
    let key = first.body["result"]["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let state = first.body["result"]["requestState"].as_str().unwrap().to_owned();
    let redis_key = format!("hitl:{{{}}}:thread", state.split_once('.').unwrap().0);
    (key, state, redis_key)
}

fn answer_region(key: &str, state: &str, arguments: Value) -> Value {
    json!({"name": "choose_region", "arguments": arguments, "requestState": state,
        "inputResponses": { key: {"action": "accept", "content": {"response": "eu"}}}})
}

#[tokio::test]
async fn a_claim_made_as_the_round_loads_is_given_back_when_the_answer_is_refused() {
    let Some(url) = redis_url("claims on load") else { return };
    let server = Server::start_on(&url, &[]).await;
    let (key, state, redis_key) = paused_on_redis(&server).await;
    // A field beside the record is none when missing (the build before deleted it) or
    // empty (this one writes it so, in the same command as the record).
    let field = |name: &'static str| {
        let (url, redis_key) = (url.clone(), redis_key.clone());
        async move { redis_command(&url, &["HGET", &redis_key, name]).await.filter(|v| !v.is_empty()) }
    };
    // The round is claimable in one step: its number and its token's proof beside it.
    assert_eq!(field("r").await.as_deref(), Some("1"));
    assert_eq!(field("t").await.map(|t| t.len()), Some(40), "SHA-1 of the token, in hex");
    assert_eq!(field("b").await.map(|b| b.len()), Some(64), "what binds the call to it, SHA-256 in hex");
    assert_eq!(field("c").await, None, "unclaimed");
    let record = packed_record(&url, &redis_key).await;
    assert_eq!(record["format"], 4, "a replica that looks for the claim inside refuses it");

    // A forged token claims nothing.
    let (thread, _) = state.split_once('.').unwrap();
    let forged = server.call_tool(2, answer_region(&key, &format!("{thread}.Zm9yZ2Vk"), json!({}))).await;
    assert_eq!(forged.body["error"]["code"], -32602, "{:?}", forged.body);
    assert_eq!((field("v").await.as_deref(), field("c").await), (Some("1"), None), "untouched");

    // The round's token with an answer that does not fit: claimed as it loads, then
    // refused and given back.
    let mut unfit = answer_region(&key, &state, json!({}));
    unfit["inputResponses"][&key]["content"]["response"] = json!(42);
    let refused = server.call_tool(3, unfit).await;
    assert!(refused.body["error"]["code"].is_i64(), "{:?}", refused.body);
    assert_eq!(field("c").await, None, "the claim is given back");
    assert_eq!(field("v").await.as_deref(), Some("3"), "claimed, then given back");

    // So the true answer resumes at once, not after the claim's lease.
    let started = Instant::now();
    let done = server.call_tool(4, answer_region(&key, &state, json!({}))).await;
    assert_eq!(done.body["result"]["structuredContent"]["region"], "eu", "{:?}", done.body);
    assert!(started.elapsed() < Duration::from_secs(10), "no wait for a lapsed lease");
    assert_eq!(field("r").await, None, "finished: nothing left to claim");
    let resend = server.call_tool(5, answer_region(&key, &state, json!({}))).await;
    assert_eq!(resend.body["result"], done.body["result"], "a resend gets the same result");
}

#[tokio::test]
async fn a_paused_call_saved_by_the_build_before_claims_on_load_is_answered() {
    let Some(url) = redis_url("records of the build before") else { return };
    let server = Server::start_on(&url, &[]).await;
    let (key, state, redis_key) = paused_on_redis(&server).await;
    // Rewritten as the build before wrote it: format 1 in JSON, no proof, nothing beside
    // the record, at a version of its own (every write moves the version on).
    let mut record = packed_record(&url, &redis_key).await;
    record["format"] = json!(1);
    record["version"] = json!(2);
    record["round"].as_object_mut().unwrap().remove("proof");
    redis_command(&url, &["HSET", &redis_key, "d", &record.to_string(), "v", "2"]).await;
    redis_command(&url, &["HDEL", &redis_key, "r", "t"]).await;

    let done = server.call_tool(10, answer_region(&key, &state, json!({}))).await;
    assert_eq!(done.body["result"]["structuredContent"]["region"], "eu", "{:?}", done.body);
    let resend = server.call_tool(11, answer_region(&key, &state, json!({}))).await;
    assert_eq!(resend.body["result"], done.body["result"], "a resend gets the same result");
    let finished = packed_record(&url, &redis_key).await;
    assert!(finished["checkpoint"].is_null() && finished["last"]["round"] == 1, "{finished}");
}

/// Finished calls are kept for resends, bounded: past `max_finished_calls` the oldest
/// go first, counted; a resend of one gets the error of an expired call, a resend of a
/// kept one its result. A limit of 0 (no resends at all) is refused.
#[tokio::test]
async fn finished_calls_past_their_limit_are_dropped_oldest_first() {
    let dir = std::env::temp_dir().join(format!("hitl-e2e-finished-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("hitl.toml");
    std::fs::write(&file, "[server]\nexamples = true\nmax_finished_calls = 2\n").unwrap();
    let server = Server::start(&["--config", file.to_str().unwrap(), "--store", "memory"]).await;
    let mut answered = Vec::new();
    for name in ["Ada", "Bea", "Cy"] {
        let paused = server.pause("greeter", json!({})).await;
        let reply = paused.answer(&server, crate::harness::accept(json!({"name": name}))).await;
        assert_eq!(reply.done()["structuredContent"]["greeting"], format!("Hello, {name}!"));
        answered.push((paused, name));
    }
    let (oldest, name) = &answered[0];
    let resent = oldest.answer(&server, crate::harness::accept(json!({"name": name}))).await;
    assert_eq!(resent.error(), (400, -32602, "Invalid or expired requestState".to_owned()));
    for (kept, name) in &answered[1..] {
        let resent = kept.answer(&server, crate::harness::accept(json!({"name": name}))).await;
        assert_eq!(resent.done()["structuredContent"]["greeting"], format!("Hello, {name}!"), "a kept one resends");
    }
    let metrics = crate::metrics::scrape(&server).await;
    assert_eq!(crate::metrics::sample(&metrics, "hitl_finished_calls_dropped_total"), 1.0, "{metrics}");

    for (key, flag) in [("max_finished_calls", "--max-finished-calls"), ("max_finished_bytes", "--max-finished-bytes")]
    {
        std::fs::write(&file, format!("[server]\n{key} = 0\n")).unwrap();
        let (ok, text) = crate::trust::check(&["--config", file.to_str().unwrap()]);
        assert!(!ok && text.contains(flag) && text.contains("at least 1"), "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
