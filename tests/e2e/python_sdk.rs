//! The official MCP Python SDK drives the example agents (`tests/python/sdk_e2e.py`).
//! `cargo xtask test` provides the SDK in a virtualenv and points `HITL_PYTHON` at its
//! interpreter; without it this suite cannot run and says so.

use std::path::Path;
use std::process::Command;

use crate::harness::Server;

/// Runs `tests/python/<script>` against `server`: whether it passed, and its output;
/// `None` (after `cannot_run`) without the SDK.
pub(crate) async fn run_script(script: &str, server: &Server) -> Option<(bool, String)> {
    let Ok(python) = std::env::var("HITL_PYTHON") else {
        crate::harness::cannot_run("python-sdk", "HITL_PYTHON is not set");
        return None;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python").join(script);
    let url = format!("http://{}/mcp", server.addr);
    let output = tokio::task::spawn_blocking(move || Command::new(python).arg(script).arg(url).output())
        .await
        .unwrap()
        .expect("the Python interpreter runs");
    let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    Some((output.status.success(), log))
}

#[tokio::test]
async fn python_sdk_drives_the_example_agents() {
    let server = Server::start(&[]).await;
    let Some((passed, log)) = run_script("sdk_e2e.py", &server).await else { return };
    assert!(passed, "the Python SDK suite failed:\n{log}");
    assert!(log.contains("OK"), "{log}");
}
