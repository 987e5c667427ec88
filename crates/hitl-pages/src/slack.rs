//! `[slack]`: each pending approval as a message in one channel, with **Approve** and
//! **Reject** buttons (Block Kit) and a link to its page for edit and respond; the
//! buttons' callbacks at `POST /integrations/slack/interactions`, decided under the
//! page's rules; the message updated in place (`chat.update`) once the approval is
//! decided, wherever that happened.
//!
//! What the message shows is what the page shows, made safe for Slack's `mrkdwn`:
//! every text `verbatim`, `&`, `<` and `>` escaped (no `<!channel>`, mention or link can
//! be injected), names as code spans of at most 200 characters,
//! invisible characters as visible escapes, backticks as `\u0060` (a value can't close
//! its code block), each value cut at [`VALUE_BYTES`] with its size and SHA-256, and
//! the page linked for the whole of it.
//!
//! A callback is taken only with a valid `X-Slack-Signature` (`v0=` hex HMAC-SHA256 of
//! `v0:<timestamp>:<body>` under the signing secret, compared in constant time) and an
//! `X-Slack-Request-Timestamp` within five minutes. Its Slack user decides as the
//! principal `[slack] users` maps it to; an unmapped user gets an ephemeral refusal.
//!
//! The message's channel and `ts` are kept in the store the replicas share (a note
//! under `slack-message:<approval>`), so a decision taken on any replica updates it.
//!
//! ```
//! use hitl_pages::slack::{self, SlackConfig, SlackUser};
//!
//! let config = SlackConfig {
//!     signing_secret: b"8f742231b10e8888abcd99yyyzzz85a5".to_vec(),
//!     bot_token: "xoxb-1".into(),
//!     api_url: "https://slack.com/api".into(),
//!     channel: "C0123456789".into(),
//!     users: [("U0BOB".to_owned(), SlackUser::new("user:bob"))].into(),
//! };
//! let body = b"payload=%7B%7D";
//! let signed = slack::signature(&config.signing_secret, 1_796_000_000, body);
//! assert!(slack::verify(&config.signing_secret, "1796000000", &signed, body, 1_796_000_100).is_ok());
//! assert!(slack::verify(&config.signing_secret, "1796000000", &signed, body, 1_796_000_301).is_err());
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hitl_interrupt::Engine;
use hitl_protocol::display;
use hitl_thread::{About, Notes};
use http::StatusCode;
use http_body_util::{BodyExt as _, Full};
use ring::hmac;
use serde_json::{Map, Value, json};

use crate::session::Session;
use crate::{ApprovalStatus, Refusal, Shared};

/// Where Slack posts the buttons' callbacks.
pub const INTERACTIONS_PATH: &str = "/integrations/slack/interactions";
/// How far a callback's timestamp may be from now, in seconds (Slack's own advice).
pub const MAX_SKEW_SECONDS: u64 = 300;
/// The bytes of one argument value a message shows; past it the value is cut, with its
/// size and SHA-256.
pub const VALUE_BYTES: usize = 500;
/// The characters of one text block a message shows (Slack takes 3,000).
const BLOCK_CHARS: usize = 2_800;
/// The characters of a name (a tool, a caller, an upstream) a message shows.
const NAME_CHARS: usize = 200;
/// How long an update waits for the post of its message (which is retried).
const POST_WAIT: Duration = Duration::from_secs(120);
/// The buttons' action ids: approve this call, approve it and the later calls its
/// policy's `approval_ttl` covers (as the message states), reject.
const APPROVE: &str = "hitl_approve";
const APPROVE_COVERING: &str = "hitl_approve_covering";
const REJECT: &str = "hitl_reject";
const OPEN: &str = "hitl_open";

/// `[slack]`, its secrets read from the environment.
#[derive(Clone)]
pub struct SlackConfig {
    /// Verifies the callbacks (`signing_secret_env`).
    pub signing_secret: Vec<u8>,
    /// Posts and updates messages (`bot_token_env`).
    pub bot_token: String,
    /// Slack's Web API (`https://slack.com/api`), without its last slash.
    pub api_url: String,
    /// The channel the approvals are posted in.
    pub channel: String,
    /// Slack user id → the principal who decides.
    pub users: BTreeMap<String, SlackUser>,
}

impl std::fmt::Debug for SlackConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets.
        f.debug_struct("SlackConfig")
            .field("api_url", &self.api_url)
            .field("channel", &self.channel)
            .field("users", &self.users)
            .finish_non_exhaustive()
    }
}

/// Who a Slack user decides as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackUser {
    /// `user:<id>`.
    pub principal: String,
    /// The `group:<name>` entries it counts as a member of (a page session has those of
    /// its token; a Slack user has those the mapping names).
    pub groups: Vec<String>,
}

impl SlackUser {
    /// `principal`, in no group.
    pub fn new(principal: &str) -> Self {
        Self { principal: principal.to_owned(), groups: Vec::new() }
    }
}

/// Posts and updates the messages, and takes the callbacks.
#[derive(Clone)]
pub(crate) struct Slack {
    config: Arc<SlackConfig>,
    notes: Arc<dyn Notes>,
    client: crate::notify::Https,
}

impl std::fmt::Debug for Slack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.config.fmt(f)
    }
}

/// The store note holding an approval's message (`<channel> <ts>`).
fn message_key(approval: &str) -> String {
    format!("slack-message:{approval}")
}

impl Slack {
    pub(crate) fn new(config: SlackConfig, notes: Arc<dyn Notes>, client: crate::notify::Https) -> Self {
        Self { config: Arc::new(config), notes, client }
    }

    /// Tells Slack of `event` about `entry` (as listed), off the request path: a pending
    /// approval is posted, a decided one's message updated. `arguments`: the call's
    /// whole, redacted (each value is cut here, with the size and digest of the whole).
    pub(crate) fn send(&self, event: &str, entry: &Value, arguments: Option<&Value>, about: Option<&About>) {
        let (Some(id), this) = (entry["id"].as_str().map(str::to_owned), self.clone()) else { return };
        let message = message(entry, arguments, about);
        match event {
            "approval.pending" => {
                let until = entry["expires_at_ms"].as_u64().unwrap_or(0).saturating_add(3_600_000);
                tokio::spawn(async move { this.post(&id, message, until).await });
            }
            _ => {
                tokio::spawn(async move { this.update(&id, message).await });
            }
        }
    }

    async fn post(&self, id: &str, mut message: Map<String, Value>, until_ms: u64) {
        message.insert("channel".into(), self.config.channel.clone().into());
        let message = Value::Object(message);
        let Some(posted) = self.retried("chat.postMessage", &message).await else { return };
        let (Some(channel), Some(ts)) = (posted["channel"].as_str(), posted["ts"].as_str()) else {
            return tracing::error!(approval = %id, "Slack posted the approval but named no channel and ts");
        };
        if let Err(error) = self.notes.put_note(&message_key(id), &format!("{channel} {ts}"), until_ms).await {
            tracing::error!(%error, approval = %id, "the Slack message's ts could not be stored: it will not be updated");
        }
    }

    /// Updates approval `id`'s message, once it is known: a decision may come before
    /// the post that announced it has been answered (which, retried, may take a minute).
    async fn update(&self, id: &str, mut message: Map<String, Value>) {
        let mut pause = Duration::from_millis(250);
        let mut waited = Duration::ZERO;
        let mut found = None;
        while waited < POST_WAIT {
            match self.notes.take_note(&message_key(id)).await {
                Ok(Some(note)) => {
                    found = Some(note);
                    break;
                }
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, approval = %id, "the Slack message's ts could not be read"),
            }
            tokio::time::sleep(pause).await;
            waited += pause;
            pause = (pause * 2).min(Duration::from_secs(8));
        }
        // Posted by no one (Slack was set up after it paused, or the post failed).
        let Some((channel, ts)) = found.as_deref().and_then(|n| n.split_once(' ')) else { return };
        message.insert("channel".into(), channel.into());
        message.insert("ts".into(), ts.into());
        self.retried("chat.update", &Value::Object(message)).await;
    }

    /// Calls `method` of the Web API with `body`, tried as webhooks are.
    async fn retried(&self, method: &str, body: &Value) -> Option<Value> {
        let mut pause = Duration::from_millis(500);
        for attempt in 1..=crate::notify::ATTEMPTS {
            let wait = match self.call(method, body).await {
                Ok(answer) => return Some(answer),
                Err((error, retry_after)) => {
                    tracing::warn!(method, attempt, %error, "a Slack call failed");
                    // Slack's rate limits say how long to wait (at most 30 s here).
                    retry_after.map_or(pause, |after| after.min(Duration::from_secs(30)))
                }
            };
            if attempt < crate::notify::ATTEMPTS {
                tokio::time::sleep(wait).await;
                pause *= 2;
            }
        }
        tracing::error!(method, "a Slack call was dropped after {} attempts", crate::notify::ATTEMPTS);
        None
    }

    /// One call of the Web API: its answer when `ok`, else why not (and, when rate
    /// limited, how long Slack asks to wait).
    async fn call(&self, method: &str, body: &Value) -> Result<Value, (String, Option<Duration>)> {
        let url = format!("{}/{method}", self.config.api_url);
        let request = http::Request::post(url)
            .header(http::header::CONTENT_TYPE, "application/json; charset=utf-8")
            .header(http::header::AUTHORIZATION, format!("Bearer {}", self.config.bot_token))
            .header(http::header::USER_AGENT, "hitl")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| (e.to_string(), None))?;
        let answer = async {
            let response = self.client.get().request(request).await.map_err(|e| (e.to_string(), None))?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok()?.trim().parse().ok())
                .map(Duration::from_secs);
            let bytes = http_body_util::Limited::new(response.into_body(), 1 << 20)
                .collect()
                .await
                .map_err(|e| (e.to_string(), None))?
                .to_bytes();
            if !status.is_success() {
                return Err((format!("HTTP {status}"), retry_after));
            }
            serde_json::from_slice::<Value>(&bytes).map_err(|e| (format!("not JSON: {e}"), None))
        };
        let answer = tokio::time::timeout(Duration::from_secs(10), answer)
            .await
            .map_err(|_| ("no answer within 10 s".to_owned(), None))??;
        match answer["ok"].as_bool() {
            Some(true) => Ok(answer),
            _ => Err((format!("Slack said {}", answer["error"].as_str().unwrap_or("not ok")), None)),
        }
    }

    /// Tells `user` alone, in `channel`, why their click decided nothing.
    fn ephemeral(&self, channel: &str, user: &str, text: &str) {
        let body = json!({ "channel": channel, "user": user, "text": mrkdwn(text), "parse": "none",
                           "link_names": false, "unfurl_links": false });
        let this = self.clone();
        tokio::spawn(async move { this.retried("chat.postEphemeral", &body).await });
    }
}

/// `v0=<hex HMAC-SHA256 of "v0:<timestamp>:<body>">` under `secret`, as Slack signs.
pub fn signature(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let mut context = hmac::Context::with_key(&hmac::Key::new(hmac::HMAC_SHA256, secret));
    context.update(format!("v0:{timestamp}:").as_bytes());
    context.update(body);
    format!("v0={}", hitl_thread::hex(context.sign().as_ref()))
}

/// Checks a callback's `X-Slack-Request-Timestamp` and `X-Slack-Signature` against its
/// body at `now` (unix seconds): the time within [`MAX_SKEW_SECONDS`], the signature
/// compared in constant time.
pub fn verify(secret: &[u8], timestamp: &str, signature: &str, body: &[u8], now: u64) -> Result<(), &'static str> {
    let time: u64 = timestamp.parse().map_err(|_| "no valid X-Slack-Request-Timestamp")?;
    if time.abs_diff(now) > MAX_SKEW_SECONDS {
        return Err("the request's timestamp is more than 5 minutes away (stale or replayed)");
    }
    let tag = signature.strip_prefix("v0=").and_then(from_hex).ok_or("no valid X-Slack-Signature")?;
    let mut signed = format!("v0:{time}:").into_bytes();
    signed.extend_from_slice(body);
    hmac::verify(&hmac::Key::new(hmac::HMAC_SHA256, secret), &signed, &tag)
        .map_err(|_| "the X-Slack-Signature does not match the body")
}

fn from_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) || !hex.is_ascii() {
        return None;
    }
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok()).collect()
}

/// `text` safe in `mrkdwn`: `&`, `<`, `>` escaped, so nothing in it is a mention, a
/// link or a command.
pub fn mrkdwn(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` (already [`display`]-escaped) for a code span or block: [`mrkdwn`], and each
/// backtick as `\u0060`, so the text can't end the code early.
fn code(text: &str) -> String {
    mrkdwn(text).replace('`', "\\u0060")
}

/// `text` in at most [`BLOCK_CHARS`] characters; past them its start and how much there
/// is in all.
fn block_sized(text: String, whole_bytes: usize) -> String {
    if text.chars().count() <= BLOCK_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(BLOCK_CHARS).collect();
    // Never half an escape (`&amp;` cut to `&am`).
    if let Some(at) = cut.rfind('&').filter(|&at| !cut[at..].contains(';')) {
        cut.truncate(at);
    }
    format!("{cut}\n… cut: {whole_bytes} bytes in all; the page shows them whole")
}

/// `name` (a tool, a caller, an upstream) as a code span: escaped, at most
/// [`NAME_CHARS`] characters of it.
fn name(text: &str) -> String {
    let shown = display::escape(text);
    let cut: String = shown.chars().take(NAME_CHARS).collect();
    let more = if cut.len() < shown.len() { "…" } else { "" };
    format!("`{}{more}`", code(&cut))
}

/// A `mrkdwn` text object taken as written: no link, channel name or mention is made
/// of what it holds.
fn mrkdwn_text(text: &str) -> Value {
    json!({"type": "mrkdwn", "text": text, "verbatim": true})
}

/// An approval's message: what asks, what runs, under which policy, and the buttons
/// while it waits; once decided, who decided in their place. `arguments`: the call's,
/// whole and redacted (else the entry's, as listed).
fn message(entry: &Value, arguments: Option<&Value>, about: Option<&About>) -> Map<String, Value> {
    let field = |key: &str| entry[key].as_str();
    let (tool, link) = (field("tool").unwrap_or("a tool"), display::escape(field("link").unwrap_or_default()));
    let caller = field("caller").map_or_else(|| "an anonymous caller".to_owned(), name);
    let status = ApprovalStatus::of_entry(entry).unwrap_or(ApprovalStatus::Pending);
    let runs_on = about.and_then(|a| a.upstream.as_deref()).map(|u| format!(" on {}", name(u))).unwrap_or_default();
    let headline = format!("{caller} asks to run {}{runs_on}", name(tool));
    let mut blocks = vec![section(&block_sized(headline, 0))];
    if let Some(description) = about.and_then(|a| a.description.as_deref()).filter(|d| !d.is_empty()) {
        let shown = display::escape_lines(description);
        blocks.push(section(&block_sized(mrkdwn(&shown), description.len())));
    }
    let arguments = arguments.or_else(|| entry.get("arguments")).filter(|a| !a.is_null()).cloned().unwrap_or(json!({}));
    let cut = match &arguments {
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), crate::capped(v, VALUE_BYTES))).collect())
        }
        other => crate::capped(other, VALUE_BYTES),
    };
    let shown = code(&display::json_pretty(&cut));
    let whole = arguments.to_string().len();
    blocks.push(section(&format!("*Arguments*\n```\n{}\n```", block_sized(shown, whole))));
    let mut facts = vec![format!("Policy `{}`", code(&display::escape(field("policy").unwrap_or_default())))];
    let covers = about.and_then(|a| a.covers.as_deref()).filter(|_| status.is_pending());
    if let Some(covers) = covers {
        facts.push(format!("An approval covers {}", mrkdwn(&display::escape(covers))));
    }
    if let Some(expires) = entry["expires_at_ms"].as_u64().filter(|_| status.is_pending()) {
        facts.push(format!("expires {}", crate::rfc3339(expires)));
    }
    blocks.push(context(&block_sized(facts.join(" · "), 0)));
    let button = |id: &str, label: &str, style: Option<&str>| {
        let mut button = json!({"type": "button", "action_id": id, "value": entry["id"],
                                "text": {"type": "plain_text", "text": label}});
        if let Some(style) = style {
            button["style"] = json!(style);
        }
        button
    };
    let page = |label: &str| json!({"type": "button", "action_id": OPEN, "url": link, "text": {"type": "plain_text", "text": label}});
    let plain = |text: &str| display::escape(text).chars().take(NAME_CHARS).collect::<String>();
    let fallback = if status.is_pending() {
        let offered = |d: &str| entry["decisions"].as_array().is_none_or(|all| all.iter().any(|o| o == d));
        let mut buttons = Vec::new();
        if offered("approve") {
            let label = if covers.is_some() { "Approve this call" } else { "Approve" };
            buttons.push(button(APPROVE, label, Some("primary")));
            if covers.is_some() {
                buttons.push(button(APPROVE_COVERING, "Approve, covering as stated", None));
            }
        }
        if offered("reject") {
            buttons.push(button(REJECT, "Reject", Some("danger")));
        }
        buttons.push(page("Edit or respond on the page"));
        blocks.push(json!({"type": "actions", "block_id": "hitl_decide", "elements": buttons}));
        format!("Approval needed: {} asks to run {}", plain(field("caller").unwrap_or("someone")), plain(tool))
    } else {
        let by = field("decided_by").map(name);
        let outcome = match (status, by) {
            (ApprovalStatus::Expired | ApprovalStatus::Withdrawn, _) | (_, None) => {
                format!("*{}*", capitalized(status.as_str()))
            }
            (_, Some(by)) => format!("*{}* by {by}", capitalized(status.as_str())),
        };
        blocks.push(context(&outcome));
        blocks.push(json!({"type": "actions", "block_id": "hitl_decided", "elements": [page("Details")]}));
        format!(
            "{}: {} asked to run {}",
            capitalized(status.as_str()),
            plain(field("caller").unwrap_or("someone")),
            plain(tool)
        )
    };
    let mut message = Map::new();
    message.insert("text".into(), mrkdwn(&fallback).into());
    message.insert("blocks".into(), Value::Array(blocks));
    // Nothing in the text turns into a link preview or a mention by itself.
    for key in ["unfurl_links", "unfurl_media", "link_names"] {
        message.insert(key.into(), false.into());
    }
    message.insert("parse".into(), "none".into());
    message
}

fn section(text: &str) -> Value {
    json!({"type": "section", "text": mrkdwn_text(text)})
}

fn context(text: &str) -> Value {
    json!({"type": "context", "elements": [mrkdwn_text(text)]})
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// `POST /integrations/slack/interactions`: a button's callback, verified, decided as
/// the mapped principal under the page's rules. Slack is answered 200 whenever the
/// request was Slack's (a refusal goes to the user as an ephemeral message); 401 for a
/// request whose signature or time is not good.
pub(crate) async fn interaction(
    shared: &Shared,
    engine: &Engine,
    parts: &http::request::Parts,
    body: &[u8],
) -> http::Response<hitl_http::Body> {
    let respond = |status: StatusCode, text: &str| crate::respond(status, "text/plain; charset=utf-8", text.to_owned());
    let Some(slack) = &shared.slack else {
        return respond(StatusCode::NOT_FOUND, "Slack is not set up on this server ([slack]).");
    };
    if parts.method != http::Method::POST {
        return respond(StatusCode::METHOD_NOT_ALLOWED, "Slack posts its interactions here.");
    }
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let timestamp = header("x-slack-request-timestamp");
    if let Err(why) = verify(&slack.config.signing_secret, timestamp, header("x-slack-signature"), body, now) {
        tracing::warn!(reason = why, "a Slack interaction was refused");
        metrics::counter!("hitl_slack_interactions_refused_total").increment(1);
        return respond(StatusCode::UNAUTHORIZED, why);
    }
    let payload = crate::form(body).remove("payload").unwrap_or_default();
    let Ok(payload) = serde_json::from_str::<Value>(&payload) else {
        return respond(StatusCode::BAD_REQUEST, "the body has no JSON payload");
    };
    if payload["type"] != "block_actions" {
        return respond(StatusCode::OK, "");
    }
    let action = payload["actions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| matches!(a["action_id"].as_str(), Some(APPROVE | APPROVE_COVERING | REJECT)));
    // The page link's button, or something else: nothing to decide.
    let Some(action) = action else { return respond(StatusCode::OK, "") };
    let decision = if action["action_id"] == REJECT { "reject" } else { "approve" };
    let mut content = Map::new();
    content.insert("decision".into(), decision.into());
    if decision == "approve" {
        // This call only, unless the button pressed was the one that covers as stated.
        content.insert("cover".into(), (action["action_id"] == APPROVE_COVERING).into());
    }
    let id = action["value"].as_str().unwrap_or_default();
    let user = payload["user"]["id"].as_str().unwrap_or_default();
    let channel = payload["channel"]["id"].as_str().unwrap_or(&slack.config.channel);
    let users = shared.reload.now();
    let users = users.slack_users.as_ref().unwrap_or(&slack.config.users);
    let Some(mapped) = users.get(user) else {
        tracing::warn!(slack_user = %user, approval = %id, "a Slack user not in [slack] users tried to decide");
        let text = format!(
            "Your Slack user ({user}) is not mapped to a hitl principal ([slack] users), so nothing was decided."
        );
        slack.ephemeral(channel, user, &text);
        return respond(StatusCode::OK, "");
    };
    let who = Session {
        id: String::new(),
        principal: mapped.principal.clone(),
        groups: mapped.groups.clone(),
        expires: u64::MAX,
        scope: None,
        credential: None,
        approver: true,
    };
    // Who pressed, in the trail (read by the call's approvers): two Slack users mapped
    // to one principal are told apart.
    let view = engine.pages().get(id).await.ok().flatten();
    crate::ledger::send(
        &shared.notes,
        crate::ledger::Note::Audit(Box::new(crate::AuditEvent {
            thread: view.as_ref().map(|v| v.thread_id.as_str().into()),
            approvers: view.as_ref().map(|v| shared.reload.approvers(v)),
            approver: Some(who.principal.clone()),
            approval: Some(id.to_owned()),
            via: Some(format!("slack {user}")),
            ..crate::AuditEvent::new(crate::AuditKind::SignedIn)
        })),
    );
    // As for a page session: an approver under the rules in force, then this call's.
    let outcome = if who.is(&shared.reload.now().auditors) {
        shared.decide(engine, id, &who, content).await.map(|_| ())
    } else {
        let why = format!("{} is not an approver of any policy.", who.principal);
        Err(Refusal(StatusCode::FORBIDDEN, why))
    };
    match outcome {
        Ok(()) => tracing::info!(principal = %who.principal, approval = %id, decision, "decided in Slack"),
        Err(Refusal(status, why)) => {
            tracing::info!(principal = %who.principal, approval = %id, %status, reason = %why, "a Slack decision was refused");
            // The store's own words stay in the log.
            let why = if status == StatusCode::SERVICE_UNAVAILABLE {
                "hitl's store is unavailable; try again shortly."
            } else {
                &why
            };
            slack.ephemeral(channel, user, &format!("Not decided: {why}"));
        }
    }
    respond(StatusCode::OK, "")
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{message, mrkdwn, signature, verify};

    #[test]
    fn signatures_follow_slacks_v0_scheme_and_are_refused_when_stale_forged_or_for_another_body() {
        // Slack's documented example: secret, timestamp and body of its "Verifying
        // requests from Slack" page.
        let secret = b"8f742231b10e8888abcd99yyyzzz85a5";
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let expected = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert_eq!(signature(secret, 1_531_420_618, body), expected);
        assert_eq!(verify(secret, "1531420618", expected, body, 1_531_420_618 + 299), Ok(()));
        assert!(verify(secret, "1531420618", expected, body, 1_531_420_618 + 301).is_err(), "stale");
        assert!(verify(secret, "1531420618", expected, body, 1_531_420_618 - 301).is_err(), "from the future");
        assert!(verify(secret, "1531420619", expected, body, 1_531_420_619).is_err(), "another time");
        assert!(verify(secret, "1531420618", expected, b"token=x", 1_531_420_618).is_err(), "another body");
        assert!(verify(b"another secret", "1531420618", expected, body, 1_531_420_618).is_err(), "forged");
        for bad in ["", "v0=", "v1=a2", "v0=zz", &expected[..20]] {
            assert!(verify(secret, "1531420618", bad, body, 1_531_420_618).is_err(), "{bad:?}");
        }
        assert!(verify(secret, "soon", expected, body, 1_531_420_618).is_err());
    }

    fn texts(message: &serde_json::Map<String, Value>) -> String {
        Value::Object(message.clone()).to_string()
    }

    #[test]
    fn a_message_escapes_mrkdwn_and_invisible_characters_and_cuts_long_values_with_their_size() {
        let entry = json!({
            "id": "a.1", "status": "pending", "tool": "db.drop_<!here>", "caller": "user:<!channel>",
            "policy": "db.*", "link": "http://h/approvals/a.1", "expires_at_ms": 1_796_000_000_000_u64,
            "arguments": {"table": "t\u{202e}x`` ` <https://evil.example|click> & more", "blob": "z".repeat(5000)}
        });
        let shown = texts(&message(&entry, None, None));
        assert!(!shown.contains("<!channel>") && !shown.contains("<!here>") && !shown.contains("<https://evil"));
        assert!(shown.contains("&lt;!channel&gt;") && shown.contains("&amp; more"), "{shown}");
        assert!(!shown.contains('\u{202e}') && shown.contains("\\\\u202e"), "the override as an escape: {shown}");
        assert!(!shown.contains("x``"), "no backtick can close the code block: {shown}");
        assert!(shown.contains("5000 bytes"), "a long value cut with its size: {shown}");
        assert!(shown.contains("hitl_approve") && shown.contains("hitl_reject"), "the buttons");
        assert_eq!(mrkdwn("a<b>&c"), "a&lt;b&gt;&amp;c");
        // A huge argument list still fits a block.
        let many: serde_json::Map<String, Value> =
            (0..200).map(|i| (format!("k{i}"), json!("v".repeat(400)))).collect();
        let entry = json!({"id": "a.2", "status": "pending", "tool": "t", "arguments": many});
        for block in message(&entry, None, None)["blocks"].as_array().unwrap() {
            let text = block["text"]["text"].as_str().unwrap_or_default();
            assert!(text.chars().count() <= 3000, "{} characters", text.chars().count());
        }
    }

    #[test]
    fn every_text_is_verbatim_and_within_slacks_limits_whatever_the_names() {
        let long = format!("user:{}", "x".repeat(5000));
        let entry = json!({"id": "a.1", "status": "pending", "tool": "t&".repeat(3000), "caller": long,
                           "policy": "p<".repeat(4000), "link": "http://h/approvals/a.1",
                           "decisions": ["approve", "edit", "reject"], "arguments": {"k": "v"}});
        let about = hitl_thread::About {
            description: Some("d&".repeat(4000)),
            upstream: Some("u".repeat(900)),
            covers: Some("this call, and user:alice's calls of t for 15 min".into()),
            ..Default::default()
        };
        let posted = message(&entry, None, Some(&about));
        let mut texts = 0;
        for block in posted["blocks"].as_array().unwrap() {
            let objects: Vec<&Value> = match block["type"].as_str() {
                Some("section") => vec![&block["text"]],
                Some("context") => block["elements"].as_array().unwrap().iter().collect(),
                _ => continue,
            };
            for object in objects {
                texts += 1;
                assert_eq!(object["verbatim"], true, "no link or mention is made of it: {object}");
                let n = object["text"].as_str().unwrap().chars().count();
                assert!(n <= 3000, "{n} characters: {object}");
            }
        }
        assert!(texts >= 4);
        let actions = posted["blocks"].as_array().unwrap().iter().find(|b| b["type"] == "actions").unwrap();
        let ids: Vec<&str> =
            actions["elements"].as_array().unwrap().iter().map(|e| e["action_id"].as_str().unwrap()).collect();
        assert_eq!(
            ids,
            ["hitl_approve", "hitl_approve_covering", "hitl_reject", "hitl_open"],
            "covering is its own button"
        );
        // Only the decisions the review offers.
        let entry = json!({"id": "a.2", "status": "pending", "tool": "t", "decisions": ["reject", "respond"]});
        let posted = message(&entry, None, None);
        let actions = posted["blocks"].as_array().unwrap().iter().find(|b| b["type"] == "actions").unwrap();
        let ids: Vec<&str> =
            actions["elements"].as_array().unwrap().iter().map(|e| e["action_id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["hitl_reject", "hitl_open"]);
    }

    #[test]
    fn a_decided_message_says_who_decided_and_has_no_buttons() {
        let entry = json!({"id": "a.1", "status": "rejected", "tool": "db.drop", "caller": "user:alice",
                           "decided_by": "user:bob", "link": "http://h/approvals/a.1", "arguments": {}});
        let shown = texts(&message(&entry, None, None));
        assert!(shown.contains("*Rejected* by `user:bob`"), "{shown}");
        assert!(!shown.contains("hitl_approve") && !shown.contains("hitl_reject"), "{shown}");
    }
}
