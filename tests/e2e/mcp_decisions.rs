//! `[approvals] mcp_decisions = true`: an approver decides from their own MCP client
//! (the official Python SDK): `hitl_pending_approvals` and `hitl_decide_approval` are
//! listed to approvers only, and a decision counts only once the approver's client
//! accepted the form that restates the call; the page's rules hold (the two-person rule).

use serde_json::{Value, json};

use crate::approvals::{Folder, api, ask, config, executions, people};
use crate::harness::Server;
use crate::upstream::PythonUpstream;

/// `sdk_decide.py` as the holder of `token`, deciding `id` with `decision` (`mode`:
/// `confirm`, `unconfirmed` or `decline`).
async fn decide_from_client(server: &Server, token: &str, id: &str, decision: &str, mode: &str) -> Value {
    let python = std::env::var("HITL_PYTHON").expect("HITL_PYTHON");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/sdk_decide.py");
    let url = format!("http://{}/mcp", server.addr);
    let args = [url, token.to_owned(), id.to_owned(), decision.to_owned(), mode.to_owned()];
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python).arg(script).args(args).output().expect("python runs")
    })
    .await
    .unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{log}");
    serde_json::from_str(log.lines().next().unwrap_or_default()).unwrap_or_else(|_| panic!("{log}"))
}

#[tokio::test]
async fn an_approver_decides_from_their_own_mcp_client_once_the_form_is_accepted() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let hook = crate::approvals::Receiver::start(0).await;
    let folder = Folder::new(&format!("{}\n[approvals]\nmcp_decisions = true\n", config(&upstream.url, &hook.url)));
    let server = folder.serve(&[]).await;
    let p = people();
    let partition = format!("p-mcp-{}-{}", std::process::id(), crate::approvals::now_ms());
    let args = json!({"partition": partition, "database": "orders"});
    let (paused, url) = ask(&server, &p.alice, &args).await;
    let id = url.rsplit('/').next().unwrap().to_owned();

    // Carol is no approver: the tools are not hers to see.
    let carols = crate::auth::request_as(&server, Some(&p.carol), json!({}), 1, "tools/list", json!({})).await;
    let names: Vec<&str> =
        carols.body["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(!names.contains(&"hitl_decide_approval"), "{names:?}");

    // Bob declines the form, then accepts it without confirming: nothing is decided.
    let declined = decide_from_client(&server, &p.bob, &id, "approve", "decline").await;
    assert!(declined["listed"].as_array().unwrap().contains(&json!("hitl_decide_approval")), "{declined}");
    assert!(declined["pending"].as_array().unwrap().contains(&json!(id)), "{declined}");
    assert_eq!(declined["is_error"], true, "{declined}");
    let asked = declined["asked"][0].as_str().unwrap();
    assert!(
        asked.contains("approve the call of db.drop_partition by user:alice") && asked.contains(&partition),
        "{asked}"
    );
    let unconfirmed = decide_from_client(&server, &p.bob, &id, "approve", "unconfirmed").await;
    assert_eq!(unconfirmed["text"], "Not decided: the decision was not confirmed.", "{unconfirmed}");
    let still = api(&server, &p.bob, http::Method::GET, &format!("/api/approvals/{id}"), None).await;
    assert_eq!(still.body["status"], "pending", "still waiting: {}", still.body);

    // Alice, an approver too (group:sre), may not decide her own call.
    let own = decide_from_client(&server, &p.alice, &id, "approve", "confirm").await;
    assert!(own["text"].as_str().unwrap().contains("two-person rule"), "{own}");
    assert!(!own["pending"].as_array().unwrap().contains(&json!(id)), "not listed to its caller: {own}");

    // Bob confirms: decided, and alice's retry runs the call once.
    let decided = decide_from_client(&server, &p.bob, &id, "approve", "confirm").await;
    assert_eq!(decided["is_error"], false, "{decided}");
    let ran = paused.answer(&server, json!({"action": "accept"})).await;
    assert_eq!(ran.text(), format!("dropped {partition} on orders"), "{}", ran.body);
    assert_eq!(executions(&server, &p.alice).await, 1);
    let again = decide_from_client(&server, &p.bob, &id, "reject", "confirm").await;
    assert_eq!(again["is_error"], true, "the first decision wins: {again}");
}
