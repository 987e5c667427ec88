//! Who is signed in to the pages, and forms that can't be forged from another site.
//!
//! A session is a cookie `hitl_session=<base64url JSON>.<base64url HMAC>`: an id, the
//! principal, the groups, an expiry and what it rests on (the keyed MAC of a listed
//! token's digest), signed with a key derived from the server secret, so any replica
//! reads it and no one can write one. It is `HttpOnly` (scripts never see it),
//! `SameSite=Strict` (never sent by another site's request) and `Secure` when the pages
//! are served over https. The pages check on every request that it is still good (its
//! token still listed, not signed out: `hitl_pages` keeps signed-out ids in the store).
//!
//! Forms carry a CSRF token: the HMAC of a random `hitl_csrf` cookie and the session's
//! id, checked on every POST, so a form posted from elsewhere, or with another
//! session's token, fails even if a browser sent the cookies.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hitl_auth::Credential;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "hitl_session";
/// The CSRF cookie's name.
pub const CSRF_COOKIE: &str = "hitl_csrf";
/// How long a sign-in lasts by default (`[approvals] session_ttl`).
pub const SESSION_SECONDS: u64 = 8 * 3600;

/// Who signed in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Its id, random: what signing out marks in the store.
    #[serde(rename = "i")]
    pub id: String,
    /// `user:<id>`.
    #[serde(rename = "p")]
    pub principal: String,
    /// `group:<name>` memberships.
    #[serde(rename = "g")]
    pub groups: Vec<String>,
    /// When it ends (s since the epoch).
    #[serde(rename = "e")]
    pub expires: u64,
    /// The one approval a single-use link's session may see (none: a full sign-in).
    #[serde(rename = "s", default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The listed token it was opened with, as the MAC of its digest ([`Keys::binds`]):
    /// the session ends when no tokens file line holds it.
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// Was it an approver's (named by a policy) when it opened? It ends when it is no
    /// longer one.
    #[serde(rename = "a", default)]
    pub approver: bool,
}

impl Session {
    /// May this session see approval `id` (a single-use link's only its own)?
    pub fn reaches(&self, id: &str) -> bool {
        self.scope.as_deref().is_none_or(|scope| scope == id)
    }

    /// Is `who` (a `user:` or `group:` entry) this person?
    pub fn is(&self, who: &[String]) -> bool {
        who.iter().any(|w| *w == self.principal || self.groups.contains(w))
    }
}

/// A signed single-use link's content: who it signs in, for which approval, until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    /// The approval's id.
    #[serde(rename = "a")]
    pub approval: String,
    /// `user:<id>`: a `user:` approver of the approval.
    #[serde(rename = "p")]
    pub principal: String,
    /// When it lapses (s since the epoch).
    #[serde(rename = "e")]
    pub expires: u64,
    /// Its id, marked used on first use.
    #[serde(rename = "n")]
    pub nonce: String,
}

/// How long a single-use link lasts.
pub const TICKET_SECONDS: u64 = 24 * 3600;

/// Signs and checks sessions and CSRF tokens.
#[derive(Clone)]
pub struct Keys {
    key: hmac::Key,
    secure: bool,
    ttl: u64,
    /// The cookies' `Path`: where the pages are mounted.
    path: String,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys").field("secure", &self.secure).finish_non_exhaustive()
    }
}

fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A random value, base64url.
pub(crate) fn random() -> String {
    let mut bytes = [0u8; 24];
    SystemRandom::new().fill(&mut bytes).expect("the system random source works");
    URL_SAFE_NO_PAD.encode(bytes)
}

impl Keys {
    /// Keys from 32 bytes derived from the server secret; `secure` marks cookies
    /// `Secure` (pages served over https).
    pub fn new(key: [u8; 32], secure: bool) -> Self {
        Self { key: hmac::Key::new(hmac::HMAC_SHA256, &key), secure, ttl: SESSION_SECONDS, path: "/".into() }
    }

    /// These keys, setting cookies for the pages under `path` (where the app is
    /// mounted: `/hitl`), not the whole host.
    #[must_use]
    pub fn with_path(mut self, path: &str) -> Self {
        self.path = if path.is_empty() { "/".into() } else { path.to_owned() };
        self
    }

    /// These keys, with sessions lasting `seconds` (at least one).
    #[must_use]
    pub fn with_session_ttl(mut self, seconds: u64) -> Self {
        self.ttl = seconds.max(1);
        self
    }

    fn mac(&self, label: &str, value: &str) -> String {
        URL_SAFE_NO_PAD.encode(hmac::sign(&self.key, format!("{label}\n{value}").as_bytes()))
    }

    fn verify(&self, label: &str, value: &str, mac: &str) -> bool {
        let Ok(given) = URL_SAFE_NO_PAD.decode(mac) else { return false };
        hmac::verify(&self.key, format!("{label}\n{value}").as_bytes(), &given).is_ok()
    }

    /// A new session of `principal`, resting on `credential` (a listed token binds it;
    /// an end, a JWT's `exp` or a link's, shortens it), for approval `scope` only when
    /// given (a single-use link).
    pub fn open(
        &self,
        principal: &str,
        groups: &[String],
        credential: Option<&Credential>,
        scope: Option<&str>,
    ) -> Session {
        let mut expires = now_s().saturating_add(self.ttl);
        let mut bound = None;
        match credential {
            Some(Credential::Until(end)) => expires = expires.min(*end),
            Some(Credential::Listed(digest)) => bound = Some(self.mac("credential", &bound_text(principal, digest))),
            None => {}
        }
        Session {
            id: random(),
            principal: principal.to_owned(),
            groups: groups.to_vec(),
            expires,
            scope: scope.map(str::to_owned),
            credential: bound,
            approver: false,
        }
    }

    /// Was `session` opened with the listed token whose digest is `digest`?
    pub fn binds(&self, session: &Session, digest: &[u8; 32]) -> bool {
        session
            .credential
            .as_deref()
            .is_some_and(|mac| self.verify("credential", &bound_text(&session.principal, digest), mac))
    }

    /// The `Set-Cookie` value that carries `session`.
    pub fn cookie_of(&self, session: &Session) -> String {
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(session).expect("a session is plain JSON"));
        let value = format!("{body}.{}", self.mac("session", &body));
        self.cookie(SESSION_COOKIE, &value, session.expires.saturating_sub(now_s()))
    }

    /// A single-use link's `ticket` for `principal` on `approval`.
    pub fn ticket(&self, approval: &str, principal: &str) -> String {
        let ticket = Ticket {
            approval: approval.to_owned(),
            principal: principal.to_owned(),
            expires: now_s() + TICKET_SECONDS,
            nonce: random(),
        };
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&ticket).expect("a ticket is plain JSON"));
        format!("{body}.{}", self.mac("ticket", &body))
    }

    /// The ticket `value` carries, if these keys signed it and it has not lapsed.
    pub fn check_ticket(&self, value: &str) -> Option<Ticket> {
        let (body, mac) = value.rsplit_once('.')?;
        if !self.verify("ticket", body, mac) {
            return None;
        }
        let ticket: Ticket = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).ok()?).ok()?;
        (ticket.expires > now_s()).then_some(ticket)
    }

    /// The `Set-Cookie` value that signs out.
    pub fn sign_out(&self) -> String {
        self.cookie(SESSION_COOKIE, "", 0)
    }

    /// The session in `headers`' cookies, if signed by these keys and not expired.
    pub fn session(&self, headers: &http::HeaderMap) -> Option<Session> {
        let value = cookie(headers, SESSION_COOKIE)?;
        let (body, mac) = value.rsplit_once('.')?;
        if !self.verify("session", body, mac) {
            return None;
        }
        let session: Session = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).ok()?).ok()?;
        (session.expires > now_s()).then_some(session)
    }

    /// The CSRF token for the request's `hitl_csrf` cookie and session `id` (none
    /// before a sign-in), and the `Set-Cookie` to send when it has no cookie yet.
    pub fn csrf(&self, headers: &http::HeaderMap, id: Option<&str>) -> (String, Option<String>) {
        match cookie(headers, CSRF_COOKIE).filter(|c| !c.is_empty()) {
            Some(seed) => (self.mac("csrf", &csrf_text(&seed, id)), None),
            None => {
                let seed = random();
                (self.mac("csrf", &csrf_text(&seed, id)), Some(self.cookie(CSRF_COOKIE, &seed, self.ttl)))
            }
        }
    }

    /// Does a form's `token` match the request's `hitl_csrf` cookie and session `id`?
    pub fn csrf_ok(&self, headers: &http::HeaderMap, id: Option<&str>, token: &str) -> bool {
        cookie(headers, CSRF_COOKIE).is_some_and(|seed| self.verify("csrf", &csrf_text(&seed, id), token))
    }

    fn cookie(&self, name: &str, value: &str, max_age: u64) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!("{name}={value}; Path={}; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}", self.path)
    }
}

/// What a listed token's MAC covers: the principal and the token's digest.
fn bound_text(principal: &str, digest: &[u8; 32]) -> String {
    format!("{principal}\n{}", hitl_thread::hex(digest))
}

/// What a CSRF token covers: the cookie's seed and the session's id.
fn csrf_text(seed: &str, id: Option<&str>) -> String {
    format!("{seed}\n{}", id.unwrap_or_default())
}

/// The value of cookie `name` in `headers`.
pub fn cookie(headers: &http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookies(set: &[&str]) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        let pairs: Vec<&str> = set.iter().map(|c| c.split(';').next().unwrap()).collect();
        headers.insert(http::header::COOKIE, pairs.join("; ").parse().unwrap());
        headers
    }

    #[test]
    fn sessions_are_signed_and_csrf_tokens_bound_to_their_cookie_and_session() {
        let keys = Keys::new([7; 32], true);
        let opened = keys.open("user:bob", &["group:sre".into()], None, None);
        let set = keys.cookie_of(&opened);
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Secure"), "{set}");
        let session = keys.session(&with_cookies(&[&set])).expect("a signed session");
        assert_eq!(session, opened);
        assert!(session.is(&["group:sre".into()]) && !session.is(&["group:dev".into()]));
        // Another key, or a changed body, is no session.
        assert!(Keys::new([8; 32], true).session(&with_cookies(&[&set])).is_none());
        let value = set.split(';').next().unwrap().strip_prefix("hitl_session=").unwrap();
        let (_, mac) = value.rsplit_once('.').unwrap();
        let forged = format!(
            "hitl_session={}.{mac}",
            URL_SAFE_NO_PAD.encode(br#"{"i":"x","p":"user:eve","g":["group:sre"],"e":99999999999}"#)
        );
        assert!(keys.session(&with_cookies(&[&forged])).is_none());

        let (token, set_csrf) = keys.csrf(&http::HeaderMap::new(), Some(&session.id));
        let set_csrf = set_csrf.expect("a new CSRF cookie");
        let headers = with_cookies(&[&set_csrf]);
        assert!(keys.csrf_ok(&headers, Some(&session.id), &token));
        assert_eq!(keys.csrf(&headers, Some(&session.id)), (token.clone(), None), "the same cookie, the same token");
        assert!(!keys.csrf_ok(&headers, Some("another-session"), &token), "another session's token");
        assert!(!keys.csrf_ok(&headers, None, &token), "a signed-in token, signed out");
        assert!(
            !keys.csrf_ok(&headers, Some(&session.id), "x") && !keys.csrf_ok(&http::HeaderMap::new(), None, &token)
        );

        let ticket = keys.ticket("a1", "user:bob");
        let read = keys.check_ticket(&ticket).expect("a signed ticket");
        assert_eq!((read.approval.as_str(), read.principal.as_str()), ("a1", "user:bob"));
        assert!(Keys::new([8; 32], true).check_ticket(&ticket).is_none(), "another key's");
        assert!(keys.check_ticket(&format!("x{ticket}")).is_none(), "a changed one");
    }

    #[test]
    fn a_session_rests_on_its_credential_and_lasts_its_lifetime_at_most() {
        let keys = Keys::new([7; 32], false).with_session_ttl(60);
        let listed = keys.open("user:bob", &[], Some(&Credential::Listed([1; 32])), None);
        assert!(keys.binds(&listed, &[1; 32]) && !keys.binds(&listed, &[2; 32]), "its own token's digest only");
        let moved = Session { principal: "user:eve".into(), ..listed.clone() };
        assert!(!keys.binds(&moved, &[1; 32]), "bound to its principal too");
        assert!(listed.expires <= now_s() + 60 && listed.expires > now_s());
        assert!(keys.cookie_of(&listed).contains("Max-Age=60") || keys.cookie_of(&listed).contains("Max-Age=59"));
        let jwt = keys.open("user:bob", &[], Some(&Credential::Until(now_s() + 5)), None);
        assert!(jwt.expires <= now_s() + 5 && jwt.credential.is_none(), "a JWT's exp ends it sooner");
        let lapsed = keys.open("user:bob", &[], Some(&Credential::Until(now_s().saturating_sub(1))), None);
        assert!(keys.session(&with_cookies(&[&keys.cookie_of(&lapsed)])).is_none(), "past its JWT's exp");
        assert_ne!(keys.open("user:bob", &[], None, None).id, keys.open("user:bob", &[], None, None).id);
    }
}
