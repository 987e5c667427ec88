//! `requestState`: `<thread id>.<token>`, where the token is an HMAC-SHA256 under the
//! server secret of the thread id, the round number and a per-round random nonce.
//! The thread record keeps the nonce, never the token, so reading a record does not
//! reveal a usable state; verification recomputes the token and compares in constant
//! time.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// The server secret that keys request-state tokens, and the one it replaced while
/// rounds issued under that one are still open (a rotation).
#[derive(Clone)]
pub struct Secret {
    key: hmac::Key,
    previous: Option<hmac::Key>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Too short a secret.
#[derive(Debug, thiserror::Error)]
#[error("the server secret must be at least {min} bytes, got {got}")]
pub struct WeakSecret {
    /// The minimum.
    pub min: usize,
    /// What was given.
    pub got: usize,
}

impl Secret {
    /// The shortest secret accepted.
    pub const MIN_LEN: usize = 32;

    /// A secret from bytes (at least [`Secret::MIN_LEN`]).
    pub fn new(bytes: &[u8]) -> Result<Self, WeakSecret> {
        if bytes.len() < Self::MIN_LEN {
            return Err(WeakSecret { min: Self::MIN_LEN, got: bytes.len() });
        }
        Ok(Self { key: hmac::Key::new(hmac::HMAC_SHA256, bytes), previous: None })
    }

    /// This secret, still accepting the `requestState`s `previous` issued: new rounds
    /// are signed with this one only.
    #[must_use]
    pub fn with_previous(mut self, previous: Secret) -> Self {
        self.previous = Some(previous.key);
        self
    }

    /// A random secret, for a single process that keeps its threads in memory.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        SystemRandom::new().fill(&mut bytes).expect("the system random source works");
        Self { key: hmac::Key::new(hmac::HMAC_SHA256, &bytes), previous: None }
    }

    /// The token of round `round` of `thread` (the part of its `requestState` after the
    /// dot).
    pub fn token(&self, thread: &str, round: u32, nonce: &str) -> String {
        URL_SAFE_NO_PAD.encode(hmac::sign(&self.key, message(thread, round, nonce).as_bytes()).as_ref())
    }

    /// The `requestState` of round `round` of `thread`.
    pub fn request_state(&self, thread: &str, round: u32, nonce: &str) -> String {
        format!("{thread}.{}", self.token(thread, round, nonce))
    }

    /// Does `token` (the part after the dot) belong to that round, under this secret or
    /// the previous one? Constant-time.
    pub fn verify(&self, thread: &str, round: u32, nonce: &str, token: &str) -> bool {
        let Ok(given) = URL_SAFE_NO_PAD.decode(token) else { return false };
        let message = message(thread, round, nonce);
        std::iter::once(&self.key)
            .chain(&self.previous)
            .any(|key| hmac::verify(key, message.as_bytes(), &given).is_ok())
    }
}

/// What a round's token signs.
fn message(thread: &str, round: u32, nonce: &str) -> String {
    format!("hitl/request-state/v1\n{thread}\n{round}\n{nonce}")
}

/// A fresh nonce for a round: 16 random bytes, base64url.
pub fn nonce() -> String {
    let mut bytes = [0u8; 16];
    SystemRandom::new().fill(&mut bytes).expect("the system random source works");
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Splits a `requestState` into thread id and token; `None` when it is not of that shape.
pub fn split(request_state: &str) -> Option<(&str, &str)> {
    let (thread, token) = request_state.split_once('.')?;
    let valid_id = uuid::Uuid::try_parse(thread).is_ok();
    (valid_id && !token.is_empty() && token.len() <= 64).then_some((thread, token))
}
