//! Digests of JSON values: canonical text (object keys sorted), SHA-256, hex.

use ring::digest;
use serde_json::Value;

/// `value` as compact JSON with object keys sorted at every level, so that equal
/// values have equal text whatever order their keys arrived in.
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(key).unwrap_or_default());
                out.push(':');
                write(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// SHA-256 of the canonical text, in hex.
pub fn digest_hex(value: &Value) -> String {
    hex(digest::digest(&digest::SHA256, canonical(value).as_bytes()).as_ref())
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
