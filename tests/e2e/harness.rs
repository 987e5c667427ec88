//! Starts the real binary on a free port and talks HTTP to it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// A running `hitl serve`, killed on drop. Derefs to a [`Client`] of it.
pub(crate) struct Server {
    child: Child,
    client: Client,
}

/// Speaks HTTP to a server; `Copy`, so tasks can take one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Client {
    pub(crate) addr: SocketAddr,
}

impl std::ops::Deref for Server {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response: status, headers, JSON body (`Null` when empty).
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: http::HeaderMap,
    pub(crate) body: Value,
}

/// A suite that cannot run here says why; in CI (`CI` set) that fails the test instead,
/// so a missing service never passes as a skipped suite.
pub(crate) fn cannot_run(suite: &str, why: &str) {
    assert!(std::env::var_os("CI").is_none(), "{suite}: {why}, and CI needs every suite to run");
    eprintln!("{suite}: {why}; the suite did not run");
}

/// The shared Redis of the run (`cargo xtask test` and `.ci/run` provide `REDIS_URL`);
/// `None`, or a failure in CI, when there is none.
pub(crate) fn redis_url(suite: &str) -> Option<String> {
    let url = std::env::var("REDIS_URL").ok();
    if url.is_none() {
        cannot_run(suite, "REDIS_URL is not set");
    }
    url
}

/// The secret the tests' replicas share.
pub(crate) const TEST_SECRET: &str = "hitl-e2e-test-secret-0123456789abcdef";

impl Server {
    /// Starts the server with `args` after `serve`, on a free loopback port, and waits
    /// until `/healthz` answers. When `HITL_E2E_STORE` is set (a Redis URL), the server
    /// keeps its threads there: the whole suite then runs against Redis.
    pub(crate) async fn start(args: &[&str]) -> Server {
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        if let Ok(store) = std::env::var("HITL_E2E_STORE")
            && !args.contains(&"--store")
        {
            all.extend(["--store".to_owned(), store]);
        }
        let server = Self::spawn(&all);
        server.wait_healthy().await;
        server
    }

    /// Starts the server on `store` (a Redis URL) with the shared test secret.
    pub(crate) async fn start_on(store: &str, args: &[&str]) -> Server {
        let mut all = vec!["--store".to_owned(), store.to_owned()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        let server = Self::spawn(&all);
        server.wait_healthy().await;
        server
    }

    /// Starts the server without waiting for it to be healthy.
    pub(crate) fn spawn(args: &[String]) -> Server {
        let mut command = Command::new(Self::program());
        command.arg("serve").args(["--listen", "127.0.0.1:0"]).args(args).stderr(Stdio::inherit());
        // Every test calls from 127.0.0.1, and the suite's Redis outlives a run: one
        // caller's default share of paused calls is too small for all of them.
        if !args.iter().any(|a| a == "--max-paused-per-caller" || a == "--config") {
            command.args(["--max-paused-per-caller", "1000000"]);
        }
        Self::spawn_command(command)
    }

    /// The path of the server program.
    pub(crate) fn program() -> &'static str {
        env!("CARGO_BIN_EXE_hitl-e2e-server")
    }

    /// Starts `command` (which runs the server program on a free port), with the test
    /// secret and warnings logged, without waiting for it to be healthy.
    pub(crate) fn spawn_command(command: Command) -> Server {
        Self::spawn_command_with_env(command, &[("HITL_SECRET", TEST_SECRET)])
    }

    /// [`Server::spawn_command`] with `env` instead of the test secret.
    pub(crate) fn spawn_command_with_env(mut command: Command, env: &[(&str, &str)]) -> Server {
        command.env("RUST_LOG", "warn").env_remove("HITL_SECRET").env_remove("HITL_PREVIOUS_SECRET");
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.stdout(Stdio::piped()).spawn().expect("the server starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("the server prints its address");
        let addr = line
            .trim()
            .strip_prefix("hitl listening on http://")
            .and_then(|rest| rest.strip_suffix("/mcp"))
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .unwrap();
        Server { child, client: Client { addr } }
    }

    /// Polls `/healthz` until it answers 200.
    pub(crate) async fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(reply) = self.request(http::Method::GET, "/healthz", &[], Bytes::new()).await
                && reply.status == 200
            {
                return;
            }
            assert!(Instant::now() < deadline, "the server did not become healthy");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Takes the server's stderr, when it was piped.
    pub(crate) fn take_stderr(&mut self) -> Option<std::process::ChildStderr> {
        self.child.stderr.take()
    }

    /// Kills the process at once (SIGKILL), as a crash would.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Client {
    /// One request on a fresh connection.
    pub(crate) async fn request(
        &self,
        method: http::Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Reply, Box<dyn std::error::Error + Send + Sync>> {
        let stream = tokio::net::TcpStream::connect(self.addr).await?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        let mut request = http::Request::builder().method(method).uri(path).header("host", self.addr.to_string());
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = sender.send_request(request.body(Full::new(body))?).await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await?.to_bytes();
        let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes)? };
        Ok(Reply { status, headers, body })
    }

    /// One request whose body is read as text (for SSE): status, headers, text.
    pub(crate) async fn raw(
        &self,
        method: http::Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> (u16, http::HeaderMap, String) {
        let stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(connection);
        let mut request = http::Request::builder().method(method).uri(path);
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            request = request.header("host", self.addr.to_string());
        }
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = sender.send_request(request.body(Full::new(body)).unwrap()).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        (parts.status.as_u16(), parts.headers, String::from_utf8_lossy(&bytes).into_owned())
    }

    /// `GET /api/approvals/events` as `token`, held open: the response, whose body
    /// keeps the stream (and its connection) open until it is dropped.
    pub(crate) async fn approval_events(&self, token: &str) -> hyper::Response<hyper::body::Incoming> {
        let stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(connection);
        let request = http::Request::get("/api/approvals/events")
            .header("host", self.addr.to_string())
            .header("authorization", format!("Bearer {token}"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        sender.send_request(request).await.unwrap()
    }

    /// POSTs raw bytes to `/mcp`.
    pub(crate) async fn post_raw(&self, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Reply {
        let mut all = vec![("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
        all.extend_from_slice(headers);
        self.request(http::Method::POST, "/mcp", &all, body.into()).await.expect("the request completes")
    }

    /// A 2026-07-28 request with correct headers and `_meta`; `params` are merged over
    /// the `_meta`.
    pub(crate) async fn modern(&self, id: u64, method: &str, params: Value, capabilities: Value) -> Reply {
        self.modern_as(None, id, method, params, capabilities).await
    }

    /// [`Client::modern`] with `Authorization: Bearer <token>` when a token is given.
    pub(crate) async fn modern_as(
        &self,
        token: Option<&str>,
        id: u64,
        method: &str,
        params: Value,
        capabilities: Value,
    ) -> Reply {
        let mut full = json!({ "_meta": modern_meta(capabilities) });
        full.as_object_mut().unwrap().extend(params.as_object().cloned().unwrap_or_default());
        let name = full
            .get("name")
            .or_else(|| full.get("uri"))
            .or_else(|| full.get("taskId"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("mcp-protocol-version", "2026-07-28"), ("mcp-method", method)];
        if let Some(name) = name.as_deref() {
            headers.push(("mcp-name", name));
        }
        if let Some(bearer) = bearer.as_deref() {
            headers.push(("authorization", bearer));
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": full});
        let mut all = vec![("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
        all.extend_from_slice(&headers);
        let (status, headers, text) = self.raw(http::Method::POST, "/mcp", &all, Bytes::from(body.to_string())).await;
        // A refusal may be plain text, and a stream is text: kept as a string.
        let body = match text.as_str() {
            "" => Value::Null,
            text => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())),
        };
        Reply { status, headers, body }
    }

    /// A 2026-07-28 `tools/call` from a client with form elicitation.
    pub(crate) async fn call_tool(&self, id: u64, params: Value) -> Reply {
        self.modern(id, "tools/call", params, json!({"elicitation": {}})).await
    }
}

/// The `_meta` of a 2026-07-28 request.
pub(crate) fn modern_meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "hitl-e2e", "version": "0"}
    })
}

/// A call paused with `input_required`, holding what its retry repeats: the round's
/// vocabulary for tests (`server.pause(..)`, `.key()`, `.answer(..)`, `.done()`).
pub(crate) struct Paused {
    tool: String,
    arguments: Value,
    result: Value,
    /// Who retries (a bearer token; none: no `Authorization`) and what their client
    /// declares.
    caller: (Option<String>, Value),
}

impl Paused {
    /// `reply`, which must be the `input_required` result of calling `tool` with
    /// `arguments`.
    pub(crate) fn of(tool: &str, arguments: Value, reply: &Reply) -> Self {
        let result = reply.body["result"].clone();
        assert_eq!(result["resultType"], "input_required", "{}", reply.body);
        Self { tool: tool.to_owned(), arguments, result, caller: (None, json!({"elicitation": {}})) }
    }

    /// The same, retried by the holder of `token` from a client with `capabilities`.
    pub(crate) fn by(self, token: Option<&str>, capabilities: Value) -> Self {
        Self { caller: (token.map(str::to_owned), capabilities), ..self }
    }

    /// The same, asserting that the round asks one question.
    pub(crate) fn only(self) -> Self {
        assert_eq!(self.requests().len(), 1, "one question: {:?}", self.requests());
        self
    }

    /// The key of the round's first question.
    pub(crate) fn key(&self) -> &str {
        self.requests().keys().next().expect("a question")
    }

    /// The round's first question (its `elicitation/create` request).
    pub(crate) fn question(&self) -> &Value {
        self.requests().values().next().expect("a question")
    }

    /// Every question of the round, by key.
    pub(crate) fn requests(&self) -> &serde_json::Map<String, Value> {
        self.result["inputRequests"].as_object().expect("inputRequests")
    }

    /// The round's `requestState`.
    pub(crate) fn state(&self) -> &str {
        self.result["requestState"].as_str().expect("a requestState")
    }

    /// The retry that answers the first question with `answer`.
    pub(crate) async fn answer(&self, client: &Client, answer: Value) -> Reply {
        self.answer_all(client, json!({ self.key(): answer })).await
    }

    /// The retry with `responses` (`inputResponses`, by key).
    pub(crate) async fn answer_all(&self, client: &Client, responses: Value) -> Reply {
        let params = json!({"name": self.tool, "arguments": self.arguments, "inputResponses": responses,
                            "requestState": self.state()});
        let (token, capabilities) = &self.caller;
        client.modern_as(token.as_deref(), 2, "tools/call", params, capabilities.clone()).await
    }
}

impl Client {
    /// Calls `tool` with `arguments` as a client with form elicitation; it must pause.
    pub(crate) async fn pause(&self, tool: &str, arguments: Value) -> Paused {
        let reply = self.call_tool(1, json!({"name": tool, "arguments": arguments})).await;
        Paused::of(tool, arguments, &reply)
    }

    /// [`Client::pause`] by the holder of `token` from a client with `capabilities`.
    pub(crate) async fn pause_as(&self, token: &str, capabilities: Value, tool: &str, arguments: Value) -> Paused {
        let params = json!({"name": tool, "arguments": arguments});
        let reply = self.modern_as(Some(token), 1, "tools/call", params, capabilities.clone()).await;
        Paused::of(tool, arguments, &reply).by(Some(token), capabilities)
    }
}

impl Reply {
    /// The `complete` result of a call (an error result included).
    pub(crate) fn done(&self) -> &Value {
        let result = &self.body["result"];
        assert_eq!(result["resultType"], "complete", "{}", self.body);
        result
    }

    /// The text of the result's first content block (empty when there is none).
    pub(crate) fn text(&self) -> String {
        self.body["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned()
    }

    /// The text of a `complete` result, which must have one.
    pub(crate) fn done_text(&self) -> String {
        self.done()["content"][0]["text"].as_str().unwrap_or_else(|| panic!("a text result: {}", self.body)).to_owned()
    }

    /// The JSON-RPC result of an HTTP 200 reply.
    pub(crate) fn result(&self) -> &Value {
        assert_eq!(self.status, 200, "{:?}", self.body);
        &self.body["result"]
    }

    /// Is the result an error result?
    pub(crate) fn is_error(&self) -> bool {
        self.result()["isError"] == true
    }

    /// The questions of an `input_required` result, by key.
    pub(crate) fn requests(&self) -> serde_json::Map<String, Value> {
        let result = self.result();
        assert_eq!(result["resultType"], "input_required", "{result}");
        result["inputRequests"].as_object().cloned().expect("inputRequests")
    }

    /// The `requestState` of an `input_required` result.
    pub(crate) fn state(&self) -> String {
        self.result()["requestState"].as_str().expect("a requestState").to_owned()
    }

    /// The key of the one question an `input_required` result asks.
    pub(crate) fn only_key(&self) -> String {
        let requests = self.requests();
        assert_eq!(requests.len(), 1, "one question: {requests:?}");
        requests.keys().next().expect("a question").clone()
    }

    /// A JSON-RPC error reply: its HTTP status, code and message.
    pub(crate) fn error(&self) -> (u16, i64, String) {
        let e = &self.body["error"];
        (self.status, e["code"].as_i64().unwrap_or_default(), e["message"].as_str().unwrap_or_default().to_owned())
    }
}

/// An `accept` answer with `content`.
pub(crate) fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}
