//! The pages in a real browser: Debian's Chromium, driven over WebDriver (chromedriver
//! and the `fantoccini` crate). An approver signs in, approves, edits and rejects; the
//! caller's MCP client gets each outcome on its retry; a secret typed on its page
//! reaches the agent and appears nowhere else. Screenshots of each page are saved under
//! `target/browser-screenshots/`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client as Browser, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::approvals::{Folder, Receiver};
use crate::auth::{request_as, token};
use crate::harness::{Paused, Server, cannot_run};
use crate::upstream::PythonUpstream;

/// chromedriver on a free port, stopped on drop.
pub(crate) struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// chromedriver (`HITL_CHROMEDRIVER`, else on PATH), or `None` after `cannot_run`.
pub(crate) async fn driver() -> Option<Driver> {
    let program = std::env::var("HITL_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let child = match Command::new(&program)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            cannot_run("browser", &format!("{program} does not start ({e}): install chromium and chromium-driver"));
            return None;
        }
    };
    let driver = Driver { child, url: format!("http://127.0.0.1:{port}") };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "chromedriver did not listen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Some(driver)
}

/// A headless Chromium session, phone-sized when `phone`.
pub(crate) async fn browser(driver: &Driver, phone: bool) -> Browser {
    let mut options = json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                       "--window-size=1280,900"]});
    if phone {
        options["mobileEmulation"] = json!({"deviceMetrics": {"width": 390, "height": 844, "pixelRatio": 3.0}});
    }
    if let Ok(binary) = std::env::var("HITL_CHROMIUM") {
        options["binary"] = binary.into();
    } else if std::path::Path::new("/usr/bin/chromium").exists() {
        options["binary"] = "/usr/bin/chromium".into();
    }
    let capabilities = serde_json::Map::from_iter([("goog:chromeOptions".to_owned(), options)]);
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&driver.url)
        .await
        .expect("a Chromium session")
}

/// Saves a screenshot of the page as `target/browser-screenshots/<name>.png`.
pub(crate) async fn screenshot(browser: &Browser, name: &str) {
    let png = browser.screenshot().await.expect("a screenshot");
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/browser-screenshots");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join(format!("{name}.png")), &png).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "{name}: a PNG");
}

async fn text_of(browser: &Browser) -> String {
    browser.find(Locator::Css("body")).await.unwrap().text().await.unwrap()
}

fn url_client() -> Value {
    json!({"elicitation": {"form": {}, "url": {}}})
}

/// Signs in on the login page the browser is at (it was sent there), with `token`.
pub(crate) async fn sign_in(browser: &Browser, token: &str) {
    let field = browser.wait().for_element(Locator::Css("#token")).await.expect("the sign-in form");
    screenshot(browser, "login").await;
    field.send_keys(token).await.unwrap();
    browser.find(Locator::Css("button[type=submit].primary")).await.unwrap().click().await.unwrap();
}

/// The drop call of `partition` by alice, paused, and its page's URL.
async fn ask(server: &Server, alice: &str, partition: &str) -> (Paused, String) {
    let args = json!({"partition": partition, "database": "orders"});
    let paused = server.pause_as(alice, url_client(), "db.drop_partition", args).await;
    let url = paused.question()["params"]["url"].as_str().unwrap().to_owned();
    (paused, url)
}

/// Alice's retry after a visit to the page.
async fn retry(server: &Server, paused: &Paused) -> Value {
    paused.answer(server, json!({"action": "accept"})).await.body
}

#[tokio::test]
async fn an_approver_approves_edits_and_rejects_in_chromium() {
    let Some(driver) = driver().await else { return };
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let hook = Receiver::start(0).await;
    let folder = Folder::new(&crate::approvals::config(&upstream.url, &hook.url));
    let server = folder.serve(&[]).await;
    let alice = token("rsa-1", json!({"sub": "alice"}));
    let bob = token("ec-1", json!({"sub": "bob", "groups": ["sre"]}));
    let browser = browser(&driver, false).await;

    // Approve: the link leads to the sign-in, then back to the approval.
    let (paused, url) = ask(&server, &alice, "p1").await;
    browser.goto(&url).await.unwrap();
    sign_in(&browser, &bob).await;
    let approve = browser.wait().for_element(Locator::Css("#approve")).await.expect("the approval page");
    let page = text_of(&browser).await;
    assert!(page.contains("db.drop_partition") && page.contains("user:alice") && page.contains("group:sre"), "{page}");
    screenshot(&browser, "approval").await;
    let still = retry(&server, &paused).await;
    assert_eq!(still["result"]["resultType"], "input_required", "not yet: {still}");
    approve.click().await.unwrap();
    browser.wait().for_element(Locator::Css(".status.approved")).await.expect("approved");
    screenshot(&browser, "approved").await;
    let done = retry(&server, &paused).await;
    assert_eq!(done["result"]["content"][0]["text"], "dropped p1 on orders", "{done}");

    // Edit: the arguments in the text area, changed.
    let (paused, url) = ask(&server, &alice, "p2").await;
    browser.goto(&url).await.unwrap();
    let args = browser.wait().for_element(Locator::Css("#args")).await.expect("the edit form");
    args.clear().await.unwrap();
    args.send_keys(r#"{"partition": "p2-archive", "database": "orders"}"#).await.unwrap();
    screenshot(&browser, "edit").await;
    browser.find(Locator::Css("#edit")).await.unwrap().click().await.unwrap();
    browser.wait().for_element(Locator::Css(".status.edited")).await.expect("edited");
    let done = retry(&server, &paused).await;
    assert_eq!(done["result"]["content"][0]["text"], "dropped p2-archive on orders", "{done}");

    // Reject, with a reason the caller gets.
    let (paused, url) = ask(&server, &alice, "p3").await;
    browser.goto(&url).await.unwrap();
    let reason = browser.wait().for_element(Locator::Css("#reject-message")).await.expect("the reject form");
    reason.send_keys("Not during the freeze").await.unwrap();
    browser.find(Locator::Css("#reject")).await.unwrap().click().await.unwrap();
    browser.wait().for_element(Locator::Css(".status.rejected")).await.expect("rejected");
    screenshot(&browser, "rejected").await;
    let done = retry(&server, &paused).await;
    assert_eq!(done["result"]["content"][0]["text"], "Not during the freeze", "{done}");
    assert_eq!(done["result"]["isError"], true);

    // The list of approvals, and the pages on a phone.
    browser.goto(&format!("http://{}/approvals", server.addr)).await.unwrap();
    screenshot(&browser, "list").await;
    browser.close().await.unwrap();
    let phone = self::browser(&driver, true).await;
    let (_, url) = ask(&server, &alice, "p4").await;
    phone.goto(&url).await.unwrap();
    sign_in(&phone, &bob).await;
    phone.wait().for_element(Locator::Css("#approve")).await.expect("the approval page on a phone");
    let widths =
        phone.execute("return [document.documentElement.scrollWidth, window.innerWidth];", vec![]).await.unwrap();
    let (scroll, inner) = (widths[0].as_f64().unwrap(), widths[1].as_f64().unwrap());
    assert!(inner <= 400.0 && scroll <= inner, "no sideways scrolling on a phone: {scroll}px in {inner}px");
    screenshot(&phone, "approval-phone").await;
    phone.close().await.unwrap();
}

#[tokio::test]
async fn a_secret_typed_in_chromium_reaches_the_agent_and_nothing_else() {
    let Some(driver) = driver().await else { return };
    let hook = Receiver::start(0).await;
    let folder = Folder::new(&format!(
        "[auth.jwt]\nissuer = \"https://idp.example\"\naudience = \"hitl\"\njwks_file = \"jwks.json\"\n\n\
         [[notify]]\nurl = \"{}\"\n\n[audit]\nfile = \"audit.jsonl\"\n",
        hook.url
    ));
    let log = folder.0.join("server.log");
    let mut command = Command::new(Server::program());
    command.arg("serve").args(["--listen", "127.0.0.1:0", "--config", &folder.config()]);
    command.stderr(std::fs::File::create(&log).unwrap());
    let server =
        Server::spawn_command_with_env(command, &[("HITL_SECRET", crate::harness::TEST_SECRET), ("RUST_LOG", "debug")]);
    server.wait_healthy().await;
    let alice = token("rsa-1", json!({"sub": "alice"}));

    let asked = request_as(
        &server,
        Some(&alice),
        url_client(),
        1,
        "tools/call",
        json!({"name": "connect_github", "arguments": {}}),
    )
    .await;
    let (key, question) = asked.body["result"]["inputRequests"].as_object().unwrap().iter().next().unwrap();
    let url = question["params"]["url"].as_str().unwrap().to_owned();
    let state = asked.body["result"]["requestState"].clone();

    let browser = browser(&driver, false).await;
    browser.goto(&url).await.unwrap();
    sign_in(&browser, &alice).await;
    let field = browser.wait().for_element(Locator::Css("#value")).await.expect("the secret page");
    assert_eq!(field.attr("type").await.unwrap().as_deref(), Some("password"), "typed unseen");
    screenshot(&browser, "secret").await;
    let secret = "ghp_browserS3cr3tT0ken";
    field.send_keys(secret).await.unwrap();
    browser.find(Locator::Css("#save")).await.unwrap().click().await.unwrap();
    browser.wait().for_element(Locator::XPath("//*[contains(text(), 'Saved')]")).await.expect("saved");
    screenshot(&browser, "secret-saved").await;
    browser.close().await.unwrap();

    let params = json!({"name": "connect_github", "arguments": {}, "requestState": state,
                        "inputResponses": { key.as_str(): {"action": "accept"} }});
    let done = request_as(&server, Some(&alice), url_client(), 2, "tools/call", params).await;
    let expected = crate::auth::sha256_hex(secret);
    assert_eq!(done.body["result"]["structuredContent"]["token_sha256"], expected.as_str(), "{}", done.body);
    folder.wait_audit("the secret page's answer", |e| e["page"]["type"] == "secret").await;
    drop(server);
    let everywhere = [
        asked.body.to_string(),
        done.body.to_string(),
        std::fs::read_to_string(folder.0.join("audit.jsonl")).unwrap(),
        std::fs::read_to_string(&log).unwrap(),
        hook.got().iter().map(|h| String::from_utf8_lossy(&h.raw).into_owned()).collect(),
    ];
    for (what, text) in
        ["the first reply", "the result", "the audit file", "the log", "the webhooks"].iter().zip(&everywhere)
    {
        assert!(!text.contains(secret), "the secret is in {what}");
    }
}
