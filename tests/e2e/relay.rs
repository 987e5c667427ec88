//! What hitl relays between clients and upstreams (#29), with software no one here
//! wrote: the real filesystem server (npm `@modelcontextprotocol/server-filesystem`),
//! whose tools all declare an `outputSchema`, reviewed through hitl and called by the
//! official Python SDK, fastmcp and the TypeScript SDK.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::gateway::ConfigFile;
use crate::harness::{Server, cannot_run};

/// A folder of its own under the system's temporary folder, removed when dropped (its
/// path also names a server started on it, for `pkill -f`).
pub(crate) struct Folder(pub(crate) PathBuf);

impl Folder {
    pub(crate) fn new(what: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("hitl-e2e-{what}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        // The filesystem server compares real paths.
        Self(path.canonicalize().unwrap())
    }
}

impl Folder {
    /// The path of `name` in it.
    pub(crate) fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// hitl (with `--legacy-elicitation`, for the TypeScript SDK v1) in front of the
/// filesystem server over stdio, allowed `folder` on its command line, its log written to
/// `log`; `fs.write_file` and `fs.read_text_file` reviewed. `None` (after `cannot_run`)
/// without Node or the server.
async fn filesystem_gateway(folder: &Path, log: &Path) -> Option<(Server, ConfigFile)> {
    let (Ok(node), Ok(script)) = (std::env::var("HITL_NODE"), std::env::var("HITL_SERVER_FILESYSTEM")) else {
        cannot_run("relay", "HITL_NODE or HITL_SERVER_FILESYSTEM is not set (cargo xtask test installs them)");
        return None;
    };
    // The server's stderr goes to `log` (hitl logs it at info, and tests run at warn).
    let command = json!(["sh", "-c", "exec \"$0\" \"$1\" \"$2\" 2>>\"$3\"", node, script, folder, log]);
    let file = ConfigFile::write(&format!(
        "[[upstream]]\nname = \"fs\"\ncommand = {command}\n\n\
         [[policy]]\ntools = [\"fs.write_file\", \"fs.read_text_file\"]\naction = \"review\"\n"
    ));
    let server = Server::start(&["--config", file.0.to_str().unwrap(), "--legacy-elicitation"]).await;
    Some((server, file))
}

/// The lines `program` printed (JSON each), after asserting it succeeded.
fn json_lines(output: std::process::Output) -> Vec<Value> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// What each client saw, by case: the write approved, then a read answered with JSON
/// that fits the output schema (structured content), with plain text and rejected (error
/// results, which no client refuses), and approved (the file's content, structured).
fn check_results(client: &str, lines: &[Value]) {
    let cases: Vec<&str> = lines.iter().map(|l| l["case"].as_str().unwrap()).collect();
    assert_eq!(cases, ["approve", "respond_json", "respond_text", "reject", "approve"], "{client}: {lines:#?}");
    for line in lines {
        assert!(line.get("exception").is_none(), "{client} raised: {line}");
    }
    let [write, json, text, reject, read] = lines else { unreachable!("five lines") };
    assert_eq!(write["is_error"], false, "{client}: {write}");
    assert!(write["structured"]["content"].as_str().is_some_and(|c| c.contains("Successfully wrote")), "{write}");
    assert_eq!(json["is_error"], false, "{client}: {json}");
    assert_eq!(json["structured"], json!({"content": "from the reviewer"}), "{client}: {json}");
    assert_eq!((&text["is_error"], &text["text"]), (&json!(true), &json!("the file is not there")), "{client}");
    assert_eq!((&reject["is_error"], &reject["text"]), (&json!(true), &json!("not this file")), "{client}");
    assert_eq!(read["is_error"], false, "{client}: {read}");
    assert_eq!(read["structured"], json!({"content": "written through hitl"}), "{client}: {read}");
}

/// The three SDK clients call reviewed filesystem tools through hitl: a reviewer's
/// `respond` is structured content when its JSON fits the tool's `outputSchema` and an
/// error result otherwise, a `reject` an error result, and none of it makes a client
/// raise (they refuse a success without structured content on such a tool). hitl
/// declares no `roots` to the server, which therefore takes its allowed folder from its
/// command line instead of failing to ask for roots at its start.
#[tokio::test]
async fn sdk_clients_accept_what_reviewers_answer_for_tools_with_an_output_schema() {
    let folder = Folder::new("relay-fs");
    let log = folder.0.with_extension("log");
    let Some((server, _file)) = filesystem_gateway(&folder.0, &log).await else { return };
    let Ok(python) = std::env::var("HITL_PYTHON") else {
        cannot_run("relay", "HITL_PYTHON is not set");
        return;
    };
    let url = format!("http://{}/mcp", server.addr);

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/sdk_results.py");
    let (at, dir) = (url.clone(), folder.0.clone());
    let output = tokio::task::spawn_blocking(move || Command::new(python).arg(script).arg(at).arg(dir).output())
        .await
        .unwrap()
        .expect("python runs");
    let lines = json_lines(output);
    let by = |client: &str| lines.iter().filter(|l| l["client"] == client).cloned().collect::<Vec<_>>();
    check_results("mcp", &by("mcp"));
    check_results("fastmcp", &by("fastmcp"));

    let node = std::env::var("HITL_NODE").unwrap();
    let modules = Path::new(&node).ancestors().nth(3).expect("node sits in node_modules").to_owned();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("ts/results_client.mjs");
    let dir = folder.0.clone();
    let output =
        tokio::task::spawn_blocking(move || Command::new(node).arg(script).arg(modules).arg(url).arg(dir).output())
            .await
            .unwrap()
            .expect("node runs");
    check_results("ts", &json_lines(output));

    // The server's own log: it was never asked for roots it could not get.
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(
        said.contains("Client does not support MCP Roots, using allowed directories set from server args"),
        "{said}"
    );
    assert!(!said.contains("Failed to request initial roots"), "{said}");
}

/// A 2026-07-28 `tools/call` of `name` with progress token `watch`, over SSE: every
/// message of the stream, the response last.
pub(crate) async fn watched(server: &Server, name: &str, mut params: Value) -> Vec<Value> {
    let mut meta = crate::harness::modern_meta(json!({"elicitation": {}}));
    meta["progressToken"] = json!("watch");
    params["name"] = json!(name);
    params["_meta"] = meta;
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", name),
    ];
    let (status, headers, text) =
        server.raw(http::Method::POST, "/mcp", &headers, bytes::Bytes::from(body.to_string())).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["content-type"], "text/event-stream", "{text}");
    text.lines().filter_map(|l| l.strip_prefix("data: ")).map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Calls reviewed tool `name` with `arguments`, approves it with the same progress
/// token, and returns the approved call's stream after checking its progress: every
/// notification under the client's token, the values strictly increasing.
async fn approved_with_progress(server: &Server, name: &str, arguments: Value) -> Vec<Value> {
    let asked = watched(server, name, json!({"arguments": arguments})).await;
    let round = &asked.last().unwrap()["result"];
    assert_eq!(round["resultType"], "input_required", "{asked:?}");
    let key = round["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let answers = json!({ key: {"action": "accept", "content": {"decision": "approve"}} });
    let params = json!({"arguments": arguments, "inputResponses": answers, "requestState": round["requestState"]});
    let messages = watched(server, name, params).await;
    let progress: Vec<&Value> =
        messages.iter().filter(|m| m["method"] == "notifications/progress").map(|m| &m["params"]).collect();
    assert!(progress.iter().all(|p| p["progressToken"] == "watch"), "{messages:?}");
    let values: Vec<f64> = progress.iter().map(|p| p["progress"].as_f64().unwrap()).collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "values on one token strictly increase: {values:?}");
    messages
}

/// The (progress, total, message) of the relayed notifications (those with a total:
/// hitl's own count of supersteps has none).
fn relayed(messages: &[Value]) -> Vec<(Value, Value, Value)> {
    messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress" && m["params"].get("total").is_some())
        .map(|m| (m["params"]["progress"].clone(), m["params"]["total"].clone(), m["params"]["message"].clone()))
        .collect()
}

/// After an approval, each of the upstream's progress notifications reaches the client
/// under its token, with its message, after hitl's own (`0`, then `1` once the review's
/// step is done): server-everything's `trigger-long-running-operation` reports 1/3, 2/3,
/// 3/3, which would not all be larger than hitl's `1`, so they are moved past it (2/4,
/// 3/4, 4/4); the Python SDK's `count` reports 10/30, 20/30, 30/30 with messages, larger
/// already, so they go as they are.
#[tokio::test]
async fn an_approved_calls_upstream_progress_reaches_the_client_strictly_increasing() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let Some(_everything) = crate::field::Everything::start(port).await else { return };
    let Some(python) = crate::upstream::PythonUpstream::start(&[]) else { return };
    let file = ConfigFile::write(&format!(
        "[[upstream]]\nname = \"ev\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n\n\
         [[upstream]]\nname = \"py\"\nurl = \"{}\"\n\n\
         [[policy]]\ntools = [\"ev.trigger-long-running-operation\", \"py.count\"]\naction = \"review\"\n",
        python.url
    ));
    let server = file.serve().await;

    let messages =
        approved_with_progress(&server, "ev.trigger-long-running-operation", json!({"duration": 0.3, "steps": 3}))
            .await;
    let own: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress" && m["params"].get("total").is_none())
        .map(|m| &m["params"]["progress"])
        .collect();
    assert_eq!(own, [&json!(0), &json!(1)], "hitl's own, before the upstream's: {messages:?}");
    let expected: Vec<(Value, Value, Value)> = (2..=4).map(|i| (json!(i), json!(4), Value::Null)).collect();
    assert_eq!(relayed(&messages), expected, "{messages:?}");
    let last = messages.last().unwrap();
    assert!(last["result"]["content"][0]["text"].as_str().is_some_and(|t| t.contains("Steps: 3")), "{last}");

    let messages = approved_with_progress(&server, "py.count", json!({"steps": 3})).await;
    let expected: Vec<(Value, Value, Value)> =
        (1..=3).map(|i| (json!(i * 10), json!(30), json!(format!("step {i} of 3")))).collect();
    assert_eq!(relayed(&messages), expected, "{messages:?}");
    assert_eq!(messages.last().unwrap()["result"]["content"][0]["text"], "counted to 3", "{messages:?}");
}

/// A 2025-11-25 client's session with `server`, declaring `capabilities`, and a
/// `tools/call` of `greeter` (which pauses) in it: the call's result.
async fn greeter_in_a_2025_session(server: &Server, capabilities: Value) -> Value {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": capabilities,
        "clientInfo": {"name": "raw", "version": "0"}}});
    let reply = server.post_raw(&[], init.to_string()).await;
    let session = reply.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let call =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "greeter", "arguments": {}}});
    let headers = [("mcp-protocol-version", "2025-11-25"), ("mcp-session-id", session.as_str())];
    let reply = server.post_raw(&headers, call.to_string()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.body.get("error").is_none(), "an error result, never a JSON-RPC error: {}", reply.body);
    reply.body["result"].clone()
}

/// The seed's error result of a 2025-era client (its first two blocks as the seed
/// fixes them) says what to do: without `--legacy-elicitation`, a client that declared
/// elicitation is told the server does not push questions to its protocol version (not
/// that it lacks elicitation); with it, a client without elicitation gets the same
/// documented error result, not `-32021`.
#[tokio::test]
async fn a_2025_era_client_is_told_why_a_paused_call_fails() {
    let seed_blocks = |result: &Value| {
        assert_eq!(result["isError"], true, "{result}");
        assert_eq!(result["content"][0]["text"], CANNOT_ANSWER, "{result}");
        let pending: Value = serde_json::from_str(result["content"][1]["text"].as_str().unwrap()).unwrap();
        assert_eq!(pending[0]["value"]["requests"][0]["message"], "What is your name?", "{result}");
    };
    let server = Server::start(&[]).await;
    let declared = greeter_in_a_2025_session(&server, json!({"elicitation": {}})).await;
    seed_blocks(&declared);
    assert_eq!(
        declared["content"][2]["text"],
        "This server does not push questions to clients of protocol version 2025-11-25: \
         call it with protocol version 2026-07-28 to answer them.",
        "{declared}"
    );
    let undeclared = greeter_in_a_2025_session(&server, json!({})).await;
    seed_blocks(&undeclared);
    assert_eq!(undeclared["content"].as_array().unwrap().len(), 2, "it cannot elicit at all: {undeclared}");

    let pushing = Server::start(&["--legacy-elicitation"]).await;
    let undeclared = greeter_in_a_2025_session(&pushing, json!({})).await;
    seed_blocks(&undeclared);
    assert_eq!(undeclared["content"].as_array().unwrap().len(), 2, "{undeclared}");
}

/// The seed's first block of a 2025-era client's paused call.
const CANNOT_ANSWER: &str = "This tool paused to ask for human input, and this client can't answer it.";

/// A 2025-11-25 upstream's `-32042` (URL elicitation required: the Python SDK's
/// `UrlElicitationRequiredError`, raised by `connect_drive` until the account is
/// authorized) reaches a 2025-11-25 client as that error, with its URL and elicitation
/// id, and a 2026-07-28 client as an `input_required` round with that URL question
/// (which that revision asks instead); once the user accepts, hitl makes the call again.
/// A decline ends the call with an error result and no second call.
#[tokio::test]
async fn an_upstreams_url_elicitation_required_error_reaches_each_client_era_as_it_understands_it() {
    let Some(upstream) = crate::upstream::PythonUpstream::start(&[]) else { return };
    let file = ConfigFile::write(&format!(
        "[[upstream]]\nname = \"db\"\nurl = \"{}\"\nprotocol = \"2025-11-25\"\n",
        upstream.url
    ));
    let server = file.serve().await;
    let connect = |account: &str| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                         "params": {"name": "db.connect_drive", "arguments": {"account": account}}})
    };

    let old = server.post_raw(&[("mcp-protocol-version", "2025-11-25")], connect("ada").to_string()).await;
    let error = &old.body["error"];
    assert_eq!(error["code"], -32042, "{}", old.body);
    let page = &error["data"]["elicitations"][0];
    assert_eq!(page["url"], "https://example.com/oauth/drive?account=ada", "{error}");
    assert_eq!(page["elicitationId"], "drive-ada", "{error}");
    assert_eq!(page["mode"], "url", "{error}");

    let url_caps = json!({"elicitation": {"url": {}}});
    let call = |id: u64, params: Value| server.modern(id, "tools/call", params, url_caps.clone());
    let arguments = json!({"account": "grace"});
    let asked = call(2, json!({"name": "db.connect_drive", "arguments": arguments})).await;
    let round = &asked.body["result"];
    assert_eq!(round["resultType"], "input_required", "{}", asked.body);
    let question = &round["inputRequests"]["drive-grace"];
    assert_eq!(question["method"], "elicitation/create", "{round}");
    assert_eq!(question["params"]["mode"], "url", "{round}");
    assert_eq!(question["params"]["url"], "https://example.com/oauth/drive?account=grace", "{round}");
    assert_eq!(question["params"]["message"], "db: Authorize access to the drive of grace", "{round}");
    assert!(question["params"].get("elicitationId").is_none(), "2026-07-28 has no elicitation ids: {round}");
    let before = crate::gateway::executions_of(&server, "connect_drive").await;
    let answered = call(
        3,
        json!({"name": "db.connect_drive", "arguments": arguments, "requestState": round["requestState"],
               "inputResponses": {"drive-grace": {"action": "accept"}}}),
    )
    .await;
    assert_eq!(answered.body["result"]["content"][0]["text"], "connected grace", "{}", answered.body);
    assert_eq!(crate::gateway::executions_of(&server, "connect_drive").await, before + 1);

    let arguments = json!({"account": "linus"});
    let asked = call(4, json!({"name": "db.connect_drive", "arguments": arguments})).await;
    let round = &asked.body["result"];
    let declined = call(
        5,
        json!({"name": "db.connect_drive", "arguments": arguments, "requestState": round["requestState"],
               "inputResponses": {"drive-linus": {"action": "decline"}}}),
    )
    .await;
    assert_eq!(declined.body["result"]["isError"], true, "{}", declined.body);
    assert_eq!(declined.body["result"]["content"][0]["text"], "The request for input was declined.");
    assert_eq!(crate::gateway::executions_of(&server, "connect_drive").await, before + 1, "not called again");
}

/// hitl's own agents declare no `outputSchema` (their results' `structuredContent` is
/// whatever object they output, which no schema constrains, so no SDK client refuses
/// it); only a gateway's upstream tools list one, as their upstream declared it.
#[tokio::test]
async fn hitls_own_agents_declare_no_output_schema() {
    let server = Server::start(&[]).await;
    let listed = server.modern(1, "tools/list", json!({}), json!({})).await;
    let tools = listed.body["result"]["tools"].as_array().expect("tools").clone();
    assert!(tools.iter().any(|t| t["name"] == "greeter"), "{}", listed.body);
    for tool in &tools {
        assert!(tool.get("outputSchema").is_none(), "{tool}");
    }
}

/// With `--legacy-elicitation`, a 2025-11-25 client's call (pushed to, over SSE in its
/// session) gets the upstream's `-32042` too, at the end of its stream.
#[tokio::test]
async fn a_pushed_2025_client_gets_the_url_elicitation_required_error_too() {
    let Some(upstream) = crate::upstream::PythonUpstream::start(&[]) else { return };
    let file = ConfigFile::write(&format!(
        "[[upstream]]\nname = \"db\"\nurl = \"{}\"\nprotocol = \"2025-11-25\"\n",
        upstream.url
    ));
    let server = Server::start(&["--config", file.0.to_str().unwrap(), "--legacy-elicitation"]).await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}, "url": {}}},
        "clientInfo": {"name": "raw", "version": "0"}}});
    let reply = server.post_raw(&[], init.to_string()).await;
    let session = reply.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "db.connect_drive", "arguments": {"account": "ken"}}});
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-11-25"),
        ("mcp-session-id", session.as_str()),
    ];
    let (status, _, text) =
        server.raw(http::Method::POST, "/mcp", &headers, bytes::Bytes::from(call.to_string())).await;
    assert_eq!(status, 200, "{text}");
    let last = text.lines().filter_map(|l| l.strip_prefix("data: ")).next_back().expect("an SSE stream");
    let last: Value = serde_json::from_str(last).unwrap();
    assert_eq!(last["error"]["code"], -32042, "{text}");
    assert_eq!(last["error"]["data"]["elicitations"][0]["elicitationId"], "drive-ken", "{text}");
}

/// A 2025-era client pushed a review question (the Python SDK in 2025-11-25 mode): once
/// approved, the upstream's `-32042` comes on a resumed round, which keeps a result, so
/// the client gets an error result naming the pages (a JSON-RPC error cannot be a
/// round's stored result).
#[tokio::test]
async fn a_url_elicitation_required_error_after_a_pushed_review_is_an_error_result_naming_the_page() {
    let Some(upstream) = crate::upstream::PythonUpstream::start(&[]) else { return };
    let file = ConfigFile::write(&format!(
        "[[upstream]]\nname = \"db\"\nurl = \"{}\"\nprotocol = \"2025-11-25\"\n\n\
         [[policy]]\ntools = [\"db.connect_drive\"]\naction = \"review\"\n",
        upstream.url
    ));
    let server = Server::start(&["--config", file.0.to_str().unwrap(), "--legacy-elicitation"]).await;
    let Some((passed, log)) = crate::python_sdk::run_script("sdk_url_required.py", &server).await else { return };
    assert!(passed, "{log}");
    let line: Value = serde_json::from_str(log.lines().next().unwrap()).unwrap_or_else(|e| panic!("{e}: {log}"));
    assert_eq!(line["is_error"], true, "{line}");
    assert_eq!(line["texts"][0], "URL elicitation required", "{line}");
    let data: Value = serde_json::from_str(line["texts"][1].as_str().unwrap()).unwrap();
    assert_eq!(data["elicitations"][0]["url"], "https://example.com/oauth/drive?account=joan", "{line}");
}
