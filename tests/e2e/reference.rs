//! hitl in front of the reference MCP servers people put behind a gateway, pinned and
//! installed under `target/` by `cargo xtask test`: `mcp-server-git` (PyPI) and
//! `@modelcontextprotocol/server-filesystem` (npm), both over stdio, driven by the
//! official Python SDK speaking 2026-07-28. A reviewed write and a reviewed commit are
//! approved by the client's user and happen once; a denied reset fails, naming its policy.

use std::process::Command;

use serde_json::Value;

use crate::field_stdio::filesystem_server;
use crate::gateway::ConfigFile;
use crate::harness::cannot_run;

/// `git` in `dir`, which must succeed; its output.
fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn the_python_sdk_writes_and_commits_through_hitl_in_front_of_mcp_server_git_and_server_filesystem() {
    let Ok(python) = std::env::var("HITL_PYTHON") else {
        cannot_run("reference", "HITL_PYTHON is not set");
        return;
    };
    let Some((node, filesystem)) = filesystem_server() else { return };
    let repo = std::env::temp_dir().join(format!("hitl-e2e-git-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&repo);
    std::fs::create_dir_all(&repo).unwrap();
    let repo = repo.canonicalize().unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["config", "user.email", "e2e@hitl.example"]);
    git(&repo, &["config", "user.name", "hitl e2e"]);
    std::fs::write(repo.join("README"), "a repository\n").unwrap();
    git(&repo, &["add", "README"]);
    git(&repo, &["commit", "-qm", "First"]);
    let dir = repo.display().to_string();
    let file = ConfigFile::write(&format!(
        r#"[[upstream]]
name = "git"
command = [{python:?}, "-m", "mcp_server_git", "--repository", {dir:?}]

[[upstream]]
name = "fs"
command = [{node:?}, {filesystem:?}, {dir:?}]

[[policy]]
tools = ["git.git_commit", "fs.write_file"]
action = "review"

[[policy]]
tools = ["git.git_reset"]
action = "deny"
"#
    ));
    let server = file.serve().await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/sdk_reference.py");
    let url = format!("http://{}/mcp", server.addr);
    let output = tokio::task::spawn_blocking(move || Command::new(python).arg(script).arg(url).arg(dir).output())
        .await
        .unwrap()
        .expect("python runs");
    let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{log}");
    let seen: Value = serde_json::from_str(log.lines().next().unwrap_or_default()).unwrap_or_else(|_| panic!("{log}"));

    let tools: Vec<&str> = seen["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for name in
        ["git.git_status", "git.git_commit", "git.git_log", "git.git_reset", "fs.write_file", "fs.read_text_file"]
    {
        assert!(tools.contains(&name), "{name} listed: {tools:?}");
    }
    // The write and the commit were reviewed (one question each) and ran once.
    assert_eq!(seen["reviews"].as_array().unwrap().len(), 2, "{seen}");
    assert_eq!(seen["write"]["is_error"], false, "{seen}");
    assert!(seen["write"]["structured"].is_object(), "the filesystem server's structured result is relayed: {seen}");
    assert_eq!(seen["add"]["is_error"], false, "{seen}");
    assert_eq!(seen["commit"]["is_error"], false, "{seen}");
    assert_eq!(seen["reset"]["is_error"], true, "{seen}");
    assert_eq!(seen["reset"]["text"], "git.git_reset is denied by the policy tools = [\"git.git_reset\"]", "{seen}");
    assert!(seen["log"]["text"].as_str().unwrap().contains("Add notes through hitl"), "{seen}");
    assert_eq!(std::fs::read_to_string(repo.join("notes.txt")).unwrap(), "hello from hitl\n");
    let history = git(&repo, &["log", "--format=%s"]);
    assert_eq!(history.lines().collect::<Vec<_>>(), ["Add notes through hitl", "First"], "one commit made");
    let _ = std::fs::remove_dir_all(&repo);
}
