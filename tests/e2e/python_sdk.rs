//! The official MCP Python SDK drives the example agents (`tests/python/sdk_e2e.py`).
//! `cargo xtask test` provides the SDK in a virtualenv and points `HITL_PYTHON` at its
//! interpreter; without it this suite cannot run and says so.

use std::path::Path;
use std::process::Command;

use crate::harness::Server;

#[tokio::test]
async fn python_sdk_drives_the_example_agents() {
    let Ok(python) = std::env::var("HITL_PYTHON") else {
        crate::harness::cannot_run("python-sdk", "HITL_PYTHON is not set");
        return;
    };
    let server = Server::start(&[]).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/sdk_e2e.py");
    let url = format!("http://{}/mcp", server.addr);
    let output = tokio::task::spawn_blocking(move || Command::new(python).arg(script).arg(url).output())
        .await
        .unwrap()
        .expect("the Python interpreter runs");
    let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the Python SDK suite failed:\n{log}");
    assert!(log.contains("OK"), "{log}");
}
