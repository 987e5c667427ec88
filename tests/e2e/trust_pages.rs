//! The gate can be trusted (issue #28), over HTTP against the hitl program: each test
//! plays the attack or the mistake and shows it fails. A webhook's body is not a way
//! in (plain links by default; a single-use link never signs in the caller), a page
//! session ends when its access does (its token leaves the tokens file, its JWT's `exp`
//! passes, its subject is no longer an approver, `/logout` on any replica, its
//! `session_ttl`), a form's CSRF token is its session's alone, sign-ins are throttled,
//! and webhook signatures cover a timestamp.

use bytes::Bytes;
use serde_json::json;

use crate::approvals::{Folder, Hook, Receiver, api, csrf_of, eventually, request_as_client, signature_of};
use crate::harness::{Client, Server, TEST_SECRET};

/// Tokens `tok-cara` and `tok-dan` (people of these tests alone: other tests watching
/// a shared store's approvals as bob see none of theirs); `greeter` reviewed by
/// `approvers`; `extra` after.
fn gate(approvers: &str, extra: &str) -> Folder {
    let config = format!(
        "[auth]\ntokens_file = \"tokens.txt\"\n\n[[policy]]\ntools = [\"greeter\"]\naction = \"review\"\n\
         approvers = [{approvers}]\n\n{extra}"
    );
    let folder = Folder::new(&config);
    std::fs::write(folder.0.join("tokens.txt"), "cara tok-cara\ndan tok-dan\n").unwrap();
    folder
}

/// A signed `[[notify]]` to `url`, with `more` lines.
fn notify(url: &str, more: &str) -> String {
    format!("[[notify]]\nurl = \"{url}\"\nsecret_env = \"HITL_WEBHOOK_SECRET\"\n{more}\n")
}

/// `name=value` of the `Set-Cookie` for cookie `name`, if the answer sets it.
fn set_cookie(headers: &http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with(&format!("{name}=")))
        .map(str::to_owned)
}

/// A browser's cookies after signing in: the CSRF cookie and the session.
#[derive(Debug, Clone)]
struct Visitor {
    csrf_cookie: String,
    session: String,
}

impl Visitor {
    fn cookies(&self) -> String {
        format!("{}; {}", self.csrf_cookie, self.session)
    }
}

/// A `GET` with `cookie` (and `Accept: accept` when given).
async fn get(server: &Client, path: &str, cookie: &str, accept: Option<&str>) -> (u16, http::HeaderMap, String) {
    let mut headers = vec![("cookie", cookie)];
    if let Some(accept) = accept {
        headers.push(("accept", accept));
    }
    server.raw(http::Method::GET, path, &headers, Bytes::new()).await
}

/// A form `POST` with `cookie`.
async fn post(server: &Client, path: &str, cookie: &str, body: String) -> (u16, http::HeaderMap, String) {
    let headers = [("content-type", "application/x-www-form-urlencoded"), ("cookie", cookie)];
    server.raw(http::Method::POST, path, &headers, Bytes::from(body)).await
}

/// The login form's CSRF cookie and token (a visitor with no session).
async fn login_form(server: &Client) -> (String, String) {
    let (status, headers, html) = server.raw(http::Method::GET, "/login", &[], Bytes::new()).await;
    assert_eq!(status, 200, "{html}");
    csrf_of(&headers, &html)
}

/// Signs in with `token` on `/login`, keeping `csrf` (cookie, token) when given.
async fn sign_in(server: &Client, token: &str, csrf: Option<(String, String)>) -> Visitor {
    let (csrf_cookie, csrf) = match csrf {
        Some(given) => given,
        None => login_form(server).await,
    };
    let (status, headers, html) =
        post(server, "/login", &csrf_cookie, format!("csrf={csrf}&token={token}&next=/approvals")).await;
    assert_eq!(status, 303, "signed in: {html}");
    let session = set_cookie(&headers, "hitl_session").expect("a session cookie");
    Visitor { csrf_cookie, session: session.split(';').next().unwrap().to_owned() }
}

/// The page at `path` as the holder of `token`, signed in on `/login`.
pub(crate) async fn page_as(server: &Client, token: &str, path: &str) -> String {
    let visitor = sign_in(server, token, None).await;
    let (status, _, html) = get(server, path, &visitor.cookies(), None).await;
    assert_eq!(status, 200, "{html}");
    html
}

/// Decides on the page at `path` as the holder of `token`, signed in: posts the page's
/// form with `fields` (`decision=approve`, …) and its CSRF token; the response status.
pub(crate) async fn decide_on_page(server: &Client, token: &str, path: &str, fields: &str) -> u16 {
    let visitor = sign_in(server, token, None).await;
    let (_, _, html) = get(server, path, &visitor.cookies(), None).await;
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).and_then(|r| r.split('"').next()).expect("a form");
    post(server, path, &visitor.cookies(), format!("csrf={csrf}&{fields}")).await.0
}

/// `GET /approvals` as `visitor`: 200 signed in, 303 to `/login` signed out.
async fn listing(server: &Client, visitor: &Visitor) -> u16 {
    get(server, "/approvals", &visitor.cookies(), None).await.0
}

/// Asserts `visitor` is treated as signed out: the page sends them to sign in, drops
/// the cookie, and a request for JSON gets 401.
async fn assert_signed_out(server: &Client, visitor: &Visitor, why: &str) {
    let (status, headers, _) = get(server, "/approvals", &visitor.cookies(), None).await;
    assert_eq!(status, 303, "{why}");
    assert!(headers["location"].to_str().unwrap().starts_with("/login"), "{why}: {headers:?}");
    let dropped = set_cookie(&headers, "hitl_session").unwrap_or_default();
    assert!(dropped.contains("Max-Age=0"), "{why}: the cookie is dropped: {dropped}");
    let (status, _, body) = get(server, "/approvals", &visitor.cookies(), Some("application/json")).await;
    assert_eq!(status, 401, "{why}: {body}");
}

/// Waits until `visitor`'s session is refused (pages poll nothing: the next request
/// sees it).
async fn wait_signed_out(server: &Client, visitor: &Visitor, why: &str) {
    let probe = || async { (listing(server, visitor).await == 303).then_some(()) };
    eventually(|| format!("{why}: the session still works"), probe).await;
    assert_signed_out(server, visitor, why).await;
}

/// Cara calls `greeter`: its approval id and page path.
async fn cara_calls(server: &Server) -> (String, String) {
    let asked = request_as_client(server, "tok-cara", 1, json!({"name": "greeter", "arguments": {}})).await;
    let question = asked.body["result"]["inputRequests"].as_object().unwrap().values().next().unwrap().clone();
    let url = question["params"]["url"].as_str().unwrap_or_else(|| panic!("a URL question: {}", asked.body));
    let path = url.strip_prefix(&format!("http://{}", server.addr)).unwrap().to_owned();
    (path.rsplit('/').next().unwrap().to_owned(), path)
}

/// The pending notification of approval `id`.
async fn pending(hook: &Receiver, id: &str) -> Hook {
    hook.wait_for("pending", |h| h.body["event"] == "approval.pending" && h.body["approval"]["id"] == id).await
}

#[tokio::test]
async fn a_webhook_body_carries_plain_links_that_need_a_sign_in_by_default() {
    let hook = Receiver::start(0).await;
    let folder = gate("\"user:dan\"", &notify(&hook.url, ""));
    let server = folder.serve(&[]).await;
    let (id, path) = cara_calls(&server).await;
    let got = pending(&hook, &id).await;
    let raw = String::from_utf8_lossy(&got.raw);
    assert!(!raw.contains("ticket="), "no single-use link in the body: {raw}");
    assert!(got.body.get("links").is_none(), "{raw}");
    assert_eq!(got.body["link"], format!("http://{}{path}", server.addr), "{raw}");
    // Whoever reads the channel gets a link that asks them to sign in.
    let (status, headers, _) = server.raw(http::Method::GET, &path, &[], Bytes::new()).await;
    assert_eq!(status, 303);
    assert!(headers["location"].to_str().unwrap().starts_with("/login?next="), "{headers:?}");
    assert!(set_cookie(&headers, "hitl_session").is_none());
}

#[tokio::test]
async fn a_single_use_link_never_signs_in_the_caller_even_as_a_named_approver() {
    let hook = Receiver::start(0).await;
    let folder = gate("\"user:cara\", \"user:dan\"", &notify(&hook.url, "single_use_links = true"));
    let server = folder.serve(&[]).await;
    let (id, path) = cara_calls(&server).await;
    let got = pending(&hook, &id).await;
    let link_of = |who: &str| {
        let link = got.body["links"][who].as_str().unwrap_or_else(|| panic!("a link for {who}: {}", got.body));
        assert!(link.contains("?ticket="), "{link}");
        link.strip_prefix(&format!("http://{}", server.addr)).unwrap().to_owned()
    };
    let (caras, dans) = (link_of("user:cara"), link_of("user:dan"));
    for attempt in ["first", "second"] {
        let (status, headers, html) = server.raw(http::Method::GET, &caras, &[], Bytes::new()).await;
        assert_eq!(status, 403, "the caller's link, {attempt} use: {html}");
        assert!(set_cookie(&headers, "hitl_session").is_none(), "no session for the caller");
        assert!(html.contains("You made this call"), "{html}");
    }
    // The other approver's link still signs them in, to that approval.
    let (status, headers, _) = server.raw(http::Method::GET, &dans, &[], Bytes::new()).await;
    assert_eq!((status, headers["location"].to_str().unwrap()), (303, path.as_str()));
    let session = set_cookie(&headers, "hitl_session").expect("dan's session");
    let (status, _, html) = get(&server, &path, session.split(';').next().unwrap(), None).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Signed in as user:dan") && html.contains("id=\"approve\""), "{html}");
}

#[tokio::test]
async fn a_session_ends_when_its_token_leaves_the_tokens_file() {
    let folder = gate("\"user:dan\"", "");
    let server = folder.serve(&[]).await;
    let (dan, cara) = (sign_in(&server, "tok-dan", None).await, sign_in(&server, "tok-cara", None).await);
    assert_eq!(listing(&server, &dan).await, 200);
    assert_eq!(listing(&server, &cara).await, 200);
    std::fs::write(folder.0.join("tokens.txt"), "cara tok-cara\n").unwrap();
    wait_signed_out(&server, &dan, "dan's token left the file").await;
    assert_eq!(listing(&server, &cara).await, 200, "cara's token is still there");
    let api = api(&server, "tok-dan", http::Method::GET, "/api/approvals", None).await;
    assert_eq!(api.status, 401, "{}", api.body);
    // And it no longer signs in.
    let (csrf_cookie, csrf) = login_form(&server).await;
    let (status, _, _) = post(&server, "/login", &csrf_cookie, format!("csrf={csrf}&token=tok-dan")).await;
    assert_eq!(status, 401, "a removed token does not sign in");
}

#[tokio::test]
async fn a_cookie_copied_before_logout_is_refused_after_it() {
    let folder = gate("\"user:dan\"", "");
    let server = folder.serve(&[]).await;
    let dan = sign_in(&server, "tok-dan", None).await;
    let copied = dan.clone();
    let (status, headers, html) = get(&server, "/approvals", &dan.cookies(), None).await;
    assert_eq!(status, 200, "{html}");
    assert!(set_cookie(&headers, "hitl_csrf").is_none());
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).and_then(|r| r.split('"').next()).unwrap().to_owned();
    let (status, headers, _) = post(&server, "/logout", &dan.cookies(), format!("csrf={csrf}")).await;
    assert_eq!((status, headers["location"].to_str().unwrap()), (303, "/login"));
    assert!(set_cookie(&headers, "hitl_session").unwrap().contains("Max-Age=0"));
    assert_signed_out(&server, &copied, "the cookie was copied before /logout").await;
    assert_eq!(listing(&server, &sign_in(&server, "tok-dan", None).await).await, 200, "a new sign-in works");
}

#[tokio::test]
async fn a_session_signed_out_on_one_replica_is_refused_on_another() {
    let Some(url) = crate::harness::redis_url("page sessions on replicas") else { return };
    let folder = gate("\"user:dan\"", "");
    let (a, b) = (folder.serve(&["--store", &url]).await, folder.serve(&["--store", &url]).await);
    let dan = sign_in(&a, "tok-dan", None).await;
    assert_eq!(listing(&b, &dan).await, 200, "the session works on both");
    let (_, _, html) = get(&a, "/approvals", &dan.cookies(), None).await;
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).and_then(|r| r.split('"').next()).unwrap().to_owned();
    let (status, _, _) = post(&a, "/logout", &dan.cookies(), format!("csrf={csrf}")).await;
    assert_eq!(status, 303);
    assert_signed_out(&b, &dan, "signed out on the other replica").await;
    assert_signed_out(&a, &dan, "signed out here").await;
}

#[tokio::test]
async fn a_csrf_token_from_another_session_is_refused() {
    let folder = gate("\"user:dan\"", "");
    let server = folder.serve(&[]).await;
    let (_, path) = cara_calls(&server).await;
    // Two sessions of one browser (the same CSRF cookie): only the session differs.
    let form = login_form(&server).await;
    let (one, two) =
        (sign_in(&server, "tok-dan", Some(form.clone())).await, sign_in(&server, "tok-dan", Some(form)).await);
    let token_of =
        |html: &str| html.split("name=\"csrf\" value=\"").nth(1).and_then(|r| r.split('"').next()).unwrap().to_owned();
    let (status, _, html) = get(&server, &path, &one.cookies(), None).await;
    assert_eq!(status, 200, "{html}");
    let ones = token_of(&html);
    let (status, _, html) = post(&server, &path, &two.cookies(), format!("csrf={ones}&decision=approve")).await;
    assert_eq!(status, 403, "session one's token on session two: {html}");
    assert!(html.contains("Form refused"), "{html}");
    let (_, _, html) = get(&server, &path, &two.cookies(), None).await;
    assert!(html.contains("id=\"approve\""), "still undecided: {html}");
    let twos = token_of(&html);
    assert_ne!(ones, twos);
    let (status, _, html) = post(&server, &path, &two.cookies(), format!("csrf={twos}&decision=approve")).await;
    assert_eq!(status, 303, "its own token: {html}");
}

#[tokio::test]
async fn the_eleventh_failed_sign_in_in_a_minute_gets_429_and_failures_are_logged_without_the_token() {
    let folder = gate("\"user:dan\"", "");
    let log = folder.0.join("server.log");
    let mut command = std::process::Command::new(Server::program());
    command.arg("serve").args(["--listen", "127.0.0.1:0", "--config", &folder.config()]);
    command.stderr(std::fs::File::create(&log).unwrap());
    let server = Server::spawn_command_with_env(command, &[("HITL_SECRET", TEST_SECRET)]);
    server.wait_healthy().await;

    let (csrf_cookie, csrf) = login_form(&server).await;
    for n in 1..=10 {
        let (status, headers, _) =
            post(&server, "/login", &csrf_cookie, format!("csrf={csrf}&token=wrong-token-{n}")).await;
        assert_eq!(status, 401, "failure {n}");
        assert!(headers.get("retry-after").is_none());
    }
    let (status, headers, html) =
        post(&server, "/login", &csrf_cookie, format!("csrf={csrf}&token=wrong-token-11")).await;
    assert_eq!(status, 429, "{html}");
    let wait: u64 = headers["retry-after"].to_str().unwrap().parse().expect("Retry-After in seconds");
    assert!((1..=60).contains(&wait), "{wait}");
    let (status, headers, _) = post(&server, "/login", &csrf_cookie, format!("csrf={csrf}&token=tok-dan")).await;
    assert_eq!(status, 429, "even a good token waits");
    assert!(set_cookie(&headers, "hitl_session").is_none());
    // The API's bearer tokens are not the sign-in form: not held back.
    assert_eq!(api(&server, "tok-dan", http::Method::GET, "/api/approvals", None).await.status, 200);

    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let probe = || async { (read().matches("a sign-in to the pages failed").count() >= 10).then_some(()) };
    eventually(|| format!("ten failures logged: {}", read()), probe).await;
    let text = read();
    let failures: Vec<&str> = text.lines().filter(|l| l.contains("a sign-in to the pages failed")).collect();
    assert!(failures.iter().all(|l| l.contains("WARN") && l.contains("127.0.0.1")), "{failures:#?}");
    assert!(!text.contains("wrong-token"), "no token is logged: {text}");
}

#[tokio::test]
async fn session_ttl_sets_how_long_a_session_lasts() {
    let folder = gate("\"user:dan\"", "[approvals]\nsession_ttl = 4\n");
    let server = folder.serve(&[]).await;
    let (csrf_cookie, csrf) = login_form(&server).await;
    let (status, headers, _) = post(&server, "/login", &csrf_cookie, format!("csrf={csrf}&token=tok-dan")).await;
    assert_eq!(status, 303);
    let set = set_cookie(&headers, "hitl_session").unwrap();
    let max_age: u64 = set.split("Max-Age=").nth(1).and_then(|r| r.split(';').next()).unwrap().parse().unwrap();
    assert!((1..=4).contains(&max_age), "{set}");
    let dan = Visitor { csrf_cookie, session: set.split(';').next().unwrap().to_owned() };
    wait_signed_out(&server, &dan, "past session_ttl").await;

    // A lifetime of nothing is a mistake `hitl check` names.
    let zero = gate("\"user:dan\"", "[approvals]\nsession_ttl = 0\n");
    let out = std::process::Command::new(Server::program())
        .args(["check", "--config", &zero.config()])
        .env("HITL_SECRET", TEST_SECRET)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("[approvals] session_ttl"), "{err}");
}

/// JWT sign-in, `greeter` reviewed by `approvers`.
fn jwt_gate(approvers: &str) -> String {
    format!(
        "[auth.jwt]\nissuer = \"https://idp.example\"\naudience = \"hitl\"\njwks_file = \"jwks.json\"\n\n\
         [[policy]]\ntools = [\"greeter\"]\naction = \"review\"\napprovers = [{approvers}]\n"
    )
}

#[tokio::test]
async fn a_jwt_session_ends_at_its_exp_and_when_its_subject_is_no_longer_an_approver() {
    let folder = Folder::new(&jwt_gate("\"group:sre\""));
    let server = folder.serve(&[]).await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let brief = crate::auth::token("ec-1", json!({"sub": "bob", "groups": ["sre"], "exp": now + 3}));
    let bob = sign_in(&server, &brief, None).await;
    let carol = sign_in(&server, &crate::auth::token("rsa-1", json!({"sub": "carol", "groups": ["sre"]})), None).await;
    assert_eq!(listing(&server, &carol).await, 200);
    wait_signed_out(&server, &bob, "past the JWT's exp").await;
    assert_eq!(listing(&server, &carol).await, 200, "a JWT still good");
    drop(server);

    // The policy changes: carol's group approves nothing now, so her session ends.
    std::fs::write(folder.0.join("hitl.toml"), jwt_gate("\"group:dev\"")).unwrap();
    let server = folder.serve(&[]).await;
    assert_signed_out(&server, &carol, "no longer an approver").await;
}

#[tokio::test]
async fn webhook_deliveries_are_signed_over_their_timestamp_and_name_their_delivery() {
    let hook = Receiver::start(1).await;
    let folder = gate("\"user:dan\"", &notify(&hook.url, ""));
    let server = folder.serve(&[]).await;
    let (id, _) = cara_calls(&server).await;
    let ours = |h: &Hook, event: &str| h.body["event"] == event && h.body["approval"]["id"] == id.as_str();
    hook.wait_for("a retried delivery", |h| ours(h, "approval.pending") && h.headers["x-hitl-delivery-attempt"] == "2")
        .await;
    let attempts: Vec<Hook> = hook.got().into_iter().filter(|h| ours(h, "approval.pending")).collect();
    assert_eq!(attempts.len(), 2);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    for h in &attempts {
        let timestamp: u64 = h.headers["x-hitl-timestamp"].to_str().unwrap().parse().expect("unix seconds");
        assert!(now.abs_diff(timestamp) <= 300, "within the receiver's 5-minute window: {timestamp} at {now}");
        // The documented check: HMAC-SHA256 of "<timestamp>.<body>".
        let signed = [format!("{timestamp}.").as_bytes(), &h.raw].concat();
        let given = h.headers["x-hitl-signature"].to_str().unwrap();
        assert_eq!(given, signature_of(&signed));
        assert_ne!(given, signature_of(&h.raw), "not the body alone any more");
        // A replay under another time fails the check.
        let replayed = [format!("{}.", timestamp + 1).as_bytes(), &h.raw].concat();
        assert_ne!(given, signature_of(&replayed));
    }
    let delivery = |h: &Hook| h.headers["x-hitl-delivery"].to_str().unwrap().to_owned();
    assert!(!delivery(&attempts[0]).is_empty());
    assert_eq!(delivery(&attempts[0]), delivery(&attempts[1]), "one delivery id for every attempt");

    let decided = api(
        &server,
        "tok-dan",
        http::Method::POST,
        &format!("/api/approvals/{id}/decision"),
        Some(json!({"decision": "approve"})),
    )
    .await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    let decided = hook.wait_for("decided", |h| ours(h, "approval.decided")).await;
    assert_ne!(delivery(&decided), delivery(&attempts[0]), "another event, another delivery");
}
