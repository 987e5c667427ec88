//! The configuration reloaded while serving, against a real upstream (the Python SDK's
//! server the gateway tests use): a change of the file seen through its folder (a
//! write, a Kubernetes ConfigMap's symlink swap), `SIGHUP`, a broken file that keeps
//! the rules in force, and paused reviews answered under the rules then in force.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::gateway::executions_of;
use crate::harness::{Paused, Reply, Server, accept};
use crate::upstream::PythonUpstream;

/// A folder of its own for a configuration, removed when dropped.
struct Folder(PathBuf);

impl Folder {
    fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("hitl-e2e-reload-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `db` (the upstream at `url`) with `drop_*` under `action`, and `extra` after it.
fn config(url: &str, action: &str, extra: &str) -> String {
    format!(
        r#"[[upstream]]
name = "db"
url = "{url}"

[[policy]]
tools = ["db.drop_*"]
action = "{action}"
{extra}"#
    )
}

/// The hitl program on a file of its own folder reviewing `db`'s drops: the folder, the
/// file, its text and the server.
async fn reviewed(upstream: &PythonUpstream) -> (Folder, PathBuf, String, Server) {
    let folder = Folder::new();
    let file = folder.join("hitl.toml");
    let first = config(&upstream.url, "review", "");
    std::fs::write(&file, &first).unwrap();
    let server = serve(&file).await;
    (folder, file, first, server)
}

async fn serve(file: &Path) -> Server {
    Server::start(&["--config", file.to_str().unwrap()]).await
}

pub(crate) async fn health(server: &Server) -> Value {
    let reply = server.request(http::Method::GET, "/healthz", &[], bytes::Bytes::new()).await.unwrap();
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    reply.body
}

/// Polls `/healthz` until the loaded file's digest is no longer `before`; the new one.
pub(crate) async fn reloaded(server: &Server, before: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let digest = health(server).await["config_digest"].as_str().unwrap().to_owned();
        if digest != before {
            return digest;
        }
        assert!(Instant::now() < deadline, "the configuration was not reloaded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `hitl_config_reloads_total{result}`, as `/metrics` says.
async fn reloads(server: &Server, result: &str) -> u64 {
    let (status, _, text) = server.raw(http::Method::GET, "/metrics", &[], bytes::Bytes::new()).await;
    assert_eq!(status, 200, "{text}");
    let series = format!("hitl_config_reloads_total{{result=\"{result}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(series.as_str())).map_or(0, |n| n.trim().parse().unwrap())
}

async fn wait_reloads(server: &Server, result: &str, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while reloads(server, result).await < count {
        assert!(Instant::now() < deadline, "no {result} reload counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Sends the server `SIGHUP`.
fn hangup(server: &Server) {
    let sent = std::process::Command::new("kill").args(["-HUP", &server.pid().to_string()]).status().unwrap();
    assert!(sent.success());
}

const DROP: &str = "db.drop_partition";

fn drop_args() -> Value {
    json!({"partition": "p1", "database": "orders"})
}

async fn drop_call(server: &Server, id: u64) -> Reply {
    server.call_tool(id, json!({"name": DROP, "arguments": drop_args()})).await
}

#[tokio::test]
async fn a_changed_file_is_applied_and_a_broken_one_keeps_the_rules_in_force() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let (_folder, file, first, server) = reviewed(&upstream).await;
    let shown = health(&server).await;
    assert_eq!(shown["config_digest"], sha256_hex(first.as_bytes()), "{shown}");
    assert!(shown["config_loaded_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{shown}");
    Paused::of(DROP, drop_args(), &drop_call(&server, 1).await);

    // Written in place: the new rules are in force once /healthz shows the new digest.
    let second = config(&upstream.url, "deny", "");
    std::fs::write(&file, &second).unwrap();
    let digest = reloaded(&server, &sha256_hex(first.as_bytes())).await;
    assert_eq!(digest, sha256_hex(second.as_bytes()));
    assert_eq!(reloads(&server, "success").await, 1);
    let denied = drop_call(&server, 2).await;
    assert_eq!(denied.body["result"]["isError"], true, "{}", denied.body);
    assert!(denied.text().contains("is denied by the policy"), "{}", denied.body);

    // A file `hitl check` refuses (a policy with no action) is not applied.
    std::fs::write(&file, format!("{second}\n[[policy]]\ntools = [\"db.echo\"]\n")).unwrap();
    wait_reloads(&server, "error", 1).await;
    assert_eq!(health(&server).await["config_digest"], digest, "the rules in force stay");
    assert!(drop_call(&server, 3).await.text().contains("is denied by the policy"));
    // And a file that does not parse.
    std::fs::write(&file, "[[policy]\n").unwrap();
    wait_reloads(&server, "error", 2).await;
    assert!(drop_call(&server, 4).await.text().contains("is denied by the policy"));
    assert_eq!(executions_of(&server, "drop_partition").await, 0);
}

#[tokio::test]
async fn a_configmap_symlink_swap_is_seen() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    // The layout a Kubernetes ConfigMap volume has: the file is a symlink through
    // `..data`, itself a symlink to a timestamped folder, swapped by a rename.
    let folder = Folder::new();
    let version = |name: &str, text: &str| {
        std::fs::create_dir(folder.join(name)).unwrap();
        std::fs::write(folder.join(name).join("hitl.toml"), text).unwrap();
    };
    let first = config(&upstream.url, "deny", "");
    version("..2026_12_02_10_00_00.1", &first);
    std::os::unix::fs::symlink("..2026_12_02_10_00_00.1", folder.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/hitl.toml", folder.join("hitl.toml")).unwrap();
    let server = serve(&folder.join("hitl.toml")).await;
    assert!(drop_call(&server, 1).await.text().contains("is denied by the policy"));

    let second = config(&upstream.url, "allow", "");
    version("..2026_12_02_10_05_00.2", &second);
    std::os::unix::fs::symlink("..2026_12_02_10_05_00.2", folder.join("..data_tmp")).unwrap();
    std::fs::rename(folder.join("..data_tmp"), folder.join("..data")).unwrap();
    std::fs::remove_dir_all(folder.join("..2026_12_02_10_00_00.1")).unwrap();
    assert_eq!(reloaded(&server, &sha256_hex(first.as_bytes())).await, sha256_hex(second.as_bytes()));
    let ran = drop_call(&server, 2).await;
    assert_eq!(ran.text(), "dropped p1 on orders", "{}", ran.body);
    assert_eq!(executions_of(&server, "drop_partition").await, 1);
}

#[cfg(unix)]
#[tokio::test]
async fn sighup_reloads_and_a_paused_review_is_judged_by_the_rules_then_in_force() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    // The file named is a symlink into another folder: changes there are not seen
    // (only the named file's folder is watched), so SIGHUP is what reloads it.
    let (named, real) = (Folder::new(), Folder::new());
    let file = real.join("hitl.toml");
    let reviewed = config(&upstream.url, "review", "");
    std::fs::write(&file, &reviewed).unwrap();
    std::os::unix::fs::symlink(&file, named.join("hitl.toml")).unwrap();
    let server = serve(&named.join("hitl.toml")).await;
    let approve = json!({"decision": "approve"});
    let reject = json!({"decision": "reject", "message": "not today"});
    let (one, two, three) = (
        Paused::of(DROP, drop_args(), &drop_call(&server, 1).await),
        Paused::of(DROP, drop_args(), &drop_call(&server, 2).await),
        Paused::of(DROP, drop_args(), &drop_call(&server, 3).await),
    );

    // Now denied: an approval answered afterwards ends with the deny error, unrun; a
    // rejection ends as it says.
    let denied = config(&upstream.url, "deny", "");
    std::fs::write(&file, &denied).unwrap();
    hangup(&server);
    reloaded(&server, &sha256_hex(reviewed.as_bytes())).await;
    let after = one.answer(&server, accept(approve.clone())).await;
    assert!(after.text().contains("db.drop_partition is denied by the policy"), "{}", after.body);
    let rejected = two.answer(&server, accept(reject.clone())).await;
    assert_eq!(rejected.text(), "not today", "{}", rejected.body);
    assert_eq!(executions_of(&server, "drop_partition").await, 0, "the upstream is not called");

    // Allowed again: the approval stands and runs the call once.
    let allowed = config(&upstream.url, "allow", "");
    std::fs::write(&file, &allowed).unwrap();
    hangup(&server);
    reloaded(&server, &sha256_hex(denied.as_bytes())).await;
    let ran = three.answer(&server, accept(approve)).await;
    assert_eq!(ran.text(), "dropped p1 on orders", "{}", ran.body);
    assert_eq!(executions_of(&server, "drop_partition").await, 1);
}

#[tokio::test]
async fn upstreams_and_agents_come_and_go_with_the_file_and_a_paused_call_of_a_removed_tool_names_it() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let (_folder, file, first, server) = reviewed(&upstream).await;
    let paused = Paused::of(DROP, drop_args(), &drop_call(&server, 1).await);
    let names = |reply: &Reply| -> Vec<String> {
        let tools = reply.body["result"]["tools"].as_array().cloned().unwrap_or_default();
        tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect()
    };
    let listed = names(&server.modern(2, "tools/list", json!({}), json!({})).await);
    assert!(listed.contains(&DROP.to_owned()) && listed.contains(&"greeter".to_owned()), "{listed:?}");

    // The upstream goes, a declared agent comes.
    let second = r#"
[[agent]]
name = "ask_twice"
description = "Asks two questions."
kind = "workflow"
input_schema = { type = "object" }
steps = [
  { ask = { message = "First?", key = "a" } },
  { ask = { message = "Second?", key = "b" } },
]
"#;
    std::fs::write(&file, second).unwrap();
    reloaded(&server, &sha256_hex(first.as_bytes())).await;
    let listed = names(&server.modern(3, "tools/list", json!({}), json!({})).await);
    assert!(listed.contains(&"ask_twice".to_owned()), "{listed:?}");
    assert!(!listed.iter().any(|n| n.starts_with("db.")), "{listed:?}");
    assert!(health(&server).await.get("upstreams").is_none());
    let gone = paused.answer(&server, accept(json!({"decision": "approve"}))).await;
    let said = gone.body.to_string();
    assert!(said.contains(DROP), "the error names the tool: {said}");
    assert_ne!(gone.body["result"]["resultType"], "complete", "{said}");

    // And back, with the upstream's tools listed again.
    std::fs::write(&file, &first).unwrap();
    reloaded(&server, &sha256_hex(second.as_bytes())).await;
    let listed = names(&server.modern(4, "tools/list", json!({}), json!({})).await);
    assert!(listed.contains(&DROP.to_owned()) && !listed.contains(&"ask_twice".to_owned()), "{listed:?}");
    assert_eq!(executions_of(&server, "drop_partition").await, 0);
}

#[tokio::test]
async fn approvers_and_webhooks_follow_a_reload() {
    use crate::approvals::{Folder as Signed, Receiver, api, ask, config as signed_config, decide, executions, people};
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let (first_hook, second_hook) = (Receiver::start(0).await, Receiver::start(0).await);
    let first = signed_config(&upstream.url, &first_hook.url);
    let folder = Signed::new(&first);
    let server = folder.serve(&[]).await;
    let p = people();
    let args = json!({"partition": "p1", "database": "orders"});
    let (paused, url) = ask(&server, &p.alice, &args).await;
    let id = url.rsplit('/').next().unwrap().to_owned();
    first_hook.wait_for("of the first approval", |h| h.body["approval"]["id"] == id.as_str()).await;

    // Carol, not in group:sre, becomes the approver; the webhook moves.
    let second = first
        .replace(r#"approvers = ["group:sre"]"#, r#"approvers = ["user:carol"]"#)
        .replace(&first_hook.url, &second_hook.url);
    std::fs::write(folder.0.join("hitl.toml"), &second).unwrap();
    reloaded(&server, &sha256_hex(first.as_bytes())).await;
    // The listing and the approval's view follow who decides it now.
    let listed = |token: String| {
        let (server, id) = (&server, &id);
        async move {
            let reply = api(server, &token, http::Method::GET, "/api/approvals?status=pending", None).await;
            reply.body["approvals"].as_array().unwrap().iter().find(|a| a["id"] == id.as_str()).cloned()
        }
    };
    let carols = listed(p.carol.clone()).await.expect("listed to carol, the approver now");
    assert_eq!(carols["approvers"], json!(["user:carol"]), "{carols}");
    assert_eq!(listed(p.bob.clone()).await, None, "no longer listed to bob");
    let view = api(&server, &p.carol, http::Method::GET, &format!("/api/approvals/{id}"), None).await;
    assert_eq!((view.status, &view.body["approvers"]), (200, &json!(["user:carol"])), "{}", view.body);
    let bob = decide(&server, &p.bob, &id, json!({"decision": "approve"})).await;
    assert_eq!(bob.status, 403, "the approvers named when it paused no longer decide: {}", bob.body);
    assert!(bob.body.to_string().contains("user:carol"), "{}", bob.body);
    let carol = decide(&server, &p.carol, &id, json!({"decision": "approve"})).await;
    assert_eq!(carol.status, 200, "{}", carol.body);
    let ran = paused.answer(&server, json!({"action": "accept"})).await;
    assert_eq!(ran.text(), "dropped p1 on orders", "{}", ran.body);
    assert_eq!(executions(&server, &p.alice).await, 1);

    let (_, url) = ask(&server, &p.alice, &json!({"partition": "p2", "database": "orders"})).await;
    let next = url.rsplit('/').next().unwrap().to_owned();
    second_hook.wait_for("of the approval after the reload", |h| h.body["approval"]["id"] == next.as_str()).await;

    // The audit trail names the version of the rules each approval was asked under.
    let approved = folder.wait_audit("approved", |e| e["event"] == "approved" && e["approval"] == id.as_str()).await;
    let asked = folder.wait_audit("asked after", |e| e["event"] == "asked" && e["approvals"][0] == next.as_str()).await;
    let place = format!("{}:10", folder.config());
    for entry in [&approved, &asked] {
        assert_eq!(entry["policy_at"], place.as_str(), "{entry}");
        assert!(entry["policy_digest"].as_str().is_some_and(|d| d.len() == 24), "{entry}");
    }
    assert_ne!(approved["policy_digest"], asked["policy_digest"], "the policy's text changed between them");
    assert!(
        !first_hook.got().iter().any(|h| h.body["approval"]["id"] == next.as_str()),
        "the old webhook hears of nothing after the reload"
    );
}

#[tokio::test]
async fn a_new_tokens_file_takes_over_and_turning_authentication_off_needs_a_restart() {
    let folder = Folder::new();
    std::fs::write(folder.join("a.txt"), "alice token-a\n").unwrap();
    std::fs::write(folder.join("b.txt"), "alice token-b\n").unwrap();
    let file = folder.join("hitl.toml");
    let first = "[auth]\ntokens_file = \"a.txt\"\n";
    std::fs::write(&file, first).unwrap();
    let server = serve(&file).await;
    let list = |token: &'static str| {
        let server = &server;
        async move { crate::auth::request_as(server, Some(token), json!({}), 1, "tools/list", json!({})).await.status }
    };
    assert_eq!((list("token-a").await, list("token-b").await), (200, 401));

    let second = "[auth]\ntokens_file = \"b.txt\"\n";
    std::fs::write(&file, second).unwrap();
    reloaded(&server, &sha256_hex(first.as_bytes())).await;
    assert_eq!((list("token-a").await, list("token-b").await), (401, 200));

    // Without [auth], callers would not sign in: that waits for a restart.
    std::fs::write(&file, "").unwrap();
    reloaded(&server, &sha256_hex(second.as_bytes())).await;
    assert_eq!((list("token-a").await, list("token-b").await), (401, 200));
}

#[tokio::test]
async fn a_workflows_call_rejected_under_earlier_rules_stays_rejected_when_they_allow_it() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let workflow = r#"
[[agent]]
name = "cleanup"
kind = "workflow"
input_schema = { type = "object", properties = { partition = { type = "string" } }, required = ["partition"] }
steps = [
  { call = "db.drop_partition", args = { partition = "{partition}", database = "orders" } },
]
"#;
    let folder = Folder::new();
    let file = folder.join("hitl.toml");
    let reviewed = config(&upstream.url, "review", workflow);
    std::fs::write(&file, &reviewed).unwrap();
    let server = serve(&file).await;
    let args = json!({"partition": "p4"});
    let (rejected, approved) =
        (server.pause("cleanup", args.clone()).await, server.pause("cleanup", args.clone()).await);

    // Allowed now: the rejection stays one, the approval runs.
    std::fs::write(&file, config(&upstream.url, "allow", workflow)).unwrap();
    reloaded(&server, &sha256_hex(reviewed.as_bytes())).await;
    let reject = json!({"decision": "reject", "message": "not p4"});
    let done = rejected.only().answer(&server, accept(reject)).await;
    assert_eq!(
        (done.text(), done.body["result"]["isError"].clone()),
        ("not p4".to_owned(), json!(true)),
        "{}",
        done.body
    );
    assert_eq!(executions_of(&server, "drop_partition").await, 0, "a rejected call is not run");
    let ran = approved.only().answer(&server, accept(json!({"decision": "approve"}))).await;
    assert_eq!(ran.text(), "dropped p4 on orders", "{}", ran.body);
    assert_eq!(executions_of(&server, "drop_partition").await, 1);
}
