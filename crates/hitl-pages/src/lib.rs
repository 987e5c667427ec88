//! Approvals outside the MCP client. When a question is answered on a page (an
//! approver's decision on a tool call, a secret, a sign-in's callback), the client is
//! sent to one of these pages by URL; the page writes its answer into the paused thread
//! (`hitl_interrupt::PageAnswers::answer`, from `Engine::pages`) and the client's retry
//! resumes the agent.
//!
//! - **Pages** (server-rendered, no script): `/login` (a token, as for the API, becomes
//!   a signed `HttpOnly`, `SameSite=Strict` session cookie that lasts while its token
//!   does, until `/logout` on any replica; failed sign-ins are throttled), `/approvals` and
//!   `/approvals/<id>` (approve, edit, reject, respond), `/secrets/<id>`,
//!   `/oauth/callback`. Every form carries a CSRF token; every page is sent with a
//!   strict `Content-Security-Policy` and `X-Frame-Options: DENY`.
//! - **The approvals API** (bearer tokens): `GET /api/approvals?status=pending`,
//!   `GET /api/approvals/<id>`, `POST /api/approvals/<id>/decision`,
//!   `GET /api/approvals/events` (SSE), `GET /api/audit?since=<ms>`.
//! - **Slack** ([`slack`], `[slack]`): each pending approval posted to a channel with
//!   Approve and Reject buttons, their signed callbacks at
//!   `POST /integrations/slack/interactions`, the message updated once decided.
//! - **Thread administration** (bearer tokens of `[admin] principals`): `GET
//!   /api/threads`, `GET /api/threads/<id>`, `DELETE /api/threads/<id>`.
//! - **The ledger** ([`Pages::observer`]): the listing, the audit trail (store and
//!   `[audit] file`) and `[[notify]]` webhooks, fed by the engine's events.
//!
//! The approver is never the caller (the two-person rule, on by default), and sees only
//! the approvals their `user:`/`group:` entries may decide.
//!
//! ```no_run
//! # fn demo(engine: hitl_interrupt::Engine, store: std::sync::Arc<hitl_thread::MemoryStore>) {
//! use hitl_pages::{Pages, PagesConfig};
//!
//! let config = PagesConfig::new("https://hitl.example.com");
//! let pages = Pages::new(config, store.clone(), store, engine.secret());
//! let engine = engine.with_pages("https://hitl.example.com").with_observer(pages.observer());
//! let service = pages.service(engine); // mount it at each of Pages::PREFIXES
//! # let _ = service; }
//! ```

mod api;
mod audit;
pub mod chain;
pub mod decisions;
mod entry;
mod html;
mod ledger;
pub mod notify;
mod reload;
mod respond;
pub mod session;
pub mod slack;
mod streams;
mod threads;
mod throttle;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use hitl_auth::{Credential, Identity, Verify};
use hitl_http::{Body, Endpoint};
use hitl_interrupt::{Engine, Observer, PageAnswer, PageInput, PageView, Secret};
use hitl_thread::{Notes, PageKind, Records};
use http::{HeaderValue, Method, StatusCode, header};
use serde_json::{Map, Value};
use tokio::sync::{broadcast, mpsc};

pub use audit::{AuditEvent, AuditKind, AuditPage};
pub use entry::{ApprovalEntry, ApprovalStatus};
pub use ledger::{AuditFile, Retention, capped, diff, redact, rfc3339, shown_arguments};
pub use reload::{ApproversFn, Reload, Reloaded};
use respond::respond;
use session::{Keys, Session};

/// How the pages are set up.
#[derive(Clone)]
pub struct PagesConfig {
    /// The base of the links hitl hands out (`https://hitl.example.com`).
    pub base_url: String,
    /// Who may sign in: the same verifiers as the API.
    pub verifiers: Vec<Arc<dyn Verify>>,
    /// Refuse an approval by the person who made the call (default: on).
    pub two_person: bool,
    /// The `[[notify]]` webhooks.
    pub notify: Vec<notify::Target>,
    /// Where audit lines go besides the store.
    pub audit_file: Option<AuditFile>,
    /// The audit file's lines chained (`[audit] chain = true`): this replica's chain,
    /// continued from the file's last line of it when the pages start.
    pub audit_chain: Option<chain::Chain>,
    /// Who may read `GET /api/audit` (`user:`/`group:` entries; the server names every
    /// policy's approvers).
    pub auditors: Vec<String>,
    /// Who may administer threads (`GET`/`DELETE /api/threads`): `user:`/`group:`
    /// entries; none by default.
    pub admins: Vec<String>,
    /// Event streams (`GET /api/approvals/events`) one principal may hold open
    /// (default 4).
    pub max_event_streams_per_principal: usize,
    /// Event streams open in all (default 256; the server sets a quarter of its
    /// connection limit).
    pub max_event_streams: usize,
    /// How long and how many ended approvals stay listed, how much of an argument
    /// value is shown outside its approval's own view, when the audit file rotates.
    pub retention: Retention,
    /// How long a page session lasts, in seconds (`[approvals] session_ttl`; 8 hours by
    /// default).
    pub session_ttl: u64,
    /// Who decides a call under the rules in force, when they may change while the
    /// pages serve (see [`ApproversFn`]).
    pub approvers_now: Option<ApproversFn>,
    /// The approvers' decision tools, opened when the pages serve (`[approvals]
    /// mcp_decisions`).
    pub decision_desk: Option<decisions::DecisionDesk>,
    /// `[slack]`: approvals posted to a channel with buttons, decided there.
    pub slack: Option<slack::SlackConfig>,
}

impl PagesConfig {
    /// Pages under `base_url`, with no one able to sign in yet, the two-person rule on,
    /// no webhooks and no audit file.
    pub fn new(base_url: &str) -> Self {
        Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            verifiers: Vec::new(),
            two_person: true,
            notify: Vec::new(),
            audit_file: None,
            audit_chain: None,
            auditors: Vec::new(),
            admins: Vec::new(),
            max_event_streams_per_principal: 4,
            max_event_streams: 256,
            retention: Retention::default(),
            session_ttl: session::SESSION_SECONDS,
            approvers_now: None,
            decision_desk: None,
            slack: None,
        }
    }
}

/// The pages, the approvals API and the ledger.
pub struct Pages {
    shared: Arc<Shared>,
    worker: Mutex<Option<(ledger::Worker, mpsc::Receiver<ledger::Note>)>>,
    notes: mpsc::Sender<ledger::Note>,
}

impl std::fmt::Debug for Pages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pages").field("base_url", &self.shared.config.base_url).finish_non_exhaustive()
    }
}

pub(crate) struct Shared {
    config: PagesConfig,
    /// The path of `base_url` (`/hitl`, or empty): where another app mounted the
    /// pages. Requests arrive without it; links, redirects and cookies name it.
    mount: String,
    records: Arc<dyn Records>,
    /// Single-use marks: sign-in tickets used, sessions signed out.
    marks: Arc<dyn Notes>,
    keys: Keys,
    events: broadcast::Sender<Value>,
    notes: mpsc::Sender<ledger::Note>,
    streams: streams::EventStreams,
    throttle: throttle::Throttle,
    /// What a reload of the configuration replaces.
    reload: Reload,
    /// `[slack]`'s poster, which takes the buttons' callbacks too.
    slack: Option<slack::Slack>,
}

impl Pages {
    /// The handle a reload of the configuration puts new notification targets,
    /// auditors and approvers through.
    pub fn reload(&self) -> Reload {
        self.shared.reload.clone()
    }

    /// Every path the pages serve under (mount each on the HTTP app).
    pub const PREFIXES: [&'static str; 8] =
        ["/approvals", "/secrets", "/login", "/logout", "/oauth/callback", "/pages", "/api", "/integrations"];

    /// The pages under `config`, keeping their listing and trail in `records` and their
    /// single-use marks (sign-in tickets, signed-out sessions, expiries announced) in
    /// `marks`, signing sessions with a key derived from `secret`. Give both the store
    /// the replicas share.
    pub fn new(config: PagesConfig, records: Arc<dyn Records>, marks: Arc<dyn Notes>, secret: &Secret) -> Self {
        let mount = mount_path(&config.base_url);
        let keys = Keys::new(secret.derive("pages/session"), config.base_url.starts_with("https://"))
            .with_session_ttl(config.session_ttl)
            .with_path(&mount);
        let (events, _) = broadcast::channel(256);
        let (notes, received) = mpsc::channel(ledger::QUEUE);
        let reload = Reload::new(Reloaded {
            notify: config.notify.clone(),
            auditors: config.auditors.clone(),
            approvers: config.approvers_now.clone(),
            slack_users: None,
        });
        let https = notify::Https::default();
        let slack = config.slack.clone().map(|slack| slack::Slack::new(slack, marks.clone(), https.clone()));
        let worker = ledger::Worker {
            batch: Vec::new(),
            line_buffer: Vec::new(),
            unstored: ledger::Unstored::default(),
            seen: None,
            records: records.clone(),
            marks: marks.clone(),
            base_url: config.base_url.clone(),
            audit_chain: config.audit_chain.clone().map(|chain| ledger::resumed(chain, config.audit_file.as_ref())),
            audit_file: config.audit_file.clone(),
            notifier: notify::Notifier::new(reload.clone(), keys.clone(), https),
            slack: slack.clone(),
            events: events.clone(),
            retention: config.retention,
        };
        let streams = streams::EventStreams::new(config.max_event_streams_per_principal, config.max_event_streams);
        let throttle = throttle::Throttle::default();
        let shared = Arc::new(Shared {
            config,
            mount,
            records,
            marks,
            keys,
            events,
            notes: notes.clone(),
            streams,
            throttle,
            reload,
            slack,
        });
        Self { shared, worker: Mutex::new(Some((worker, received))), notes }
    }

    /// The engine's observer: feeds the listing, the trail and the webhooks.
    pub fn observer(&self) -> Arc<dyn Observer> {
        Arc::new(ledger::LedgerObserver(self.notes.clone()))
    }

    /// The service of every page and API route, answering with `engine` (which must
    /// have [`Pages::observer`] and `with_pages`). Starts the ledger's worker, so call
    /// it on a tokio runtime.
    pub fn service(&self, engine: Engine) -> Endpoint {
        if let Some((worker, received)) = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take() {
            tokio::spawn(worker.run(received));
        }
        if let Some(desk) = &self.shared.config.decision_desk {
            desk.open(self.shared.clone(), engine.clone());
        }
        let shared = self.shared.clone();
        let service = tower::service_fn(move |request: http::Request<Bytes>| {
            let (shared, engine) = (shared.clone(), engine.clone());
            async move { Ok::<_, Infallible>(shared.handle(&engine, request).await) }
        });
        Endpoint::new(service)
    }
}

/// The headers every page and API answer carries.
fn harden(response: &mut http::Response<Body>) {
    let headers = response.headers_mut();
    let set = |headers: &mut http::HeaderMap, name: &'static str, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(
        headers,
        "content-security-policy",
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    );
    set(headers, "x-frame-options", "DENY");
    set(headers, "x-content-type-options", "nosniff");
    set(headers, "referrer-policy", "no-referrer");
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
}

/// The path of `base_url` without its last slash: where the pages are mounted
/// (`https://example.com/hitl/` → `/hitl`; a URL naming no path → empty).
fn mount_path(base_url: &str) -> String {
    base_url.parse::<http::Uri>().map(|uri| uri.path().trim_end_matches('/').to_owned()).unwrap_or_default()
}

fn see_other(location: &str) -> http::Response<Body> {
    let mut response = respond(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "");
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// The pairs of an `application/x-www-form-urlencoded` body or query string.
pub(crate) fn form(bytes: &[u8]) -> HashMap<String, String> {
    form_urlencoded::parse(bytes).into_owned().collect()
}

/// Why a decision was not taken, as a status and a sentence.
pub(crate) struct Refusal(pub(crate) StatusCode, pub(crate) String);

/// A request's answer in the making: its session (when still good), the session its
/// cookie names (good or not: what signing out ends), its CSRF token, and the cookie to
/// set for it.
struct Visit {
    session: Option<Session>,
    signed: Option<Session>,
    csrf: String,
    set_csrf: Option<String>,
}

/// The store key marking session `id` signed out.
fn signed_out_key(id: &str) -> String {
    format!("session-ended:{id}")
}

/// Does the request want JSON rather than a page (a script's or a tool's request)?
fn wants_json(parts: &http::request::Parts) -> bool {
    let accept = parts.headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    accept.contains("application/json") && !accept.contains("text/html")
}

impl Shared {
    /// What a page of this visit carries besides its body.
    fn chrome<'a>(&'a self, visit: &'a Visit) -> html::Chrome<'a> {
        html::Chrome { csrf: &visit.csrf, mount: &self.mount }
    }

    /// A redirect to `path` of the pages (`/login`), under their mount.
    fn see_other(&self, path: &str) -> http::Response<Body> {
        see_other(&format!("{}{path}", self.mount))
    }

    async fn handle(&self, engine: &Engine, request: http::Request<Bytes>) -> http::Response<Body> {
        let (parts, body) = request.into_parts();
        let path = parts.uri.path().to_owned();
        let mut response = if path.starts_with("/api/") || path == "/api" {
            api::handle(self, engine, &parts, &body).await
        } else if path == slack::INTERACTIONS_PATH {
            slack::interaction(self, engine, &parts, &body).await
        } else {
            // The stylesheet needs no session: no store read for it.
            let signed = if path.starts_with("/pages/") { None } else { self.keys.session(&parts.headers) };
            let session = match &signed {
                Some(session) if self.still_good(session).await => Some(session.clone()),
                _ => None,
            };
            // A cookie that names no good session (ended, lapsed, forged) is dropped.
            let ended = session.is_none()
                && !path.starts_with("/pages/")
                && session::cookie(&parts.headers, session::SESSION_COOKIE).is_some_and(|c| !c.is_empty());
            let (csrf, set_csrf) = self.keys.csrf(&parts.headers, session.as_ref().map(|s| s.id.as_str()));
            let visit = Visit { session, signed, csrf, set_csrf };
            let mut response = self.page(engine, &parts, &body, &visit).await;
            if let Some(cookie) = visit.set_csrf.as_deref().and_then(|c| HeaderValue::from_str(c).ok()) {
                response.headers_mut().append(header::SET_COOKIE, cookie);
            }
            // Unless this answer opened another session.
            let opened = response
                .headers()
                .get_all(header::SET_COOKIE)
                .iter()
                .any(|c| c.as_bytes().starts_with(format!("{}=", session::SESSION_COOKIE).as_bytes()));
            if ended
                && !opened
                && let Ok(value) = HeaderValue::from_str(&self.keys.sign_out())
            {
                response.headers_mut().append(header::SET_COOKIE, value);
            }
            response
        };
        harden(&mut response);
        response
    }

    /// Is `session` (signed by these keys, not past its time) still good: its listed
    /// token still in a tokens file, its approver still named by a policy, not signed
    /// out on any replica? A store that can't say is a no.
    async fn still_good(&self, session: &Session) -> bool {
        if session.credential.is_some() {
            let matches = |digest: &[u8; 32]| self.keys.binds(session, digest);
            if !self.config.verifiers.iter().any(|v| v.lists(&session.principal, &matches)) {
                tracing::info!(principal = %session.principal, "a page session ended: its token is no longer listed");
                return false;
            }
        }
        if session.approver && !session.is(&self.reload.now().auditors) {
            tracing::info!(principal = %session.principal, "a page session ended: no policy names it an approver");
            return false;
        }
        match self.marks.used(&signed_out_key(&session.id)).await {
            Ok(ended) => !ended,
            Err(error) => {
                tracing::error!(%error, "a page session could not be checked; treated as signed out");
                false
            }
        }
    }

    /// Where a request without a good session goes: to the sign-in form, which comes
    /// back to `path`; a request for JSON gets 401.
    fn sign_in_first(&self, parts: &http::request::Parts, path: &str) -> http::Response<Body> {
        if wants_json(parts) {
            return respond::error(StatusCode::UNAUTHORIZED, "sign in first: no session, or it ended");
        }
        self.see_other(&format!("/login?next={}", encode(path)))
    }

    /// Approval `id` as its paused call shows it (every argument whole, whatever the
    /// listing keeps); once the call has moved on, as listed. Either way with its
    /// `display`.
    pub(crate) async fn approval(&self, engine: &Engine, id: &str) -> Result<Option<Value>, String> {
        let view = engine.pages().get(id).await.map_err(|e| e.to_string())?;
        if let Some(view) = view.filter(|v| matches!(v.page.kind, PageKind::Approval { .. })) {
            let mut entry = ledger::detail(&view, &self.config.base_url);
            if view.page.answer.is_none() {
                entry["approvers"] = serde_json::json!(self.reload.approvers(&view));
            }
            return Ok(Some(entry));
        }
        Ok(self.records.approval(id).await.map_err(|e| e.to_string())?.map(ledger::with_display))
    }

    /// The listed approvals, each pending one naming the approvers the rules in force
    /// name for it (a reload may have changed them since it paused: the listing, the
    /// API and the trail's readers then follow whoever may decide it now).
    pub(crate) async fn approvals(&self, engine: &Engine) -> Result<Vec<Value>, hitl_thread::StoreError> {
        let mut listed = self.records.approvals().await?;
        if self.reload.now().approvers.is_none() {
            return Ok(listed);
        }
        for entry in listed.iter_mut().filter(|e| ApprovalStatus::of_entry(e).is_some_and(ApprovalStatus::is_pending)) {
            let Some(id) = entry["id"].as_str() else { continue };
            if let Ok(Some(view)) = engine.pages().get(id).await
                && view.page.answer.is_none()
                && matches!(view.page.kind, PageKind::Approval { .. })
            {
                entry["approvers"] = serde_json::json!(self.reload.approvers(&view));
            }
        }
        Ok(listed)
    }

    /// May `who` see listed approval `entry` in the API: an approver of it, or an admin.
    pub(crate) fn sees(&self, who: &Session, entry: &Value) -> bool {
        api::may_see(who, entry) || who.is(&self.config.admins)
    }

    fn html(&self, status: StatusCode, markup: maud::Markup) -> http::Response<Body> {
        respond(status, "text/html; charset=utf-8", markup.into_string())
    }

    fn message(&self, status: StatusCode, title: &str, text: &str, visit: &Visit) -> http::Response<Body> {
        self.html(status, html::message(title, text, visit.session.as_ref(), &self.chrome(visit)))
    }

    async fn page(
        &self,
        engine: &Engine,
        parts: &http::request::Parts,
        body: &[u8],
        visit: &Visit,
    ) -> http::Response<Body> {
        let path = parts.uri.path();
        let query = form(parts.uri.query().unwrap_or_default().as_bytes());
        let posted = (parts.method == Method::POST).then(|| form(body));
        let signing_in = parts.method == Method::POST && path == "/login";
        let address = parts
            .extensions
            .get::<hitl_http::PeerAddr>()
            .map_or(std::net::IpAddr::from([0, 0, 0, 0]), |peer| peer.0.ip());
        if signing_in && let Some(wait) = self.throttle.wait(address, Instant::now()) {
            return self.throttled(wait, visit);
        }
        let session_id = visit.session.as_ref().map(|s| s.id.as_str());
        if let Some(fields) = &posted
            && !self.keys.csrf_ok(&parts.headers, session_id, fields.get("csrf").map_or("", String::as_str))
        {
            if signing_in {
                self.sign_in_failed(address, "the form's CSRF token is not this visitor's");
            }
            let text = "This form expired or did not come from hitl. Go back, reload the page and try again.";
            return self.message(StatusCode::FORBIDDEN, "Form refused", text, visit);
        }
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match (&parts.method, segments.as_slice(), posted) {
            (&Method::GET, ["pages", "style.css"], _) => {
                let mut response = respond(StatusCode::OK, "text/css; charset=utf-8", html::STYLE);
                response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("max-age=3600"));
                response
            }
            (&Method::GET, ["login"], _) => {
                let next = safe_next(query.get("next").map(String::as_str));
                self.html(StatusCode::OK, html::login(next, &self.chrome(visit), None))
            }
            (&Method::POST, ["login"], Some(fields)) => self.login(&fields, address, visit),
            (&Method::POST, ["logout"], Some(_)) => self.logout(visit).await,
            (&Method::GET, ["approvals"], _) => match visit.session.as_ref().filter(|s| s.scope.is_none()) {
                None => self.sign_in_first(parts, path),
                Some(session) => match self.approvals(engine).await {
                    Ok(listed) => {
                        let mine: Vec<Value> = listed.into_iter().filter(|e| api::may_see(session, e)).collect();
                        self.html(StatusCode::OK, html::list(&mine, Some(session), &self.chrome(visit)))
                    }
                    // Not an empty list: the API answers 503 too.
                    Err(e) => {
                        tracing::error!(error = %e, "the approvals could not be listed");
                        let text = "The store is unavailable; try again shortly.";
                        self.message(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", text, visit)
                    }
                },
            },
            (&Method::GET, ["approvals", id], _) if query.contains_key("ticket") => {
                self.ticket(engine, id, &query["ticket"], path, visit).await
            }
            (method, ["approvals", id], fields) if *method == Method::GET || fields.is_some() => {
                self.approval_page(engine, parts, id, fields, visit).await
            }
            (method, ["secrets", id], fields) if *method == Method::GET || fields.is_some() => {
                self.secret_page(engine, parts, id, fields, visit).await
            }
            (&Method::GET, ["oauth", "callback"], _) => self.callback(engine, query, visit).await,
            _ => self.message(StatusCode::NOT_FOUND, "Not found", "There is no page here.", visit),
        }
    }

    /// A single-use link from a notification: signs its user in, once, to that approval
    /// alone, and shows it. Never the caller's: a link is not a password, and the person
    /// who made the call does not approve it through one.
    async fn ticket(&self, engine: &Engine, id: &str, value: &str, path: &str, visit: &Visit) -> http::Response<Body> {
        let Some(ticket) = self.keys.check_ticket(value).filter(|t| t.approval == id) else {
            let text = "This link is not valid or has lapsed. Sign in to see the approval.";
            return self.message(StatusCode::FORBIDDEN, "Link not valid", text, visit);
        };
        match self.approval(engine, id).await {
            Ok(Some(entry)) if entry["caller"].as_str() == Some(ticket.principal.as_str()) => {
                ledger::send(
                    &self.notes,
                    ledger::Note::Audit(Box::new(AuditEvent {
                        principal: Some(ticket.principal.as_str().into()),
                        approver: Some(ticket.principal.clone()),
                        approval: Some(id.to_owned()),
                        reason: Some("a single-use link never signs in the caller".into()),
                        ..AuditEvent::new(AuditKind::Refused)
                    })),
                );
                tracing::warn!(principal = %ticket.principal, approval = %id, "the caller's single-use link was refused");
                let text = "You made this call, so a link can't sign you in to it. Sign in with your token.";
                return self.message(StatusCode::FORBIDDEN, "Link not valid", text, visit);
            }
            Ok(Some(_)) => {}
            // Nothing listed to check the caller against: an ordinary sign-in.
            Ok(None) => return self.see_other(&format!("/login?next={}", encode(path))),
            Err(e) => {
                tracing::error!(error = %e, "a single-use link's approval could not be read");
                let text = "The store is unavailable; try again shortly.";
                return self.message(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", text, visit);
            }
        }
        let until = ticket.expires.saturating_mul(1000);
        match self.marks.use_once(&format!("ticket:{}", ticket.nonce), until).await {
            Ok(true) => {}
            // Used once already: an ordinary sign-in from here.
            Ok(false) => return self.see_other(&format!("/login?next={}", encode(path))),
            Err(e) => {
                tracing::error!(error = %e, "a single-use link could not be checked");
                let text = "The store is unavailable; try again shortly.";
                return self.message(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", text, visit);
            }
        }
        ledger::send(
            &self.notes,
            ledger::Note::Audit(Box::new(AuditEvent {
                approver: Some(ticket.principal.clone()),
                approval: Some(id.to_owned()),
                via: Some("single-use link".into()),
                ..AuditEvent::new(AuditKind::SignedIn)
            })),
        );
        let mut session = self.keys.open(&ticket.principal, &[], Some(&Credential::Until(ticket.expires)), Some(id));
        session.approver = session.is(&self.reload.now().auditors);
        let mut response = self.see_other(path);
        if let Ok(value) = HeaderValue::from_str(&self.keys.cookie_of(&session)) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
        response
    }

    fn login(
        &self,
        fields: &HashMap<String, String>,
        address: std::net::IpAddr,
        visit: &Visit,
    ) -> http::Response<Body> {
        let next = safe_next(fields.get("next").map(String::as_str));
        let token = fields.get("token").map_or("", |t| t.trim());
        match self.identify(token) {
            Ok(identity) => {
                let mut session =
                    self.keys.open(&identity.principal, &identity.groups, Some(&identity.credential), None);
                session.approver = session.is(&self.reload.now().auditors);
                let mut response = self.see_other(next);
                if let Ok(value) = HeaderValue::from_str(&self.keys.cookie_of(&session)) {
                    response.headers_mut().append(header::SET_COOKIE, value);
                }
                tracing::info!(principal = %identity.principal, "signed in to the pages");
                response
            }
            Err(why) => {
                self.sign_in_failed(address, &why);
                self.html(StatusCode::UNAUTHORIZED, html::login(next, &self.chrome(visit), Some(&why)))
            }
        }
    }

    /// Counts and logs a failed sign-in from `address` (never its token).
    fn sign_in_failed(&self, address: std::net::IpAddr, why: &str) {
        self.throttle.failed(address, Instant::now());
        tracing::warn!(%address, reason = %why, "a sign-in to the pages failed");
    }

    /// The sign-in form, refused for `wait` after too many failures from one address.
    fn throttled(&self, wait: std::time::Duration, visit: &Visit) -> http::Response<Body> {
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let seconds = seconds.max(1);
        let why = format!("Too many failed sign-ins from your address. Try again in {seconds} s.");
        let mut response =
            self.html(StatusCode::TOO_MANY_REQUESTS, html::login("/approvals", &self.chrome(visit), Some(&why)));
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        response
    }

    /// Ends the session the request's cookie names, on every replica (its id is marked
    /// in the store until it would have ended), and drops the cookie.
    async fn logout(&self, visit: &Visit) -> http::Response<Body> {
        let mut response = self.see_other("/login");
        if let Some(session) = &visit.signed
            && let Err(error) =
                self.marks.use_once(&signed_out_key(&session.id), session.expires.saturating_mul(1000)).await
        {
            tracing::error!(%error, "a page session could not be ended in the store");
            let text = "The store is unavailable, so the session could not be ended everywhere; try again shortly.";
            response = self.message(StatusCode::SERVICE_UNAVAILABLE, "Not signed out", text, visit);
        }
        if let Ok(value) = HeaderValue::from_str(&self.keys.sign_out()) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
        response
    }

    /// Who `token` names, by the first verifier that accepts it.
    fn identify(&self, token: &str) -> Result<Identity, String> {
        if token.is_empty() {
            return Err("Enter a token.".into());
        }
        if self.config.verifiers.is_empty() {
            return Err("This server has no sign-in configured ([auth] tokens_file or [auth.jwt]).".into());
        }
        let mut why = String::from("That token is not valid.");
        for verifier in &self.config.verifiers {
            match verifier.verify(token) {
                Ok(identity) => return Ok(identity),
                Err(e) => why = format!("That token is not valid: {e}."),
            }
        }
        Err(why)
    }

    async fn approval_page(
        &self,
        engine: &Engine,
        parts: &http::request::Parts,
        id: &str,
        posted: Option<HashMap<String, String>>,
        visit: &Visit,
    ) -> http::Response<Body> {
        let path = parts.uri.path();
        let Some(session) = visit.session.as_ref().filter(|s| s.reaches(id)) else {
            return self.sign_in_first(parts, path);
        };
        let mut error = None;
        if let Some(fields) = posted {
            let mut content = Map::new();
            for field in ["decision", "message", "args"] {
                if let Some(value) = fields.get(field).filter(|v| !v.is_empty()) {
                    content.insert(field.to_owned(), Value::String(value.clone()));
                }
            }
            // The approve form's checkbox (the review form's `cover` field), on a page
            // that offers it: left unchecked, it is not sent at all, and the approval
            // is for this call only.
            if fields.get("decision").is_some_and(|d| d == "approve") && fields.contains_key("cover_offered") {
                content.insert("cover".into(), Value::Bool(fields.get("cover").is_some_and(|v| v == "true")));
            }
            match self.decide(engine, id, session, content).await {
                // Back to the page, which now shows the decision (post/redirect/get).
                Ok(_) => return self.see_other(path),
                Err(Refusal(status, why)) if status == StatusCode::UNPROCESSABLE_ENTITY => error = Some(why),
                Err(Refusal(status, why)) => return self.message(status, "Not decided", &why, visit),
            }
        }
        // The approvers see it, and the caller (sent here by their MCP client); no one else.
        let hidden = || {
            let text = "This approval is for its approvers and the person who asked for it.";
            self.message(StatusCode::FORBIDDEN, "Not yours to see", text, visit)
        };
        let (entry, can) = match engine.pages().get(id).await {
            Ok(Some(view)) if matches!(view.page.kind, PageKind::Approval { .. }) => {
                let approvers = self.reload.approvers(&view);
                if !session.is(&approvers) && view.principal.as_deref() != Some(session.principal.as_str()) {
                    return hidden();
                }
                let can = match (self.may_decide(&view, session), &view.page.answer) {
                    (_, Some(_)) => {
                        html::Can::Not("Decided; the caller's MCP client picks it up on its next retry.".into())
                    }
                    (Err(Refusal(_, why)), None) => html::Can::Not(why),
                    (Ok(()), None) => {
                        html::Can::Decide(view.review.as_ref().map(|r| r.offered.clone()).unwrap_or_default())
                    }
                };
                (ledger::detail(&view, &self.config.base_url), can)
            }
            Ok(_) => match self.records.approval(id).await {
                Ok(Some(entry)) if !api::may_see(session, &entry) && entry["caller"] != session.principal.as_str() => {
                    return hidden();
                }
                Ok(Some(entry)) => {
                    let status = crate::ApprovalStatus::of_entry(&entry)
                        .map_or("decided", crate::ApprovalStatus::as_str)
                        .to_owned();
                    let can = html::Can::Not(format!("This approval is {status}: nothing is left to decide."));
                    (ledger::with_display(entry), can)
                }
                _ => {
                    let text = "No approval is waiting here: the link is wrong, or the call ended or expired.";
                    return self.message(StatusCode::NOT_FOUND, "No such approval", text, visit);
                }
            },
            Err(e) => return self.unavailable(&e, visit),
        };
        let status = if error.is_some() { StatusCode::UNPROCESSABLE_ENTITY } else { StatusCode::OK };
        self.html(status, html::approval(&entry, &can, error.as_deref(), Some(session), &self.chrome(visit)))
    }

    fn unavailable(&self, error: &hitl_interrupt::EngineError, visit: &Visit) -> http::Response<Body> {
        tracing::error!(%error, "a page could not read its call");
        let text = "The store of paused calls is unavailable; try again shortly.";
        self.message(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", text, visit)
    }

    /// May `session` decide `view`? Its approvers (those the rules in force name, when
    /// a reload changed them since it paused), never the caller (unless the two-person
    /// rule is off).
    pub(crate) fn may_decide(&self, view: &PageView, session: &Session) -> Result<(), Refusal> {
        let approvers = self.reload.approvers(view);
        if !session.is(&approvers) {
            let why =
                format!("{} is not among the approvers of this call ({}).", session.principal, approvers.join(", "));
            return Err(Refusal(StatusCode::FORBIDDEN, why));
        }
        if self.config.two_person && view.principal.as_deref() == Some(session.principal.as_str()) {
            let why = "You made this call, so someone else must approve it (the two-person rule).".to_owned();
            return Err(Refusal(StatusCode::FORBIDDEN, why));
        }
        Ok(())
    }

    /// Takes `who`'s decision (`content`: the seed's review form) on approval `id`.
    pub(crate) async fn decide(
        &self,
        engine: &Engine,
        id: &str,
        who: &Session,
        content: Map<String, Value>,
    ) -> Result<Value, Refusal> {
        let view = match engine.pages().get(id).await {
            Ok(Some(view)) if matches!(view.page.kind, PageKind::Approval { .. }) => view,
            Ok(_) => {
                return Err(match self.records.approval(id).await {
                    Ok(Some(entry)) if api::may_see(who, &entry) => Refusal(
                        StatusCode::CONFLICT,
                        format!(
                            "This approval is already {}.",
                            crate::ApprovalStatus::of_entry(&entry).map_or("decided", crate::ApprovalStatus::as_str)
                        ),
                    ),
                    _ => Refusal(StatusCode::NOT_FOUND, "No approval is waiting under this id.".into()),
                });
            }
            Err(e) => return Err(Refusal(StatusCode::SERVICE_UNAVAILABLE, format!("The store is unavailable: {e}"))),
        };
        let refused = |why: &str| {
            ledger::send(
                &self.notes,
                ledger::Note::Audit(Box::new(AuditEvent {
                    thread: Some(view.thread_id.as_str().into()),
                    tool: view.review.as_ref().map(|r| r.tool.as_str().into()),
                    principal: view.principal.as_deref().map(Into::into),
                    approver: Some(who.principal.clone()),
                    approval: Some(id.to_owned()),
                    reason: Some(why.to_owned()),
                    ..AuditEvent::new(AuditKind::Refused)
                })),
            );
        };
        if let Err(refusal) = self.may_decide(&view, who) {
            refused(&refusal.1);
            return Err(refusal);
        }
        match engine.pages().answer(id, PageInput::Decision(content), Some(who.principal.clone())).await {
            Ok(PageAnswer::Taken(view)) => {
                let entry = ledger::decided_entry(&view, &self.config.base_url).0;
                metrics::counter!("hitl_approvals_decided_total", "status" => entry.status.as_str()).increment(1);
                Ok(entry.to_value())
            }
            Ok(PageAnswer::AlreadyAnswered(view)) => {
                let by = view.page.answered_by.unwrap_or_else(|| "someone".into());
                Err(Refusal(StatusCode::CONFLICT, format!("This approval was already decided by {by}.")))
            }
            Ok(PageAnswer::Gone) => Err(Refusal(StatusCode::NOT_FOUND, "The call ended or expired.".into())),
            Ok(PageAnswer::Refused(e)) => {
                refused(&e.message);
                Err(Refusal(StatusCode::UNPROCESSABLE_ENTITY, e.message))
            }
            Err(e) => Err(Refusal(StatusCode::SERVICE_UNAVAILABLE, format!("The store is unavailable: {e}"))),
        }
    }

    async fn secret_page(
        &self,
        engine: &Engine,
        parts: &http::request::Parts,
        id: &str,
        posted: Option<HashMap<String, String>>,
        visit: &Visit,
    ) -> http::Response<Body> {
        let path = parts.uri.path();
        let view = match engine.pages().get(id).await {
            Ok(Some(view)) if matches!(view.page.kind, PageKind::Secret { .. }) => view,
            Ok(_) => {
                let text = "Nothing is waiting here: the link is wrong, or the call ended or expired.";
                return self.message(StatusCode::NOT_FOUND, "No such page", text, visit);
            }
            Err(e) => return self.unavailable(&e, visit),
        };
        // The caller types their own secret: signed in as them, when the call has one
        // and this server can sign people in; else the unguessable link is the key.
        if let Some(caller) = view.principal.as_deref().filter(|_| !self.config.verifiers.is_empty()) {
            match visit.session.as_ref().filter(|s| s.scope.is_none()) {
                None => return self.sign_in_first(parts, path),
                Some(session) if session.principal != caller => {
                    let text = format!("This page is for {caller}, who made the call.");
                    return self.message(StatusCode::FORBIDDEN, "Not yours", &text, visit);
                }
                Some(_) => {}
            }
        }
        let PageKind::Secret { label } = &view.page.kind else { unreachable!("matched above") };
        let done = "Saved. Go back to your MCP client: the agent continues there.";
        if view.page.answer.is_some() {
            return self.message(StatusCode::OK, label, done, visit);
        }
        let mut error = None;
        if let Some(fields) = posted {
            let value = fields.get("value").cloned().unwrap_or_default();
            match engine
                .pages()
                .answer(id, PageInput::Secret(value), visit.session.as_ref().map(|s| s.principal.clone()))
                .await
            {
                Ok(PageAnswer::Taken(_) | PageAnswer::AlreadyAnswered(_)) => {
                    return self.message(StatusCode::OK, label, done, visit);
                }
                Ok(PageAnswer::Gone) => {
                    return self.message(StatusCode::NOT_FOUND, "No such page", "The call ended or expired.", visit);
                }
                Ok(PageAnswer::Refused(e)) => error = Some(e.message),
                Err(e) => return self.unavailable(&e, visit),
            }
        }
        let status = if error.is_some() { StatusCode::UNPROCESSABLE_ENTITY } else { StatusCode::OK };
        self.html(
            status,
            html::secret(label, &view.message, error.as_deref(), visit.session.as_ref(), &self.chrome(visit)),
        )
    }

    /// A provider's redirect back after a sign-in: `state` names the page.
    async fn callback(&self, engine: &Engine, query: HashMap<String, String>, visit: &Visit) -> http::Response<Body> {
        let state = query.get("state").cloned().unwrap_or_default();
        let params: Map<String, Value> = query.into_iter().map(|(k, v)| (k, Value::String(v))).collect();
        match engine.pages().answer(&state, PageInput::Callback(params), None).await {
            Ok(PageAnswer::Taken(_) | PageAnswer::AlreadyAnswered(_)) => {
                let text = "You are signed in. Go back to your MCP client: the agent continues there.";
                self.message(StatusCode::OK, "Signed in", text, visit)
            }
            Ok(PageAnswer::Gone | PageAnswer::Refused(_)) => {
                let text =
                    "This sign-in does not belong to a waiting call: it ended, expired, or the link was changed.";
                self.message(StatusCode::BAD_REQUEST, "Sign-in not completed", text, visit)
            }
            Err(e) => self.unavailable(&e, visit),
        }
    }
}

/// `next` when it is a path on this server, else `/approvals` (no open redirects, and
/// nothing a `Location` header can't carry).
fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains('\\')
                && n.len() <= 2048
                && n.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            n
        }
        _ => "/approvals",
    }
}

fn encode(path: &str) -> String {
    form_urlencoded::byte_serialize(path.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use hitl_interrupt::{Engine, Secret};
    use hitl_thread::{MemoryStore, Records, StoreError, SystemClock};
    use http::{StatusCode, header};
    use serde_json::Value;

    use crate::{Pages, PagesConfig};

    /// Records out of reach.
    struct Down;

    #[async_trait::async_trait]
    impl Records for Down {
        async fn put_approval(&self, _: &str, _: Value, _: u64) -> Result<(), StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn approval(&self, _: &str) -> Result<Option<Value>, StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn approvals(&self) -> Result<Vec<Value>, StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn remove_approvals(&self, _: &[String]) -> Result<(), StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn append_audit(&self, _: &[hitl_thread::AuditLine]) -> Result<(), StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
        async fn audit_since(&self, _: u64, _: Option<&str>, _: usize) -> Result<Vec<Value>, StoreError> {
            Err(StoreError::Unavailable("down".into()))
        }
    }

    #[tokio::test]
    async fn the_approvals_page_answers_503_when_the_store_cannot_list_them_not_an_empty_list() {
        let memory = Arc::new(MemoryStore::default());
        let secret = Secret::generate();
        let pages = Pages::new(PagesConfig::new("http://127.0.0.1:8123"), Arc::new(Down), memory.clone(), &secret);
        let engine = Engine::new(memory, Arc::new(SystemClock), secret, Default::default());
        let keys = &pages.shared.keys;
        let cookie = keys.cookie_of(&keys.open("user:ada", &[], None, None));
        let request = http::Request::get("/approvals")
            .header(header::COOKIE, cookie.split(';').next().unwrap())
            .body(Bytes::new())
            .unwrap();
        let response = pages.shared.handle(&engine, request).await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn sign_ins_go_back_only_to_paths_here() {
        assert_eq!(super::safe_next(Some("/approvals/a.1.0.x")), "/approvals/a.1.0.x");
        for bad in ["//evil.example", "https://evil.example", "/\\evil", "/a\r\nSet-Cookie: x", "/a b", ""] {
            assert_eq!(super::safe_next(Some(bad)), "/approvals", "{bad:?}");
        }
        assert_eq!(super::safe_next(None), "/approvals");
    }

    #[test]
    fn the_mount_is_the_path_of_the_base_url() {
        for (base, mount) in [
            ("http://127.0.0.1:8123", ""),
            ("https://hitl.example/", ""),
            ("https://apps.example/hitl", "/hitl"),
            ("https://apps.example/tools/hitl/", "/tools/hitl"),
        ] {
            assert_eq!(super::mount_path(base), mount, "{base}");
        }
    }
}
