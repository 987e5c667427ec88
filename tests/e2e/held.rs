//! Waiting for a person who is not at the client: a retry of a call whose approval is
//! pending is held until the decision (or `[approvals] hold` seconds), so an SDK client
//! with its default settings completes a call someone approves minutes later; the
//! decision wakes the held retry at once, on any replica; one caller holds a bounded
//! number of retries.
//!
//! The delays here (a decision 40 s or 3 s after the call) are the scenario itself, as
//! issue #29 states it: what is asserted is what the client got, not how fast.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::approvals::{Folder, Receiver, api, ask, config, decide, eventually, executions, now_ms, people};
use crate::auth::token;
use crate::harness::{Server, redis_url};
use crate::upstream::PythonUpstream;

/// The pending approval of `db.drop_partition` with `partition`, as `approver` lists it.
async fn pending(server: &Server, approver: &str, partition: &str) -> Value {
    let probe = || async {
        let listed = api(server, approver, http::Method::GET, "/api/approvals?status=pending", None).await;
        listed.body["approvals"].as_array()?.iter().find(|a| a["arguments"]["partition"] == partition).cloned()
    };
    eventually(|| format!("no pending approval of {partition}"), probe).await
}

/// Waits until `server` holds `n` retries (its `hitl_held_retries` gauge, read by an
/// admin).
async fn wait_held(server: &Server, n: u64) {
    let ops = token("rsa-1", json!({"sub": "ops"}));
    let probe = || async {
        let bearer = format!("Bearer {ops}");
        let (_, _, text) =
            server.raw(http::Method::GET, "/metrics", &[("authorization", bearer.as_str())], bytes::Bytes::new()).await;
        let held = text.lines().find_map(|l| l.strip_prefix("hitl_held_retries ")).map(|v| v.trim().parse::<f64>());
        (held == Some(Ok(n as f64))).then_some(())
    };
    eventually(|| format!("the server does not hold {n} retries"), probe).await;
}

/// A partition name no other test (or earlier run on the same Redis) uses.
fn fresh_partition(what: &str) -> String {
    format!("p-{what}-{}", uuid_like())
}

fn uuid_like() -> String {
    format!("{:x}{:x}", now_ms(), std::process::id())
}

#[tokio::test]
async fn the_python_sdk_with_its_defaults_completes_a_call_approved_forty_seconds_later() {
    let Ok(python) = std::env::var("HITL_PYTHON") else {
        crate::harness::cannot_run("held", "HITL_PYTHON is not set");
        return;
    };
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let hook = Receiver::start(0).await;
    let folder = Folder::new(&config(&upstream.url, &hook.url));
    let server = folder.serve(&[]).await;
    let people = people();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/sdk_held.py");
    let url = format!("http://{}/mcp", server.addr);
    let alice = people.alice.clone();
    // A partition of its own: on Redis every test's server lists the same approvals.
    let partition = fresh_partition("sdk");
    let client = tokio::task::spawn_blocking({
        let partition = partition.clone();
        move || {
            std::process::Command::new(python).arg(script).args([url, alice, partition]).output().expect("python runs")
        }
    });

    let approval = pending(&server, &people.bob, &partition).await;
    let id = approval["id"].as_str().unwrap().to_owned();
    let requested = approval["requested_at_ms"].as_u64().unwrap();
    // The approver comes back 40 s after the call was made.
    let at = requested + 40_000;
    if let Some(wait) = at.checked_sub(now_ms()) {
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
    let decided = decide(&server, &people.bob, &id, json!({"decision": "approve"})).await;
    assert_eq!(decided.status, 200, "{}", decided.body);

    let output = tokio::time::timeout(Duration::from_secs(60), client).await.expect("the client finishes").unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{log}");
    let got: Value = serde_json::from_str(log.lines().next().unwrap_or_default()).unwrap_or_else(|_| panic!("{log}"));
    assert_eq!(got["is_error"], false, "{got}");
    assert!(got["text"].as_str().unwrap().contains(&partition), "the upstream's result: {got}");
    // Asked at the call, then again when the first held retry's 25 s ran out: never ten
    // times in a burst.
    let asked = got["asked"].as_array().unwrap();
    assert!((2..=3).contains(&asked.len()), "{got}");
    assert!(asked.iter().all(|u| u.as_str().is_some_and(|u| u.ends_with(&format!("/approvals/{id}")))), "{got}");
    // While held, the client heard every 10 s whom it waits for.
    let heard = got["heard"].as_array().unwrap();
    let waiting = heard.iter().filter(|m| *m == "waiting for approval by group:sre").count();
    assert!(waiting >= 2, "{got}");
    assert_eq!(executions(&server, &people.alice).await, 1, "the drop ran once");
}

/// hitl in front of the test upstream, with `[approvals]` extra lines.
async fn gated(upstream: &PythonUpstream, approvals: &str, extra: &[&str]) -> (Folder, Arc<Server>, Receiver) {
    let hook = Receiver::start(0).await;
    let folder = Folder::new(&format!("{}\n[approvals]\n{approvals}\n", config(&upstream.url, &hook.url)));
    let server = Arc::new(folder.serve(extra).await);
    (folder, server, hook)
}

#[tokio::test]
async fn a_held_retry_answers_as_soon_as_the_decision_is_stored_and_a_caller_holds_a_bounded_number() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let (_folder, server, _hook) = gated(&upstream, "max_held_per_caller = 1", &[]).await;
    let people = people();
    let partition = fresh_partition("held");
    let args = json!({"partition": partition, "database": "orders"});
    let (paused, _) = ask(&server, &people.alice, &args).await;
    let paused = Arc::new(paused);
    let id = pending(&server, &people.bob, &partition).await["id"].as_str().unwrap().to_owned();

    let started = Instant::now();
    let held = tokio::spawn({
        let (server, paused) = (server.clone(), paused.clone());
        async move {
            let reply = paused.answer(&server, json!({"action": "accept"})).await;
            (reply, Instant::now())
        }
    });
    // Once the first retry is held, the same caller's next one finds no place to wait:
    // the question again, at once.
    wait_held(&server, 1).await;
    let again = paused.answer(&server, json!({"action": "accept"})).await;
    assert_eq!(again.body["result"]["resultType"], "input_required", "{}", again.body);
    assert_eq!(again.body["result"]["requestState"], paused.state());
    assert!(!held.is_finished(), "the first retry is held, not answered");

    // The approver decides 3 s after the call.
    if let Some(wait) = Duration::from_secs(3).checked_sub(started.elapsed()) {
        tokio::time::sleep(wait).await;
    }
    assert!(!held.is_finished(), "still held before the decision");
    let decided = decide(&server, &people.bob, &id, json!({"decision": "approve"})).await;
    let decided_at = Instant::now();
    assert_eq!(decided.status, 200, "{}", decided.body);
    let (reply, answered_at) = tokio::time::timeout(Duration::from_secs(20), held).await.expect("answered").unwrap();
    assert_ne!(reply.body["result"]["resultType"], "input_required", "{}", reply.body);
    assert!(reply.body["result"]["isError"] != true, "{}", reply.body);
    let after = answered_at.saturating_duration_since(decided_at);
    assert!(after < Duration::from_secs(1), "the held retry answered {after:?} after the decision");
    assert_eq!(executions(&server, &people.alice).await, 1);
}

#[tokio::test]
async fn a_decision_on_one_replica_wakes_the_retry_held_on_another() {
    let Some(redis) = redis_url("held") else { return };
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let (folder, first, _hook) = gated(&upstream, "hold = 60", &["--store", &redis]).await;
    let second = Arc::new(folder.serve(&["--store", &redis]).await);
    let people = people();
    let partition = fresh_partition("replicas");
    let args = json!({"partition": partition, "database": "orders"});
    let (paused, _) = ask(&first, &people.alice, &args).await;
    let id = pending(&second, &people.bob, &partition).await["id"].as_str().unwrap().to_owned();
    let held = tokio::spawn({
        let server = first.clone();
        async move {
            let reply = paused.answer(&server, json!({"action": "accept"})).await;
            (reply, Instant::now())
        }
    });
    // Held on the first replica (its next look at the thread is 10 s away; the hold 60 s).
    wait_held(&first, 1).await;
    assert!(!held.is_finished(), "the retry was answered without a decision");
    let decided = decide(&second, &people.bob, &id, json!({"decision": "approve"})).await;
    let decided_at = Instant::now();
    assert_eq!(decided.status, 200, "{}", decided.body);
    let (reply, answered_at) = tokio::time::timeout(Duration::from_secs(30), held).await.expect("answered").unwrap();
    assert!(
        reply.body["result"]["isError"] != true && reply.body["result"]["resultType"] != "input_required",
        "{}",
        reply.body
    );
    let after = answered_at.saturating_duration_since(decided_at);
    assert!(after < Duration::from_secs(1), "woken {after:?} after the decision on the other replica");
}
