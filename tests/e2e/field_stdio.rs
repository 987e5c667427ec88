//! A stdio upstream that crashes while a call waits for review (issue #29), with the
//! real `@modelcontextprotocol/server-filesystem` (npm, pinned, under `target/`) killed
//! with `kill -9`: a call whose request was not sent yet waits for the upstream to come
//! back and runs once; one whose request was sent when the server died ends with the
//! upstream's failure and is never sent again. Behind a wrapper (`sh -c "cat | node …"`)
//! the crash is seen by the health probe.

use std::process::Command;

use serde_json::{Value, json};

use crate::gateway::ConfigFile;
use crate::harness::{Server, cannot_run};
use crate::relay::Folder;

/// Node and the filesystem server's entry script, or `None` after `cannot_run`.
pub(crate) fn filesystem_server() -> Option<(String, String)> {
    match (std::env::var("HITL_NODE"), std::env::var("HITL_SERVER_FILESYSTEM")) {
        (Ok(node), Ok(script)) => Some((node, script)),
        _ => {
            cannot_run("field", "HITL_NODE or HITL_SERVER_FILESYSTEM is not set (cargo xtask test installs them)");
            None
        }
    }
}

/// hitl with `command` as upstream `fs`, `fs.write_file` reviewed by the client's user.
async fn gateway(command: &[String], extra: &str) -> (Server, ConfigFile) {
    let file = ConfigFile::write(&format!(
        "[[upstream]]\nname = \"fs\"\ncommand = {command:?}\ntimeout = 20\n{extra}\n\n\
         [[policy]]\ntools = [\"fs.write_file\"]\naction = \"review\"\n"
    ));
    (file.serve().await, file)
}

/// `fs.write_file` of `content` to `path`, paused for review: the params of its retry
/// with the approval.
async fn paused_write(server: &Server, path: &str, content: &str) -> Value {
    let arguments = json!({"path": path, "content": content});
    let paused = server.call_tool(1, json!({"name": "fs.write_file", "arguments": arguments})).await;
    let result = &paused.body["result"];
    assert_eq!(result["resultType"], "input_required", "{}", paused.body);
    let key = result["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    json!({"name": "fs.write_file", "arguments": arguments, "requestState": result["requestState"],
           "inputResponses": { key: {"action": "accept", "content": {"decision": "approve"}} }})
}

/// Kills (`-9`) every process whose command line has `tag`; true when one was found.
fn kill(tag: &str) -> bool {
    Command::new("pkill").args(["-9", "-f", tag]).status().unwrap().success()
}

#[tokio::test]
async fn an_approved_write_waits_for_a_crashed_stdio_server_to_come_back_and_runs_once() {
    let Some((node, script)) = filesystem_server() else { return };
    let folder = Folder::new("fs-crash");
    let command = vec![node, script, folder.0.display().to_string()];
    let (server, _file) = gateway(&command, "").await;
    let target = folder.path("notes.txt");
    let approve = paused_write(&server, &target, "written after the crash").await;
    // The server dies while the write waits for review (it was started under 10 s ago,
    // so it is started again only after a pause).
    assert!(kill(&folder.0.display().to_string()), "the filesystem server was running");
    // hitl sees the process end (the reviewer decides later than that); were the write
    // sent before, into the pipe of a process still dying, its outcome would be unknown.
    crate::field::upstream_becomes(&server, "fs", "unreachable").await;
    let done = server.call_tool(2, approve.clone()).await;
    assert!(done.body["result"]["isError"] != true, "{}", done.body);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "written after the crash");
    // A resend gets the stored result; the write is not made again.
    std::fs::write(&target, "changed since").unwrap();
    let again = server.call_tool(3, approve).await;
    assert_eq!(again.body["result"], done.body["result"]);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "changed since");
}

#[tokio::test]
async fn a_write_sent_when_the_stdio_server_died_is_not_sent_again() {
    let Some((node, script)) = filesystem_server() else { return };
    let Ok(python) = std::env::var("HITL_PYTHON") else {
        cannot_run("field", "HITL_PYTHON is not set");
        return;
    };
    let folder = Folder::new("fs-sent");
    let log = folder.path("calls.log");
    let wrapper = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/kill_on_call.py");
    let command = vec![
        python,
        wrapper.display().to_string(),
        log.clone(),
        "--".into(),
        node,
        script,
        folder.0.display().to_string(),
    ];
    let (server, _file) = gateway(&command, "").await;
    let approve = paused_write(&server, &folder.path("notes.txt"), "maybe").await;
    // The wrapper kills the server the moment the write reaches it.
    let done = server.call_tool(2, approve.clone()).await;
    assert_eq!(done.body["result"]["isError"], true, "{}", done.body);
    let said = done.text();
    assert!(said.contains("upstream fs is unreachable") && said.contains("exited before it answered"), "{said}");
    assert!(!said.contains("not sent"), "the request was sent: {said}");
    let again = server.call_tool(3, approve).await;
    assert_eq!(again.body["result"], done.body["result"], "a resend gets the same outcome");
    let sent = std::fs::read_to_string(&log).unwrap();
    assert_eq!(sent.lines().count(), 1, "the write reached the server once: {sent}");
}

#[tokio::test]
async fn behind_a_wrapper_the_health_probe_sees_the_crash_and_the_approved_write_runs_once() {
    let Some((node, script)) = filesystem_server() else { return };
    let folder = Folder::new("fs-wrapped");
    let dir = folder.0.display().to_string();
    // The shell keeps hitl's pipe open after node dies: only a write shows the crash.
    let command = vec!["sh".into(), "-c".into(), format!("cat | {node:?} {script:?} {dir:?}")];
    let (server, _file) = gateway(&command, "health_interval = 1").await;
    let target = folder.path("notes.txt");
    let approve = paused_write(&server, &target, "written through the wrapper").await;
    let node_only = format!("{script} {dir}");
    assert!(kill(&node_only), "node was running under the shell");
    crate::field::upstream_becomes(&server, "fs", "unreachable").await;
    let done = server.call_tool(2, approve).await;
    assert!(done.body["result"]["isError"] != true, "{}", done.body);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "written through the wrapper");
}
