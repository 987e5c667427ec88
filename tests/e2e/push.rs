//! Push elicitation for 2025-era clients (`hitl serve --legacy-elicitation`): the
//! official Python SDK in 2025-11-25 mode and the TypeScript SDK v1 complete the example
//! agents by answering `elicitation/create` requests pushed on the call's SSE stream;
//! over raw HTTP, a stream dropped mid-round leaves the call paused and the next
//! identical call in the session is asked again and resumes it.

use std::path::Path;
use std::process::Command;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::harness::{Client, Server};

#[tokio::test]
async fn the_python_sdk_in_2025_11_25_mode_completes_the_examples_by_push() {
    let server = Server::start(&["--legacy-elicitation"]).await;
    let Some((passed, log)) = crate::python_sdk::run_script("sdk_push.py", &server).await else { return };
    assert!(passed, "the Python SDK push suite failed:\n{log}");
    for test in ["test_greeter", "test_plan_deployment", "test_survey_asks_both_in_one_round", "test_connect_calendar"]
    {
        assert!(log.contains(&format!("{test} (__main__.Push.{test}) ... ok")), "{test}: {log}");
    }
}

#[tokio::test]
async fn the_typescript_sdk_v1_completes_the_examples_by_push() {
    let Ok(node) = std::env::var("HITL_NODE") else {
        crate::harness::cannot_run("ts-sdk", "HITL_NODE is not set (cargo xtask test installs the TypeScript SDK)");
        return;
    };
    let modules = Path::new(&node).ancestors().nth(3).expect("node sits in node_modules").to_owned();
    let server = Server::start(&["--legacy-elicitation"]).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("ts/push_client.mjs");
    let url = format!("http://{}/mcp", server.addr);
    let output = tokio::task::spawn_blocking(move || Command::new(node).arg(script).arg(modules).arg(url).output())
        .await
        .unwrap()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let expected = [
        ("greeter", json!({"greeting": "Hello, Ada!"}), json!(["What is your name?"])),
        ("plan_deployment", json!({"region": "eu-west-1", "replicas": 3}), json!(["Where should the service deploy?"])),
        (
            "survey",
            json!({"color": "blue", "quest": "grail"}),
            json!(["What is your favorite color?", "What is your quest?"]),
        ),
        ("connect_calendar", json!({"status": "connected"}), json!(["Connect your calendar to continue."])),
    ];
    assert_eq!(lines.len(), expected.len(), "{stdout}");
    for (line, (tool, output, asked)) in lines.iter().zip(expected) {
        assert_eq!((&line["tool"], &line["output"], &line["asked"]), (&json!(tool), &output, &asked), "{line}");
    }
}

/// A 2025-11-25 client's requests: `initialize` gives the session.
struct Session<'a> {
    client: &'a Client,
    id: String,
    /// `X-User`, for a server behind an authenticating proxy.
    user: Option<&'static str>,
}

impl<'a> Session<'a> {
    async fn open(client: &'a Client, capabilities: Value) -> Session<'a> {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": {"name": "raw", "version": "0"}}});
        let reply = client.post_raw(&[("x-user", "alice")], init.to_string()).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let id = reply.headers["mcp-session-id"].to_str().unwrap().to_owned();
        Session { client, id, user: None }
    }

    fn headers(&self) -> Vec<(&str, String)> {
        let mut headers = vec![
            ("content-type", "application/json".to_owned()),
            ("accept", "application/json, text/event-stream".to_owned()),
            ("mcp-session-id", self.id.clone()),
            ("mcp-protocol-version", "2025-11-25".to_owned()),
        ];
        headers.extend(self.user.map(|user| ("x-user", user.to_owned())));
        headers
    }

    /// POSTs `message` and returns the response's body as it streams.
    async fn stream(&self, message: Value) -> (u16, hyper::body::Incoming) {
        let stream = tokio::net::TcpStream::connect(self.client.addr).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(connection);
        let mut request = http::Request::post("/mcp").header("host", self.client.addr.to_string());
        for (k, v) in self.headers() {
            request = request.header(k, v);
        }
        let response = sender.send_request(request.body(Full::new(Bytes::from(message.to_string()))).unwrap()).await;
        let response = response.unwrap();
        (response.status().as_u16(), response.into_body())
    }

    /// POSTs a response to a pushed request: 202, no body.
    async fn answer(&self, id: &Value, result: Value) -> u16 {
        let headers = self.headers();
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let body = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
        self.client.post_raw(&headers, body).await.status
    }
}

/// The next JSON-RPC message on an SSE body (`None` when it ends).
async fn next_message(body: &mut hyper::body::Incoming, buffer: &mut String) -> Option<Value> {
    loop {
        if let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let data = event.lines().find_map(|l| l.strip_prefix("data: "))?;
            return Some(serde_json::from_str(data).unwrap());
        }
        let frame = tokio::time::timeout(std::time::Duration::from_secs(10), body.frame()).await.ok()??.ok()?;
        if let Ok(data) = frame.into_data() {
            buffer.push_str(&String::from_utf8_lossy(&data));
        }
    }
}

#[tokio::test]
async fn a_stream_dropped_mid_round_is_asked_again_and_resumed_by_the_next_identical_call() {
    let server = Server::start(&["--legacy-elicitation"]).await;
    let session = Session::open(&server, json!({"elicitation": {}})).await;
    assert!(session.id.split('.').count() == 3, "a signed session id: {}", session.id);
    let call =
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "greeter", "arguments": {}}});

    // The first stream asks, and is dropped before the answer.
    let (status, mut body) = session.stream(call.clone()).await;
    assert_eq!(status, 200);
    let mut buffer = String::new();
    let asked = next_message(&mut body, &mut buffer).await.expect("a pushed request");
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert_eq!(asked["params"]["message"], "What is your name?");
    assert_eq!(asked["params"]["mode"], "form", "2025-11-25 clients get the mode");
    drop(body);

    // The same call again: the same question, on a new stream, answered this time.
    let (_, mut body) = session.stream(call.clone()).await;
    let mut buffer = String::new();
    let again = next_message(&mut body, &mut buffer).await.expect("the question again");
    assert_eq!(again["params"], asked["params"]);
    assert_ne!(again["id"], asked["id"], "a new request");
    // An answer to the dropped stream's request reaches no one; it is accepted all the same.
    assert_eq!(session.answer(&asked["id"], json!({"action": "accept", "content": {"name": "Old"}})).await, 202);
    assert_eq!(session.answer(&again["id"], json!({"action": "accept", "content": {"name": "Ada"}})).await, 202);
    let result = next_message(&mut body, &mut buffer).await.expect("the call's result");
    assert_eq!(result["id"], 7);
    assert_eq!(result["result"]["structuredContent"], json!({"greeting": "Hello, Ada!"}), "{result}");
    assert!(result["result"].get("resultType").is_none(), "a 2025-era result: {result}");
    assert!(next_message(&mut body, &mut buffer).await.is_none(), "the stream ends with the result");
}

#[tokio::test]
async fn a_2025_06_18_client_gets_forms_it_can_show_and_a_forged_session_gets_the_seeds_error() {
    let server = Server::start(&["--legacy-elicitation"]).await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "raw", "version": "0"}}});
    let reply = server.post_raw(&[], init.to_string()).await;
    assert_eq!(reply.body["result"]["protocolVersion"], "2025-06-18");
    let session =
        Session { client: &server, id: reply.headers["mcp-session-id"].to_str().unwrap().to_owned(), user: None };
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "plan_deployment", "arguments": {}}});
    let (_, mut body) = session.stream(call.clone()).await;
    let mut buffer = String::new();
    let asked = next_message(&mut body, &mut buffer).await.unwrap();
    assert!(asked["params"].get("mode").is_none(), "no modes before 2025-11-25: {asked}");
    let region = &asked["params"]["requestedSchema"]["properties"]["region"];
    assert_eq!(region["enum"], json!(["us-east-1", "eu-west-1"]), "{region}");
    assert_eq!(session.answer(&asked["id"], json!({"action": "decline"})).await, 202);
    let result = next_message(&mut body, &mut buffer).await.unwrap();
    assert_eq!(result["id"], 3, "{result}");

    // A session id this server did not sign is no session: the seed's error result.
    let forged = Session { client: &server, id: format!("{}x", session.id), user: None };
    let (_, body) = forged.stream(call).await;
    let text = String::from_utf8_lossy(&body.collect().await.unwrap().to_bytes()).into_owned();
    assert!(text.contains("this client can't answer it"), "{text}");
}

#[tokio::test]
async fn two_replicas_on_redis_answer_each_others_pushed_questions() {
    let Some(redis) = crate::harness::redis_url("push replicas") else { return };
    let a = Server::start_on(&redis, &["--legacy-elicitation"]).await;
    let b = Server::start_on(&redis, &["--legacy-elicitation"]).await;
    let session = Session::open(&a, json!({"elicitation": {}})).await;
    let on_b = Session { client: &b, id: session.id.clone(), user: None };

    // A's stream asks; the answer reaches B, which forwards it to A.
    let greeter =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "greeter", "arguments": {}}});
    let (_, mut body) = session.stream(greeter).await;
    let mut buffer = String::new();
    let asked = next_message(&mut body, &mut buffer).await.unwrap();
    assert_eq!(on_b.answer(&asked["id"], json!({"action": "accept", "content": {"name": "Ada"}})).await, 202);
    let done = next_message(&mut body, &mut buffer).await.expect("the result on A's stream");
    assert_eq!(done["result"]["structuredContent"], json!({"greeting": "Hello, Ada!"}), "{done}");

    // A's stream drops mid-round; the same call on B is asked again (the note is in
    // Redis) and resumes the same round, answered through A.
    let survey =
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "survey", "arguments": {}}});
    let (_, mut body) = session.stream(survey.clone()).await;
    let mut buffer = String::new();
    let first = next_message(&mut body, &mut buffer).await.unwrap();
    drop(body);
    let (_, mut body) = on_b.stream(survey).await;
    let mut buffer = String::new();
    let again =
        [next_message(&mut body, &mut buffer).await.unwrap(), next_message(&mut body, &mut buffer).await.unwrap()];
    let messages: Vec<&Value> = again.iter().map(|r| &r["params"]["message"]).collect();
    assert!(messages.contains(&&first["params"]["message"]), "{messages:?}");
    for request in &again {
        let text = if request["params"]["message"] == "What is your favorite color?" { "blue" } else { "grail" };
        assert_eq!(
            session.answer(&request["id"], json!({"action": "accept", "content": {"response": text}})).await,
            202
        );
    }
    let done = next_message(&mut body, &mut buffer).await.expect("the result on B's stream");
    assert_eq!(done["result"]["structuredContent"], json!({"color": "blue", "quest": "grail"}), "{done}");
}

#[tokio::test]
async fn a_url_question_waits_for_its_page_then_says_it_is_complete() {
    let server = Server::start(&["--legacy-elicitation"]).await;
    let session = Session::open(&server, json!({"elicitation": {"form": {}, "url": {}}})).await;
    let call = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "connect_github", "arguments": {}}});
    let (_, mut body) = session.stream(call).await;
    let mut buffer = String::new();
    let asked = next_message(&mut body, &mut buffer).await.unwrap();
    assert_eq!(asked["params"]["mode"], "url", "{asked}");
    let elicitation_id = asked["params"]["elicitationId"].as_str().expect("an elicitationId for 2025-11-25").to_owned();
    let url = asked["params"]["url"].as_str().unwrap();
    let path = url.strip_prefix(&format!("http://{}", server.addr)).expect("hitl's secret page").to_owned();
    // The user agrees to open the page; the call waits for the page, not for the client.
    assert_eq!(session.answer(&asked["id"], json!({"action": "accept"})).await, 202);

    let (status, headers, html) = server.raw(http::Method::GET, &path, &[], Bytes::new()).await;
    assert_eq!(status, 200, "{html}");
    let (cookie, csrf) = crate::approvals::csrf_of(&headers, &html);
    let form = [("content-type", "application/x-www-form-urlencoded"), ("cookie", cookie.as_str())];
    let secret = "ghp_pushedS3cr3t";
    let typed = Bytes::from(format!("csrf={csrf}&value={secret}"));
    assert_eq!(server.raw(http::Method::POST, &path, &form, typed).await.0, 200);

    let complete = next_message(&mut body, &mut buffer).await.expect("the page is done");
    assert_eq!(
        complete,
        json!({"jsonrpc": "2.0", "method": "notifications/elicitation/complete", "params": {"elicitationId": elicitation_id}})
    );
    let done = next_message(&mut body, &mut buffer).await.expect("the call's result");
    assert_eq!(done["result"]["structuredContent"]["token_sha256"], crate::auth::sha256_hex(secret), "{done}");
    assert!(!done.to_string().contains(secret));
}

#[tokio::test]
async fn only_the_caller_answers_its_pushed_questions() {
    let server = Server::start(&["--legacy-elicitation", "--principal-header", "x-user"]).await;
    let mut alice = Session::open(&server, json!({"elicitation": {}})).await;
    alice.user = Some("alice");
    let bob = Session { client: &server, id: alice.id.clone(), user: Some("bob") };
    let call =
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "greeter", "arguments": {}}});
    let (_, mut body) = alice.stream(call).await;
    let mut buffer = String::new();
    let asked = next_message(&mut body, &mut buffer).await.unwrap();
    // Bob's response is accepted and goes nowhere; Alice's answers the round.
    assert_eq!(bob.answer(&asked["id"], json!({"action": "accept", "content": {"name": "Mallory"}})).await, 202);
    assert_eq!(alice.answer(&asked["id"], json!({"action": "accept", "content": {"name": "Alice"}})).await, 202);
    let done = next_message(&mut body, &mut buffer).await.unwrap();
    assert_eq!(done["result"]["structuredContent"], json!({"greeting": "Hello, Alice!"}), "{done}");
}

#[tokio::test]
async fn a_prompt_that_asks_is_answered_by_push_too() {
    let server = Server::start(&["--legacy-elicitation", "--conformance-fixtures"]).await;
    let session = Session::open(&server, json!({"elicitation": {}})).await;
    let get = json!({"jsonrpc": "2.0", "id": 6, "method": "prompts/get",
                     "params": {"name": "test_input_required_result_prompt", "arguments": {}}});
    let (_, mut body) = session.stream(get).await;
    let mut buffer = String::new();
    let asked = next_message(&mut body, &mut buffer).await.unwrap();
    assert_eq!(asked["params"]["message"], "What context should the prompt use?", "{asked}");
    assert_eq!(session.answer(&asked["id"], json!({"action": "accept", "content": {"context": "orders"}})).await, 202);
    let done = next_message(&mut body, &mut buffer).await.unwrap();
    assert_eq!(done["id"], 6);
    assert_eq!(done["result"]["messages"][0]["content"]["text"], "Context: orders", "{done}");
}
