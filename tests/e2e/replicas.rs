//! Several `hitl` replicas on one Redis: any replica answers any round, resends
//! spread over replicas resume the agent once, and a killed replica loses nothing.
//! Needs `REDIS_URL` (`cargo xtask test` provides one).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::harness::{Reply, Server, redis_url};

const CAPS: &str = r#"{"elicitation": {"form": {}, "url": {}}}"#;

fn caps() -> Value {
    serde_json::from_str(CAPS).unwrap()
}

/// An answer that fits a question: the first choice, the minimum, `true`, or text.
fn answer_for(request: &Value) -> Value {
    let params = &request["params"];
    if params["mode"] == "url" {
        return json!({"action": "accept"});
    }
    let mut content = Map::new();
    for (name, field) in params["requestedSchema"]["properties"].as_object().unwrap() {
        let value = if let Some(choices) = field["enum"].as_array() {
            choices[0].clone()
        } else {
            match field["type"].as_str().unwrap() {
                "integer" | "number" => field.get("minimum").cloned().unwrap_or(json!(1)),
                "boolean" => json!(true),
                _ => json!("Ada"),
            }
        };
        content.insert(name.clone(), value);
    }
    json!({"action": "accept", "content": content})
}

/// Calls `tool`, answering every round on the next replica in turn; returns the final
/// reply and how many rounds it took.
async fn drive(replicas: &[&Server], tool: &str, arguments: Value) -> (Reply, usize) {
    let mut reply = replicas[0].modern(1, "tools/call", json!({"name": tool, "arguments": arguments}), caps()).await;
    let mut rounds = 0;
    while reply.body["result"]["resultType"] == "input_required" {
        rounds += 1;
        assert!(rounds < 5, "{tool} keeps asking");
        let result = &reply.body["result"];
        let responses: Map<String, Value> =
            result["inputRequests"].as_object().unwrap().iter().map(|(k, r)| (k.clone(), answer_for(r))).collect();
        let params = json!({"name": tool, "arguments": arguments, "inputResponses": responses,
                            "requestState": result["requestState"]});
        let replica = replicas[rounds % replicas.len()];
        reply = replica.modern(1 + rounds as u64, "tools/call", params, caps()).await;
    }
    (reply, rounds)
}

#[tokio::test]
async fn any_replica_answers_any_round_of_every_example_agent() {
    let Some(url) = redis_url("replicas") else { return };
    let a = Server::start_on(&url, &[]).await;
    let b = Server::start_on(&url, &[]).await;
    let agents = [
        ("greeter", json!({}), r#"{"greeting":"Hello, Ada!"}"#),
        ("choose_region", json!({}), r#"{"region":"Ada"}"#),
        ("plan_deployment", json!({}), r#"{"region":"us-east-1","replicas":1}"#),
        ("connect_calendar", json!({}), r#"{"status":"connected"}"#),
        (
            "deploy_production_release",
            json!({"service": "api", "version": "1"}),
            r#"{"result":"Successfully released api v1 to prod."}"#,
        ),
        ("onboarding", json!({}), r#"{"name":"Ada","age":0}"#),
        ("survey", json!({}), r#"{"color":"Ada","quest":"Ada"}"#),
        ("twin_questions", json!({}), r#"{"primary":"Ada","secondary":"Ada"}"#),
        ("relay_pair", json!({}), r#"{"first":"Ada","second":"Ada"}"#),
        ("echo_context", json!({}), r#"{"answer":"Ada","context":null}"#),
    ];
    for (tool, arguments, expected) in agents {
        let (reply, rounds) = drive(&[&a, &b], tool, arguments).await;
        assert!(rounds >= 1, "{tool} paused");
        assert_eq!(reply.status, 200, "{tool}: {:?}", reply.body);
        assert_eq!(reply.body["result"]["content"][0]["text"], expected, "{tool}");
    }
    let (reply, _) = drive(&[&a, &b], "issue_ticket", json!({})).await;
    assert!(reply.body["result"]["structuredContent"]["ticket"].is_string());
}

#[tokio::test]
async fn fifty_concurrent_resends_over_two_replicas_resume_once() {
    let Some(url) = redis_url("replicas") else { return };
    let a = Server::start_on(&url, &[]).await;
    let b = Server::start_on(&url, &[]).await;
    let first = a.call_tool(1, json!({"name": "issue_ticket", "arguments": {}})).await;
    let state = first.body["result"]["requestState"].clone();
    let params = json!({"name": "issue_ticket", "arguments": {},
                        "inputResponses": {"approve": {"action": "accept", "content": {"approve": true}}},
                        "requestState": state});
    let mut tasks = Vec::new();
    for i in 0..50u64 {
        let (client, params) = (if i % 2 == 0 { *a } else { *b }, params.clone());
        tasks.push(tokio::spawn(async move { client.call_tool(i, params).await }));
    }
    let mut tickets = BTreeSet::new();
    for task in tasks {
        let reply = task.await.unwrap();
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        tickets.insert(reply.body["result"]["structuredContent"]["ticket"].as_str().unwrap().to_owned());
    }
    assert_eq!(tickets.len(), 1, "every response carries the same ticket: {tickets:?}");
}

#[tokio::test]
async fn a_killed_replica_loses_no_paused_call() {
    let Some(url) = redis_url("replicas") else { return };
    let mut a = Server::start_on(&url, &[]).await;
    let b = Server::start_on(&url, &[]).await;
    let first = a.call_tool(1, json!({"name": "greeter", "arguments": {}})).await;
    let state = first.body["result"]["requestState"].clone();
    a.kill();
    let params = json!({"name": "greeter", "arguments": {},
                        "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Ada"}}},
                        "requestState": state});
    let done = b.call_tool(2, params).await;
    assert_eq!(done.body["result"]["content"][0]["text"], r#"{"greeting":"Hello, Ada!"}"#);
}

#[tokio::test]
async fn replicas_need_a_shared_secret() {
    let Some(url) = redis_url("replicas") else { return };
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hitl-e2e-server"))
        .args(["serve", "--listen", "127.0.0.1:0", "--store", &url])
        .env_remove("HITL_SECRET")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("HITL_SECRET") && stderr.contains("--secret-file"), "{stderr}");
}
