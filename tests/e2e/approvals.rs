//! Approvals by someone else, over HTTP against the hitl program and a real upstream
//! (the Python SDK's): the URL question the caller gets, the approvals API (listing,
//! decisions, events), the two-person rule, webhooks (signature and retries checked by a
//! local receiver), the audit file, the secret page, and the pages' own defences.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::auth::{jwt_fixture, request_as, token};
use crate::harness::{Client, Paused, Reply, Server, TEST_SECRET};
use crate::upstream::PythonUpstream;

/// The webhook secret the tests' servers sign with.
const HOOK_SECRET: &str = "hook-secret-for-tests";

/// A client that can answer forms and be sent to pages.
pub(crate) fn url_client() -> Value {
    json!({"elicitation": {"form": {}, "url": {}}})
}

/// One request the webhook receiver got.
#[derive(Debug, Clone)]
pub(crate) struct Hook {
    pub(crate) headers: http::HeaderMap,
    pub(crate) body: Value,
    pub(crate) raw: Bytes,
}

/// A local webhook receiver: answers 500 to the first `failures` deliveries of each
/// event of each approval (servers sharing a store may notify of others' approvals
/// too), then 200, and keeps every request.
pub(crate) struct Receiver {
    pub(crate) url: String,
    got: Arc<Mutex<Vec<Hook>>>,
}

impl Receiver {
    pub(crate) async fn start(failures: usize) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let got: Arc<Mutex<Vec<Hook>>> = Arc::default();
        let kept = got.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let kept = kept.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                        let kept = kept.clone();
                        async move {
                            let (parts, body) = request.into_parts();
                            let raw = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
                            let n = {
                                let mut kept = kept.lock().unwrap();
                                let same = |h: &Hook| {
                                    h.body["event"] == body["event"]
                                        && h.body["approval"]["id"] == body["approval"]["id"]
                                };
                                let n = kept.iter().filter(|h| same(h)).count() + 1;
                                kept.push(Hook { headers: parts.headers, body, raw });
                                n
                            };
                            let status = if n <= failures { 500 } else { 200 };
                            Ok::<_, std::convert::Infallible>(
                                http::Response::builder().status(status).body(Full::new(Bytes::new())).unwrap(),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { url, got }
    }

    /// The requests so far.
    pub(crate) fn got(&self) -> Vec<Hook> {
        self.got.lock().unwrap().clone()
    }

    /// Waits until a request satisfies `matches`.
    pub(crate) async fn wait_for(&self, what: &str, matches: impl Fn(&Hook) -> bool) -> Hook {
        let matches = &matches;
        let probe = move || async move { self.got().into_iter().find(|h| matches(h)) };
        eventually(|| format!("no webhook {what}: got {:?}", self.got()), probe).await
    }
}

/// The shared audit trail since `since` (ms), read a page at a time (`GET /api/audit`
/// returns at most 500, and a `next_cursor` while more remain), as `token` sees it.
pub(crate) async fn trail(server: &Server, token: &str, since: u64) -> Vec<Value> {
    let (mut all, mut path) = (Vec::new(), format!("/api/audit?since={since}"));
    loop {
        let page = api(server, token, http::Method::GET, &path, None).await;
        assert_eq!(page.status, 200, "{}", page.body);
        all.extend(page.body["events"].as_array().cloned().unwrap_or_default());
        match page.body["next_cursor"].as_str() {
            Some(cursor) => path = format!("/api/audit?cursor={cursor}"),
            None => return all,
        }
    }
}

/// What `probe` finds, asked every 20 ms for at most 20 s; past that, the test fails
/// with `why`.
pub(crate) async fn eventually<T, F>(why: impl Fn() -> String, probe: impl Fn() -> F) -> T
where
    F: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", why());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// `sha256=<hex>` of `<X-Hitl-Timestamp>.<body>` of `hook` under the test webhook
/// secret, computed by `openssl`.
pub(crate) fn expected_signature(hook: &Hook) -> String {
    let timestamp = hook.headers["x-hitl-timestamp"].to_str().expect("a timestamp");
    let body = [format!("{timestamp}.").as_bytes(), &hook.raw].concat();
    signature_of(&body)
}

/// `sha256=<hex>` of `body` under the test webhook secret, computed by `openssl`.
pub(crate) fn signature_of(body: &[u8]) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new("openssl")
        .args(["dgst", "-sha256", "-hmac", HOOK_SECRET, "-r"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("openssl runs");
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    format!("sha256={}", String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap())
}

/// A folder with the JWT keys and a config, removed on drop.
pub(crate) struct Folder(pub(crate) std::path::PathBuf);

impl Folder {
    pub(crate) fn new(config: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let folder = std::env::temp_dir().join(format!("hitl-e2e-approvals-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::copy(jwt_fixture("jwks.json"), folder.join("jwks.json")).unwrap();
        std::fs::write(folder.join("hitl.toml"), config).unwrap();
        Self(folder)
    }

    pub(crate) fn config(&self) -> String {
        self.0.join("hitl.toml").display().to_string()
    }

    /// The hitl program on this config, with the webhook secret in its environment.
    pub(crate) async fn serve(&self, extra: &[&str]) -> Server {
        self.serve_with_env(extra, &[]).await
    }

    /// [`Folder::serve`], with `env` in the program's environment too.
    pub(crate) async fn serve_with_env(&self, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut command = std::process::Command::new(Server::program());
        command.arg("serve").args(["--listen", "127.0.0.1:0", "--config", &self.config()]).args(extra);
        if let Ok(store) = std::env::var("HITL_E2E_STORE")
            && !extra.contains(&"--store")
        {
            command.args(["--store", &store]);
        }
        command.stderr(std::process::Stdio::inherit());
        let mut all = vec![("HITL_SECRET", TEST_SECRET), ("HITL_WEBHOOK_SECRET", HOOK_SECRET)];
        all.extend_from_slice(env);
        let server = Server::spawn_command_with_env(command, &all);
        server.wait_healthy().await;
        server
    }

    pub(crate) fn audit(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.0.join("audit.jsonl")).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).expect("each audit line is JSON")).collect()
    }

    /// Waits until the audit file has an entry satisfying `matches`.
    pub(crate) async fn wait_audit(&self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        let matches = &matches;
        let probe = move || async move { self.audit().into_iter().find(|e| matches(e)) };
        eventually(|| format!("no audit entry {what}: {:#?}", self.audit()), probe).await
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A config with JWT sign-in (the test keys of `jwks.json`) and the `db` upstream at
/// `upstream`, then `rest`.
pub(crate) fn signed_in(upstream: &str, rest: &str) -> String {
    format!(
        r#"[auth.jwt]
issuer = "https://idp.example"
audience = "hitl"
jwks_file = "jwks.json"

[[upstream]]
name = "db"
url = "{upstream}"

{rest}"#
    )
}

/// The config: JWT sign-in, `db` upstream, drops approved by group:sre, a webhook, an
/// audit file.
pub(crate) fn config(upstream: &str, hook: &str) -> String {
    signed_in(
        upstream,
        &format!(
            r#"[[policy]]
tools = ["db.drop_*"]
action = "review"
approvers = ["group:sre"]

[[notify]]
url = "{hook}"
secret_env = "HITL_WEBHOOK_SECRET"

[audit]
file = "audit.jsonl"

[admin]
principals = ["user:ops"]
"#
        ),
    )
}

/// The hitl program in front of the test upstream, drops approved by group:sre, with a
/// webhook receiver failing its first `failures` deliveries.
struct Gated {
    upstream: PythonUpstream,
    hook: Receiver,
    folder: Folder,
    server: Server,
}

impl Gated {
    async fn start(failures: usize) -> Option<Self> {
        let upstream = PythonUpstream::start(&[])?;
        let hook = Receiver::start(failures).await;
        let folder = Folder::new(&config(&upstream.url, &hook.url));
        let server = folder.serve(&[]).await;
        Some(Self { upstream, hook, folder, server })
    }
}

pub(crate) struct People {
    /// The caller, herself in group:sre (so the two-person rule is what stops her).
    pub(crate) alice: String,
    /// An approver.
    pub(crate) bob: String,
    /// Neither.
    pub(crate) carol: String,
}

pub(crate) fn people() -> People {
    People {
        alice: token("rsa-1", json!({"sub": "alice", "groups": ["sre"]})),
        bob: token("ec-1", json!({"sub": "bob", "groups": ["sre"]})),
        carol: token("hs-1", json!({"sub": "carol", "groups": ["dev"]})),
    }
}

/// An API request with `token`.
pub(crate) async fn api(server: &Server, token: &str, method: http::Method, path: &str, body: Option<Value>) -> Reply {
    let bearer = format!("Bearer {token}");
    let headers = [("authorization", bearer.as_str()), ("content-type", "application/json")];
    let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
    server.request(method, path, &headers, body).await.expect("the API answers")
}

/// `who` decides approval `id` over the API.
pub(crate) async fn decide(server: &Server, who: &str, id: &str, decision: Value) -> Reply {
    api(server, who, http::Method::POST, &format!("/api/approvals/{id}/decision"), Some(decision)).await
}

/// The drop of `args` by the holder of `caller`, paused at its approval, and the URL
/// of the approval's page.
pub(crate) async fn ask(server: &Server, caller: &str, args: &Value) -> (Paused, String) {
    let paused = server.pause_as(caller, url_client(), "db.drop_partition", args.clone()).await;
    assert_eq!(paused.question()["params"]["mode"], "url", "{}", paused.question());
    let url = paused.question()["params"]["url"].as_str().unwrap().to_owned();
    (paused, url)
}

pub(crate) async fn executions(server: &Server, caller: &str) -> u64 {
    let reply = request_as(
        server,
        Some(caller),
        url_client(),
        9,
        "tools/call",
        json!({"name": "db.executions", "arguments": {"tool": "drop_partition"}}),
    )
    .await;
    reply.text().parse().unwrap_or_else(|_| panic!("a count: {}", reply.body))
}

#[tokio::test]
async fn an_approver_decides_on_the_api_and_the_callers_retry_runs_the_call_once() {
    let since = now_ms();
    let Some(Gated { upstream: _upstream, hook, folder, server }) = Gated::start(1).await else { return };
    let p = people();
    let args = json!({"partition": "p1", "database": "orders"});

    let (paused, url) = ask(&server, &p.alice, &args).await;
    let (key, question) = (paused.key(), paused.question());
    assert_eq!(question["params"]["message"], "Waiting for approval by group:sre to run db.drop_partition");
    let id = url.strip_prefix(&format!("http://{}/approvals/", server.addr)).expect("hitl's page").to_owned();

    // Before the decision: the same URL question; the caller cannot answer it herself.
    let look = json!({"action": "accept"});
    let early = paused.answer(&server, look.clone()).await;
    assert_eq!(early.body["result"]["inputRequests"][&key]["params"]["url"], url.as_str(), "{}", early.body);
    assert_eq!(early.body["result"]["requestState"], paused.state());
    let forged = json!({"action": "accept", "content": {"decision": "approve"}});
    let refused = paused.answer(&server, forged).await;
    assert_eq!(refused.body["error"]["code"], -32602, "{}", refused.body);
    assert_eq!(refused.body["error"]["message"], "This question is answered on its page, not by the client");

    // The listing: bob sees it with its arguments, carol does not.
    // (The ledger lists in the background: a moment after the pause.)
    let (server_ref, bob, id_ref) = (&server, &p.bob, &id);
    let listed = move || async move {
        let listed = api(server_ref, bob, http::Method::GET, "/api/approvals?status=pending", None).await;
        assert_eq!(listed.status, 200, "{}", listed.body);
        listed.body["approvals"].as_array().unwrap().iter().find(|a| a["id"] == id_ref.as_str()).cloned()
    };
    let entry = eventually(|| format!("{id} never listed"), listed).await;
    assert_eq!((entry["tool"].clone(), entry["arguments"].clone()), (json!("db.drop_partition"), args.clone()));
    assert_eq!((entry["caller"].clone(), entry["status"].clone()), (json!("user:alice"), json!("pending")));
    assert_eq!(entry["link"], url.as_str());
    let hidden = api(&server, &p.carol, http::Method::GET, "/api/approvals", None).await;
    assert!(!hidden.body.to_string().contains(&id), "carol sees none: {}", hidden.body);
    let one = api(&server, &p.carol, http::Method::GET, &format!("/api/approvals/{id}"), None).await;
    assert_eq!(one.status, 404);
    assert_eq!(api(&server, "nonsense", http::Method::GET, "/api/approvals", None).await.status, 401);

    // Refused decisions: the caller herself, someone not named, a bad edit.
    let decision_path = format!("/api/approvals/{id}/decision");
    let own = decide(&server, &p.alice, &id, json!({"decision": "approve"})).await;
    assert_eq!(own.status, 403, "{}", own.body);
    assert!(own.body["error"].as_str().unwrap().contains("two-person rule"), "{}", own.body);
    let outsider = decide(&server, &p.carol, &id, json!({"decision": "approve"})).await;
    assert_eq!(outsider.status, 403, "{}", outsider.body);
    let bad = json!({"decision": "edit", "args": {"partition": 7, "database": "orders"}});
    let bad = decide(&server, &p.bob, &id, bad).await;
    assert_eq!(bad.status, 422, "{}", bad.body);
    let not_json = server
        .raw(http::Method::POST, &decision_path, &[("authorization", &format!("Bearer {}", p.bob))], Bytes::from("{"))
        .await;
    assert_eq!(not_json.0, 400, "{}", not_json.2);
    assert_eq!(executions(&server, &p.alice).await, 0, "nothing ran before the decision");

    // /metrics: the approval waits; none decided yet; the upstream not called.
    // With sign-in on, /metrics is for admins.
    let ops = format!("Bearer {}", token("hs-1", json!({"sub": "ops"})));
    let scrape =
        || async { server.raw(http::Method::GET, "/metrics", &[("authorization", &ops)], Bytes::new()).await.2 };
    let sample = |text: &str, series: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
            .map_or(0.0, |v| v.trim().parse::<f64>().unwrap())
    };
    let (approved_series, called_series) = (
        "hitl_approvals_decided_total{status=\"approved\"}",
        "hitl_upstream_call_seconds_count{upstream=\"db\",outcome=\"ok\"}",
    );
    let before = scrape().await;
    assert!(sample(&before, "hitl_approvals_pending") >= 1.0, "{before}");
    assert_eq!(sample(&before, approved_series), 0.0);

    // Bob approves, once.
    let approved = decide(&server, &p.bob, &id, json!({"decision": "approve"})).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert_eq!(
        (approved.body["status"].clone(), approved.body["decided_by"].clone()),
        (json!("approved"), json!("user:bob"))
    );
    let again = decide(&server, &p.bob, &id, json!({"decision": "reject"})).await;
    assert_eq!(again.status, 409, "{}", again.body);

    let done = paused.answer(&server, look.clone()).await;
    assert_ne!(done.body["result"]["isError"], json!(true), "{}", done.body);
    assert!(done.text().contains("p1"), "{}", done.body);
    let resent = paused.answer(&server, look).await;
    assert_eq!(resent.body["result"], done.body["result"], "a resend gets the same result");
    assert_eq!(executions(&server, &p.alice).await, 1, "run exactly once");
    let after = scrape().await;
    assert_eq!(sample(&after, approved_series), 1.0, "{after}");
    assert!(sample(&after, called_series) > sample(&before, called_series), "the upstream call is timed: {after}");

    // The listing and the webhook know; the first delivery failed and was retried.
    let decided = api(&server, &p.bob, http::Method::GET, &format!("/api/approvals/{id}"), None).await;
    assert_eq!(decided.body["status"], "approved", "{}", decided.body);
    let ours = |h: &Hook, event: &str| h.body["event"] == event && h.body["approval"]["id"] == id.as_str();
    let pending = hook.wait_for("pending", |h| ours(h, "approval.pending")).await;
    assert_eq!(pending.body["link"], url.as_str());
    let decided = hook.wait_for("decided", |h| ours(h, "approval.decided")).await;
    for h in [&pending, &decided] {
        assert_eq!(h.headers["x-hitl-signature"].to_str().unwrap(), expected_signature(h), "signed");
    }
    let is_retry = |h: &Hook| ours(h, "approval.pending") && h.headers["x-hitl-delivery-attempt"] == "2";
    hook.wait_for("retried", is_retry).await;
    let attempts: Vec<String> = hook
        .got()
        .iter()
        .filter(|h| ours(h, "approval.pending"))
        .map(|h| h.headers["x-hitl-delivery-attempt"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(attempts, ["1", "2"], "the failed delivery was tried again");

    // The audit file has the whole story.
    for event in ["asked", "refused", "approved", "answered", "executed", "finished"] {
        folder.wait_audit(event, |e| e["event"] == event).await;
    }
    let approved = folder.wait_audit("approved", |e| e["event"] == "approved").await;
    assert_eq!((approved["approver"].clone(), approved["principal"].clone()), (json!("user:bob"), json!("user:alice")));
    assert_eq!(approved["arguments"], args);
    assert!(approved["at"].as_str().unwrap().ends_with('Z') && approved["args_digest"].is_string(), "{approved}");
    let refusals: Vec<String> = folder
        .audit()
        .into_iter()
        .filter(|e| e["event"] == "refused")
        .map(|e| e["reason"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(refusals.len(), 4, "the client's answer, the caller, the outsider and the bad edit: {refusals:?}");
    assert_eq!(refusals[0], "This question is answered on its page, not by the client");
    let shared = trail(&server, &p.bob, since).await;
    let events: Vec<&str> =
        shared.iter().filter(|e| e["thread"] == approved["thread"]).filter_map(|e| e["event"].as_str()).collect();
    assert!(events.contains(&"approved") && events.contains(&"executed"), "{events:?}");
    assert_eq!(api(&server, &p.carol, http::Method::GET, "/api/audit", None).await.status, 403);
}

#[tokio::test]
async fn edits_rejections_and_responses_reach_the_caller() {
    let Some(Gated { upstream: _upstream, hook: _hook, folder, server }) = Gated::start(0).await else { return };
    let p = people();
    let cases = [
        (json!({"decision": "edit", "args": {"partition": "p9", "database": "orders"}}), "edited"),
        (json!({"decision": "reject", "message": "not during the freeze"}), "rejected"),
        (json!({"decision": "respond", "message": "p2 was dropped yesterday"}), "responded"),
    ];
    for (n, (decision, status)) in cases.into_iter().enumerate() {
        let args = json!({"partition": format!("p{}", n + 2), "database": "orders"});
        let (paused, url) = ask(&server, &p.alice, &args).await;
        let id = url.rsplit('/').next().unwrap();
        let decided = decide(&server, &p.bob, id, decision).await;
        assert_eq!(decided.body["status"], status, "{}", decided.body);
        let done = paused.answer(&server, json!({"action": "accept"})).await;
        let result = &done.body["result"];
        match status {
            "edited" => assert!(done.text().contains("p9") && result["isError"] != true, "{}", done.body),
            "rejected" => {
                assert_eq!((done.text(), result["isError"].clone()), ("not during the freeze".into(), json!(true)))
            }
            _ => assert_eq!(done.text(), "p2 was dropped yesterday", "{}", done.body),
        }
    }
    let edited = folder.wait_audit("edited", |e| e["event"] == "edited").await;
    assert_eq!(edited["diff"], json!({"partition": {"from": "p2", "to": "p9"}}), "{edited}");
    assert_eq!(executions(&server, &p.alice).await, 1, "only the edit ran");
}

/// Reads SSE events from `path` until `until` says stop: the events' data, in order.
async fn events_until(
    server: &Client,
    token: &str,
    mut until: impl FnMut(&[Value]) -> bool,
    started: tokio::sync::oneshot::Sender<()>,
) -> Vec<Value> {
    let response = server.approval_events(token).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    let _ = started.send(());
    let (mut seen, mut buffer) = (Vec::new(), String::new());
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.unwrap().into_data() else { continue };
        buffer.push_str(&String::from_utf8_lossy(&data));
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let name = event.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or_default().to_owned();
            if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) {
                seen.push(json!({"event": name, "approval": serde_json::from_str::<Value>(data).unwrap()}));
            }
        }
        if until(&seen) {
            break;
        }
    }
    seen
}

#[tokio::test]
async fn the_events_stream_shows_pending_and_decided_approvals_to_approvers() {
    let Some(Gated { upstream: _upstream, hook: _hook, folder: _folder, server }) = Gated::start(0).await else {
        return;
    };
    let p = people();
    let (started, ready) = tokio::sync::oneshot::channel();
    let bob = p.bob.clone();
    let client = *server;
    let watcher = tokio::spawn(async move {
        events_until(&client, &bob, |seen| seen.iter().any(|e| e["event"] == "approval.decided"), started).await
    });
    ready.await.unwrap();
    let args = json!({"partition": "p5", "database": "orders"});
    let (_, url) = ask(&server, &p.alice, &args).await;
    let id = url.rsplit('/').next().unwrap().to_owned();
    let decided = decide(&server, &p.bob, &id, json!({"decision": "reject"})).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    let seen = tokio::time::timeout(Duration::from_secs(20), watcher).await.expect("the events arrive").unwrap();
    let mine: Vec<(&str, &str)> = seen
        .iter()
        .filter(|e| e["approval"]["id"] == id.as_str())
        .map(|e| (e["event"].as_str().unwrap(), e["approval"]["status"].as_str().unwrap()))
        .collect();
    assert_eq!(mine, [("approval.pending", "pending"), ("approval.decided", "rejected")]);
}

/// The CSRF cookie a page set, and the token in its form.
pub(crate) fn csrf_of(reply_headers: &http::HeaderMap, html: &str) -> (String, String) {
    let cookie = reply_headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("hitl_csrf="))
        .map(|c| c.split(';').next().unwrap().to_owned())
        .expect("a CSRF cookie");
    let token =
        html.split("name=\"csrf\" value=\"").nth(1).and_then(|rest| rest.split('"').next()).expect("a CSRF field");
    (cookie, token.to_owned())
}

#[tokio::test]
async fn a_secret_typed_on_its_page_reaches_the_agent_and_nothing_else() {
    let hook = Receiver::start(0).await;
    let folder = Folder::new(&format!("[[notify]]\nurl = \"{}\"\n\n[audit]\nfile = \"audit.jsonl\"\n", hook.url));
    let mut command = std::process::Command::new(Server::program());
    command.arg("serve").args(["--listen", "127.0.0.1:0", "--config", &folder.config()]);
    let log = folder.0.join("server.log");
    command.stderr(std::fs::File::create(&log).unwrap()).env("RUST_LOG", "debug");
    let server = Server::spawn_command_with_env(command, &[("HITL_SECRET", TEST_SECRET), ("RUST_LOG", "debug")]);
    server.wait_healthy().await;

    let asked = server.modern(1, "tools/call", json!({"name": "connect_github", "arguments": {}}), url_client()).await;
    let (key, question) = asked.body["result"]["inputRequests"].as_object().unwrap().iter().next().unwrap();
    let url = question["params"]["url"].as_str().unwrap();
    let path = url.strip_prefix(&format!("http://{}", server.addr)).expect("hitl's page").to_owned();
    assert!(path.starts_with("/secrets/"), "{path}");
    let state = asked.body["result"]["requestState"].clone();

    let (status, headers, html) = server.raw(http::Method::GET, &path, &[], Bytes::new()).await;
    assert_eq!(status, 200, "{html}");
    assert_eq!(headers["x-frame-options"], "DENY");
    assert!(headers["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
    let (cookie, csrf) = csrf_of(&headers, &html);
    let form_headers = [("content-type", "application/x-www-form-urlencoded"), ("cookie", cookie.as_str())];
    let secret = "ghp_e2eS3cr3tT0ken";
    // Without the CSRF token the form is refused.
    let forged = server.raw(http::Method::POST, &path, &form_headers, Bytes::from(format!("value={secret}"))).await;
    assert_eq!(forged.0, 403, "{}", forged.2);
    let (status, _, saved) =
        server.raw(http::Method::POST, &path, &form_headers, Bytes::from(format!("csrf={csrf}&value={secret}"))).await;
    assert_eq!(status, 200, "{saved}");
    assert!(saved.contains("Saved"), "{saved}");

    let params = json!({"name": "connect_github", "arguments": {}, "requestState": state,
                        "inputResponses": { key.as_str(): {"action": "accept"} }});
    let done = server.modern(2, "tools/call", params, url_client()).await;
    let sha = crate::auth::sha256_hex(secret);
    assert_eq!(done.body["result"]["structuredContent"]["token_sha256"], sha.as_str(), "{}", done.body);
    folder.wait_audit("the secret page's answer", |e| e["event"] == "answered" && e["page"]["type"] == "secret").await;
    drop(server);
    let everything = format!(
        "{}{}{}{}",
        asked.body,
        done.body,
        std::fs::read_to_string(folder.0.join("audit.jsonl")).unwrap(),
        std::fs::read_to_string(&log).unwrap()
    );
    assert!(!everything.contains(secret), "the secret appears nowhere but in the agent");
}

#[tokio::test]
async fn pages_need_a_sign_in_and_refuse_forged_forms() {
    let Some(Gated { upstream: _upstream, hook: _hook, folder: _folder, server }) = Gated::start(0).await else {
        return;
    };
    let p = people();
    let args = json!({"partition": "p7", "database": "orders"});
    let (paused, url) = ask(&server, &p.alice, &args).await;
    let path = url.strip_prefix(&format!("http://{}", server.addr)).unwrap().to_owned();

    // Not signed in: to the login form, which comes back here.
    let (status, headers, _) = server.raw(http::Method::GET, &path, &[], Bytes::new()).await;
    assert_eq!(status, 303);
    let login = headers["location"].to_str().unwrap().to_owned();
    assert!(login.starts_with("/login?next=%2Fapprovals%2F"), "{login}");
    let (_, headers, html) = server.raw(http::Method::GET, &login, &[], Bytes::new()).await;
    assert!(html.contains("<label for=\"token\">"), "{html}");
    let (csrf_cookie, csrf) = csrf_of(&headers, &html);
    let form = |cookie: &str| {
        vec![("content-type", "application/x-www-form-urlencoded".to_owned()), ("cookie", cookie.to_owned())]
    };
    let post = |cookie: String, body: String, at: String| {
        let server = *server;
        async move {
            let headers = form(&cookie);
            let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            server.raw(http::Method::POST, &at, &headers, Bytes::from(body)).await
        }
    };
    let wrong = post(csrf_cookie.clone(), format!("csrf={csrf}&token=nope&next={}", &path), "/login".into()).await;
    assert_eq!(wrong.0, 401);
    let (status, headers, _) =
        post(csrf_cookie.clone(), format!("csrf={csrf}&token={}&next={}", p.bob, path), "/login".into()).await;
    assert_eq!((status, headers["location"].to_str().unwrap()), (303, path.as_str()));
    let session = headers["set-cookie"].to_str().unwrap();
    assert!(session.contains("HttpOnly") && session.contains("SameSite=Strict"), "{session}");
    let cookies = format!("{csrf_cookie}; {}", session.split(';').next().unwrap());

    let open =
        post(csrf_cookie.clone(), format!("csrf={csrf}&token={}&next=//evil.example", p.bob), "/login".into()).await;
    assert_eq!(open.1["location"], "/approvals", "no open redirect");

    // Someone else signed in sees nothing of it; the caller sees it, without the forms.
    let signed_in = |token: String| {
        let post = &post;
        let (csrf_cookie, csrf, path) = (csrf_cookie.clone(), csrf.clone(), path.clone());
        async move {
            let (_, headers, _) =
                post(csrf_cookie.clone(), format!("csrf={csrf}&token={token}&next={path}"), "/login".into()).await;
            format!("{csrf_cookie}; {}", headers["set-cookie"].to_str().unwrap().split(';').next().unwrap())
        }
    };
    let carol = signed_in(p.carol.clone()).await;
    let (status, _, html) = server.raw(http::Method::GET, &path, &[("cookie", carol.as_str())], Bytes::new()).await;
    assert_eq!(status, 403, "{html}");
    assert!(!html.contains("orders"), "no arguments shown: {html}");
    let alice = signed_in(p.alice.clone()).await;
    let (status, _, html) = server.raw(http::Method::GET, &path, &[("cookie", alice.as_str())], Bytes::new()).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("two-person rule") && !html.contains("id=\"approve\""), "{html}");

    let (status, _, html) = server.raw(http::Method::GET, &path, &[("cookie", cookies.as_str())], Bytes::new()).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("db.drop_partition") && html.contains("id=\"approve\""), "{html}");
    let forged = post(cookies.clone(), "decision=approve".into(), path.clone()).await;
    assert_eq!(forged.0, 403, "no CSRF token, no decision");
    // A form's token belongs to its session: the sign-in form's is not bob's.
    let elsewhere = post(cookies.clone(), format!("csrf={csrf}&decision=approve"), path.clone()).await;
    assert_eq!(elsewhere.0, 403, "a token from before the sign-in");
    let bobs = html.split("name=\"csrf\" value=\"").nth(1).and_then(|r| r.split('"').next()).unwrap().to_owned();
    let approved = post(cookies.clone(), format!("csrf={bobs}&decision=approve"), path.clone()).await;
    assert_eq!(approved.0, 303, "{}", approved.2);
    let (_, _, html) = server.raw(http::Method::GET, &path, &[("cookie", cookies.as_str())], Bytes::new()).await;
    assert!(html.contains("approved") && !html.contains("id=\"approve\""), "{html}");
    let done = paused.answer(&server, json!({"action": "accept"})).await;
    assert!(done.text().contains("p7"), "{}", done.body);
}

#[tokio::test]
async fn approvers_need_sign_in_and_bad_notify_settings_are_refused() {
    let check = |config: &str, env: &[(&str, &str)]| {
        let folder = Folder::new(config);
        let mut command = std::process::Command::new(Server::program());
        command.args(["check", "--config", &folder.config()]).env_remove("HITL_WEBHOOK_SECRET");
        for (k, v) in env {
            command.env(k, v);
        }
        let out = command.output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let approvers = "[[policy]]\ntools = [\"deploy_*\"]\naction = \"review\"\napprovers = [\"group:sre\"]\n";
    let (ok, err) = check(approvers, &[]);
    assert!(!ok && err.contains("names approvers, who sign in to decide"), "{err}");
    let (ok, err) = check(&approvers.replace("review", "allow"), &[]);
    assert!(!ok && err.contains("policy[0].approvers: only a policy with action = \"review\""), "{err}");
    let notify = "[[notify]]\nurl = \"https://hooks.example/a\"\nsecret_env = \"HITL_WEBHOOK_SECRET\"\n";
    let (ok, err) = check(notify, &[]);
    assert!(
        !ok && err.contains("notify[0].secret_env: the environment variable HITL_WEBHOOK_SECRET is not set"),
        "{err}"
    );
    assert!(check(notify, &[("HITL_WEBHOOK_SECRET", "x")]).0);
    let (ok, err) = check("[[notify]]\nurl = \"ftp://x\"\n", &[]);
    assert!(!ok && err.contains("notify[0].url"), "{err}");
    let (ok, err) = check("[[notify]]\nurl = \"https://x\"\nformat = \"teams\"\n", &[]);
    assert!(!ok && err.contains("notify[0].format"), "{err}");
    let (ok, err) = check("[audit]\nfiles = \"a\"\n", &[]);
    assert!(!ok && err.contains("audit.files"), "{err}");
}

/// A folder with a tokens file (alice, bob) and `config`.
pub(crate) fn tokens_folder(config: &str) -> Folder {
    let folder = Folder::new(config);
    std::fs::write(folder.0.join("tokens.txt"), "alice tok-alice\nbob tok-bob\n").unwrap();
    folder
}

pub(crate) const AGENT_GATE: &str = "[auth]\ntokens_file = \"tokens.txt\"\n\n[[policy]]\ntools = [\"greeter\"]\naction = \"review\"\n\
                          approvers = [\"user:bob\"]\n\n[audit]\nfile = \"audit.jsonl\"\n";

#[tokio::test]
async fn an_agent_starts_only_once_its_approver_said_yes() {
    let folder = tokens_folder(AGENT_GATE);
    let server = folder.serve(&[]).await;
    let call = |n: u64, extra: Value| {
        let mut params = json!({"name": "greeter", "arguments": {}});
        params.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
        let server = *server;
        async move { request_as_client(&server, "tok-alice", n, params).await }
    };
    let asked = call(1, json!({})).await;
    let (key, question) = asked.body["result"]["inputRequests"].as_object().unwrap().iter().next().unwrap();
    assert_eq!(question["params"]["message"], "Waiting for approval by user:bob to run greeter", "{}", asked.body);
    let id = question["params"]["url"].as_str().unwrap().rsplit('/').next().unwrap().to_owned();
    let state = asked.body["result"]["requestState"].clone();
    let decided = decide(&server, "tok-bob", &id, json!({"decision": "approve"})).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    // Approved: the agent starts, and asks its own question.
    let started =
        call(2, json!({"requestState": state, "inputResponses": { key.as_str(): {"action": "accept"} }})).await;
    let result = &started.body["result"];
    assert_eq!(result["inputRequests"]["user_name"]["params"]["message"], "What is your name?", "{}", started.body);
    let answer = json!({"requestState": result["requestState"],
                        "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Ada"}}}});
    let done = call(3, answer).await;
    assert_eq!(done.body["result"]["structuredContent"]["greeting"], "Hello, Ada!", "{}", done.body);
}

/// A `tools/call` of `params` by the holder of `token`, from a client with URL mode.
pub(crate) async fn request_as_client(server: &Client, token: &str, id: u64, params: Value) -> Reply {
    server.modern_as(Some(token), id, "tools/call", params, url_client()).await
}

#[tokio::test]
async fn an_approval_no_one_decides_expires_and_a_stray_sign_in_callback_is_refused() {
    let folder = tokens_folder(AGENT_GATE);
    let server = folder.serve(&["--default-ttl", "1"]).await;
    let since = now_ms();
    let asked = request_as_client(&server, "tok-alice", 1, json!({"name": "greeter", "arguments": {}})).await;
    let url = asked.body["result"]["inputRequests"].as_object().unwrap().values().next().unwrap()["params"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let id = url.rsplit('/').next().unwrap().to_owned();
    // Whichever server sharing the store sweeps first writes it: read the shared trail.
    let (server_ref, id_ref) = (&server, &id);
    let expired = move || async move {
        let events = trail(server_ref, "tok-bob", since).await;
        events.into_iter().find(|e| e["event"] == "expired" && e["approval"] == id_ref.as_str())
    };
    let expired = eventually(|| format!("{id} never expired"), expired).await;
    assert_eq!(expired["principal"], "user:alice");
    let listed = api(&server, "tok-bob", http::Method::GET, &format!("/api/approvals/{id}"), None).await;
    assert_eq!(listed.body["status"], "expired", "{}", listed.body);
    let late = decide(&server, "tok-bob", &id, json!({"decision": "approve"})).await;
    assert_eq!(late.status, 409, "{}", late.body);

    let (status, headers, html) =
        server.raw(http::Method::GET, "/oauth/callback?state=forged&code=abc", &[], Bytes::new()).await;
    assert_eq!(status, 400, "{html}");
    assert!(html.contains("Sign-in not completed"), "{html}");
    assert_eq!(headers["x-frame-options"], "DENY");
}

#[tokio::test]
async fn a_notifications_single_use_link_signs_its_approver_in_to_that_approval_once() {
    let hook = Receiver::start(0).await;
    let folder = tokens_folder(&format!("{AGENT_GATE}\n[[notify]]\nurl = \"{}\"\nsingle_use_links = true\n", hook.url));
    let server = folder.serve(&[]).await;
    let asked = request_as_client(&server, "tok-alice", 1, json!({"name": "greeter", "arguments": {}})).await;
    let (key, question) = asked.body["result"]["inputRequests"].as_object().unwrap().iter().next().unwrap();
    let url = question["params"]["url"].as_str().unwrap().to_owned();
    let path = url.strip_prefix(&format!("http://{}", server.addr)).unwrap().to_owned();
    let pending = hook.wait_for("pending", |h| h.body["event"] == "approval.pending").await;
    let link = pending.body["links"]["user:bob"].as_str().unwrap_or_else(|| panic!("a link for bob: {}", pending.body));
    assert!(link.starts_with(&format!("{url}?ticket=")), "{link}");
    let ticket_path = link.strip_prefix(&format!("http://{}", server.addr)).unwrap().to_owned();

    let tampered = format!("{ticket_path}x");
    assert_eq!(server.raw(http::Method::GET, &tampered, &[], Bytes::new()).await.0, 403);
    let (status, headers, _) = server.raw(http::Method::GET, &ticket_path, &[], Bytes::new()).await;
    assert_eq!((status, headers["location"].to_str().unwrap()), (303, path.as_str()));
    let session = headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("hitl_session="))
        .map(|c| c.split(';').next().unwrap().to_owned())
        .expect("a session");
    let (status, _, _) = server.raw(http::Method::GET, &ticket_path, &[], Bytes::new()).await;
    assert_eq!(status, 303, "a second use is an ordinary sign-in");
    let (_, headers, _) = server.raw(http::Method::GET, &ticket_path, &[], Bytes::new()).await;
    assert!(headers["location"].to_str().unwrap().starts_with("/login"), "used once already");

    let (status, headers, html) =
        server.raw(http::Method::GET, &path, &[("cookie", session.as_str())], Bytes::new()).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Signed in as user:bob") && html.contains("id=\"approve\""), "{html}");
    let (status, _, _) =
        server.raw(http::Method::GET, "/approvals", &[("cookie", session.as_str())], Bytes::new()).await;
    assert_eq!(status, 303, "the link's session reaches that approval alone");
    let (csrf_cookie, csrf) = csrf_of(&headers, &html);
    let cookies = format!("{session}; {csrf_cookie}");
    let form = [("content-type", "application/x-www-form-urlencoded"), ("cookie", cookies.as_str())];
    let (status, _, _) =
        server.raw(http::Method::POST, &path, &form, Bytes::from(format!("csrf={csrf}&decision=approve"))).await;
    assert_eq!(status, 303);
    let params = json!({"name": "greeter", "arguments": {}, "requestState": asked.body["result"]["requestState"],
                        "inputResponses": { key.as_str(): {"action": "accept"} }});
    let started = request_as_client(&server, "tok-alice", 2, params).await;
    assert!(started.body["result"]["inputRequests"]["user_name"].is_object(), "{}", started.body);
    folder.wait_audit("the link's sign-in", |e| e["event"] == "signed_in" && e["approver"] == "user:bob").await;
}

#[tokio::test]
async fn replicas_on_redis_share_the_listing_and_stream_each_others_decisions() {
    let Some(url) = crate::harness::redis_url("approvals on replicas") else { return };
    let folder = tokens_folder(AGENT_GATE);
    let (a, b) = (folder.serve(&["--store", &url]).await, folder.serve(&["--store", &url]).await);
    let (started, ready) = tokio::sync::oneshot::channel();
    let client = *b;
    let streamed: Arc<Mutex<Vec<Value>>> = Arc::default();
    // This test's approval: other tests on the shared store decide theirs meanwhile.
    let mine: Arc<Mutex<Option<String>>> = Arc::default();
    let (progress, watched) = (streamed.clone(), mine.clone());
    let watcher = tokio::spawn(async move {
        let until = move |seen: &[Value]| {
            *progress.lock().unwrap() = seen.to_vec();
            let id = watched.lock().unwrap().clone();
            seen.iter().any(|e| e["event"] == "approval.decided" && id.as_deref() == e["approval"]["id"].as_str())
        };
        events_until(&client, "tok-bob", until, started).await
    });
    ready.await.unwrap();
    // Asked on a, listed and streamed by b, decided on b, resumed on a.
    let first = request_as_client(&a, "tok-alice", 1, json!({"name": "greeter", "arguments": {}})).await;
    let (key, question) = first.body["result"]["inputRequests"].as_object().unwrap().iter().next().unwrap();
    let id = question["params"]["url"].as_str().unwrap().rsplit('/').next().unwrap().to_owned();
    *mine.lock().unwrap() = Some(id.clone());
    let listed = api(&b, "tok-bob", http::Method::GET, &format!("/api/approvals/{id}"), None).await;
    assert_eq!(listed.body["status"], "pending", "{}", listed.body);
    let (streamed_ref, id_ref) = (&streamed, &id);
    let pending = move || async move {
        streamed_ref.lock().unwrap().iter().any(|e| e["approval"]["id"] == id_ref.as_str()).then_some(())
    };
    eventually(|| "b never streamed a's pending approval".to_owned(), pending).await;
    let decided = decide(&b, "tok-bob", &id, json!({"decision": "approve"})).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    let seen = tokio::time::timeout(Duration::from_secs(20), watcher).await.expect("events arrive").unwrap();
    let mine: Vec<&str> =
        seen.iter().filter(|e| e["approval"]["id"] == id.as_str()).map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(mine, ["approval.pending", "approval.decided"], "{seen:?}");
    let params = json!({"name": "greeter", "arguments": {}, "requestState": first.body["result"]["requestState"],
                        "inputResponses": { key.as_str(): {"action": "accept"} }});
    let started = request_as_client(&a, "tok-alice", 2, params).await;
    assert!(started.body["result"]["inputRequests"]["user_name"].is_object(), "{}", started.body);
}
