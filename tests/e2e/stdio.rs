//! `hitl serve --stdio` (#30): the official Python SDK's and TypeScript SDK's stdio
//! clients start the hitl program as a desktop host would, in front of a stdio upstream
//! (the Python SDK's `MCPServer`, `tests/python/upstream_server.py`, or the real
//! `@modelcontextprotocol/server-filesystem`), list, call an allowed tool, and approve
//! and reject a reviewed one (pushed `elicitation/create` for a 2025-era client,
//! `input_required` rounds for a 2026-07-28 one). What hitl writes on standard output is
//! kept (`tests/python/stdio_recorder.py`) and must be JSON-RPC, line by line; closing
//! standard input ends hitl (exit status 0) and its upstream's process. Raw lines from
//! this test check bad input, `--stdio-principal` against a policy's `callers`, and an
//! approval by another person on the pages `[server] listen` serves meanwhile.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};

use crate::harness::{Client, Server, TEST_SECRET, cannot_run};

/// A folder of its own (config, secret, records, pids), removed on drop.
struct Folder(PathBuf);

impl Folder {
    fn new(what: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("hitl-stdio-{what}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dir = dir.canonicalize().unwrap();
        private(&dir.join("secret"), TEST_SECRET);
        Self(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }

    /// `hitl.toml` here: `server` under `[server]` (the test's store and secret added),
    /// then `rest`. Returns its path.
    fn config(&self, server: &str, rest: &str) -> String {
        let store = std::env::var("HITL_E2E_STORE").map(|url| format!("store = {url:?}\n")).unwrap_or_default();
        let text =
            format!("[server]\nsecret_file = \"secret\"\nmax_paused_per_caller = 1000000\n{store}{server}\n\n{rest}");
        std::fs::write(self.0.join("hitl.toml"), text).unwrap();
        self.path("hitl.toml")
    }

    /// `[[upstream]] up`: the Python SDK's upstream over stdio, its pid noted in `pids`,
    /// with `up.release` reviewed.
    fn python_upstream(&self, python: &str) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/upstream_server.py");
        let shell = format!("echo $$ >> '{}'; exec '{python}' '{}' --stdio", self.path("pids"), script.display());
        format!(
            "[[upstream]]\nname = \"up\"\ncommand = [\"sh\", \"-c\", {shell:?}]\n\n\
             [[policy]]\ntools = [\"up.release\"]\naction = \"review\"\n"
        )
    }

    /// The upstream processes started so far.
    fn pids(&self) -> Vec<u32> {
        let text = std::fs::read_to_string(self.0.join("pids")).unwrap_or_default();
        text.lines().map(|l| l.trim().parse().unwrap()).collect()
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `text` in a file of mode 600 (hitl refuses secrets others may read).
fn private(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn python() -> Option<String> {
    let found = std::env::var("HITL_PYTHON").ok();
    if found.is_none() {
        cannot_run("stdio", "HITL_PYTHON is not set (cargo xtask test installs the Python SDK)");
    }
    found
}

/// Whether process `pid` has ended (gone, or a zombie no one reaped yet).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// Waits (2 s at most) until every process of `pids` has ended.
fn all_end(pids: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while pids.iter().any(|pid| !ended(*pid)) {
        assert!(Instant::now() < deadline, "upstream processes {pids:?} still run after hitl ended");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every line hitl wrote on standard output, each a JSON-RPC message.
fn protocol_lines(stdout: &str) -> Vec<Value> {
    assert!(stdout.is_empty() || stdout.ends_with('\n'), "the last line is whole: {stdout:?}");
    stdout
        .lines()
        .map(|line| {
            let message: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON on hitl's stdout ({e}): {line:?}"));
            assert_eq!(message["jsonrpc"], "2.0", "not JSON-RPC: {line}");
            message
        })
        .collect()
}

/// What `stdio_recorder.py` kept of the hitl it ran in `folder`: its output lines, after
/// checking it ended by itself with status 0 and its upstreams ended with it.
fn recorded(folder: &Folder) -> Vec<Value> {
    let status = std::fs::read_to_string(folder.0.join("exit")).expect("hitl ended before the client closed");
    assert_eq!(status.trim(), "0", "hitl exits with 0 when its input ends");
    let pids = folder.pids();
    assert!(!pids.is_empty(), "the upstream was started");
    all_end(&pids);
    protocol_lines(&std::fs::read_to_string(folder.0.join("stdout")).unwrap())
}

/// `hitl serve --stdio --config <config>` and `extra`, as a host starts it.
fn hitl_command(config: &str, extra: &[&str]) -> Vec<String> {
    let mut command = vec![Server::program().to_owned(), "serve".into(), "--stdio".into(), "--config".into()];
    command.push(config.to_owned());
    command.extend(extra.iter().map(|a| (*a).to_owned()));
    command
}

/// Runs `tests/python/sdk_stdio.py` in `mode`: its JSON lines by step.
fn python_sdk(python: &str, mode: &str, folder: &Path, config: &str) -> serde_json::Map<String, Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/sdk_stdio.py");
    let output = Command::new(python)
        .arg(script)
        .args([mode, &folder.display().to_string(), "--"])
        .args(hitl_command(config, &[]))
        .env("RUST_LOG", "warn")
        .output()
        .expect("the Python interpreter runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    stdout
        .lines()
        .map(|line| {
            let step: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            (step["step"].as_str().unwrap().to_owned(), step)
        })
        .collect()
}

/// The steps every SDK run goes through, the same in both eras.
fn check_python_steps(steps: &serde_json::Map<String, Value>) {
    let tools = steps["list"]["tools"].as_array().unwrap();
    for tool in ["up.echo", "up.release", "up.executions"] {
        assert!(tools.contains(&json!(tool)), "{tool} listed: {tools:?}");
    }
    assert_eq!(steps["allowed"], json!({"step": "allowed", "is_error": false, "text": "over stdio"}));
    let approved = &steps["approve"];
    assert_eq!(approved["is_error"], false, "{approved}");
    assert_eq!(approved["text"], "Released billing v2.0 to production.", "{approved}");
    assert!(approved["asked"][0].as_str().is_some_and(|m| m.contains("up.release")), "{approved}");
    let rejected = &steps["reject"];
    assert_eq!(rejected["is_error"], true, "{rejected}");
    // The approved call ran once; the rejected one not at all.
    assert_eq!(steps["executions"]["text"], "1", "{steps:?}");
    assert!(steps.contains_key("closed"));
}

#[tokio::test]
async fn the_python_sdks_stdio_client_in_2025_mode_approves_by_push_and_rejects() {
    let Some(python) = python() else { return };
    let folder = Folder::new("py-legacy");
    let config = folder.config("", &folder.python_upstream(&python));
    let path = folder.0.clone();
    let steps = tokio::task::spawn_blocking(move || python_sdk(&python, "legacy", &path, &config)).await.unwrap();
    check_python_steps(&steps);
    let lines = recorded(&folder);
    let pushed: Vec<&Value> = lines.iter().filter(|m| m["method"] == "elicitation/create").collect();
    assert_eq!(pushed.len(), 2, "one review question pushed per reviewed call: {lines:?}");
    assert!(lines.iter().all(|m| m["result"]["resultType"].is_null()), "2025-era results have no resultType");
}

#[tokio::test]
async fn the_python_sdks_stdio_client_in_2026_mode_completes_input_required_rounds() {
    let Some(python) = python() else { return };
    let folder = Folder::new("py-modern");
    let config = folder.config("", &folder.python_upstream(&python));
    let path = folder.0.clone();
    let steps = tokio::task::spawn_blocking(move || python_sdk(&python, "2026-07-28", &path, &config)).await.unwrap();
    check_python_steps(&steps);
    let lines = recorded(&folder);
    assert!(lines.iter().all(|m| m["method"] != "elicitation/create"), "nothing pushed to a 2026-07-28 client");
    let rounds = lines.iter().filter(|m| m["result"]["resultType"] == "input_required").count();
    assert_eq!(rounds, 2, "one round per reviewed call: {lines:?}");
}

#[tokio::test]
async fn the_typescript_sdks_stdio_client_writes_through_the_filesystem_server_only_when_approved() {
    let Some(python) = python() else { return };
    let Some((node, script)) = crate::field_stdio::filesystem_server() else { return };
    let modules = Path::new(&node).ancestors().nth(3).expect("node sits in node_modules").to_owned();
    let folder = Folder::new("ts");
    let files = folder.0.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let shell = format!("echo $$ >> '{}'; exec '{node}' '{script}' '{}'", folder.path("pids"), files.display());
    let config = folder.config(
        "",
        &format!(
            "[[upstream]]\nname = \"fs\"\ncommand = [\"sh\", \"-c\", {shell:?}]\ntimeout = 20\n\n\
             [[policy]]\ntools = [\"fs.write_file\"]\naction = \"review\"\n"
        ),
    );
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("ts/stdio_client.mjs");
    let recorder = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/stdio_recorder.py");
    let mut command = Command::new(&node);
    command.arg(client).arg(modules).arg(files.display().to_string()).arg("--").arg(&python).arg(recorder);
    command.arg(folder.0.display().to_string()).arg("--").args(hitl_command(&config, &[]));
    let output = tokio::task::spawn_blocking(move || command.env("RUST_LOG", "warn").output()).await.unwrap();
    let output = output.expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    let steps: serde_json::Map<String, Value> = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|s| (s["step"].as_str().unwrap().to_owned(), s))
        .collect();
    let tools = steps["list"]["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("fs.write_file")) && tools.contains(&json!("fs.list_directory")), "{tools:?}");
    assert_eq!(steps["allowed"]["is_error"], false, "{stdout}");
    assert_eq!(steps["approve"]["is_error"], false, "{stdout}");
    assert_eq!(std::fs::read_to_string(files.join("approved.txt")).unwrap(), "written over stdio");
    assert_eq!(steps["reject"]["is_error"], true, "{stdout}");
    assert!(!files.join("rejected.txt").exists(), "a rejected write does not run");
    assert_eq!(steps["asked"]["messages"].as_array().unwrap().len(), 2, "{stdout}");
    let lines = recorded(&folder);
    assert_eq!(lines.iter().filter(|m| m["method"] == "elicitation/create").count(), 2, "{lines:?}");
}

/// hitl started by this test with raw pipes: lines in, lines out.
struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Every line read so far.
    seen: Vec<String>,
}

impl Raw {
    fn start(config: &str, extra: &[&str]) -> Self {
        let command = hitl_command(config, extra);
        let mut child = Command::new(&command[0])
            .args(&command[1..])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("hitl starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { stdin: child.stdin.take(), child, lines, seen: Vec::new() }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next message hitl writes (30 s at most: the upstream starts first).
    fn next(&mut self) -> Value {
        let line = self.lines.recv_timeout(Duration::from_secs(30)).expect("a line from hitl");
        self.seen.push(line.clone());
        protocol_lines(&format!("{line}\n")).remove(0)
    }

    /// The next message that is not a notification.
    fn next_answer(&mut self) -> Value {
        loop {
            let message = self.next();
            if message.get("id").is_some() {
                return message;
            }
        }
    }

    fn initialize(&mut self, capabilities: Value) {
        self.send(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
                    "capabilities": capabilities, "clientInfo": {"name": "raw", "version": "0"}}})
            .to_string(),
        );
        let init = self.next_answer();
        assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    }

    fn call(&mut self, id: u64, name: &str, arguments: Value) {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": name, "arguments": arguments}});
        self.send(&call.to_string());
    }

    /// Closes hitl's input: it must exit with status 0 within 2 s.
    fn close(mut self) {
        let closed = Instant::now();
        drop(self.stdin.take());
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "hitl exits with 0 when its input ends: {status}");
                break;
            }
            assert!(closed.elapsed() < Duration::from_secs(2), "hitl still runs 2 s after its input closed");
            std::thread::sleep(Duration::from_millis(10));
        }
        // What is left on its output is protocol too.
        for line in self.lines.try_iter() {
            protocol_lines(&format!("{line}\n"));
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn bad_lines_get_parse_errors_and_closing_stdin_ends_hitl_and_its_upstream() {
    let Some(python) = python() else { return };
    let folder = Folder::new("raw");
    let config = folder.config("max_body_bytes = 4096", &folder.python_upstream(&python));
    let mut hitl = Raw::start(&config, &[]);
    hitl.send("not json at all");
    let error = hitl.next();
    assert_eq!((&error["id"], &error["error"]["code"]), (&Value::Null, &json!(-32700)), "{error}");
    hitl.send(&format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"x":"{}"}}}}"#, "y".repeat(8000)));
    let error = hitl.next();
    assert_eq!((&error["id"], &error["error"]["code"]), (&Value::Null, &json!(-32700)), "{error}");
    assert_eq!(error["error"]["message"], "Parse error: the message exceeds 4096 bytes", "{error}");
    hitl.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"up.echo"}"#);
    assert_eq!(hitl.next()["error"]["code"], -32700);
    // The loop goes on: a 2025-era client without elicitation gets the seed's error
    // result for a reviewed call, and the allowed tool runs.
    hitl.initialize(json!({}));
    hitl.call(3, "up.release", json!({"service": "billing", "version": "1"}));
    let refused = hitl.next_answer();
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let said = refused["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(said, "This tool paused to ask for human input, and this client can't answer it.");
    hitl.call(4, "up.echo", json!({"text": "still here"}));
    assert_eq!(hitl.next_answer()["result"]["content"][0]["text"], "still here");
    let pids = folder.pids();
    assert!(!pids.is_empty() && pids.iter().all(|pid| !ended(*pid)), "the upstream runs: {pids:?}");
    hitl.close();
    all_end(&pids);
}

#[test]
fn closing_stdin_while_hitl_still_waits_for_its_upstream_ends_hitl_and_the_upstream() {
    // An upstream that starts and never answers: hitl is still listing it (for up to
    // the upstream's 60 s timeout) when the host gives up.
    let folder = Folder::new("starting");
    let shell = format!("echo $$ >> '{}'; exec sleep 600", folder.path("pids"));
    let config = folder.config("", &format!("[[upstream]]\nname = \"mute\"\ncommand = [\"sh\", \"-c\", {shell:?}]\n"));
    let hitl = Raw::start(&config, &[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while folder.pids().is_empty() {
        assert!(Instant::now() < deadline, "the upstream was not started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pids = folder.pids();
    hitl.close();
    all_end(&pids);
}

#[test]
fn the_stdio_principal_is_the_caller_a_policys_callers_name() {
    let Some(python) = python() else { return };
    let folder = Folder::new("principal");
    let rest = format!(
        "[[policy]]\ntools = [\"up.echo\"]\naction = \"allow\"\ncallers = [\"user:alice\"]\n\n{}",
        folder.python_upstream(&python)
    );
    let config = folder.config("", &rest);
    let listed = |hitl: &mut Raw| {
        hitl.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        let list = hitl.next_answer();
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
    };
    let mut alice = Raw::start(&config, &["--stdio-principal", "user:alice"]);
    let names: Vec<String> = listed(&mut alice);
    assert!(names.contains(&"up.echo".to_owned()), "alice is a caller: {names:?}");
    alice.call(2, "up.echo", json!({"text": "alice"}));
    assert_eq!(alice.next_answer()["result"]["content"][0]["text"], "alice");
    alice.close();
    // The default principal, user:local, is not one of the callers.
    let mut local = Raw::start(&config, &[]);
    let names: Vec<String> = listed(&mut local);
    assert!(!names.contains(&"up.echo".to_owned()) && names.contains(&"up.release".to_owned()), "{names:?}");
    local.call(2, "up.echo", json!({"text": "local"}));
    let unknown = local.next_answer();
    assert_eq!(unknown["error"]["message"], "Unknown tool: up.echo", "{unknown}");
    local.close();
    // A principal that is not user:<id> is refused at start.
    let bad = Command::new(Server::program())
        .args(hitl_command(&config, &["--stdio-principal", "alice"])[1..].iter())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(bad.stdout.is_empty(), "nothing but protocol on stdout");
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(said.contains("--stdio-principal \"alice\": give user:<id>"), "{said}");
}

#[tokio::test]
async fn with_listen_set_another_person_approves_on_the_api_and_the_stdio_call_completes() {
    let Some(python) = python() else { return };
    let folder = Folder::new("listen");
    private(&folder.0.join("tokens.txt"), "bob tok-bob\n");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let rest = format!(
        "[auth]\ntokens_file = \"tokens.txt\"\n\n[[policy]]\ntools = [\"up.drop_partition\"]\naction = \"review\"\n\
         approvers = [\"user:bob\"]\n\n{}",
        folder.python_upstream(&python)
    );
    let config = folder.config(&format!("listen = \"127.0.0.1:{port}\"\n[approvals]\nhold = 0"), &rest);
    let mut hitl = Raw::start(&config, &[]);
    hitl.initialize(json!({"elicitation": {"form": {}, "url": {}}}));
    hitl.call(1, "up.drop_partition", json!({"partition": "p1", "database": "orders"}));
    let asked = hitl.next_answer();
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert_eq!(asked["params"]["mode"], "url", "{asked}");
    let url = asked["params"]["url"].as_str().unwrap();
    let prefix = format!("http://127.0.0.1:{port}/approvals/");
    let id = url.strip_prefix(&prefix).unwrap_or_else(|| panic!("hitl's page on its listen address: {url}"));
    // The stdio client consents to the page; bob decides on the API.
    hitl.send(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept"}}).to_string());
    let client = Client { addr: ([127, 0, 0, 1], port).into() };
    let decision = Bytes::from(json!({"decision": "approve"}).to_string());
    let headers = [("authorization", "Bearer tok-bob"), ("content-type", "application/json")];
    // The listing is written behind the round (the ledger's queue): bob decides once
    // he can see the approval, as a person on the page would.
    let entry = format!("/api/approvals/{id}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen =
            client.request(http::Method::GET, &entry, &headers[..1], Bytes::new()).await.expect("the API answers");
        if seen.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the approval is not listed: {} {}", seen.status, seen.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let path = format!("/api/approvals/{id}/decision");
    let decided = client.request(http::Method::POST, &path, &headers, decision).await.expect("the API answers");
    assert_eq!(decided.status, 200, "{}", decided.body);
    let done = tokio::task::spawn_blocking(move || {
        let done = hitl.next_answer();
        (hitl, done)
    })
    .await
    .unwrap();
    let (mut hitl, done) = done;
    assert_eq!(done["id"], 1, "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "dropped p1 on orders", "{done}");
    hitl.call(2, "up.executions", json!({"tool": "drop_partition"}));
    assert_eq!(hitl.next_answer()["result"]["content"][0]["text"], "1");
    hitl.close();
}
