//! Canonical JSON text: compact, object keys sorted at every level, so that equal values
//! have equal text (and equal digests) whatever order their keys arrived in.
//!
//! ```
//! use serde_json::json;
//! assert_eq!(hitl_protocol::canonical::canonical(&json!({"b": 1, "a": [{"d": 2, "c": 3}]})), r#"{"a":[{"c":3,"d":2}],"b":1}"#);
//! ```

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
pub fn write(value: &Value, out: &mut Vec<u8>) {
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

/// Appends the canonical text of the object of `entries`: sorted by key, a repeated key once
/// (the last, as a JSON object keeps it).
pub fn write_object<'a>(entries: impl Iterator<Item = (&'a str, &'a Value)>, out: &mut Vec<u8>) {
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
