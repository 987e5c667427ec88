//! Thread administration over HTTP and from the command line: the `[admin] principals`
//! list, show and cancel paused calls (`/api/threads`, `hitl threads`), and a cancelled
//! call's next resend gets `Invalid or expired requestState`; others are refused.

use serde_json::{Value, json};

use crate::approvals::{Folder, api};
use crate::auth::request_as;
use crate::harness::{Reply, Server};

const CONFIG: &str = "[auth]\ntokens_file = \"tokens.txt\"\n\n[admin]\nprincipals = [\"user:ops\"]\n";

fn folder() -> Folder {
    let folder = Folder::new(CONFIG);
    std::fs::write(folder.0.join("tokens.txt"), "alice alice-token\nops ops-token\n").unwrap();
    folder
}

/// Alice's greeter call, paused: its requestState.
async fn pause(server: &Server, id: u64) -> String {
    let reply = request_as(
        server,
        Some("alice-token"),
        json!({"elicitation": {}}),
        id,
        "tools/call",
        json!({"name": "greeter", "arguments": {}}),
    )
    .await;
    reply.body["result"]["requestState"].as_str().unwrap_or_else(|| panic!("{}", reply.body)).to_owned()
}

async fn resend(server: &Server, state: &str) -> Reply {
    let params = json!({"name": "greeter", "arguments": {}, "requestState": state,
                        "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Ada"}}}});
    request_as(server, Some("alice-token"), json!({"elicitation": {}}), 9, "tools/call", params).await
}

fn thread_of(state: &str) -> String {
    state.split_once('.').unwrap().0.to_owned()
}

async fn admin_api_lists_shows_and_cancels(server: &Server) {
    let state = pause(server, 1).await;
    let id = thread_of(&state);

    let anonymous = server.request(http::Method::GET, "/api/threads", &[], bytes::Bytes::new()).await.unwrap();
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
    let caller = api(server, "alice-token", http::Method::GET, "/api/threads", None).await;
    assert_eq!(caller.status, 403, "a caller is no admin: {}", caller.body);

    let listed = api(server, "ops-token", http::Method::GET, "/api/threads?limit=1000", None).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let threads = listed.body["threads"].as_array().unwrap();
    let mine = threads.iter().find(|t| t["id"] == id.as_str()).unwrap_or_else(|| panic!("{}", listed.body));
    assert_eq!(
        (&mine["tool"], &mine["principal"], &mine["round"]),
        (&json!("greeter"), &json!("user:alice"), &json!(1))
    );
    assert_eq!(
        (&mine["pending"], &mine["state"], &mine["task"]),
        (&json!(["user_name"]), &json!("waiting"), &json!(false))
    );
    assert!(listed.body["total"].as_u64().unwrap() >= 1);
    let text = listed.body.to_string();
    assert!(!text.contains(state.split_once('.').unwrap().1), "never the requestState token");
    assert!(!text.contains("What is your name?"), "never what a question asks");
    let bad = api(server, "ops-token", http::Method::GET, "/api/threads?limit=many", None).await;
    assert_eq!(bad.status, 400, "{}", bad.body);

    let shown = api(server, "ops-token", http::Method::GET, &format!("/api/threads/{id}"), None).await;
    assert_eq!((shown.status, &shown.body), (200, mine), "one thread, as listed");
    let cancelled = api(server, "ops-token", http::Method::DELETE, &format!("/api/threads/{id}"), None).await;
    assert_eq!((cancelled.status, &cancelled.body["cancelled"]), (200, &json!(id)), "{}", cancelled.body);
    let again = api(server, "ops-token", http::Method::DELETE, &format!("/api/threads/{id}"), None).await;
    assert_eq!(again.status, 404, "{}", again.body);
    let gone = api(server, "ops-token", http::Method::GET, &format!("/api/threads/{id}"), None).await;
    assert_eq!(gone.status, 404);

    let after = resend(server, &state).await;
    assert_eq!(
        after.body["error"],
        json!({"code": -32602, "message": "Invalid or expired requestState"}),
        "{}",
        after.body
    );
}

#[tokio::test]
async fn admins_list_show_and_cancel_paused_calls_over_the_api() {
    let folder = folder();
    let server = folder.serve(&["--store", "memory"]).await;
    admin_api_lists_shows_and_cancels(&server).await;
}

#[tokio::test]
async fn hitl_threads_lists_shows_and_cancels_on_redis() {
    let Some(redis) = crate::harness::redis_url("hitl threads") else { return };
    let folder = folder();
    let server = folder.serve(&["--store", &redis]).await;
    admin_api_lists_shows_and_cancels(&server).await;

    let state = pause(&server, 2).await;
    let id = thread_of(&state);
    let threads = |args: &[&str]| {
        let output = std::process::Command::new(Server::program())
            .args(["threads", "--store", &redis])
            .args(args)
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, table, _) = threads(&["list", "--limit", "100000"]);
    assert_eq!(code, Some(0));
    let row = table.lines().find(|l| l.starts_with(&id)).unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("greeter") && row.contains("user:alice") && row.contains("user_name"), "{row}");
    let (_, lines, _) = threads(&["list", "--json", "--limit", "100000"]);
    let listed: Vec<Value> = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(listed.iter().any(|t| t["id"] == id.as_str()), "{lines}");
    let (code, shown, _) = threads(&["show", &id]);
    assert_eq!(code, Some(0));
    assert_eq!(serde_json::from_str::<Value>(&shown).unwrap()["tool"], "greeter");
    let after_action = std::process::Command::new(Server::program())
        .args(["threads", "show", &id, "--store", &redis])
        .output()
        .unwrap();
    assert!(after_action.status.success(), "--store after the action: {after_action:?}");
    let (code, out, _) = threads(&["cancel", &id]);
    assert_eq!((code, out.trim()), (Some(0), format!("cancelled {id}").as_str()));
    let (code, _, err) = threads(&["cancel", &id]);
    assert_eq!(code, Some(1), "cancelled once");
    assert!(err.contains("no paused call"), "{err}");
    let after = resend(&server, &state).await;
    assert_eq!(after.body["error"]["message"], "Invalid or expired requestState", "{}", after.body);
}
