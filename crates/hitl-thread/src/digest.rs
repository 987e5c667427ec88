//! Digests of JSON values: canonical text (object keys sorted), SHA-256, hex.

use ring::digest;
use serde_json::Value;

/// `value` as compact JSON with object keys sorted at every level, so that equal
/// values have equal text whatever order their keys arrived in.
pub fn canonical(value: &Value) -> String {
    let mut out = Vec::new();
    write(value, &mut out);
    // Written by serde_json and ASCII punctuation: UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// Appends `value`'s canonical text to `out`: keys sorted once, each entry written where
/// it is (no lookup again, no text made per key or scalar).
fn write(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => write_object(map.iter().map(|(k, v)| (k.as_str(), v)), out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        // Writing JSON to a Vec does not fail.
        scalar => {
            let _ = serde_json::to_writer(&mut *out, scalar);
        }
    }
}

/// The canonical text of the object of `entries`: sorted by key, a repeated key once
/// (the last, as a JSON object keeps it).
fn write_object<'a>(entries: impl Iterator<Item = (&'a str, &'a Value)>, out: &mut Vec<u8>) {
    let mut entries: Vec<(&str, &Value)> = entries.collect();
    // Stable: of entries with one key, the last stays last.
    entries.sort_by(|a, b| a.0.cmp(b.0));
    out.push(b'{');
    let mut first = true;
    for (i, (key, item)) in entries.iter().enumerate() {
        if entries.get(i + 1).is_some_and(|(next, _)| next == key) {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        let _ = serde_json::to_writer(&mut *out, key);
        out.push(b':');
        write(item, out);
    }
    out.push(b'}');
}

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
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    out
}

#[cfg(test)]
mod tests;
