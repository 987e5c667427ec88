//! Digests of JSON values: canonical text (object keys sorted), SHA-256, hex.

use hitl_protocol::canonical::{write, write_object};
use ring::digest;
use serde_json::Value;

pub use hitl_protocol::canonical::canonical;

/// SHA-256 of the canonical text, in hex.
pub fn digest_hex(value: &Value) -> String {
    let mut out = Vec::with_capacity(256);
    write(value, &mut out);
    sha256_hex(&out)
}

/// [`digest_hex`] of the object of `entries`, without making it: the same digest as of
/// a map holding them.
pub fn digest_hex_of_entries<'a>(entries: impl Iterator<Item = (&'a str, &'a Value)>) -> String {
    let mut out = Vec::with_capacity(256);
    write_object(entries, &mut out);
    sha256_hex(&out)
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
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    // Each pair written in place (no copy call per byte); ASCII digits only: the UTF-8
    // check takes its fast path.
    let mut out = vec![0; bytes.len() * 2];
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0x0f)];
    }
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests;
