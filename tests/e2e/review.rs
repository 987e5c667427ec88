//! The seed's "Review tool calls": one question per tool call, each answer turned into
//! the middleware's decision, in batched and per-call mode (`email_assistant`,
//! `email_assistant_per_call`).

use serde_json::{Value, json};

use crate::harness::{Paused, Reply, Server, accept};

const ARGS: &str = r#"{"to": "ada@example.com", "subject": "Launch"}"#;

fn args() -> Value {
    serde_json::from_str(ARGS).unwrap()
}

async fn ask(server: &Server, tool: &str) -> Paused {
    server.pause(tool, args()).await
}

fn output(reply: &Reply) -> Value {
    let result = reply.done();
    assert_eq!(result["isError"], Value::Null, "{result}");
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn review_question_matches_the_seed() {
    let server = Server::start(&[]).await;
    let paused = ask(&server, "email_assistant").await;
    let key = paused.key();
    let (digest, n) = key.strip_prefix("review-").unwrap().split_once('.').unwrap();
    assert!(digest.len() == 16 && digest.chars().all(|c| c.is_ascii_hexdigit()) && n == "1", "{key}");
    // The seed's own example, kept once in hitl-protocol's golden fixtures.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/hitl-protocol/tests/fixtures/seed_review_question.json");
    let fixture: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_eq!(paused.question(), &fixture["json"]["review-7c69d526bcc899c4.1"]);
    let again = ask(&server, "email_assistant").await;
    assert_eq!(key, again.key(), "the key is derived from the question");
}

#[tokio::test]
async fn approve_runs_the_call() {
    let server = Server::start(&[]).await;
    for tool in ["email_assistant", "email_assistant_per_call"] {
        let paused = ask(&server, tool).await;
        let out = output(&paused.answer(&server, accept(json!({"decision": "approve"}))).await);
        assert_eq!(out["sent"], args(), "{tool}");
    }
}

#[tokio::test]
async fn edit_runs_the_call_with_the_edited_arguments() {
    let server = Server::start(&[]).await;
    for tool in ["email_assistant", "email_assistant_per_call"] {
        let paused = ask(&server, tool).await;
        let edited = r#"{"to": "grace@example.com", "subject": "Launch v2"}"#;
        let out = output(&paused.answer(&server, accept(json!({"decision": "edit", "args": edited}))).await);
        assert_eq!(out["sent"], json!({"to": "grace@example.com", "subject": "Launch v2"}), "{tool}");
    }
}

#[tokio::test]
async fn reject_skips_the_call_with_its_message() {
    let server = Server::start(&[]).await;
    let paused = ask(&server, "email_assistant").await;
    let out = output(&paused.answer(&server, accept(json!({"decision": "reject", "message": "Not yet"}))).await);
    assert_eq!(out, json!({"sent": null, "reply": "I did not send the email: Not yet"}));
    let paused = ask(&server, "email_assistant").await;
    let out = output(&paused.answer(&server, accept(json!({"decision": "reject", "message": "  "}))).await);
    assert_eq!(out["sent"], Value::Null);
    assert!(out["reply"].as_str().unwrap().contains("User rejected the tool call"), "a blank message is left out");
}

#[tokio::test]
async fn respond_answers_in_place_of_the_tool_and_needs_a_message() {
    let server = Server::start(&[]).await;
    let paused = ask(&server, "email_assistant").await;
    let bad = paused.answer(&server, accept(json!({"decision": "respond"}))).await;
    assert_eq!((bad.status, bad.body["error"]["code"].clone()), (400, json!(-32602)));
    let out = output(&paused.answer(&server, accept(json!({"decision": "respond", "message": "Already sent"}))).await);
    assert_eq!(out, json!({"sent": null, "reply": "Done: Already sent"}));
}

#[tokio::test]
async fn decline_rejects_and_cancel_ends_the_call() {
    let server = Server::start(&[]).await;
    let paused = ask(&server, "email_assistant").await;
    let out = output(&paused.answer(&server, json!({"action": "decline"})).await);
    assert_eq!(out["sent"], Value::Null);
    let paused = ask(&server, "email_assistant").await;
    let cancelled = paused.answer(&server, json!({"action": "cancel"})).await;
    assert_eq!(cancelled.body["result"]["isError"], true);
    assert_eq!(cancelled.body["result"]["content"][0]["text"], "The request for input was cancelled.");
}

#[tokio::test]
async fn invalid_review_answers_fail_and_keep_the_round_open() {
    let server = Server::start(&[]).await;
    let paused = ask(&server, "email_assistant").await;
    for bad in [
        json!({"decision": "edit", "args": "[1, 2]"}),
        json!({"decision": "edit", "args": "not json"}),
        json!({"decision": "respond", "message": ""}),
        json!({"decision": "launch"}),
    ] {
        let reply = paused.answer(&server, accept(bad.clone())).await;
        assert_eq!((reply.status, reply.body["error"]["code"].clone()), (400, json!(-32602)), "{bad}");
    }
    let out = output(&paused.answer(&server, accept(json!({"decision": "approve"}))).await);
    assert_eq!(out["sent"], args());
}

#[tokio::test]
async fn batched_edits_are_checked_by_the_tool_when_it_runs() {
    let server = Server::start(&[]).await;
    let paused = ask(&server, "email_assistant").await;
    let out = output(
        &paused.answer(&server, accept(json!({"decision": "edit", "args": r#"{"to": "ada@example.com"}"#}))).await,
    );
    assert_eq!(out["sent"], Value::Null);
    assert!(out["reply"].as_str().unwrap().contains("\"subject\" is a required property"), "{out}");
}

#[tokio::test]
async fn per_call_edits_must_fit_the_tool() {
    let server = Server::start(&[]).await;
    let paused = ask(&server, "email_assistant_per_call").await;
    let reply =
        paused.answer(&server, accept(json!({"decision": "edit", "args": r#"{"to": "ada@example.com"}"#}))).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.body["error"]["code"], -32602);
    assert_eq!(
        reply.body["error"]["message"],
        r#"The decision does not fit the tool: "subject" is a required property"#
    );
    let reply = paused
        .answer(&server, accept(json!({"decision": "edit", "args": r#"{"to": "nobody", "subject": "x"}"#})))
        .await;
    assert_eq!(reply.body["error"]["code"], -32602, "the email format is checked");
    // Nothing ran, and the round is still open.
    let out = output(&paused.answer(&server, accept(json!({"decision": "approve"}))).await);
    assert_eq!(out["sent"], args());
}
