//! Store outages during an approved call: Redis (a `redis-server` of the test's own,
//! with its append-only file) is stopped while the upstream runs the call, and started
//! again after 2 s, or after 45 s (longer than the 30 s claim lease). The outcome hitl
//! holds is saved once Redis is back: the call itself (within the lease) or the
//! client's resend (past it) gets the upstream's result,
//! the upstream ran once, and every audit entry of the call is in `/api/audit`. The
//! upstream is the Python SDK's `MCPServer` (`tests/python/upstream_server.py`), whose
//! `slow_drop` counts its executions as it starts.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Reply, Server, modern_meta};
use crate::redis_faults::Redis;
use crate::upstream::PythonUpstream;

/// The admin's bearer token (`[auth] tokens_file`), who also makes the calls.
const TOKEN: &str = "tok-ops-outages";

/// The first words of the error of a call whose outcome hitl keeps until the store is
/// back.
const KEPT: &str = "Internal error: the thread store is unavailable; the answers were taken";

/// A folder with `hitl.toml` and its tokens file, removed on drop.
struct Setup(std::path::PathBuf);

impl Setup {
    fn new(upstream: &PythonUpstream, rest: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("hitl-e2e-outages-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tokens.txt"), format!("ops {TOKEN}\n")).unwrap();
        let config = format!(
            "[auth]\ntokens_file = \"tokens.txt\"\n\n[admin]\nprincipals = [\"user:ops\"]\n\n\
             [[upstream]]\nname = \"db\"\nurl = \"{}\"\n\n{rest}",
            upstream.url
        );
        std::fs::write(dir.join("hitl.toml"), config).unwrap();
        Self(dir)
    }

    async fn serve(&self, redis: &Redis) -> Server {
        let config = self.0.join("hitl.toml").display().to_string();
        Server::start_on(&redis.url(), &["--config", &config]).await
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A 2026-07-28 `tools/call` with the admin's token.
async fn call(server: &crate::harness::Client, id: u64, params: &Value) -> Reply {
    let mut full = json!({ "_meta": modern_meta(json!({"elicitation": {}})) });
    full.as_object_mut().unwrap().extend(params.as_object().cloned().unwrap_or_default());
    let name = params["name"].as_str().unwrap_or_default().to_owned();
    let bearer = format!("Bearer {TOKEN}");
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", name.as_str()),
        ("authorization", bearer.as_str()),
    ];
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": full});
    server.post_raw(&headers, body.to_string()).await
}

fn kept(reply: &Reply) -> bool {
    reply.body["error"]["code"] == -32603
        && reply.body["error"]["message"].as_str().is_some_and(|m| m.starts_with(KEPT))
}

/// How many times `slow_drop` ran (an allowed call: it needs no store).
async fn executions(server: &Server) -> u64 {
    let reply = call(server, 90, &json!({"name": "db.executions", "arguments": {"tool": "slow_drop"}})).await;
    reply.text().parse().unwrap_or_else(|_| panic!("a count: {}", reply.body))
}

/// The audit events of `thread`, as the admin reads them from `/api/audit`.
async fn audit_of(server: &Server, thread: &str) -> Vec<Value> {
    let bearer = format!("Bearer {TOKEN}");
    let headers = [("authorization", bearer.as_str())];
    let (mut all, mut path) = (Vec::new(), "/api/audit?since=0".to_owned());
    loop {
        let page =
            server.request(http::Method::GET, &path, &headers, Default::default()).await.expect("the API answers");
        assert_eq!(page.status, 200, "{}", page.body);
        all.extend(
            page.body["events"].as_array().cloned().unwrap_or_default().into_iter().filter(|e| e["thread"] == thread),
        );
        match page.body["next_cursor"].as_str() {
            Some(cursor) => path = format!("/api/audit?cursor={cursor}"),
            None => return all,
        }
    }
}

/// The paused call of `params` (`name` and `arguments`): its answer `content` to its one
/// question, as the params of the resend, and its thread id.
async fn paused(server: &Server, params: &Value, content: Value) -> (Value, String) {
    let first = call(server, 1, params).await;
    let result = &first.body["result"];
    assert_eq!(result["resultType"], "input_required", "{}", first.body);
    let key = result["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let state = result["requestState"].as_str().unwrap().to_owned();
    let mut answered = params.clone();
    answered["inputResponses"] = json!({ key: {"action": "accept", "content": content} });
    answered["requestState"] = state.clone().into();
    (answered, state.split_once('.').unwrap().0.to_owned())
}

/// The approved call `answered` runs on the upstream while Redis is stopped for
/// `outage`. Within a lease's time (30 s) the call itself answers the upstream's result
/// once Redis is back; past it, the call learns its outcome is kept, a resend waits for
/// it, and once Redis is back resends get the upstream's result. Returns its text.
async fn through_an_outage(server: &Server, redis: &mut Redis, answered: &Value, outage: Duration) -> String {
    let client = **server;
    let approving = tokio::spawn({
        let answered = answered.clone();
        async move { call(&client, 2, &answered).await }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while executions(server).await == 0 {
        assert!(Instant::now() < deadline, "the approved call never reached the upstream");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The upstream has the call (it answers after a second): the store goes away.
    redis.stop();
    let stopped = Instant::now();
    // The outage's length is the test's to set: the one wait that is not a poll.
    let reply = if outage < Duration::from_secs(30) {
        tokio::time::sleep(outage.saturating_sub(stopped.elapsed())).await;
        assert!(redis.run(), "redis-server restarts");
        let first = approving.await.unwrap();
        assert!(!kept(&first), "the call waited for its outcome's save: {}", first.body);
        first
    } else {
        let first = approving.await.unwrap();
        assert!(kept(&first), "the call learns its outcome is kept: {}", first.body);
        // A resend meanwhile waits for the kept outcome (a lease's time at most).
        let resend = tokio::spawn({
            let answered = answered.clone();
            async move { call(&client, 3, &answered).await }
        });
        tokio::time::sleep(outage.saturating_sub(stopped.elapsed())).await;
        assert!(redis.run(), "redis-server restarts");
        let mut reply = resend.await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while kept(&reply) {
            assert!(Instant::now() < deadline, "the kept outcome was never saved: {}", reply.body);
            reply = call(server, 4, answered).await;
        }
        reply
    };
    assert_eq!(reply.body["result"]["isError"], false, "the upstream's result: {}", reply.body);
    let again = call(server, 5, answered).await;
    assert_eq!(again.body["result"], reply.body["result"], "resends replay the stored result");
    assert_eq!(executions(server).await, 1, "the upstream ran the call once");
    reply.text()
}

/// Every audit entry of `thread`'s call reaches `/api/audit`: asked, answered, executed,
/// finished (written while Redis was down, stored once it was back).
async fn audited(server: &Server, thread: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let events = audit_of(server, thread).await;
        let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
        if ["asked", "answered", "executed", "finished"].iter().all(|e| names.contains(e)) {
            let finished = events.iter().find(|e| e["event"] == "finished").unwrap();
            assert_eq!(finished["is_error"], false, "{finished}");
            return;
        }
        assert!(Instant::now() < deadline, "the call's audit entries are not all stored: {names:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const REVIEWED: &str = "[[policy]]\ntools = [\"db.slow_*\"]\naction = \"review\"\n";

async fn an_approved_call_survives_an_outage_of(outage: Duration) {
    let Some(mut redis) = Redis::start() else { return };
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let setup = Setup::new(&upstream, REVIEWED);
    let server = setup.serve(&redis).await;
    let params = json!({"name": "db.slow_drop", "arguments": {"partition": "p7", "seconds": 1}});
    let (answered, thread) = paused(&server, &params, json!({"decision": "approve"})).await;
    let result = through_an_outage(&server, &mut redis, &answered, outage).await;
    assert_eq!(result, "dropped p7 slowly");
    audited(&server, &thread).await;
    let bearer = format!("Bearer {TOKEN}");
    let headers = [("authorization", bearer.as_str())];
    let (_, _, scrape) = server.raw(http::Method::GET, "/metrics", &headers, Default::default()).await;
    assert!(scrape.contains("\nhitl_unsaved_outcomes 0\n"), "kept, then saved: {scrape}");
}

#[tokio::test]
async fn an_approved_call_caught_by_a_2_s_store_outage_answers_its_result_and_runs_once() {
    an_approved_call_survives_an_outage_of(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn an_approved_call_caught_by_a_store_outage_longer_than_the_lease_answers_its_result_and_runs_once() {
    an_approved_call_survives_an_outage_of(Duration::from_secs(45)).await;
}

#[tokio::test]
async fn a_declared_agents_round_caught_by_a_store_outage_answers_its_result_and_runs_once() {
    let Some(mut redis) = Redis::start() else { return };
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let agent = r#"
[[agent]]
name = "slow_cleanup"
kind = "workflow"
input_schema = { type = "object", properties = { partition = { type = "string" } }, required = ["partition"] }
steps = [
  { ask = { message = "Drop {partition} slowly?", key = "go" } },
  { call = "db.slow_drop", args = { partition = "{partition}", seconds = 1 } },
]
"#;
    let setup = Setup::new(&upstream, agent);
    let server = setup.serve(&redis).await;
    let params = json!({"name": "slow_cleanup", "arguments": {"partition": "p8"}});
    let (answered, thread) = paused(&server, &params, json!({"response": "yes"})).await;
    let result = through_an_outage(&server, &mut redis, &answered, Duration::from_secs(2)).await;
    assert_eq!(result, "dropped p8 slowly");
    audited(&server, &thread).await;
}
