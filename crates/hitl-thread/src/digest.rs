//! Digests of JSON values: canonical text (object keys sorted), SHA-256, hex.

use hitl_protocol::canonical::{write, write_object};
use ring::digest;
use serde_json::Value;

pub use hitl_protocol::canonical::canonical;

/// SHA-256 of the canonical text, in hex.
pub fn digest_hex(value: &Value) -> String {
    hex_digest_of(|out| write(value, out)).as_str().to_owned()
}

/// [`digest_hex`] of the object of `entries`, without making it: the same digest as of
/// a map holding them.
pub fn digest_hex_of_entries<'a>(entries: impl Iterator<Item = (&'a str, &'a Value)>) -> String {
    hex_digest_of(|out| write_object(entries, out)).as_str().to_owned()
}

/// `prefix` and the first `digits` hex digits (at most 64) of [`digest_hex_of_entries`],
/// in one allocation: a question's key.
pub fn prefixed_digest_of_entries<'a>(
    prefix: &str,
    digits: usize,
    entries: impl Iterator<Item = (&'a str, &'a Value)>,
) -> String {
    let digest = hex_digest_of(|out| write_object(entries, out));
    let digits = &digest.as_str()[..digits.min(HexDigest::LEN)];
    let mut key = String::with_capacity(prefix.len() + digits.len());
    key.push_str(prefix);
    key.push_str(digits);
    key
}

/// [`digest_hex`] as a shared string (one allocation for the text: the digest of a
/// call's arguments, which its thread and its observers share).
pub fn digest_hex_shared(value: &Value) -> std::sync::Arc<str> {
    std::sync::Arc::from(hex_digest_of(|out| write(value, out)).as_str())
}

/// A SHA-256 digest's 64 lowercase hex digits, on the stack.
struct HexDigest([u8; HexDigest::LEN]);

impl HexDigest {
    const LEN: usize = 64;

    fn as_str(&self) -> &str {
        // Written by `hex_into`: ASCII digits only.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// The SHA-256 of the canonical text `write` puts in this thread's buffer, in hex.
fn hex_digest_of(write: impl FnOnce(&mut Vec<u8>)) -> HexDigest {
    let digest = with_scratch(|out| {
        write(out);
        digest::digest(&digest::SHA256, out)
    });
    let mut text = HexDigest([0; HexDigest::LEN]);
    hex_into(digest.as_ref(), &mut text.0);
    text
}

/// Runs `f` on this thread's buffer for canonical text, emptied: the text is digested
/// and dropped, so each digest need not allocate its own. The buffer is taken out while
/// `f` runs (a digest within it starts an empty one) and put back after.
fn with_scratch<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    /// Past this, a buffer is not kept for the next digest.
    const KEPT: usize = 64 * 1024;
    thread_local! {
        static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    }
    let mut out = SCRATCH.try_with(std::cell::Cell::take).unwrap_or_default();
    out.clear();
    let result = f(&mut out);
    if out.capacity() <= KEPT {
        // A thread being torn down keeps nothing.
        let _ = SCRATCH.try_with(|kept| kept.set(out));
    }
    result
}

/// SHA-256 of `bytes`, in hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, bytes).as_ref())
}

/// The first 16 hex digits of [`digest_hex`]: the stable part of question keys.
pub fn short_digest(value: &Value) -> String {
    digest_hex(value)[..16].to_owned()
}

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0; bytes.len() * 2];
    hex_into(bytes, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// `bytes` as lowercase hex, written into the start of `out` (twice their length).
fn hex_into<'a>(bytes: &[u8], out: &'a mut [u8]) -> &'a str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    // Each pair written in place (no copy call per byte); ASCII digits only: the UTF-8
    // check takes its fast path.
    let out = &mut out[..bytes.len() * 2];
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0x0f)];
    }
    std::str::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests;
