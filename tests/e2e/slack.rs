//! `[slack]`: a pending approval posted to a channel with Approve and Reject buttons,
//! decided by the buttons' signed callbacks under the page's rules, and its message
//! updated in place wherever it is decided. Slack is a local stand-in
//! (`tests/python/fake_slack.py`) that answers the Web API as Slack does and signs the
//! callbacks it sends as Slack does.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::approvals::{Folder, api, ask, csrf_of, decide, eventually, executions, people, signed_in};
use crate::harness::Server;
use crate::upstream::{PythonScript, PythonUpstream};

const SIGNING_SECRET: &str = "e2e-slack-signing-secret";
const BOT_TOKEN: &str = "xoxb-e2e-bot-token";

/// The stand-in for Slack, stopped when dropped.
struct FakeSlack {
    _script: PythonScript,
    port: u16,
}

impl FakeSlack {
    fn start() -> FakeSlack {
        let python = std::env::var("HITL_PYTHON").expect("HITL_PYTHON");
        let script = PythonScript::start(&python, "fake_slack.py", [SIGNING_SECRET]);
        let line = &script.first_line;
        let port = line.trim().parse().unwrap_or_else(|_| panic!("the fake Slack printed {line:?}"));
        FakeSlack { _script: script, port }
    }

    fn client(&self) -> crate::harness::Client {
        crate::harness::Client { addr: std::net::SocketAddr::from(([127, 0, 0, 1], self.port)) }
    }

    async fn get(&self, path: &str) -> Value {
        let client = self.client();
        let (status, _, body) = client.raw(http::Method::GET, path, &[], Bytes::new()).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    /// The Web API calls of `method` so far.
    async fn calls(&self, method: &str) -> Vec<Value> {
        let all = self.get("/_calls").await;
        all.as_array().unwrap().iter().filter(|c| c["method"] == method).cloned().collect()
    }

    /// Waits for a call of `method` whose body `matches`.
    async fn wait_for(&self, method: &str, matches: impl Fn(&Value) -> bool) -> Value {
        let matches = &matches;
        let probe = move || async move { self.calls(method).await.into_iter().find(|c| matches(&c["body"])) };
        eventually(|| format!("no {method} call as expected"), probe).await
    }

    /// Slack user `user` presses the button `action_id` of approval `id`: the signed
    /// callback Slack sends hitl, tampered with as `extra` says. hitl's status and body.
    async fn click(&self, server: &Server, user: &str, action_id: &str, id: &str, extra: Value) -> (u16, String) {
        let mut click = json!({
            "url": format!("http://{}/integrations/slack/interactions", server.addr),
            "user": user, "action_id": action_id, "value": id, "channel": "C0123456789",
        });
        click.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
        let client = self.client();
        let (status, _, body) = client
            .raw(http::Method::POST, "/_click", &[("content-type", "application/json")], Bytes::from(click.to_string()))
            .await;
        assert_eq!(status, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        (answer["status"].as_u64().unwrap() as u16, answer["body"].as_str().unwrap_or_default().to_owned())
    }
}

/// The policy and `[slack]` section of these tests, Slack at `port`.
fn slack_config(port: u16) -> String {
    format!(
        r#"[[policy]]
tools = ["db.drop_*"]
action = "review"
approvers = ["group:sre"]
description = "Drops are reviewed by SRE"

[slack]
signing_secret_env = "HITL_E2E_SLACK_SIGNING_SECRET"
bot_token_env = "HITL_E2E_SLACK_BOT_TOKEN"
api_url = "http://127.0.0.1:{port}/api"
channel = "C0123456789"
users = {{ U0BOB = {{ principal = "user:bob", groups = ["group:sre"] }}, U0ALICE = {{ principal = "user:alice", groups = ["group:sre"] }}, U0CAROL = "user:carol" }}
"#
    )
}

const SLACK_ENV: [(&str, &str); 2] =
    [("HITL_E2E_SLACK_SIGNING_SECRET", SIGNING_SECRET), ("HITL_E2E_SLACK_BOT_TOKEN", BOT_TOKEN)];

/// The blocks of a message, as one text.
fn shown(body: &Value) -> String {
    body["blocks"].to_string()
}

/// Is approval `id` still waiting, as bob's API sees it?
async fn status_of(server: &Server, token: &str, id: &str) -> String {
    let one = api(server, token, http::Method::GET, &format!("/api/approvals/{id}"), None).await;
    one.body["status"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn an_approval_is_posted_escaped_and_decided_by_a_signed_button_press_of_a_mapped_approver() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let slack = FakeSlack::start();
    let folder = Folder::new(&signed_in(&upstream.url, &slack_config(slack.port)));
    let server = folder.serve_with_env(&[], &SLACK_ENV).await;
    let p = people();
    // What would mention everyone, link elsewhere, or read otherwise, if not escaped.
    let args = json!({"partition": "p1 <!channel> <https://evil.example|docs> & \u{202e}x```", "database": "orders"});
    let (paused, url) = ask(&server, &p.alice, &args).await;
    let id = url.rsplit('/').next().unwrap().to_owned();

    let posted = slack.wait_for("chat.postMessage", |b| shown(b).contains(&id)).await;
    assert_eq!(posted["authorization"], format!("Bearer {BOT_TOKEN}"), "the bot token, from the environment");
    let body = &posted["body"];
    assert_eq!(body["channel"], "C0123456789");
    let text = shown(body);
    assert!(!text.contains("<!channel>") && !text.contains("<https://evil"), "nothing injected: {text}");
    assert!(text.contains("&lt;!channel&gt;") && text.contains("&amp;"), "escaped for mrkdwn: {text}");
    assert!(!text.contains('\u{202e}') && text.contains("\\\\u202e"), "the override shown as an escape: {text}");
    assert!(!text.contains("x```"), "no value closes its code block: {text}");
    assert!(text.contains("user:alice") && text.contains("db.drop_partition") && text.contains("`db`"), "{text}");
    assert!(text.contains("Drops are reviewed by SRE"), "the policy's description: {text}");
    let actions = body["blocks"].as_array().unwrap().iter().find(|b| b["type"] == "actions").expect("buttons");
    let labels: Vec<&str> =
        actions["elements"].as_array().unwrap().iter().map(|e| e["text"]["text"].as_str().unwrap()).collect();
    assert_eq!(labels, ["Approve", "Reject", "Edit or respond on the page"]);
    assert_eq!(actions["elements"][0]["value"], id.as_str());
    assert_eq!(actions["elements"][2]["url"], url.as_str(), "the page, for edit and respond");
    assert_eq!(body["text"], "Approval needed: user:alice asks to run db.drop_partition");

    // Not Slack's: another secret, a stale time, no signature at all. Nothing decided.
    for (tamper, why) in [
        (json!({"secret": "not-the-secret"}), "does not match"),
        (json!({"age": 600}), "more than 5 minutes"),
        (json!({"signature": "v0=00"}), "does not match"),
        (json!({"signature": ""}), "X-Slack-Signature"),
    ] {
        let (status, said) = slack.click(&server, "U0BOB", "hitl_approve", &id, tamper.clone()).await;
        assert_eq!(status, 401, "{tamper}: {said}");
        assert!(said.contains(why), "{tamper}: {said}");
    }
    assert_eq!(status_of(&server, &p.bob, &id).await, "pending");

    // Refused with a word to the one who pressed: not mapped, the caller herself (the
    // two-person rule), mapped to someone who approves nothing.
    for (user, why) in [
        ("U0MALLORY", "not mapped to a hitl principal"),
        ("U0ALICE", "two-person rule"),
        ("U0CAROL", "user:carol is not an approver"),
    ] {
        let (status, _) = slack.click(&server, user, "hitl_approve", &id, json!({})).await;
        assert_eq!(status, 200, "Slack is answered");
        let told = slack.wait_for("chat.postEphemeral", |b| b["user"] == user).await;
        let said = told["body"]["text"].as_str().unwrap();
        assert!(said.contains(why), "{user}: {said}");
        assert_eq!(told["body"]["channel"], "C0123456789");
    }
    assert_eq!(status_of(&server, &p.bob, &id).await, "pending");
    assert_eq!(executions(&server, &p.alice).await, 0);

    // The link button decides nothing.
    assert_eq!(slack.click(&server, "U0BOB", "hitl_open", &id, json!({})).await.0, 200);
    assert_eq!(status_of(&server, &p.bob, &id).await, "pending");

    // Bob approves: the message shows who, without buttons; the call runs once.
    let (status, _) = slack.click(&server, "U0BOB", "hitl_approve", &id, json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(status_of(&server, &p.bob, &id).await, "approved");
    let updated = slack.wait_for("chat.update", |b| shown(b).contains(&url)).await;
    let place = (updated["body"]["channel"].clone(), updated["body"]["ts"].clone());
    assert_eq!(place, (json!("C0123456789"), posted["ts"].clone()), "the message posted, in place");
    let text = shown(&updated["body"]);
    assert!(text.contains("*Approved* by `user:bob`") && !text.contains("hitl_approve"), "{text}");
    let done = paused.answer(&server, json!({"action": "accept"})).await;
    assert!(done.text().contains("p1") && done.body["result"]["isError"] != true, "{}", done.body);
    assert_eq!(executions(&server, &p.alice).await, 1);
    let one = api(&server, &p.bob, http::Method::GET, &format!("/api/approvals/{id}"), None).await;
    assert_eq!(one.body["decided_by"], "user:bob", "{}", one.body);
    // The trail says who pressed, by their Slack id.
    let pressed = |user: &'static str| {
        let (server, bob, id) = (&server, &p.bob, &id);
        move || async move {
            let trail = crate::approvals::trail(server, bob, 0).await;
            trail.into_iter().find(|e| {
                e["event"] == "signed_in" && e["via"] == format!("slack {user}") && e["approval"] == id.as_str()
            })
        }
    };
    let entry = eventually(|| "no trail of bob's press".to_owned(), pressed("U0BOB")).await;
    assert_eq!(entry["approver"], "user:bob", "{entry}");

    // A second press, once decided: told so, nothing changes.
    slack.click(&server, "U0BOB", "hitl_reject", &id, json!({})).await;
    let told = slack.wait_for("chat.postEphemeral", |b| b["user"] == "U0BOB").await;
    assert!(told["body"]["text"].as_str().unwrap().contains("already"), "{told}");
    assert_eq!(status_of(&server, &p.bob, &id).await, "approved");
}

#[tokio::test]
async fn a_rejection_by_button_and_decisions_on_the_page_or_the_api_update_the_message() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let slack = FakeSlack::start();
    let folder = Folder::new(&signed_in(&upstream.url, &slack_config(slack.port)));
    let server = folder.serve_with_env(&[], &SLACK_ENV).await;
    let p = people();

    // Rejected in Slack: the caller is told, nothing runs.
    let (paused, url) = ask(&server, &p.alice, &json!({"partition": "p2", "database": "orders"})).await;
    let id = url.rsplit('/').next().unwrap().to_owned();
    slack.wait_for("chat.postMessage", |b| shown(b).contains(&id)).await;
    assert_eq!(slack.click(&server, "U0BOB", "hitl_reject", &id, json!({})).await.0, 200);
    let updated = slack.wait_for("chat.update", |b| shown(b).contains(&url)).await;
    assert!(shown(&updated["body"]).contains("*Rejected* by `user:bob`"), "{updated}");
    let done = paused.answer(&server, json!({"action": "accept"})).await;
    assert_eq!(done.body["result"]["isError"], true, "{}", done.body);

    // Approved on the page: the message says so.
    let (paused, url) = ask(&server, &p.alice, &json!({"partition": "p3", "database": "orders"})).await;
    let id = url.rsplit('/').next().unwrap().to_owned();
    slack.wait_for("chat.postMessage", |b| shown(b).contains(&id)).await;
    let path = url.strip_prefix(&format!("http://{}", server.addr)).unwrap().to_owned();
    page_approve(&server, &p.bob, &path).await;
    let updated = slack.wait_for("chat.update", |b| shown(b).contains(&url)).await;
    assert!(shown(&updated["body"]).contains("*Approved* by `user:bob`"), "{updated}");
    assert!(paused.answer(&server, json!({"action": "accept"})).await.text().contains("p3"));

    // Decided on the API at once, perhaps before the post was answered: still updated.
    let (_paused, url) = ask(&server, &p.alice, &json!({"partition": "p4", "database": "orders"})).await;
    let id = url.rsplit('/').next().unwrap().to_owned();
    let decided = eventually(
        || "never decided".to_owned(),
        || async {
            let reply = decide(&server, &p.bob, &id, json!({"decision": "respond", "message": "done already"})).await;
            (reply.status == 200).then_some(reply)
        },
    )
    .await;
    assert_eq!(decided.body["status"], "responded");
    let updated = slack.wait_for("chat.update", |b| shown(b).contains(&url)).await;
    assert!(shown(&updated["body"]).contains("*Responded* by `user:bob`"), "{updated}");
    assert_eq!(slack.calls("chat.update").await.len(), 3, "one update per decision");
    assert_eq!(slack.calls("chat.postMessage").await.len(), 3, "one message per approval");
}

/// Bob signs in on the pages and approves the approval at `path` with its form.
async fn page_approve(server: &Server, token: &str, path: &str) {
    let (_, headers, html) = server.raw(http::Method::GET, "/login", &[], Bytes::new()).await;
    let (csrf_cookie, csrf) = csrf_of(&headers, &html);
    let form = [("content-type", "application/x-www-form-urlencoded"), ("cookie", csrf_cookie.as_str())];
    let body = format!("csrf={csrf}&token={token}&next={path}");
    let (status, headers, _) = server.raw(http::Method::POST, "/login", &form, Bytes::from(body)).await;
    assert_eq!(status, 303, "signed in");
    let session = headers["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let cookies = format!("{csrf_cookie}; {session}");
    let (_, _, html) = server.raw(http::Method::GET, path, &[("cookie", cookies.as_str())], Bytes::new()).await;
    let token = html.split("name=\"csrf\" value=\"").nth(1).and_then(|r| r.split('"').next()).expect("a form");
    let form = [("content-type", "application/x-www-form-urlencoded"), ("cookie", cookies.as_str())];
    let body = format!("csrf={token}&decision=approve");
    let (status, _, html) = server.raw(http::Method::POST, path, &form, Bytes::from(body)).await;
    assert_eq!(status, 303, "approved on the page: {html}");
}

#[test]
fn slack_settings_that_would_weaken_or_break_it_are_refused_by_hitl_check() {
    let check = |slack: &str, env: &[(&str, &str)]| {
        let folder = Folder::new(&format!("[slack]\n{slack}"));
        let mut command = std::process::Command::new(Server::program());
        command.args(["check", "--config", &folder.config()]);
        for (k, v) in env {
            command.env(k, v);
        }
        let out = command.output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let good = "signing_secret_env = \"S_SECRET\"\nbot_token_env = \"S_TOKEN\"\nchannel = \"C0123456789\"\n\
                users = { U0BOB = \"user:bob\" }\n";
    let env = [("S_SECRET", "s"), ("S_TOKEN", "xoxb-1")];
    let (ok, err) = check(good, &env);
    assert!(ok, "{err}");
    for (config, env, why) in [
        (good, &env[..1], "[slack] bot_token_env: the environment variable S_TOKEN is not set"),
        (good, &env[1..], "[slack] signing_secret_env: the environment variable S_SECRET is not set"),
        (&format!("{good}api_url = \"http://slack.example/api\"\n"), &env[..], "give an https:// URL"),
        (&good.replace("user:bob", "group:sre"), &env[..], "is not user:<id>"),
        (
            &good.replace("U0BOB = \"user:bob\"", "U0BOB = { principal = \"user:bob\", group = [] }"),
            &env[..],
            "unknown key",
        ),
        (
            &good.replace("U0BOB = \"user:bob\"", "U0BOB = { principal = \"user:bob\", groups = [\"sre\"] }"),
            &env[..],
            "is not group:<name>",
        ),
        (&good.replace("U0BOB", "bob"), &env[..], "is not a Slack user id"),
        (&good.replace("C0123456789", "#approvals"), &env[..], "give the channel's id"),
        (&good.replace("C0123456789", "general"), &env[..], "give the channel's id"),
        (&format!("{good}api_url = \"https://user:pw@slack.example/api\"\n"), &env[..], "no user, password"),
        (&format!("{good}api_url = \"http://localhost.evil.example/api\"\n"), &env[..], "give an https:// URL"),
        (&format!("{good}token = \"xoxb-in-the-file\"\n"), &env[..], "unknown field `token`"),
    ] {
        let (ok, err) = check(config, env);
        assert!(!ok && err.contains(why), "{config}: {err}");
    }
}

#[tokio::test]
async fn on_replicas_sharing_redis_a_press_on_another_replica_decides_and_updates_the_one_message() {
    let Some(url) = crate::harness::redis_url("Slack on replicas") else { return };
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let slack = FakeSlack::start();
    let folder = Folder::new(&signed_in(&upstream.url, &slack_config(slack.port)));
    let a = folder.serve_with_env(&["--store", &url], &SLACK_ENV).await;
    let b = folder.serve_with_env(&["--store", &url], &SLACK_ENV).await;
    let p = people();
    let (paused, page) = ask(&a, &p.alice, &json!({"partition": "p5", "database": "orders"})).await;
    let id = page.rsplit('/').next().unwrap().to_owned();
    let posted = slack.wait_for("chat.postMessage", |body| shown(body).contains(&id)).await;

    // Slack's callback reaches b: b decides, and updates the message a posted.
    assert_eq!(slack.click(&b, "U0BOB", "hitl_approve", &id, json!({})).await.0, 200);
    let updated = slack.wait_for("chat.update", |body| shown(body).contains(&id)).await;
    assert_eq!(updated["body"]["ts"], posted["ts"], "the message a posted, in place");
    assert!(shown(&updated["body"]).contains("*Approved* by `user:bob`"), "{updated}");
    let mine = |calls: Vec<Value>| calls.iter().filter(|c| shown(&c["body"]).contains(&id)).count();
    assert_eq!(mine(slack.calls("chat.postMessage").await), 1, "posted once, by the replica that paused");
    assert_eq!(mine(slack.calls("chat.update").await), 1);
    let done = paused.answer(&a, json!({"action": "accept"})).await;
    assert!(done.text().contains("p5"), "{}", done.body);
}

#[tokio::test]
async fn approve_covers_this_call_only_unless_the_covering_button_is_pressed_and_users_follow_a_reload() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let slack = FakeSlack::start();
    let covering = slack_config(slack.port).replace(
        "description = \"Drops are reviewed by SRE\"",
        "description = \"Drops are reviewed by SRE\"\napproval_ttl = 600\napproval_scope = \"arguments\"",
    );
    let folder = Folder::new(&signed_in(&upstream.url, &covering));
    let server = folder.serve_with_env(&[], &SLACK_ENV).await;
    let p = people();
    let args = json!({"partition": "p6", "database": "orders"});

    // Approve: this call only. The same call again pauses again.
    let (paused, url) = ask(&server, &p.alice, &args).await;
    let id = url.rsplit('/').next().unwrap().to_owned();
    let posted = slack.wait_for("chat.postMessage", |b| shown(b).contains(&id)).await;
    let text = shown(&posted["body"]);
    let stated =
        "An approval covers this call, and user:alice's calls of db.drop_partition with these arguments for 10 min";
    assert!(text.contains(stated), "what covering means, stated: {text}");
    let actions = posted["body"]["blocks"].as_array().unwrap().iter().find(|b| b["type"] == "actions").unwrap().clone();
    let labels: Vec<&str> =
        actions["elements"].as_array().unwrap().iter().map(|e| e["text"]["text"].as_str().unwrap()).collect();
    assert_eq!(labels, ["Approve this call", "Approve, covering as stated", "Reject", "Edit or respond on the page"]);
    assert_eq!(slack.click(&server, "U0BOB", "hitl_approve", &id, json!({})).await.0, 200);
    slack.wait_for("chat.update", |b| shown(b).contains(&id)).await;
    assert!(paused.answer(&server, json!({"action": "accept"})).await.text().contains("p6"));
    let (paused, url) = ask(&server, &p.alice, &args).await;

    // Approve, covering: the same call again runs without a pause.
    let id = url.rsplit('/').next().unwrap().to_owned();
    slack.wait_for("chat.postMessage", |b| shown(b).contains(&id)).await;
    assert_eq!(slack.click(&server, "U0BOB", "hitl_approve_covering", &id, json!({})).await.0, 200);
    assert!(paused.answer(&server, json!({"action": "accept"})).await.text().contains("p6"));
    let params = json!({"name": "db.drop_partition", "arguments": args});
    let again = server.modern_as(Some(&p.alice), 1, "tools/call", params, crate::approvals::url_client()).await;
    assert!(again.text().contains("p6") && again.body["result"]["resultType"] != "input_required", "{}", again.body);
    assert_eq!(executions(&server, &p.alice).await, 3);

    // A reload that maps U0BOB no more: his press decides nothing.
    let before = crate::reload::health(&server).await["config_digest"].as_str().unwrap().to_owned();
    let config = std::fs::read_to_string(folder.0.join("hitl.toml")).unwrap();
    let config = config.replace("U0BOB = { principal = \"user:bob\", groups = [\"group:sre\"] }, ", "");
    std::fs::write(folder.0.join("hitl.toml"), config).unwrap();
    crate::reload::reloaded(&server, &before).await;
    let (_paused, url) = ask(&server, &p.alice, &json!({"partition": "p7", "database": "orders"})).await;
    let id = url.rsplit('/').next().unwrap().to_owned();
    slack.wait_for("chat.postMessage", |b| shown(b).contains(&id)).await;
    assert_eq!(slack.click(&server, "U0BOB", "hitl_approve", &id, json!({})).await.0, 200);
    let told = slack.wait_for("chat.postEphemeral", |b| b["user"] == "U0BOB").await;
    assert!(told["body"]["text"].as_str().unwrap().contains("not mapped"), "{told}");
    assert_eq!(status_of(&server, &p.bob, &id).await, "pending");
}
