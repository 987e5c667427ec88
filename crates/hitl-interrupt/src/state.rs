//! `requestState`: `<thread id>.<token>`, where the token is an HMAC-SHA256 under the
//! server secret of the thread id, the round number and a per-round random nonce.
//! The thread record keeps the nonce and the token's SHA-1 ([`proof`], defined with the
//! record in `hitl-thread`), never the token, so reading a record does not reveal a
//! usable state; verification recomputes the token and compares in constant time.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::{SecureRandom, SystemRandom};
use ring::{aead, hmac};

/// The server secret that keys request-state tokens, and the one it replaced while
/// rounds issued under that one are still open (a rotation).
#[derive(Clone)]
pub struct Secret {
    key: hmac::Key,
    previous: Option<hmac::Key>,
}

/// A page id: `<thread>.<round>.<question index>.<MAC>`, so a page leads to its
/// question without an index, and ids can't be guessed or forged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageId<'a> {
    /// The thread.
    pub thread: &'a str,
    /// The round.
    pub round: u32,
    /// The question's position in the round.
    pub index: usize,
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
        with_message(thread, round, nonce, |message| URL_SAFE_NO_PAD.encode(hmac::sign(&self.key, message).as_ref()))
    }

    /// The `requestState` of round `round` of `thread`.
    pub fn request_state(&self, thread: &str, round: u32, nonce: &str) -> String {
        joined(thread, &self.token(thread, round, nonce))
    }

    /// [`Secret::request_state`], with the token `minted` for the round when it was made
    /// (an HMAC not computed twice), if `minted` is that round's.
    pub(crate) fn request_state_of(&self, thread: &str, round: u32, nonce: &str, minted: Option<&Minted>) -> String {
        match minted.filter(|m| m.thread == thread && m.round == round && m.nonce == nonce) {
            Some(minted) => joined(thread, &minted.token),
            None => self.request_state(thread, round, nonce),
        }
    }

    /// Does `token` (the part after the dot) belong to that round, under this secret or
    /// the previous one? Constant-time.
    pub fn verify(&self, thread: &str, round: u32, nonce: &str, token: &str) -> bool {
        // Decoded in place: a token that does not fit is not one this server made.
        let mut given = [0u8; 48];
        let Ok(length) = URL_SAFE_NO_PAD.decode_slice(token, &mut given) else { return false };
        with_message(thread, round, nonce, |message| {
            std::iter::once(&self.key)
                .chain(&self.previous)
                .any(|key| hmac::verify(key, message, &given[..length]).is_ok())
        })
    }
}

/// `thread.token`, allocated once (`format!` grows its buffer several times for it).
fn joined(thread: &str, token: &str) -> String {
    let mut state = String::with_capacity(thread.len() + 1 + token.len());
    state.push_str(thread);
    state.push('.');
    state.push_str(token);
    state
}

/// A round's token, as made with the round (its proof is kept in the record): the
/// reply that asks the round is given it instead of making it again.
#[derive(Clone)]
pub(crate) struct Minted {
    pub(crate) thread: String,
    pub(crate) round: u32,
    pub(crate) nonce: String,
    pub(crate) token: String,
}

impl std::fmt::Debug for Minted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token: it answers the round.
        f.debug_struct("Minted").field("thread", &self.thread).field("round", &self.round).finish_non_exhaustive()
    }
}

impl Secret {
    /// A key for another use (say, signing session cookies), derived from this secret
    /// and `label`, so the signing key itself is never reused.
    pub fn derive(&self, label: &str) -> [u8; 32] {
        self.derive_each(label)[0]
    }

    /// [`Secret::derive`] under this secret, then under the previous one (during a
    /// rotation): what was keyed before the rotation is still checked.
    pub fn derive_each(&self, label: &str) -> Vec<[u8; 32]> {
        std::iter::once(&self.key)
            .chain(&self.previous)
            .map(|key| {
                let mut out = [0u8; 32];
                out.copy_from_slice(hmac::sign(key, format!("hitl/derive/v1\n{label}").as_bytes()).as_ref());
                out
            })
            .collect()
    }

    /// A tag (base64url of 16 bytes of HMAC under a key for `label`) that `data` was
    /// made by this server: say, a session id that carries what the client declared.
    pub fn tag(&self, label: &str, data: &str) -> String {
        let mac = hmac::sign(&self.key, format!("hitl/tag/v1\n{label}\n{data}").as_bytes());
        URL_SAFE_NO_PAD.encode(&mac.as_ref()[..16])
    }

    /// Is `tag` the [`Secret::tag`] of `data` for `label`, under this secret or the
    /// previous one? Constant-time.
    pub fn verify_tag(&self, label: &str, data: &str, tag: &str) -> bool {
        let Ok(given) = URL_SAFE_NO_PAD.decode(tag) else { return false };
        let message = format!("hitl/tag/v1\n{label}\n{data}");
        given.len() == 16
            && std::iter::once(&self.key).chain(&self.previous).any(|key| {
                let expected = hmac::sign(key, message.as_bytes());
                given.iter().zip(&expected.as_ref()[..16]).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
            })
    }

    /// The id of the page of question `index` of round `round` of `thread`.
    pub fn page_id(&self, thread: &str, round: u32, index: usize) -> String {
        let mac = hmac::sign(&self.key, page_message(thread, round, index).as_bytes());
        format!("{thread}.{round}.{index}.{}", URL_SAFE_NO_PAD.encode(&mac.as_ref()[..16]))
    }

    /// The parts of `id`, when it is a page id this secret (or the previous one) made.
    pub fn verify_page<'a>(&self, id: &'a str) -> Option<PageId<'a>> {
        let mut parts = id.split('.');
        let (thread, round, index, mac) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || uuid::Uuid::try_parse(thread).is_err() {
            return None;
        }
        let (round, index) = (round.parse().ok()?, index.parse().ok()?);
        let given = URL_SAFE_NO_PAD.decode(mac).ok()?;
        let message = page_message(thread, round, index);
        let matches = std::iter::once(&self.key).chain(&self.previous).any(|key| {
            let expected = hmac::sign(key, message.as_bytes());
            given.len() == 16 && given.iter().zip(&expected.as_ref()[..16]).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
        });
        matches.then_some(PageId { thread, round, index })
    }

    /// `plain` encrypted (AES-256-GCM under a key derived from this secret) and bound
    /// to `context`: base64url of nonce, ciphertext and tag.
    pub fn seal(&self, plain: &str, context: &str) -> String {
        let key = seal_key(&self.key);
        let mut nonce = [0u8; aead::NONCE_LEN];
        SystemRandom::new().fill(&mut nonce).expect("the system random source works");
        let mut sealed = plain.as_bytes().to_vec();
        key.seal_in_place_append_tag(
            aead::Nonce::assume_unique_for_key(nonce),
            aead::Aad::from(context.as_bytes()),
            &mut sealed,
        )
        .expect("AES-GCM seals any length this server stores");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        URL_SAFE_NO_PAD.encode(out)
    }

    /// What [`Secret::seal`] sealed for `context`, under this secret or the previous one.
    pub fn open(&self, sealed: &str, context: &str) -> Option<String> {
        let bytes = URL_SAFE_NO_PAD.decode(sealed).ok()?;
        if bytes.len() < aead::NONCE_LEN {
            return None;
        }
        let (nonce, body) = bytes.split_at(aead::NONCE_LEN);
        std::iter::once(&self.key).chain(&self.previous).find_map(|key| {
            let mut body = body.to_vec();
            let nonce = aead::Nonce::try_assume_unique_for_key(nonce).ok()?;
            let plain = seal_key(key).open_in_place(nonce, aead::Aad::from(context.as_bytes()), &mut body).ok()?;
            String::from_utf8(plain.to_vec()).ok()
        })
    }
}

/// The AES-256-GCM key of a server secret: its HMAC of a fixed label, so sealing
/// never uses the signing key itself.
fn seal_key(key: &hmac::Key) -> aead::LessSafeKey {
    let derived = hmac::sign(key, b"hitl/seal/v1");
    let unbound = aead::UnboundKey::new(&aead::AES_256_GCM, derived.as_ref()).expect("32 bytes make an AES-256 key");
    aead::LessSafeKey::new(unbound)
}

fn page_message(thread: &str, round: u32, index: usize) -> String {
    format!("hitl/page/v1\n{thread}\n{round}\n{index}")
}

/// `sign` of what a round's token signs, written on the stack (the thread's id and the
/// nonce are short; a longer message than the buffer takes is written to the heap).
fn with_message<R>(thread: &str, round: u32, nonce: &str, sign: impl FnOnce(&[u8]) -> R) -> R {
    use std::io::Write as _;
    let mut buffer = [0u8; 160];
    let written = {
        let mut rest = &mut buffer[..];
        write!(rest, "hitl/request-state/v1\n{thread}\n{round}\n{nonce}").ok().map(|()| 160 - rest.len())
    };
    match written {
        Some(length) => sign(&buffer[..length]),
        None => sign(format!("hitl/request-state/v1\n{thread}\n{round}\n{nonce}").as_bytes()),
    }
}

pub(crate) use hitl_thread::proof;

/// A fresh nonce for a round: 16 random bytes, base64url. From the thread's CSPRNG
/// (ChaCha, seeded and reseeded from the system's source): a system call per round
/// was a measurable share of the round.
pub(crate) fn nonce() -> String {
    let bytes: [u8; 16] = rand::random();
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Splits a `requestState` into thread id and token; `None` when it is not of that shape.
pub(crate) fn split(request_state: &str) -> Option<(&str, &str)> {
    let (thread, token) = request_state.split_once('.')?;
    let valid_id = uuid::Uuid::try_parse(thread).is_ok();
    (valid_id && !token.is_empty() && token.len() <= 64).then_some((thread, token))
}

#[cfg(test)]
mod tests {
    use super::{Minted, Secret};

    #[test]
    fn a_rounds_minted_token_is_used_only_for_that_round_of_that_thread() {
        let secret = Secret::generate();
        let minted = Minted { thread: "t1".into(), round: 2, nonce: "n".into(), token: "kept".into() };
        assert_eq!(secret.request_state_of("t1", 2, "n", Some(&minted)), "t1.kept", "not made again");
        for (thread, round, nonce) in [("t2", 2, "n"), ("t1", 3, "n"), ("t1", 2, "m")] {
            let made = secret.request_state_of(thread, round, nonce, Some(&minted));
            assert_eq!(
                made,
                secret.request_state(thread, round, nonce),
                "another round's is made: {thread} {round} {nonce}"
            );
        }
        assert_eq!(secret.request_state_of("t1", 2, "n", None), secret.request_state("t1", 2, "n"));
    }

    /// The token signs the same text, however long its parts (a message longer than the
    /// stack buffer is written to the heap), and a token too long to be one is refused.
    #[test]
    fn a_token_is_the_hmac_of_the_rounds_message_whatever_its_length() {
        use base64::Engine as _;
        let bytes = [7u8; 32];
        let secret = Secret::new(&bytes).unwrap();
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes);
        let thread = "0190b6c2-7c1e-7d7a-9a31-3f0c2a1b4d5e";
        for nonce in ["AAECAwQFBgcICQoLDA0ODw".to_owned(), "n".repeat(300)] {
            let message = format!("hitl/request-state/v1\n{thread}\n7\n{nonce}");
            let expected = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(ring::hmac::sign(&key, message.as_bytes()).as_ref());
            assert_eq!(secret.token(thread, 7, &nonce), expected, "nonce of {} bytes", nonce.len());
            assert!(secret.verify(thread, 7, &nonce, &expected));
            assert!(!secret.verify(thread, 8, &nonce, &expected), "another round");
        }
        assert!(!secret.verify(thread, 7, "n", &"A".repeat(64)), "48 bytes of zeros");
        assert!(!secret.verify(thread, 7, "n", &"A".repeat(65)), "longer than a token");
        assert!(!secret.verify(thread, 7, "n", "!!"), "not base64url");
    }
}
