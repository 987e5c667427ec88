//! The approver sees what will run (issue #28): argument values in the client's review
//! message, in `GET /api/approvals/<id>` and on the approval page show hidden
//! characters as visible escapes and are shown whole; a policy's description cannot be
//! pushed out of view by an argument; the page names the upstream, the tool's own
//! description and annotations, and the expiry; questions an upstream asks are marked
//! as its own. Against the hitl program and the Python SDK's upstream, and in Chromium.

use bytes::Bytes;
use fantoccini::Locator;
use serde_json::{Value, json};

use crate::approvals::{Folder, api, csrf_of, signed_in, url_client};
use crate::auth::{request_as, sha256_hex, token};
use crate::browser::{browser, driver, screenshot, sign_in};
use crate::harness::{Reply, Server};
use crate::upstream::PythonUpstream;

/// A table name that renders as `PROD_orders_test` where bidi controls are obeyed.
const BIDI: &str = "\u{202e}DORP\u{202c}_orders_test";
/// How it must show: the controls as escapes.
const SHOWN: &str = r"\u202eDORP\u202c_orders_test";

/// The hitl program in front of the test upstream (`db`), with JWT sign-in: drops
/// decided by group:sre on the page with a two-line description, releases and digests
/// reviewed by the client's user (a release with a description, a digest with the
/// seed's text).
struct Gate {
    _upstream: PythonUpstream,
    _folder: Folder,
    server: Server,
    alice: String,
    bob: String,
}

impl Gate {
    async fn start() -> Option<Self> {
        let upstream = PythonUpstream::start(&[])?;
        let folder = Folder::new(&signed_in(
            &upstream.url,
            r#"[[policy]]
tools = ["db.drop_*"]
action = "review"
approvers = ["group:sre"]
description = "Drop {partition} on {database}?\nThis cannot be undone."

[[policy]]
tools = ["db.release"]
action = "review"
description = "Release {service} v{version}?\nProduction traffic moves at once."

[[policy]]
tools = ["db.digest"]
action = "review"
"#,
        ));
        let server = folder.serve(&[]).await;
        Some(Self {
            _upstream: upstream,
            _folder: folder,
            server,
            alice: token("rsa-1", json!({"sub": "alice"})),
            bob: token("ec-1", json!({"sub": "bob", "groups": ["sre"]})),
        })
    }

    /// Alice's call of `tool`: the reply, which must pause.
    async fn ask(&self, tool: &str, arguments: &Value) -> Reply {
        let params = json!({"name": tool, "arguments": arguments});
        let asked = request_as(&self.server, Some(&self.alice), url_client(), 1, "tools/call", params).await;
        assert_eq!(asked.body["result"]["resultType"], "input_required", "{}", asked.body);
        asked
    }

    /// Alice's retry of `tool` with `answer` to the first question of `asked`.
    async fn answer(&self, tool: &str, arguments: &Value, asked: &Reply, answer: Value) -> Reply {
        let key = asked.body["result"]["inputRequests"].as_object().unwrap().keys().next().unwrap();
        let params = json!({"name": tool, "arguments": arguments, "requestState": asked.body["result"]["requestState"],
                            "inputResponses": { key.as_str(): answer }});
        request_as(&self.server, Some(&self.alice), url_client(), 2, "tools/call", params).await
    }

    /// Alice's drop with `arguments`, paused for group:sre: the approval's id and page path.
    async fn ask_drop(&self, arguments: &Value) -> (Reply, String, String) {
        let asked = self.ask("db.drop_partition", arguments).await;
        let question = asked.body["result"]["inputRequests"].as_object().unwrap().values().next().unwrap().clone();
        assert_eq!(question["params"]["message"], "Waiting for approval by group:sre to run db.drop_partition");
        let url = question["params"]["url"].as_str().unwrap();
        let path = url.strip_prefix(&format!("http://{}", self.server.addr)).expect("hitl's page").to_owned();
        let id = path.strip_prefix("/approvals/").expect("an approval page").to_owned();
        (asked, id, path)
    }

    /// The approval page at `path`, as bob (signed in through the login form) sees it.
    async fn page(&self, path: &str) -> String {
        let server = &self.server;
        let (_, headers, html) = server.raw(http::Method::GET, "/login", &[], Bytes::new()).await;
        let (csrf_cookie, csrf) = csrf_of(&headers, &html);
        let form = [("content-type", "application/x-www-form-urlencoded"), ("cookie", csrf_cookie.as_str())];
        let body = format!("csrf={csrf}&token={}&next={path}", self.bob);
        let (status, headers, _) = server.raw(http::Method::POST, "/login", &form, Bytes::from(body)).await;
        assert_eq!(status, 303, "bob signs in");
        let session = headers["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
        let cookies = format!("{csrf_cookie}; {session}");
        let (status, _, html) =
            server.raw(http::Method::GET, path, &[("cookie", cookies.as_str())], Bytes::new()).await;
        assert_eq!(status, 200, "{html}");
        html
    }

    /// How many times the upstream ran `tool`.
    async fn executions(&self, tool: &str) -> u64 {
        let params = json!({"name": "db.executions", "arguments": {"tool": tool}});
        let reply = request_as(&self.server, Some(&self.alice), url_client(), 9, "tools/call", params).await;
        reply.text().parse().unwrap_or_else(|_| panic!("a count: {}", reply.body))
    }
}

/// The message of the first question of `asked`.
fn message(asked: &Reply) -> String {
    let question = asked.body["result"]["inputRequests"].as_object().unwrap().values().next().unwrap();
    question["params"]["message"].as_str().unwrap_or_default().to_owned()
}

/// A 10 KB value padded with non-breaking spaces after a harmless start, and how it
/// must show: whole, the padding visible.
fn long_value() -> (String, String) {
    let tail = "x".repeat(10 * 1024);
    (format!("orders{}{tail}END", "\u{a0}".repeat(64)), format!("orders{}{tail}END", r"\u00a0".repeat(64)))
}

#[tokio::test]
async fn the_clients_review_message_shows_argument_values_as_they_will_run() {
    let Some(gate) = Gate::start().await else { return };

    // Plain text: the seed's message, byte for byte.
    let plain = gate.ask("db.digest", &json!({"text": "hello"})).await;
    assert_eq!(message(&plain), "Tool execution requires approval\n\nTool: db.digest\nArgs: {\"text\":\"hello\"}");

    // Bidi controls show as escapes; the upstream gets the value as it was sent.
    let arguments = json!({"text": BIDI});
    let asked = gate.ask("db.digest", &arguments).await;
    let shown = message(&asked);
    assert_eq!(shown, format!("Tool execution requires approval\n\nTool: db.digest\nArgs: {{\"text\":\"{SHOWN}\"}}"));
    assert!(!shown.contains('\u{202e}') && !shown.contains('\u{202c}'), "{shown:?}");
    let approve = json!({"action": "accept", "content": {"decision": "approve"}});
    let done = gate.answer("db.digest", &arguments, &asked, approve).await;
    assert_eq!(done.text(), sha256_hex(BIDI), "what ran is the value shown: {}", done.body);

    // A description's substitution cannot add lines: its newlines show as `\n`, the
    // policy's own line break stays.
    let arguments = json!({"service": "api\n\n\n\nApproved by security: yes", "version": "1.2"});
    let asked = gate.ask("db.release", &arguments).await;
    assert_eq!(
        message(&asked),
        "Release api\\n\\n\\n\\nApproved by security: yes v1.2?\nProduction traffic moves at once."
    );
    let reject = json!({"action": "accept", "content": {"decision": "reject", "message": "not like this"}});
    let rejected = gate.answer("db.release", &arguments, &asked, reject).await;
    assert_eq!(rejected.text(), "not like this", "{}", rejected.body);
    assert_eq!(gate.executions("release").await, 0);
}

#[tokio::test]
async fn the_approval_api_and_page_show_every_value_whole_and_escaped() {
    let Some(gate) = Gate::start().await else { return };
    let (long, long_shown) = long_value();
    let arguments = json!({"partition": BIDI, "database": long});
    let (asked, id, path) = gate.ask_drop(&arguments).await;

    let got = api(&gate.server, &gate.bob, http::Method::GET, &format!("/api/approvals/{id}"), None).await;
    assert_eq!(got.status, 200, "{}", got.body);
    let approval = &got.body;
    assert_eq!(approval["arguments"], arguments, "the arguments as they run, whole");
    let shown = &approval["display"];
    assert_eq!(shown["arguments"]["partition"], SHOWN);
    assert_eq!(shown["arguments"]["database"], long_shown.as_str(), "whole, the padding visible");
    assert_eq!(shown["description"], format!("Drop {SHOWN} on {long_shown}?\nThis cannot be undone."));
    assert_eq!(shown["tool"], "db.drop_partition");
    assert!(!shown.to_string().contains(['\u{202e}', '\u{202c}', '\u{a0}']), "nothing hidden is displayed");

    // What runs it.
    assert_eq!((&approval["upstream"], &shown["upstream"]), (&json!("db"), &json!("db")));
    let about = shown["tool_description"].as_str().unwrap_or_default();
    assert!(about.starts_with("Drops a partition of a database"), "{approval}");
    assert_eq!(approval["annotations"]["destructiveHint"], true, "{approval}");
    assert_eq!(shown["annotations"]["destructiveHint"], "true");
    let expires_at = shown["expires_at"].as_str().expect("the expiry").to_owned();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    assert!(approval["expires_at_ms"].as_u64().unwrap() > now, "{approval}");
    assert!(expires_at.ends_with('Z') && expires_at.len() == 24, "{expires_at}");

    // The page: the same text, whole, nothing hidden.
    let html = gate.page(&path).await;
    assert!(html.contains(SHOWN), "the bidi value escaped on the page");
    assert!(html.contains(&long_shown), "the 10 KB value whole, its padding visible");
    assert!(!html.contains(['\u{202e}', '\u{202c}', '\u{a0}']), "nothing hidden on the page");
    for expected in [
        "id=\"upstream\"",
        "<code>db</code>",
        about,
        "destructiveHint",
        expires_at.as_str(),
        "This cannot be undone.",
        "written as a \\u escape",
    ] {
        assert!(html.contains(expected), "the page shows {expected:?}");
    }
    assert!(html.contains(&format!("Drop {SHOWN} on {long_shown}?")), "the policy's description, filled, escaped");

    // Approved: the upstream runs exactly what was shown, once.
    let decided = api(
        &gate.server,
        &gate.bob,
        http::Method::POST,
        &format!("/api/approvals/{id}/decision"),
        Some(json!({"decision": "approve"})),
    )
    .await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    let done = gate.answer("db.drop_partition", &arguments, &asked, json!({"action": "accept"})).await;
    assert_eq!(done.text(), format!("dropped {BIDI} on {long}"), "{}", done.body);
    assert_eq!(gate.executions("drop_partition").await, 1);
}

#[tokio::test]
async fn a_description_on_the_page_cannot_be_pushed_out_of_view_by_an_argument() {
    let Some(gate) = Gate::start().await else { return };
    let pushed = format!("p1{}Approved by security: yes\u{2028}\u{1b}[8m", "\n".repeat(40));
    let (_, id, path) = gate.ask_drop(&json!({"partition": pushed, "database": "orders"})).await;
    let expected = format!(
        "Drop p1{}Approved by security: yes\\u2028\\u001b[8m on orders?\nThis cannot be undone.",
        r"\n".repeat(40)
    );
    let got = api(&gate.server, &gate.bob, http::Method::GET, &format!("/api/approvals/{id}"), None).await;
    assert_eq!(got.body["display"]["description"], expected.as_str(), "{}", got.body);
    assert_eq!(
        got.body["description"],
        expected.as_str(),
        "the review text itself is escaped where the gateway fills it"
    );
    let html = gate.page(&path).await;
    assert!(html.contains(&expected), "the page shows the description on its own two lines");
    assert!(!html.contains('\u{1b}') && !html.contains('\u{2028}'));
}

#[tokio::test]
async fn questions_an_upstream_asks_are_marked_as_the_upstreams() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    // In 2026-07-28 rounds (relayed), and mid-call from a 2025-11-25 upstream (held).
    for protocol in ["", "protocol = \"2025-11-25\"\n"] {
        let folder = Folder::new(&format!("[[upstream]]\nname = \"db\"\nurl = \"{}\"\n{protocol}", upstream.url));
        let server = folder.serve(&[]).await;
        let arguments = json!({"table": "orders"});
        let asked = server.call_tool(1, json!({"name": "db.truncate", "arguments": arguments})).await;
        assert_eq!(asked.body["result"]["resultType"], "input_required", "{}", asked.body);
        let (key, request) = asked.body["result"]["inputRequests"].as_object().unwrap().iter().next().unwrap();
        assert_eq!(request["method"], "elicitation/create", "{request}");
        assert_eq!(request["params"]["message"], "db: Really truncate orders?", "{protocol}: {request}");
        let answer = json!({ key.as_str(): {"action": "accept", "content": {"confirm": true}} });
        let params = json!({"name": "db.truncate", "arguments": arguments, "inputResponses": answer,
                            "requestState": asked.body["result"]["requestState"]});
        let done = server.call_tool(2, params).await;
        assert_eq!(done.text(), "truncated orders", "{protocol}: {}", done.body);
    }
}

#[tokio::test]
async fn the_approval_page_in_chromium_shows_a_bidi_value_escaped_and_a_10_kb_value_wrapped() {
    let Some(driver) = driver().await else { return };
    let Some(gate) = Gate::start().await else { return };
    let (long, long_shown) = long_value();
    let arguments = json!({"partition": BIDI, "database": long});
    let (_, _, path) = gate.ask_drop(&arguments).await;
    let url = format!("http://{}{path}", gate.server.addr);

    for (phone, name) in [(false, "trust-display"), (true, "trust-display-phone")] {
        let browser = browser(&driver, phone).await;
        browser.goto(&url).await.unwrap();
        sign_in(&browser, &gate.bob).await;
        browser.wait().for_element(Locator::Css("#arguments")).await.expect("the approval page");
        let measured = browser
            .execute(
                "const box = document.getElementById('arguments'); \
                 const text = document.getElementById('description'); \
                 return [box.scrollWidth, box.clientWidth, text.scrollWidth, text.clientWidth, \
                         document.documentElement.scrollWidth, window.innerWidth, box.textContent, \
                         document.body.innerText];",
                vec![],
            )
            .await
            .unwrap();
        let number = |i: usize| measured[i].as_f64().unwrap();
        assert!(number(0) <= number(1), "{name}: the arguments box does not overflow: {} in {}", number(0), number(1));
        assert!(number(2) <= number(3), "{name}: the description does not overflow: {} in {}", number(2), number(3));
        assert!(number(4) <= number(5), "{name}: no sideways scrolling: {} in {}", number(4), number(5));
        let (arguments_text, page_text) = (measured[6].as_str().unwrap(), measured[7].as_str().unwrap());
        assert!(arguments_text.contains(SHOWN), "{name}: the bidi value escaped");
        assert!(arguments_text.contains(&long_shown), "{name}: the padded 10 KB value whole");
        assert!(page_text.contains(SHOWN) && !page_text.contains('\u{202e}'), "{name}: nothing hidden");
        assert!(page_text.contains("destructiveHint"), "{name}: the annotations");
        browser.execute("document.getElementById('arguments').scrollIntoView();", vec![]).await.unwrap();
        screenshot(&browser, name).await;
        browser.close().await.unwrap();
    }
}
