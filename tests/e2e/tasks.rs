//! The Tasks extension (`io.modelcontextprotocol/tasks`) over raw HTTP on the 2026-07-28
//! wire: a paused call becomes a task for a client that declares the extension;
//! `tasks/get` shows its questions, `tasks/update` answers them in parts (unknown keys
//! ignored), the task completes with the call's result; `tasks/cancel` ends one; another
//! caller never sees a task.

use serde_json::{Value, json};

use crate::harness::{Client, Reply, Server};

fn tasks_client() -> Value {
    json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}})
}

async fn call(client: &Client, user: &str, tool: &str) -> Reply {
    request(client, user, "tools/call", json!({"name": tool, "arguments": {}})).await
}

/// A 2026-07-28 request from `user` (behind `--principal-header x-user`).
async fn request(client: &Client, user: &str, method: &str, params: Value) -> Reply {
    let mut full = json!({ "_meta": crate::harness::modern_meta(tasks_client()) });
    full.as_object_mut().unwrap().extend(params.as_object().cloned().unwrap_or_default());
    let name = full.get("name").or_else(|| full.get("taskId")).and_then(Value::as_str).unwrap_or_default().to_owned();
    let headers =
        [("mcp-protocol-version", "2026-07-28"), ("mcp-method", method), ("mcp-name", &name), ("x-user", user)];
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": full});
    client.post_raw(&headers, body.to_string()).await
}

async fn get(client: &Client, user: &str, id: &str) -> Value {
    let reply = request(client, user, "tasks/get", json!({"taskId": id})).await;
    reply.body["result"].clone()
}

fn iso(value: &Value) -> bool {
    value.as_str().is_some_and(|s| s.len() == 24 && s.ends_with('Z') && s.as_bytes()[10] == b'T')
}

#[tokio::test]
async fn a_paused_call_becomes_a_task_answered_in_parts() {
    let server = Server::start(&["--principal-header", "x-user"]).await;
    let discover = request(&server, "alice", "server/discover", json!({})).await;
    assert_eq!(discover.body["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"], json!({}));

    let created = call(&server, "alice", "survey").await;
    let task = &created.body["result"];
    assert_eq!(task["resultType"], "task", "{}", created.body);
    assert_eq!(task["status"], "input_required");
    assert!(iso(&task["createdAt"]) && iso(&task["lastUpdatedAt"]), "{task}");
    assert!(task["ttlMs"].as_u64().unwrap() > 0 && task.get("inputRequests").is_none(), "{task}");
    let id = task["taskId"].as_str().unwrap().to_owned();

    let waiting = get(&server, "alice", &id).await;
    assert_eq!(
        (&waiting["resultType"], &waiting["status"]),
        (&json!("complete"), &json!("input_required")),
        "{waiting}"
    );
    let requests = waiting["inputRequests"].as_object().unwrap().clone();
    assert_eq!(requests.len(), 2, "{waiting}");
    assert!(requests.keys().all(|k| k.starts_with("1:answer-")), "keys unique over the task: {requests:?}");
    let key_of = |message: &str| {
        requests.iter().find(|(_, r)| r["params"]["message"] == message).map(|(k, _)| k.clone()).unwrap()
    };
    let (color, quest) = (key_of("What is your favorite color?"), key_of("What is your quest?"));

    // Bob sees no task of Alice's, and cannot answer it.
    let peek = request(&server, "bob", "tasks/get", json!({"taskId": id})).await;
    assert_eq!(peek.body["error"]["code"], -32602, "{}", peek.body);
    let meddle = request(
        &server,
        "bob",
        "tasks/update",
        json!({"taskId": id, "inputResponses": {
        color.as_str(): {"action": "accept", "content": {"response": "black"}}}}),
    )
    .await;
    assert_eq!(meddle.body["error"]["code"], -32602);

    // A part, with a key the task never asked: the key is ignored, the part kept.
    let part = request(
        &server,
        "alice",
        "tasks/update",
        json!({"taskId": id, "inputResponses": {
        color.as_str(): {"action": "accept", "content": {"response": "blue"}},
        "9:answer-0000000000000000": {"action": "accept", "content": {"response": "x"}}}}),
    )
    .await;
    assert_eq!(part.body["result"]["resultType"], "complete", "{}", part.body);
    let still = get(&server, "alice", &id).await;
    assert_eq!(still["status"], "input_required");
    assert_eq!(still["inputRequests"].as_object().unwrap().keys().collect::<Vec<_>>(), [&quest], "{still}");

    // A refused answer (not the form's) is dropped: the question stays outstanding.
    let wrong = request(
        &server,
        "alice",
        "tasks/update",
        json!({"taskId": id, "inputResponses": {
        quest.as_str(): {"action": "accept", "content": {"response": 42}}}}),
    )
    .await;
    assert_eq!(wrong.body["error"]["code"], -32602, "{}", wrong.body);
    assert_eq!(get(&server, "alice", &id).await["inputRequests"].as_object().unwrap().len(), 1);

    let last = request(
        &server,
        "alice",
        "tasks/update",
        json!({"taskId": id, "inputResponses": {
        quest.as_str(): {"action": "accept", "content": {"response": "grail"}}}}),
    )
    .await;
    assert_eq!(last.body["result"], json!({"resultType": "complete", "_meta": last.body["result"]["_meta"]}));
    let done = get(&server, "alice", &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["structuredContent"], json!({"color": "blue", "quest": "grail"}));
    // A late answer to a finished task is ignored.
    let late = request(
        &server,
        "alice",
        "tasks/update",
        json!({"taskId": id, "inputResponses": {
        quest.as_str(): {"action": "accept", "content": {"response": "other"}}}}),
    )
    .await;
    assert_eq!(late.body["result"]["resultType"], "complete");
    assert_eq!(get(&server, "alice", &id).await["result"], done["result"]);
}

#[tokio::test]
async fn a_task_can_be_cancelled_and_clients_without_the_extension_get_rounds() {
    let server = Server::start(&["--principal-header", "x-user"]).await;
    let id = call(&server, "alice", "greeter").await.body["result"]["taskId"].as_str().unwrap().to_owned();
    let cancelled = request(&server, "alice", "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(cancelled.body["result"]["resultType"], "complete", "{}", cancelled.body);
    let task = get(&server, "alice", &id).await;
    assert_eq!(task["status"], "cancelled", "{task}");
    assert!(task.get("inputRequests").is_none() && task.get("result").is_none());
    let unknown = request(&server, "alice", "tasks/cancel", json!({"taskId": "not-a-task"})).await;
    assert_eq!(unknown.body["error"]["code"], -32602);

    // Without the extension, the same call is a round, as the seed says.
    let reply = server
        .post_raw(
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "greeter"),
                ("x-user", "alice"),
            ],
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "greeter", "arguments": {},
                   "_meta": crate::harness::modern_meta(json!({"elicitation": {}}))}})
            .to_string(),
        )
        .await;
    assert_eq!(reply.body["result"]["resultType"], "input_required", "{}", reply.body);
}

#[tokio::test]
async fn a_task_made_on_one_replica_is_served_by_another() {
    let Some(redis) = crate::harness::redis_url("task replicas") else { return };
    let a = Server::start_on(&redis, &["--principal-header", "x-user"]).await;
    let b = Server::start_on(&redis, &["--principal-header", "x-user"]).await;
    let id = call(&a, "alice", "greeter").await.body["result"]["taskId"].as_str().unwrap().to_owned();
    let waiting = get(&b, "alice", &id).await;
    let key = waiting["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let update = request(
        &b,
        "alice",
        "tasks/update",
        json!({"taskId": id, "inputResponses": {
        key.as_str(): {"action": "accept", "content": {"name": "Ada"}}}}),
    )
    .await;
    assert_eq!(update.body["result"]["resultType"], "complete", "{}", update.body);
    let done = get(&a, "alice", &id).await;
    assert_eq!(
        (&done["status"], &done["result"]["structuredContent"]),
        (&json!("completed"), &json!({"greeting": "Hello, Ada!"}))
    );
}

#[tokio::test]
async fn a_task_waits_for_its_page_and_needs_the_extension_declared() {
    let server = Server::start(&["--principal-header", "x-user"]).await;
    // connect_github asks for a secret on hitl's page (a URL question).
    let created = request(
        &server,
        "alice",
        "tools/call",
        json!({"name": "connect_github", "arguments": {},
        "_meta": crate::harness::modern_meta(json!({"elicitation": {"form": {}, "url": {}},
                                                    "extensions": {"io.modelcontextprotocol/tasks": {}}}))}),
    )
    .await;
    let id = created.body["result"]["taskId"].as_str().unwrap_or_else(|| panic!("{}", created.body)).to_owned();
    let waiting = get(&server, "alice", &id).await;
    let (key, question) = waiting["inputRequests"].as_object().unwrap().iter().next().unwrap();
    let url = question["params"]["url"].as_str().unwrap();
    let path = url.strip_prefix(&format!("http://{}", server.addr)).unwrap().to_owned();

    // The user agrees to open the page: the task works on until the page is done.
    let accepted = request(
        &server,
        "alice",
        "tasks/update",
        json!({"taskId": id, "inputResponses": { key: {"action": "accept"} }}),
    )
    .await;
    assert_eq!(accepted.body["result"]["resultType"], "complete", "{}", accepted.body);
    let working = get(&server, "alice", &id).await;
    assert_eq!(working["status"], "working", "{working}");
    assert!(working.get("inputRequests").is_none());

    let (_, headers, html) = server.raw(http::Method::GET, &path, &[("x-user", "alice")], bytes::Bytes::new()).await;
    let (cookie, csrf) = crate::approvals::csrf_of(&headers, &html);
    let form =
        [("content-type", "application/x-www-form-urlencoded"), ("cookie", cookie.as_str()), ("x-user", "alice")];
    let typed = bytes::Bytes::from(format!("csrf={csrf}&value=ghp_taskS3cr3t"));
    assert_eq!(server.raw(http::Method::POST, &path, &form, typed).await.0, 200);
    let done = get(&server, "alice", &id).await;
    assert_eq!(done["status"], "completed", "polling moves the task on once the page is done: {done}");
    assert_eq!(done["result"]["structuredContent"]["token_sha256"], crate::auth::sha256_hex("ghp_taskS3cr3t"));

    // tasks/* without the extension declared: -32021 naming it.
    let undeclared = server
        .post_raw(
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tasks/get"),
                ("mcp-name", &id),
                ("x-user", "alice"),
            ],
            json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": id,
                   "_meta": crate::harness::modern_meta(json!({}))}})
            .to_string(),
        )
        .await;
    assert_eq!(undeclared.body["error"]["code"], -32021, "{}", undeclared.body);
    assert_eq!(
        undeclared.body["error"]["data"]["requiredCapabilities"]["extensions"],
        json!({"io.modelcontextprotocol/tasks": {}})
    );
}

/// Polls task `id` until it no longer shows `working` (10 s at most).
async fn settled(client: &Client, user: &str, id: &str) -> Value {
    for _ in 0..200 {
        let task = get(client, user, id).await;
        if task["status"] != "working" {
            return task;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("task {id} still works after 10 s");
}

async fn call_with(client: &Client, user: &str, tool: &str, arguments: Value) -> Value {
    let reply = request(client, user, "tools/call", json!({"name": tool, "arguments": arguments})).await;
    assert!(reply.body.get("error").is_none(), "{}", reply.body);
    reply.body["result"].clone()
}

#[tokio::test]
async fn a_call_that_runs_long_goes_on_as_a_task_and_ends_completed_or_failed() {
    let server = Server::start(&["--principal-header", "x-user", "--conformance-fixtures"]).await;
    // A quick tool answers at once; a sync-only one never becomes a task.
    let quick = call_with(&server, "alice", "slow_compute", json!({"seconds": 0, "label": "now"})).await;
    assert_eq!((&quick["resultType"], &quick["structuredContent"]["label"]), (&json!("complete"), &json!("now")));
    let greet = call_with(&server, "alice", "greet", json!({"name": "Ada"})).await;
    assert_eq!(greet["content"][0]["text"], "Hello, Ada!", "{greet}");

    // One that runs past the wait is answered as a working task, stored first.
    let created = call_with(&server, "alice", "slow_compute", json!({"seconds": 1, "label": "later"})).await;
    assert_eq!((&created["resultType"], &created["status"]), (&json!("task"), &json!("working")), "{created}");
    assert!(created.get("result").is_none() && created.get("requestState").is_none(), "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();
    assert_eq!(get(&server, "alice", &id).await["status"], "working");
    let peek = request(&server, "bob", "tasks/get", json!({"taskId": id})).await;
    assert_eq!(peek.body["error"]["code"], -32602, "another caller has no such task: {}", peek.body);
    let done = settled(&server, "alice", &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["structuredContent"]["label"], "later");

    // A tool's error is a completed task with an error result; a crash is a failed task.
    let failing = call_with(&server, "alice", "failing_job", json!({})).await;
    let failing = settled(&server, "alice", failing["taskId"].as_str().unwrap()).await;
    assert_eq!((&failing["status"], &failing["result"]["isError"]), (&json!("completed"), &json!(true)), "{failing}");
    let crashing = call_with(&server, "alice", "protocol_error_job", json!({})).await;
    assert_eq!(crashing["resultType"], "task", "a required-task tool is always a task: {crashing}");
    let crashed = settled(&server, "alice", crashing["taskId"].as_str().unwrap()).await;
    assert_eq!((&crashed["status"], &crashed["error"]["code"]), (&json!("failed"), &json!(-32603)), "{crashed}");
    assert!(crashed["statusMessage"].as_str().unwrap().contains("panicked"), "{crashed}");
    assert!(crashed.get("result").is_none());

    // A client that does not follow tasks cannot call a tool that is only ever a task.
    let refused = server
        .post_raw(
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "failing_job"),
                ("x-user", "alice"),
            ],
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "failing_job", "arguments": {},
                   "_meta": crate::harness::modern_meta(json!({}))}})
            .to_string(),
        )
        .await;
    assert_eq!(refused.body["error"]["code"], -32021, "{}", refused.body);
    assert_eq!(
        refused.body["error"]["data"]["requiredCapabilities"]["extensions"],
        json!({"io.modelcontextprotocol/tasks": {}})
    );
}

#[tokio::test]
async fn cancel_stops_a_task_that_runs_on() {
    let server = Server::start(&["--principal-header", "x-user", "--conformance-fixtures"]).await;
    let created = call_with(&server, "alice", "slow_compute", json!({"seconds": 60, "label": "long"})).await;
    let id = created["taskId"].as_str().unwrap().to_owned();
    let refused = request(&server, "bob", "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(refused.body["error"]["code"], -32602, "{}", refused.body);
    assert_eq!(get(&server, "alice", &id).await["status"], "working");
    let ack = request(&server, "alice", "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(ack.body["result"]["resultType"], "complete", "{}", ack.body);
    assert!(ack.body["result"].get("status").is_none() && ack.body["result"].get("taskId").is_none());
    let task = get(&server, "alice", &id).await;
    assert_eq!(task["status"], "cancelled", "{task}");
    assert!(task.get("result").is_none() && task.get("error").is_none());
    let again = request(&server, "alice", "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(again.body["result"]["resultType"], "complete", "cancelling an ended task is acknowledged");
}

#[tokio::test]
async fn a_task_that_runs_on_one_replica_is_followed_on_another() {
    let Some(redis) = crate::harness::redis_url("task replicas") else { return };
    let a = Server::start_on(&redis, &["--principal-header", "x-user", "--conformance-fixtures"]).await;
    let b = Server::start_on(&redis, &["--principal-header", "x-user", "--conformance-fixtures"]).await;
    let created = call_with(&a, "alice", "slow_compute", json!({"seconds": 1, "label": "across"})).await;
    let id = created["taskId"].as_str().unwrap().to_owned();
    assert_eq!(get(&b, "alice", &id).await["status"], "working");
    let done = settled(&b, "alice", &id).await;
    assert_eq!(
        (&done["status"], &done["result"]["structuredContent"]["label"]),
        (&json!("completed"), &json!("across"))
    );
}
