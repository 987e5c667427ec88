//! `[[policy]] approval_ttl` and `approval_scope`: an approval that also lets the same
//! caller's later calls through for a while, against a real upstream (the Python SDK
//! server of the gateway tests, which counts its executions). Each scope, never across
//! callers, never after an edit or a rejection, narrowed by the reviewer in the client,
//! on the API and on the page; `hitl check` refuses it without authenticated callers.
//!
//! Each test's policy text holds a nonce: approvals are kept under the policy's digest,
//! and on Redis every test (and an earlier run) shares the store.

use serde_json::{Value, json};

use crate::approvals::{Folder, api, decide, executions, people, signed_in, url_client};
use crate::harness::{Paused, Reply, Server, accept};
use crate::upstream::PythonUpstream;

fn nonce() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{:x}-{}-{n}", crate::approvals::now_ms(), std::process::id())
}

fn drop_args(partition: &str) -> Value {
    json!({"partition": partition, "database": "orders"})
}

/// The drop of `partition` by the holder of `token`, from a client with form and URL
/// elicitation: ran (its text) or paused.
async fn drop(server: &Server, token: &str, partition: &str) -> Reply {
    let params = json!({"name": "db.drop_partition", "arguments": drop_args(partition)});
    server.modern_as(Some(token), 1, "tools/call", params, url_client()).await
}

fn paused(reply: &Reply, token: &str, partition: &str) -> Paused {
    Paused::of("db.drop_partition", drop_args(partition), reply).by(Some(token), url_client())
}

fn ran(reply: &Reply, partition: &str) {
    assert_eq!(reply.text(), format!("dropped {partition} on orders"), "it ran without a review: {}", reply.body);
}

#[tokio::test]
async fn an_approval_in_the_client_covers_the_callers_calls_with_these_arguments_and_nothing_else() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let folder = Folder::new(&signed_in(
        &upstream.url,
        &format!(
            r#"[[policy]]
tools = ["db.drop_*"]
action = "review"
description = "Drop {{partition}}? ({})"
approval_ttl = 900
approval_scope = "arguments"

[[policy]]
tools = ["db.echo"]
action = "review"
approval_ttl = 900

[audit]
file = "audit.jsonl"
"#,
            nonce()
        ),
    ));
    let server = folder.serve(&[]).await;
    let p = people();

    // The review says what an approval covers, and offers to narrow it.
    let first = paused(&drop(&server, &p.alice, "p1").await, &p.alice, "p1");
    let said = "this call, and your calls of db.drop_partition with these arguments for 15 min";
    let message = first.question()["params"]["message"].as_str().unwrap();
    assert!(message.ends_with(&format!("An approval covers {said}.")), "{message}");
    let cover = &first.question()["params"]["requestedSchema"]["properties"]["cover"];
    assert_eq!((&cover["type"], &cover["default"]), (&json!("boolean"), &json!(true)), "{cover}");
    ran(&first.answer(&server, accept(json!({"decision": "approve"}))).await, "p1");

    // Later: the same call runs at once; other arguments or another caller are asked.
    ran(&drop(&server, &p.alice, "p1").await, "p1");
    let other = drop(&server, &p.alice, "p2").await;
    assert_eq!(other.body["result"]["resultType"], "input_required", "other arguments: {}", other.body);
    let bobs = drop(&server, &p.bob, "p1").await;
    assert_eq!(bobs.body["result"]["resultType"], "input_required", "another caller: {}", bobs.body);
    assert_eq!(executions(&server, &p.alice).await, 2);

    // The covered call is in the trail, naming the approval (here the call approved in
    // its client: its thread).
    let asked = folder.wait_audit("review_asked", |e| e["event"] == "review_asked").await;
    let covered = folder.wait_audit("approved_by_earlier", |e| e["event"] == "approved_by_earlier").await;
    assert_eq!(covered["approval"], asked["thread"], "{covered} {asked}");
    assert_eq!((&covered["principal"], &covered["tool"]), (&json!("user:alice"), &json!("db.drop_partition")));
    assert_ne!(covered["thread"], asked["thread"], "a call of its own");
    assert_eq!(folder.audit().iter().filter(|e| e["event"] == "approved_by_earlier").count(), 1);

    // An edit covers nothing later, neither the arguments asked nor those run.
    let p2 = paused(&other, &p.alice, "p2");
    let edit = json!({"decision": "edit", "args": r#"{"partition": "p3", "database": "orders"}"#, "cover": true});
    ran(&p2.answer(&server, accept(edit)).await, "p3");
    for partition in ["p2", "p3"] {
        let again = drop(&server, &p.alice, partition).await;
        assert_eq!(again.body["result"]["resultType"], "input_required", "after an edit: {}", again.body);
    }
    // Nor does a rejection, nor an approval narrowed to its call.
    let p4 = paused(&drop(&server, &p.alice, "p4").await, &p.alice, "p4");
    let rejected = p4.answer(&server, accept(json!({"decision": "reject", "cover": true}))).await;
    assert!(rejected.is_error(), "{}", rejected.body);
    let p4 = paused(&drop(&server, &p.alice, "p4").await, &p.alice, "p4");
    ran(&p4.answer(&server, accept(json!({"decision": "approve", "cover": false}))).await, "p4");
    let again = drop(&server, &p.alice, "p4").await;
    assert_eq!(again.body["result"]["resultType"], "input_required", "narrowed: {}", again.body);
    assert_eq!(executions(&server, &p.alice).await, 4, "p1 twice, p3, p4");

    // Scope `call` (the default): an approval offers nothing later and covers nothing.
    let echo = |text: &'static str| {
        let (server, alice) = (&server, p.alice.clone());
        async move {
            let params = json!({"name": "db.echo", "arguments": {"text": text}});
            server.modern_as(Some(&alice), 1, "tools/call", params, url_client()).await
        }
    };
    let asked = Paused::of("db.echo", json!({"text": "hi"}), &echo("hi").await).by(Some(&p.alice), url_client());
    assert!(asked.question()["params"]["requestedSchema"]["properties"].get("cover").is_none(), "{}", asked.question());
    assert_eq!(asked.answer(&server, accept(json!({"decision": "approve"}))).await.text(), "hi");
    assert_eq!(echo("hi").await.body["result"]["resultType"], "input_required", "scope call covers nothing later");
}

#[tokio::test]
async fn an_approvers_approval_covers_the_callers_calls_of_the_tool_unless_narrowed() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let folder = Folder::new(&signed_in(
        &upstream.url,
        &format!(
            r#"[[policy]]
tools = ["db.drop_*"]
action = "review"
approvers = ["group:sre"]
description = "Drop {{partition}}? ({})"
approval_ttl = 600
approval_scope = "tool"

[audit]
file = "audit.jsonl"
"#,
            nonce()
        ),
    ));
    let server = folder.serve(&[]).await;
    let p = people();

    let first = paused(&drop(&server, &p.alice, "p1").await, &p.alice, "p1");
    let url = first.question()["params"]["url"].as_str().unwrap().to_owned();
    let id = url.rsplit('/').next().unwrap().to_owned();
    // The API and the page say what an approval covers, naming the caller.
    let said = "this call, and user:alice's calls of db.drop_partition with any arguments for 10 min";
    let shown = api(&server, &p.bob, http::Method::GET, &format!("/api/approvals/{id}"), None).await;
    assert_eq!(shown.body["covers"], said, "{}", shown.body);
    let listed = api(&server, &p.bob, http::Method::GET, "/api/approvals?status=pending", None).await;
    let entry = listed.body["approvals"].as_array().unwrap().iter().find(|a| a["id"] == id.as_str()).unwrap().clone();
    assert_eq!(entry["covers"], said, "{entry}");
    let page = crate::trust_pages::page_as(&server, &p.bob, &format!("/approvals/{id}")).await;
    assert!(page.contains(said), "{page}");
    assert!(page.contains(r#"name="cover" value="true" checked"#), "a checkbox, checked: {page}");

    let decided = decide(&server, &p.bob, &id, json!({"decision": "approve"})).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    ran(&first.answer(&server, accept(json!({}))).await, "p1");
    // Alice's later drops, whatever their arguments, run at once; carol's are asked.
    ran(&drop(&server, &p.alice, "p7").await, "p7");
    let covered = folder.wait_audit("approved_by_earlier", |e| e["event"] == "approved_by_earlier").await;
    assert_eq!(covered["approval"], id.as_str(), "{covered}");
    let carols = drop(&server, &p.carol, "p1").await;
    let carols = paused(&carols, &p.carol, "p1");
    assert_eq!(carols.question()["params"]["mode"], "url", "another caller is asked: {}", carols.question());

    // Bob narrows his approval of carol's call to that call.
    let carol_id = carols.question()["params"]["url"].as_str().unwrap().rsplit('/').next().unwrap().to_owned();
    let narrowed = decide(&server, &p.bob, &carol_id, json!({"decision": "approve", "cover": false})).await;
    assert_eq!(narrowed.status, 200, "{}", narrowed.body);
    ran(&carols.answer(&server, accept(json!({}))).await, "p1");
    let again = drop(&server, &p.carol, "p2").await;
    assert_eq!(again.body["result"]["resultType"], "input_required", "narrowed: {}", again.body);
    // On the page, the checkbox left unchecked narrows it too.
    let again = paused(&again, &p.carol, "p2");
    let page = again.question()["params"]["url"].as_str().unwrap().to_owned();
    let page = page.strip_prefix(&format!("http://{}", server.addr)).unwrap().to_owned();
    // What a browser sends with the box unchecked: no `cover`.
    let status =
        crate::trust_pages::decide_on_page(&server, &p.bob, &page, "decision=approve&cover_offered=true").await;
    assert_eq!(status, 303, "decided on the page");
    ran(&again.answer(&server, accept(json!({}))).await, "p2");
    let after = drop(&server, &p.carol, "p3").await;
    assert_eq!(after.body["result"]["resultType"], "input_required", "unchecked on the page: {}", after.body);
    let bad = decide(&server, &p.bob, &carol_id, json!({"decision": "approve", "cover": "yes"})).await;
    assert_ne!(bad.status, 200, "{}", bad.body);
    assert_eq!(executions(&server, &p.alice).await, 4, "p1 and p7 by alice, p1 and p2 by carol");
}

#[tokio::test]
async fn approval_ttl_needs_authenticated_callers_and_a_review() {
    let check = |config: &str| {
        let folder = Folder::new(config);
        let out = std::process::Command::new(Server::program())
            .args(["check", "--config"])
            .arg(folder.config())
            .output()
            .expect("hitl check runs");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let policy = |rest: &str| format!("[[policy]]\ntools = [\"db.*\"]\n{rest}\n");
    let (code, err) = check(&policy("action = \"review\"\napproval_ttl = 900\napproval_scope = \"tool\""));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("approval_ttl") && err.contains("callers are not known"), "{err}");
    let jwt = "[auth.jwt]\nissuer = \"https://idp.example\"\naudience = \"hitl\"\njwks_file = \"jwks.json\"\n";
    let (code, err) = check(&format!("{jwt}{}", policy("action = \"allow\"\napproval_ttl = 900")));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("only a policy with action = \"review\""), "{err}");
    let (code, err) = check(&policy("action = \"review\"\napproval_scope = \"tool\""));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("set approval_ttl"), "{err}");
    let (code, err) = check(&policy("action = \"review\"\napproval_ttl = 900\napproval_scope = \"forever\""));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("approval_scope") || err.contains("forever"), "{err}");
}
