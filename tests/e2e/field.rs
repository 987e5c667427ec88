//! hitl in the field (issue #29): the reference MCP servers people put behind a gateway
//! (npm `@modelcontextprotocol/server-everything`, installed pinned under `target/` by
//! `cargo xtask test`), restarting under a running hitl.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::gateway::{ConfigFile, text};
use crate::harness::cannot_run;

/// server-everything over Streamable HTTP on `port`, stopped when dropped.
struct Everything {
    child: Child,
}

impl Everything {
    /// Starts it on `port` and waits until it accepts connections; `None` (after
    /// `cannot_run`) when Node or the server is not installed.
    async fn start(port: u16) -> Option<Self> {
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
    assert_eq!(text(&before), "Echo: before", "{}", before.body);

    drop(upstream);
    let _upstream = Everything::start(port).await.expect("started again");
    let after = echo("after").await;
    assert_eq!(text(&after), "Echo: after", "the next call succeeds: {}", after.body);
    let again = echo("again").await;
    assert_eq!(text(&again), "Echo: again", "{}", again.body);
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
