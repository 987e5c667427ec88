//! Who is signed in to the pages, and forms that can't be forged from another site.
//!
//! A session is a cookie `hitl_session=<base64url JSON>.<base64url HMAC>`: the principal,
//! the groups and an expiry, signed with a key derived from the server secret, so any
//! replica reads it and no one can write one. It is `HttpOnly` (scripts never see it),
//! `SameSite=Strict` (never sent by another site's request) and `Secure` when the pages
//! are served over https.
//!
//! Forms carry a CSRF token: the HMAC of a random `hitl_csrf` cookie (signed
//! double-submit), checked on every POST, so a form posted from elsewhere fails even if
//! a browser sent the cookies.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "hitl_session";
/// The CSRF cookie's name.
pub const CSRF_COOKIE: &str = "hitl_csrf";
/// How long a sign-in lasts.
pub const SESSION_SECONDS: u64 = 8 * 3600;

/// Who signed in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
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
        Self { key: hmac::Key::new(hmac::HMAC_SHA256, &key), secure }
    }

    fn mac(&self, label: &str, value: &str) -> String {
        URL_SAFE_NO_PAD.encode(hmac::sign(&self.key, format!("{label}\n{value}").as_bytes()))
    }

    fn verify(&self, label: &str, value: &str, mac: &str) -> bool {
        let Ok(given) = URL_SAFE_NO_PAD.decode(mac) else { return false };
        hmac::verify(&self.key, format!("{label}\n{value}").as_bytes(), &given).is_ok()
    }

    /// The `Set-Cookie` value that signs `principal` in.
    pub fn sign_in(&self, principal: &str, groups: &[String]) -> String {
        self.sign_in_to(principal, groups, None)
    }

    /// [`Keys::sign_in`], for approval `scope` only when given (a single-use link).
    pub fn sign_in_to(&self, principal: &str, groups: &[String], scope: Option<&str>) -> String {
        let session = Session {
            principal: principal.to_owned(),
            groups: groups.to_vec(),
            expires: now_s() + SESSION_SECONDS,
            scope: scope.map(str::to_owned),
        };
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&session).expect("a session is plain JSON"));
        let value = format!("{body}.{}", self.mac("session", &body));
        self.cookie(SESSION_COOKIE, &value, SESSION_SECONDS)
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

    /// The CSRF token for the request's `hitl_csrf` cookie, and the `Set-Cookie` to send
    /// when it has none yet.
    pub fn csrf(&self, headers: &http::HeaderMap) -> (String, Option<String>) {
        match cookie(headers, CSRF_COOKIE).filter(|c| !c.is_empty()) {
            Some(seed) => (self.mac("csrf", &seed), None),
            None => {
                let seed = random();
                (self.mac("csrf", &seed), Some(self.cookie(CSRF_COOKIE, &seed, SESSION_SECONDS)))
            }
        }
    }

    /// Does a form's `token` match the request's `hitl_csrf` cookie?
    pub fn csrf_ok(&self, headers: &http::HeaderMap, token: &str) -> bool {
        cookie(headers, CSRF_COOKIE).is_some_and(|seed| self.verify("csrf", &seed, token))
    }

    fn cookie(&self, name: &str, value: &str, max_age: u64) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}")
    }
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
    fn sessions_are_signed_and_csrf_tokens_bound_to_their_cookie() {
        let keys = Keys::new([7; 32], true);
        let set = keys.sign_in("user:bob", &["group:sre".into()]);
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Secure"), "{set}");
        let session = keys.session(&with_cookies(&[&set])).expect("a signed session");
        assert_eq!(session.principal, "user:bob");
        assert!(session.is(&["group:sre".into()]) && !session.is(&["group:dev".into()]));
        // Another key, or a changed body, is no session.
        assert!(Keys::new([8; 32], true).session(&with_cookies(&[&set])).is_none());
        let value = set.split(';').next().unwrap().strip_prefix("hitl_session=").unwrap();
        let (_, mac) = value.rsplit_once('.').unwrap();
        let forged = format!(
            "hitl_session={}.{mac}",
            URL_SAFE_NO_PAD.encode(br#"{"p":"user:eve","g":["group:sre"],"e":99999999999}"#)
        );
        assert!(keys.session(&with_cookies(&[&forged])).is_none());

        let (token, set_csrf) = keys.csrf(&http::HeaderMap::new());
        let set_csrf = set_csrf.expect("a new CSRF cookie");
        let headers = with_cookies(&[&set_csrf]);
        assert!(keys.csrf_ok(&headers, &token));
        assert_eq!(keys.csrf(&headers), (token.clone(), None), "the same cookie gives the same token");
        assert!(!keys.csrf_ok(&headers, "x") && !keys.csrf_ok(&http::HeaderMap::new(), &token));

        let ticket = keys.ticket("a1", "user:bob");
        let read = keys.check_ticket(&ticket).expect("a signed ticket");
        assert_eq!((read.approval.as_str(), read.principal.as_str()), ("a1", "user:bob"));
        assert!(Keys::new([8; 32], true).check_ticket(&ticket).is_none(), "another key's");
        assert!(keys.check_ticket(&format!("x{ticket}")).is_none(), "a changed one");
    }
}
