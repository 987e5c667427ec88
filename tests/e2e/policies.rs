//! `[[policy]] when`: policies that see the call's arguments and its caller, against a
//! real upstream (the Python SDK's server of the gateway tests), served by the hitl
//! program from a config file. The upstream counts its executions; every test asserts
//! the count.

use serde_json::{Value, json};

use crate::approvals::{Folder, people, signed_in};
use crate::auth::request_as;
use crate::gateway::{ConfigFile, executions_of};
use crate::harness::{Paused, accept};
use crate::upstream::PythonUpstream;

fn drop_args(database: &str) -> Value {
    json!({"partition": "p1", "database": database})
}

#[tokio::test]
async fn a_policy_on_the_arguments_reviews_prod_and_lets_staging_through() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let config = ConfigFile::write(&format!(
        r#"[[upstream]]
name = "db"
url = "{}"

[[policy]]
tools = ["db.drop_*"]
when = 'args.database == "prod"'
action = "review"

[[policy]]
tools = ["db.drop_*"]
when = 'args.database.startsWith("tmp_")'
action = "deny"

[[policy]]
tools = ["db.*"]
action = "allow"
"#,
        upstream.url
    ));
    let server = config.serve().await;
    let staging = server.call_tool(1, json!({"name": "db.drop_partition", "arguments": drop_args("staging")})).await;
    assert_eq!(staging.text(), "dropped p1 on staging", "{}", staging.body);
    let denied = server.call_tool(2, json!({"name": "db.drop_partition", "arguments": drop_args("tmp_1")})).await;
    assert_eq!(denied.body["result"]["isError"], true, "{}", denied.body);
    assert!(denied.text().contains("is denied by the policy"), "{}", denied.body);
    assert_eq!(executions_of(&server, "drop_partition").await, 1);

    // Prod pauses for review; an approval runs it once.
    let prod = server.call_tool(3, json!({"name": "db.drop_partition", "arguments": drop_args("prod")})).await;
    let paused = Paused::of("db.drop_partition", drop_args("prod"), &prod);
    assert!(paused.question()["params"]["message"].as_str().unwrap().contains("Tool execution requires approval"));
    let ran = paused.answer(&server, accept(json!({"decision": "approve"}))).await;
    assert_eq!(ran.text(), "dropped p1 on prod", "{}", ran.body);
    assert_eq!(executions_of(&server, "drop_partition").await, 2);

    // An edit to arguments the rules deny is not run: what runs is what is judged.
    let prod = server.call_tool(4, json!({"name": "db.drop_partition", "arguments": drop_args("prod")})).await;
    let paused = Paused::of("db.drop_partition", drop_args("prod"), &prod);
    let edit = json!({"decision": "edit", "args": r#"{"partition": "p1", "database": "tmp_9"}"#});
    let edited = paused.answer(&server, accept(edit)).await;
    assert!(edited.text().contains("is denied by the policy"), "{}", edited.body);
    assert_eq!(executions_of(&server, "drop_partition").await, 2, "the denied edit did not run");
}

#[tokio::test]
async fn an_expression_that_fails_counts_as_true_for_review_and_false_for_allow() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let config = ConfigFile::write(&format!(
        r#"[[upstream]]
name = "db"
url = "{}"

[[policy]]
tools = ["db.echo"]
when = "args.missing == 1"
action = "allow"

[[policy]]
tools = ["db.echo"]
action = "deny"

[[policy]]
tools = ["db.drop_*"]
when = "args.partition > 3"
action = "review"
"#,
        upstream.url
    ));
    let server = config.serve().await;
    // `args.missing` is no field: the allow policy does not apply, the deny after it does.
    let echoed = server.call_tool(1, json!({"name": "db.echo", "arguments": {"text": "hi"}})).await;
    assert!(echoed.text().contains("db.echo is denied by the policy"), "{}", echoed.body);
    // A string compared with a number fails: the review applies.
    let dropped = server.call_tool(2, json!({"name": "db.drop_partition", "arguments": drop_args("orders")})).await;
    Paused::of("db.drop_partition", drop_args("orders"), &dropped);
    assert_eq!(executions_of(&server, "drop_partition").await, 0);
}

#[tokio::test]
async fn a_policy_on_the_callers_groups_reviews_those_outside_the_group() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let folder = Folder::new(&signed_in(
        &upstream.url,
        r#"[[policy]]
tools = ["db.drop_*"]
when = '!("group:sre" in caller.groups) && caller.authenticated'
action = "review"
"#,
    ));
    let server = folder.serve(&[]).await;
    let p = people();
    let call = json!({"name": "db.drop_partition", "arguments": drop_args("orders")});
    let by_bob = request_as(&server, Some(&p.bob), json!({"elicitation": {}}), 1, "tools/call", call.clone()).await;
    assert_eq!(by_bob.text(), "dropped p1 on orders", "bob is in group:sre: {}", by_bob.body);
    let by_carol = request_as(&server, Some(&p.carol), json!({"elicitation": {}}), 2, "tools/call", call).await;
    assert_eq!(by_carol.body["result"]["resultType"], "input_required", "carol is not: {}", by_carol.body);
}

#[test]
fn a_when_that_does_not_compile_is_refused_at_its_line_and_column() {
    let config = ConfigFile::write("[[policy]]\ntools = [\"db.*\"]\nwhen = \"args.amount >\"\naction = \"review\"\n");
    let out = std::process::Command::new(crate::harness::Server::program())
        .args(["check", "--config", config.0.to_str().unwrap()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains(":3:8: policy[0].when: not a CEL expression"), "{said}");
    let config =
        ConfigFile::write("[[policy]]\ntools = [\"db.*\"]\nwhen = \"request.amount > 1\"\naction = \"review\"\n");
    let out = std::process::Command::new(crate::harness::Server::program())
        .args(["check", "--config", config.0.to_str().unwrap()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains(r#"policy[0].when: unknown variable "request""#), "{said}");
}

/// The rules `explain_cli_and_api` asks about (line numbers matter).
const EXPLAINED: &str = r#"[auth]
tokens_file = "tokens.txt"

[admin]
principals = ["user:bob"]

[[upstream]]
name = "db"
url = "http://127.0.0.1:9/mcp"

[[policy]]
tools = ["payments.*"]
action = "allow"

[[policy]]
tools = ["db.drop_*"]
when = 'args.database == "prod" && !("group:dba" in caller.groups)'
action = "review"

[[policy]]
tools = ["db.drop_*"]
when = "args.rows > 10"
action = "allow"

[[policy]]
tools = ["db.*"]
action = "review"
"#;

#[tokio::test]
async fn explain_cli_and_api() {
    let folder = crate::approvals::tokens_folder(EXPLAINED);
    let file = folder.config();
    let explain = |extra: &[&str]| {
        let mut args = vec!["policy", "explain", "--config", file.as_str()];
        args.extend_from_slice(extra);
        std::process::Command::new(crate::harness::Server::program()).args(&args).output().unwrap()
    };
    let out = explain(&[
        "--tool",
        "db.drop_partition",
        "--args",
        r#"{"database":"prod"}"#,
        "--caller",
        "user:alice",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["policy"], format!("{file}:15"), "{said}");
    assert_eq!(said["action"], "review");
    assert_eq!(
        said["skipped"],
        json!([{"policy": format!("{file}:11"), "reason": "glob",
        "detail": "tools = [\"payments.*\"] does not match \"db.drop_partition\""}])
    );

    // A DBA's drop of prod: the first `when` is false, the second fails (no `rows`) on
    // an allow policy, so the catch-all review decides.
    let out = explain(&[
        "--tool",
        "db.drop_partition",
        "--args",
        r#"{"database":"prod"}"#,
        "--caller",
        "user:dana",
        "--groups",
        "group:dba",
        "--json",
    ]);
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["policy"], format!("{file}:25"), "{said}");
    let reasons: Vec<&str> =
        said["skipped"].as_array().unwrap().iter().map(|s| s["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons, ["glob", "when_false", "error"], "{said}");
    let text = explain(&["--tool", "other", "--caller", "user:alice"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.ends_with("[gateway] default_action: decides: allow\n"), "{text}");

    // The same over the API, for [admin] principals only.
    let server = folder.serve(&[]).await;
    let ask = |token: &'static str, body: Value| {
        let server = &server;
        async move { crate::approvals::api(server, token, http::Method::POST, "/api/policy/explain", Some(body)).await }
    };
    let body = json!({"tool": "db.drop_partition", "args": {"database": "prod"}, "caller": "user:alice", "groups": []});
    let answered = ask("tok-bob", body.clone()).await;
    assert_eq!(answered.status, 200, "{}", answered.body);
    assert_eq!(answered.body["policy"], format!("{file}:15"));
    assert_eq!(answered.body["action"], "review");
    let refused = ask("tok-alice", body).await;
    assert_eq!(refused.status, 403, "alice is no admin: {}", refused.body);
    assert!(refused.body.to_string().contains("/api/policy/explain is for [admin] principals"), "{}", refused.body);
    let bad = ask("tok-bob", json!({"args": {}})).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
}

/// `db` at `url`, its drops allowed 30 times a minute per caller, `db.delete_*`
/// reviewed twice a minute.
fn limited(url: &str) -> String {
    format!(
        r#"[[upstream]]
name = "db"
url = "{url}"

[[policy]]
tools = ["db.drop_*"]
action = "allow"
rate_limit = "30/minute"

[[policy]]
tools = ["db.echo"]
action = "review"
rate_limit = "2/minute"
"#
    )
}

fn limit_text(reply: &crate::harness::Reply) -> String {
    assert_eq!(reply.body["result"]["isError"], true, "{}", reply.body);
    reply.text()
}

#[tokio::test]
async fn a_rate_limit_refuses_the_31st_call_in_a_minute_and_counts_a_review_as_it_pauses() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let config = ConfigFile::write(&limited(&upstream.url));
    let server = crate::harness::Server::start(&["--config", config.0.to_str().unwrap(), "--store", "memory"]).await;
    for n in 0..30 {
        let ran = server.call_tool(n, json!({"name": "db.drop_partition", "arguments": drop_args("orders")})).await;
        assert_eq!(ran.text(), "dropped p1 on orders", "call {n}: {}", ran.body);
    }
    let refused = server.call_tool(31, json!({"name": "db.drop_partition", "arguments": drop_args("orders")})).await;
    let said = limit_text(&refused);
    assert!(said.starts_with(r#"rate limit of 30/minute for tools = ["db.drop_*"] reached; retry in "#), "{said}");
    let seconds: u64 = said.rsplit("retry in ").next().unwrap().trim_end_matches(" s").parse().unwrap();
    assert!((1..=60).contains(&seconds), "{said}");
    assert_eq!(executions_of(&server, "drop_partition").await, 30, "the 31st never reached the upstream");

    // A reviewed call is counted as it pauses: the third in the minute does not pause,
    // and an approval of a paused one is never refused afterwards.
    let echo = |id: u64| server.call_tool(id, json!({"name": "db.echo", "arguments": {"text": "hi"}}));
    let first = Paused::of("db.echo", json!({"text": "hi"}), &echo(40).await);
    Paused::of("db.echo", json!({"text": "hi"}), &echo(41).await);
    let third = echo(42).await;
    assert!(
        limit_text(&third).starts_with(r#"rate limit of 2/minute for tools = ["db.echo"] reached"#),
        "{}",
        third.body
    );
    let approved = first.answer(&server, accept(json!({"decision": "approve"}))).await;
    assert_eq!(approved.text(), "hi", "{}", approved.body);
    let (_, _, metrics) = server.raw(http::Method::GET, "/metrics", &[], bytes::Bytes::new()).await;
    assert!(metrics.contains("hitl_rate_limited_total{policy=\"tools = [\\\"db.drop_*\\\"]\"} 1"), "{metrics}");
}

#[tokio::test]
async fn replicas_on_redis_share_a_rate_limit() {
    let Some(redis) = crate::harness::redis_url("policies") else { return };
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    // A policy of its own text: counts left by another run do not apply.
    let run = format!("{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    let text = limited(&upstream.url).replacen(
        "tools = [\"db.drop_*\"]\n",
        &format!("tools = [\"db.drop_*\"]\ndescription = \"run {run}\"\n"),
        1,
    );
    let config = ConfigFile::write(&text);
    let args = ["--config", config.0.to_str().unwrap()];
    let (one, two) =
        (crate::harness::Server::start_on(&redis, &args).await, crate::harness::Server::start_on(&redis, &args).await);
    for n in 0..30 {
        let replica = if n % 2 == 0 { &one } else { &two };
        let ran = replica.call_tool(n, json!({"name": "db.drop_partition", "arguments": drop_args("orders")})).await;
        assert_eq!(ran.text(), "dropped p1 on orders", "call {n}: {}", ran.body);
    }
    for replica in [&one, &two] {
        let refused =
            replica.call_tool(31, json!({"name": "db.drop_partition", "arguments": drop_args("orders")})).await;
        assert!(limit_text(&refused).contains("rate limit of 30/minute"), "{}", refused.body);
    }
    assert_eq!(executions_of(&one, "drop_partition").await, 30);
}

#[tokio::test]
async fn the_approvers_of_the_policy_whose_when_decided_the_call_decide_it() {
    use crate::approvals::{ask, decide, executions};
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let folder = Folder::new(&signed_in(
        &upstream.url,
        r#"[[policy]]
tools = ["db.drop_*"]
when = 'args.database == "prod"'
action = "review"
approvers = ["user:carol"]

[[policy]]
tools = ["db.drop_*"]
when = 'args.database == "staging"'
action = "review"
approvers = ["user:bob"]
"#,
    ));
    let server = folder.serve(&[]).await;
    let p = people();
    let args = drop_args("staging");
    let (paused, url) = ask(&server, &p.alice, &args).await;
    let question = paused.question();
    assert_eq!(question["params"]["message"], "Waiting for approval by user:bob to run db.drop_partition");
    let id = url.rsplit('/').next().unwrap().to_owned();
    let carol = decide(&server, &p.carol, &id, json!({"decision": "approve"})).await;
    assert_eq!(carol.status, 403, "carol approves prod drops only: {}", carol.body);
    let bob = decide(&server, &p.bob, &id, json!({"decision": "approve"})).await;
    assert_eq!(bob.status, 200, "{}", bob.body);
    let ran = paused.answer(&server, json!({"action": "accept"})).await;
    assert_eq!(ran.text(), "dropped p1 on staging", "{}", ran.body);
    assert_eq!(executions(&server, &p.alice).await, 1);
}

#[tokio::test]
async fn every_decision_names_the_policy_that_made_it_in_the_audit_trail() {
    use crate::approvals::url_client;
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let folder = Folder::new(&signed_in(
        &upstream.url,
        r#"[[policy]]
tools = ["db.drop_*"]
when = 'args.database == "prod"'
action = "review"

[[policy]]
tools = ["db.drop_*"]
action = "allow"

[[policy]]
tools = ["db.fail"]
action = "deny"

[audit]
file = "audit.jsonl"
"#,
    ));
    let server = folder.serve(&[]).await;
    let alice = people().alice;
    let call = |id: u64, tool: &'static str, args: Value| {
        let server = &server;
        let alice = alice.clone();
        async move {
            let params = json!({"name": tool, "arguments": args});
            server.modern_as(Some(&alice), id, "tools/call", params, url_client()).await
        }
    };
    let ran = call(1, "db.drop_partition", drop_args("staging")).await;
    assert_eq!(ran.text(), "dropped p1 on staging", "{}", ran.body);
    let refused = call(2, "db.fail", json!({"reason": "x"})).await;
    assert!(refused.text().contains("denied by the policy"), "{}", refused.body);
    let paused = call(3, "db.drop_partition", drop_args("prod")).await;
    assert_eq!(paused.body["result"]["resultType"], "input_required", "{}", paused.body);
    // An echo no policy names: `[gateway] default_action`, never guarded.
    let echoed = call(4, "db.echo", json!({"text": "hi"})).await;
    assert_eq!(echoed.text(), "hi", "{}", echoed.body);

    let config = folder.config();
    let expect = [
        ("allowed", "db.drop_partition", Some(format!("{config}:15"))),
        ("denied", "db.fail", Some(format!("{config}:19"))),
        ("review_asked", "db.drop_partition", Some(format!("{config}:10"))),
        ("allowed", "db.echo", None),
    ];
    for (event, tool, place) in expect {
        let entry = folder
            .wait_audit(event, |e| {
                e["event"] == event && e["tool"] == tool && e["policy_at"].as_str() == place.as_deref()
            })
            .await;
        assert_eq!(entry["principal"], "user:alice", "{entry}");
        assert_eq!(entry["upstream"], "db", "{entry}");
        assert!(entry["thread"].as_str().is_some_and(|t| t.len() == 36), "{entry}");
        match &place {
            Some(_) => assert!(entry["policy_digest"].as_str().is_some_and(|d| d.len() == 24), "{entry}"),
            None => assert_eq!(entry["policy"], "[gateway] default_action", "{entry}"),
        }
    }
    // The review's own entries follow under the same thread.
    let asked = folder.wait_audit("asked", |e| e["event"] == "asked" && e["tool"] == "db.drop_partition").await;
    let review = folder.audit().into_iter().find(|e| e["event"] == "review_asked").unwrap();
    assert_eq!(asked["thread"], review["thread"], "one call, one thread: {asked} {review}");
}
