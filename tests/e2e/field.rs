//! hitl in the field (issue #29): the reference MCP servers people put behind a gateway
//! (npm `@modelcontextprotocol/server-everything`, installed pinned under `target/` by
//! `cargo xtask test`), restarting under a running hitl.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::gateway::ConfigFile;
use crate::harness::cannot_run;

/// server-everything over Streamable HTTP on `port`, stopped when dropped.
pub(crate) struct Everything {
    child: Child,
}

impl Everything {
    /// Starts it on `port` and waits until it accepts connections; `None` (after
    /// `cannot_run`) when Node or the server is not installed.
    pub(crate) async fn start(port: u16) -> Option<Self> {
        let (Ok(node), Ok(script)) = (std::env::var("HITL_NODE"), std::env::var("HITL_SERVER_EVERYTHING")) else {
            cannot_run("field", "HITL_NODE or HITL_SERVER_EVERYTHING is not set (cargo xtask test installs them)");
            return None;
        };
        let child = Command::new(node)
            .arg(script)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("node starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(Instant::now() < deadline, "server-everything did not listen on {port}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Some(Self { child })
    }
}

impl Drop for Everything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// server-everything answers a request in a session it no longer knows with HTTP 400
/// `No valid session ID provided` (the TypeScript SDK's examples do): after it restarts
/// under a running hitl, the next call opens a new session and succeeds, for the
/// gateway's listing session and for the caller's own.
#[tokio::test]
async fn an_http_upstream_that_restarts_is_reconnected() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let Some(upstream) = Everything::start(port).await else { return };
    let file = ConfigFile::write(&format!("[[upstream]]\nname = \"ev\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n"));
    let server = file.serve().await;
    let echo = |message: &'static str| {
        let server = &server;
        async move { server.call_tool(1, json!({"name": "ev.echo", "arguments": {"message": message}})).await }
    };
    let before = echo("before").await;
    assert_eq!(before.text(), "Echo: before", "{}", before.body);

    drop(upstream);
    let _upstream = Everything::start(port).await.expect("started again");
    let after = echo("after").await;
    assert_eq!(after.text(), "Echo: after", "the next call succeeds: {}", after.body);
    let again = echo("again").await;
    assert_eq!(again.text(), "Echo: again", "{}", again.body);
    let health = server.request(http::Method::GET, "/healthz", &[], bytes::Bytes::new()).await.unwrap();
    assert_eq!(health.body["upstreams"]["ev"]["status"], "ok", "{}", health.body);
}

/// A result a 2026-07-28 upstream answers, relayed to a 2025-era client: hitl answers
/// as itself (the upstream's `serverInfo` taken out) and leaves no empty `_meta`.
#[tokio::test]
async fn a_relayed_result_carries_no_empty_meta_to_a_2025_era_client() {
    let Some(upstream) = crate::upstream::PythonUpstream::start(&[]) else { return };
    let file = ConfigFile::write(&format!("[[upstream]]\nname = \"db\"\nurl = \"{}\"\n", upstream.url));
    let server = file.serve().await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "db.echo", "arguments": {"text": "old"}}});
    let reply = server.post_raw(&[], call.to_string()).await;
    let result = &reply.body["result"];
    assert_eq!(result["content"][0]["text"], "old", "{}", reply.body);
    assert!(result.get("_meta").is_none_or(|meta| meta.as_object().is_some_and(|m| !m.is_empty())), "{result}");
}

/// `/healthz`'s state of one upstream, polled until it is `status` (10 s at most); the
/// HTTP status stays 200 throughout (one bad upstream takes no replica out of a load
/// balancer).
pub(crate) async fn upstream_becomes(server: &crate::harness::Server, name: &str, status: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let health = server.request(http::Method::GET, "/healthz", &[], bytes::Bytes::new()).await.unwrap();
        assert_eq!(health.status, 200, "{}", health.body);
        if health.body["upstreams"][name]["status"] == status {
            return health.body["upstreams"][name].clone();
        }
        assert!(Instant::now() < deadline, "{name} never became {status}: {}", health.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An HTTP upstream killed between calls is reported unreachable by the next probe
/// (`health_interval`), and ok again once it answers.
#[tokio::test]
async fn healthz_tells_of_an_http_upstream_that_went_away() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let Some(upstream) = Everything::start(port).await else { return };
    let file = ConfigFile::write(&format!(
        "[[upstream]]\nname = \"ev\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nhealth_interval = 1\n"
    ));
    let server = file.serve().await;
    upstream_becomes(&server, "ev", "ok").await;
    drop(upstream);
    let down = upstream_becomes(&server, "ev", "unreachable").await;
    assert!(down["error"].as_str().is_some_and(|e| e.contains("upstream ev")), "{down}");
    let _upstream = Everything::start(port).await.expect("started again");
    upstream_becomes(&server, "ev", "ok").await;
}

/// A stdio upstream is unreachable from the moment its process exits (`kill -9`) until
/// one started again answers.
#[tokio::test]
async fn healthz_tells_of_a_stdio_upstream_whose_process_died() {
    let Ok(python) = std::env::var("HITL_PYTHON") else {
        cannot_run("field", "HITL_PYTHON is not set");
        return;
    };
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/upstream_server.py");
    let tag = format!("hitl-field-{}-{}", std::process::id(), Instant::now().elapsed().as_nanos());
    let file = ConfigFile::write(&format!(
        "[[upstream]]\nname = \"local\"\ncommand = [{python:?}, {:?}, \"--stdio\", {tag:?}]\nhealth_interval = 1\n",
        script.to_string_lossy()
    ));
    let server = file.serve().await;
    upstream_becomes(&server, "local", "ok").await;
    let killed = Command::new("pkill").args(["-9", "-f", &tag]).status().unwrap();
    assert!(killed.success(), "the upstream's process was found and killed");
    let down = upstream_becomes(&server, "local", "unreachable").await;
    assert!(down["error"].as_str().is_some_and(|e| e.contains("exited")), "{down}");
    // The next probe (or call) starts it again.
    upstream_becomes(&server, "local", "ok").await;
    let echoed = server.call_tool(1, json!({"name": "local.echo", "arguments": {"text": "back"}})).await;
    assert_eq!(echoed.text(), "back", "{}", echoed.body);
}
