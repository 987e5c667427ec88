//! `--store rediss://` with `--redis-ca-file`: a paused call kept in a Redis reached
//! over TLS. The test makes its own CA and server certificate with `openssl` and runs
//! its own `redis-server --tls-port`; without them it cannot run and says so.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::Server;

struct TlsRedis {
    child: Child,
    dir: std::path::PathBuf,
    port: u16,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn openssl(dir: &Path, args: &[&str]) -> bool {
    Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn start() -> Option<TlsRedis> {
    let port = TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
    let dir = std::env::temp_dir().join(format!("hitl-e2e-tls-{port}"));
    std::fs::create_dir_all(&dir).ok()?;
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").ok()?;
    let made = openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "1",
            "-subj",
            "/CN=hitl-test-ca",
        ],
    ) && openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    ) && openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "1",
            "-extfile",
            "ext.cnf",
        ],
    );
    if !made {
        let _ = std::fs::remove_dir_all(&dir);
        return None;
    }
    let child = Command::new("redis-server")
        .current_dir(&dir)
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args([
            "--tls-cert-file",
            "server.crt",
            "--tls-key-file",
            "server.key",
            "--tls-ca-cert-file",
            "ca.crt",
            "--tls-auth-clients",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
        .ok()?;
    let redis = TlsRedis { child, dir, port };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(redis)
}

#[tokio::test]
async fn paused_calls_live_in_redis_over_tls() {
    let Some(redis) = start() else {
        crate::harness::cannot_run("redis-tls", "openssl or a TLS-capable redis-server is missing");
        return;
    };
    let url = format!("rediss://127.0.0.1:{}/0", redis.port);
    let ca = redis.dir.join("ca.crt");
    let server = Server::start_on(&url, &["--redis-ca-file", ca.to_str().unwrap()]).await;
    let first = server.call_tool(1, json!({"name": "greeter", "arguments": {}})).await;
    assert_eq!(first.body["result"]["resultType"], "input_required", "{:?}", first.body);
    let done = server
        .call_tool(
            2,
            json!({"name": "greeter", "arguments": {},
                            "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Ada"}}},
                            "requestState": first.body["result"]["requestState"]}),
        )
        .await;
    assert_eq!(done.body["result"]["content"][0]["text"], r#"{"greeting":"Hello, Ada!"}"#);
    // Without the CA the server cannot trust this Redis: not ready.
    let untrusting = Server::spawn(&["--store".to_owned(), url]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let health = loop {
        if let Ok(reply) = untrusting.request(http::Method::GET, "/healthz", &[], Default::default()).await {
            break reply;
        }
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(health.status, 503);
}
