//! `[[notify]]`: a JSON POST to each webhook on pending and decided approvals (or, with
//! `kind = "email"`, a mail per pending approval through an SMTP server), retried
//! with backoff and never in the way of the round (each delivery is its own task).
//! Each attempt carries `X-Hitl-Timestamp` (its time, unix seconds), `X-Hitl-Delivery`
//! (the same for every attempt of one event) and, with a secret,
//! `X-Hitl-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`, so a receiver
//! can refuse a replayed delivery.
//!
//! Bodies carry plain links to the approval (sign-in required); single-use sign-in links
//! only for targets with `single_use_links` (a destination private to one approver).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hitl_protocol::display;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport as _, Message, Tokio1Executor};
use ring::hmac;
use serde::Deserialize;
use serde_json::{Value, json};

/// The signature header.
pub const SIGNATURE_HEADER: &str = "x-hitl-signature";
/// The header with the attempt's time (unix seconds), which the signature covers.
pub const TIMESTAMP_HEADER: &str = "x-hitl-timestamp";
/// The header naming the delivery: the same for every attempt of one event.
pub const DELIVERY_HEADER: &str = "x-hitl-delivery";

/// How many times a delivery is tried, and the first pause between tries (doubled
/// after each).
pub const ATTEMPTS: u32 = 5;
const FIRST_PAUSE: Duration = Duration::from_millis(500);

/// The body a webhook gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `{"event", "approval", "link"}`.
    #[default]
    Json,
    /// A Slack incoming webhook's `{"text"}`.
    Slack,
}

/// One `[[notify]]`.
#[derive(Debug, Clone)]
pub struct Target {
    /// Where to POST; for an email target, the SMTP server (`smtp://`, `smtps://`).
    pub url: http::Uri,
    /// An email target's addresses (`kind = "email"`; none: a webhook).
    pub mail: Option<Mail>,
    /// The HMAC key (from `secret_env`), if any.
    pub secret: Option<Vec<u8>>,
    /// The body's shape.
    pub format: Format,
    /// Put a signed single-use sign-in link for each `user:` approver in the body: only
    /// for a destination private to one approver (whoever reads it can use the links).
    pub single_use_links: bool,
}

/// An email target: who gets the mail, from whom, and the SMTP password (sent only over
/// TLS: `smtps://`, or `smtp://` with STARTTLS required).
#[derive(Debug, Clone)]
pub struct Mail {
    to: Vec<Mailbox>,
    from: Mailbox,
    password: Option<String>,
}

impl Mail {
    /// Checks the addresses.
    pub fn new(to: &[String], from: &str, password: Option<String>) -> Result<Self, String> {
        if to.is_empty() {
            return Err("to: name at least one address".into());
        }
        let parse = |a: &str| a.parse::<Mailbox>().map_err(|e| format!("{a:?} is not an email address: {e}"));
        let to = to.iter().map(|a| parse(a)).collect::<Result<_, _>>().map_err(|e| format!("to: {e}"))?;
        Ok(Self { to, from: parse(from).map_err(|e| format!("from: {e}"))?, password })
    }
}

/// Delivers notifications to every target.
#[derive(Clone)]
pub(crate) struct Notifier {
    /// The targets in force (a reload replaces them).
    targets: crate::Reload,
    keys: crate::session::Keys,
    client: Https,
}

/// The pages' one client of http and https URLs (webhooks, Slack's Web API), made at its
/// first use: it reads the system's CA roots.
#[derive(Clone, Default)]
pub(crate) struct Https(Arc<std::sync::OnceLock<Client<hitl_tls::Connector, Full<Bytes>>>>);

impl Https {
    pub(crate) fn get(&self) -> &Client<hitl_tls::Connector, Full<Bytes>> {
        self.0.get_or_init(|| Client::builder(hyper_util::rt::TokioExecutor::new()).build(hitl_tls::system()))
    }
}

impl Notifier {
    pub(crate) fn new(targets: crate::Reload, keys: crate::session::Keys, client: Https) -> Self {
        Self { targets, keys, client }
    }

    /// Sends `event` about `approval` to every target, each in its own task.
    pub(crate) fn send(&self, event: &str, approval: &Value) {
        let reloaded = self.targets.now();
        if reloaded.notify.is_empty() {
            return;
        }
        let client = self.client.get();
        for target in reloaded.notify.iter() {
            if let Some(mail) = &target.mail {
                // A mail per approval that waits; decisions are on the page.
                if event == "approval.pending" {
                    let (server, mail, approval) = (target.url.clone(), mail.clone(), approval.clone());
                    tokio::spawn(async move { deliver_mail(server, mail, approval).await });
                }
                continue;
            }
            let body = match target.format {
                Format::Json if target.single_use_links && event == "approval.pending" => {
                    let links = self.links(approval);
                    json!({ "event": event, "approval": approval, "link": approval["link"], "links": links })
                }
                Format::Json => json!({ "event": event, "approval": approval, "link": approval["link"] }),
                Format::Slack => json!({ "text": slack_text(event, approval) }),
            };
            let body = Bytes::from(body.to_string());
            let delivery = crate::session::random();
            let (client, target) = (client.clone(), target.clone());
            tokio::spawn(async move { deliver(client, target, delivery, body).await });
        }
    }

    /// For each approver named as a user, a signed single-use link that signs them in
    /// to `approval` (the caller's is made too, and refused when used).
    fn links(&self, approval: &Value) -> serde_json::Map<String, Value> {
        let mut links = serde_json::Map::new();
        if let (Some(id), Some(link)) = (approval["id"].as_str(), approval["link"].as_str()) {
            for user in approval["approvers"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if user.starts_with("user:") {
                    links.insert(user.to_owned(), format!("{link}?ticket={}", self.keys.ticket(id, user)).into());
                }
            }
        }
        links
    }
}

fn slack_text(event: &str, approval: &Value) -> String {
    let tool = approval["tool"].as_str().unwrap_or("a tool");
    let link = approval["link"].as_str().unwrap_or_default();
    match event {
        "approval.pending" => {
            let caller = approval["caller"].as_str().unwrap_or("someone");
            format!("{caller} asks to run {tool}: <{link}|review it>")
        }
        _ => {
            let status = crate::ApprovalStatus::of_entry(approval).map_or("decided", crate::ApprovalStatus::as_str);
            let by = approval["decided_by"].as_str().unwrap_or("no one");
            format!("{tool}: {status} by {by} (<{link}|details>)")
        }
    }
}

/// The mail of a pending `approval`: a subject with the tool and who asked, and the
/// call in plain text and HTML, every value shown as the page shows it, with the link.
fn mail_message(mail: &Mail, approval: &Value) -> Result<Message, String> {
    let text = |key: &str, or: &str| display::escape(approval[key].as_str().unwrap_or(or)).into_owned();
    let (tool, caller, link) = (text("tool", "a tool"), text("caller", "an anonymous caller"), text("link", ""));
    let policy = text("policy", "");
    let arguments = display::json_pretty(&approval["arguments"]);
    let plain = format!(
        "{caller} asks to run {tool}.\n\nPolicy: {policy}\nArguments:\n{arguments}\n\nReview it (sign in first): {link}\n"
    );
    let html = maud::html! {
        p { (caller) " asks to run " code { (tool) } "." }
        p { "Policy: " code { (policy) } }
        pre { (arguments) }
        p { a href=(link) { "Review it" } " (sign in first)." }
    };
    let mut builder =
        Message::builder().from(mail.from.clone()).subject(format!("Approval needed: {tool} for {caller}"));
    for to in &mail.to {
        builder = builder.to(to.clone());
    }
    builder
        .multipart(MultiPart::alternative_plain_html(plain, html.into_string()))
        .map_err(|e| format!("the mail could not be made: {e}"))
}

/// The SMTP transport of `server`: `smtps://` (TLS from the start), or `smtp://` with
/// STARTTLS, required when a password is sent (`smtp://user@host`), else when offered.
fn smtp(server: &http::Uri, password: Option<&str>) -> Result<AsyncSmtpTransport<Tokio1Executor>, String> {
    let host = server.host().ok_or("the SMTP URL names no host")?.to_owned();
    let wrapped = server.scheme_str() == Some("smtps");
    let port = server.port_u16().unwrap_or(if wrapped { 465 } else { 25 });
    let parameters = TlsParameters::new(host.clone()).map_err(|e| format!("TLS for {host}: {e}"))?;
    let tls = match (wrapped, password) {
        (true, _) => Tls::Wrapper(parameters),
        (false, Some(_)) => Tls::Required(parameters),
        (false, None) => Tls::Opportunistic(parameters),
    };
    let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host).port(port).tls(tls);
    if let Some(password) = password {
        let authority = server.authority().map_or("", |a| a.as_str());
        let user = authority.rsplit_once('@').map_or("", |(user, _)| user);
        builder = builder.credentials(Credentials::new(user.to_owned(), password.to_owned()));
    }
    Ok(builder.timeout(Some(Duration::from_secs(20))).build())
}

/// Sends the mail of `approval` through `server`, tried [`ATTEMPTS`] times with backoff
/// as webhooks are, off the request path.
async fn deliver_mail(server: http::Uri, mail: Mail, approval: Value) {
    let built = mail_message(&mail, &approval).and_then(|m| Ok((m, smtp(&server, mail.password.as_deref())?)));
    let (message, transport) = match built {
        Ok(built) => built,
        Err(error) => return tracing::error!(%server, %error, "an approval mail cannot be sent"),
    };
    let mut pause = FIRST_PAUSE;
    for attempt in 1..=ATTEMPTS {
        match transport.send(message.clone()).await {
            Ok(_) => return,
            Err(error) => tracing::warn!(%server, attempt, %error, "an approval mail was not delivered"),
        }
        if attempt < ATTEMPTS {
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
    }
    tracing::error!(%server, "an approval mail was dropped after {ATTEMPTS} attempts");
}

/// `sha256=<hex>` of `<timestamp>.<body>` under `key`.
pub fn signature(key: &[u8], timestamp: u64, body: &[u8]) -> String {
    let mut context = hmac::Context::with_key(&hmac::Key::new(hmac::HMAC_SHA256, key));
    context.update(format!("{timestamp}.").as_bytes());
    context.update(body);
    format!("sha256={}", hitl_thread::hex(context.sign().as_ref()))
}

async fn deliver(client: Client<hitl_tls::Connector, Full<Bytes>>, target: Target, delivery: String, body: Bytes) {
    let mut pause = FIRST_PAUSE;
    for attempt in 1..=ATTEMPTS {
        let timestamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut request = http::Request::post(target.url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::USER_AGENT, "hitl")
            .header("x-hitl-delivery-attempt", attempt.to_string())
            .header(TIMESTAMP_HEADER, timestamp.to_string())
            .header(DELIVERY_HEADER, delivery.as_str());
        if let Some(key) = &target.secret {
            request = request.header(SIGNATURE_HEADER, signature(key, timestamp, &body));
        }
        let request = request.body(Full::new(body.clone())).expect("a valid request");
        let outcome = tokio::time::timeout(Duration::from_secs(10), client.request(request)).await;
        let why = match outcome {
            Ok(Ok(response)) if response.status().is_success() => return,
            Ok(Ok(response)) => format!("HTTP {}", response.status()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer within 10 s".to_owned(),
        };
        tracing::warn!(url = %target.url, attempt, error = %why, "a notification was not delivered");
        if attempt < ATTEMPTS {
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
    }
    tracing::error!(url = %target.url, "a notification was dropped after {ATTEMPTS} attempts");
}

#[cfg(test)]
mod tests {
    #[test]
    fn signatures_are_the_hex_hmac_of_the_timestamp_a_dot_and_the_body() {
        // `printf '1796000000.{}' | openssl dgst -sha256 -hmac Jefe`
        let s = super::signature(b"Jefe", 1_796_000_000, b"{}");
        assert_eq!(s, "sha256=d6aa55d7abf4e274a6a29bb2e30a22a26566c8515a422e1b9869e58b9d8785f7");
        assert_ne!(s, super::signature(b"Jefe", 1_796_000_001, b"{}"), "another time, another signature");
    }
}
