//! Redis faults: a restart between two rounds loses no paused call, and while Redis is
//! down every request gets a clear error and `/healthz` says not ready; service comes
//! back by itself. Each test runs its own `redis-server` (on PATH; `cargo xtask test`
//! and `.ci/run` install it).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::Server;

/// A `redis-server` of this test's own, with an append-only file.
pub(crate) struct Redis {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl Redis {
    pub(crate) fn start() -> Option<Redis> {
        let port = TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let dir = std::env::temp_dir().join(format!("hitl-e2e-redis-{port}"));
        std::fs::create_dir_all(&dir).ok()?;
        let mut redis = Redis { child: None, port, dir };
        if !redis.run() {
            crate::harness::cannot_run("redis-faults", "redis-server is not on PATH");
            return None;
        }
        Some(redis)
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Starts the process (again) on the same port and directory; waits for PONG.
    pub(crate) fn run(&mut self) -> bool {
        let Ok(child) = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string(), "--appendonly", "yes", "--save", ""])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .spawn()
        else {
            return false;
        };
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                use std::io::{Read, Write};
                let mut buf = [0u8; 7];
                if s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n" {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Stops the process by PID (SIGTERM: Redis flushes its append-only file).
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let _ = child.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn greeter_answer(state: &serde_json::Value) -> serde_json::Value {
    json!({"name": "greeter", "arguments": {},
           "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Ada"}}},
           "requestState": state})
}

#[tokio::test]
async fn a_redis_restart_between_two_rounds_loses_no_paused_call() {
    let Some(mut redis) = Redis::start() else { return };
    let server = Server::start_on(&redis.url(), &[]).await;
    let first = server.call_tool(1, json!({"name": "greeter", "arguments": {}})).await;
    assert_eq!(first.body["result"]["resultType"], "input_required");
    let state = first.body["result"]["requestState"].clone();
    redis.stop();
    assert!(redis.run(), "redis-server restarts");
    server.wait_healthy().await;
    let done = server.call_tool(2, greeter_answer(&state)).await;
    assert_eq!(done.body["result"]["content"][0]["text"], r#"{"greeting":"Hello, Ada!"}"#, "{:?}", done.body);
}

#[tokio::test]
async fn redis_down_gives_clear_errors_and_service_comes_back() {
    let Some(mut redis) = Redis::start() else { return };
    let server = Server::start_on(&redis.url(), &[]).await;
    let first = server.call_tool(1, json!({"name": "greeter", "arguments": {}})).await;
    let state = first.body["result"]["requestState"].clone();
    redis.stop();

    let health = server.request(http::Method::GET, "/healthz", &[], Default::default()).await.unwrap();
    assert_eq!(health.status, 503);
    assert_eq!(health.body["status"], "unavailable");
    let reply = server.call_tool(2, greeter_answer(&state)).await;
    assert_eq!(reply.body["error"]["code"], -32603, "{:?}", reply.body);
    // The client learns what failed, not where: the store's address stays in the log.
    assert_eq!(reply.body["error"]["message"], "Internal error: the thread store is unavailable", "{:?}", reply.body);
    assert_eq!(health.body["reason"], "the thread store is unavailable");
    let fresh = server.call_tool(3, json!({"name": "greeter", "arguments": {}})).await;
    assert_eq!(fresh.body["error"]["code"], -32603);

    assert!(redis.run(), "redis-server restarts");
    server.wait_healthy().await;
    let done = server.call_tool(4, greeter_answer(&state)).await;
    assert_eq!(done.body["result"]["content"][0]["text"], r#"{"greeting":"Hello, Ada!"}"#, "{:?}", done.body);
}

#[tokio::test]
async fn the_server_starts_while_redis_is_down() {
    let Some(mut redis) = Redis::start() else { return };
    let url = redis.url();
    redis.stop();
    let server = Server::spawn(&["--store".to_owned(), url]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let health = loop {
        if let Ok(reply) = server.request(http::Method::GET, "/healthz", &[], Default::default()).await {
            break reply;
        }
        assert!(Instant::now() < deadline, "the server answers /healthz");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(health.status, 503);
    assert!(redis.run());
    server.wait_healthy().await;
}
