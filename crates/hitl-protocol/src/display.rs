//! Text shown to a person who decides whether a call runs, so that what they read is
//! what runs: characters that are not seen (bidi controls, zero-width and other format
//! characters, control characters, spaces other than U+0020) are written as visible
//! escapes, `\u202e` (lowercase hex, four digits; a character beyond U+FFFF as its
//! UTF-16 pair, as JSON writes it). Everything else is left as it is, so plain text
//! reads the same.
//!
//! One place for the rule, so the client's review message and hitl's approval page
//! never disagree on what a value shows as.
//!
//! ```
//! use hitl_protocol::display;
//! use serde_json::json;
//!
//! assert_eq!(display::escape("\u{202e}DORP\u{202c}_orders_test"), r"\u202eDORP\u202c_orders_test");
//! assert_eq!(display::escape("two\nlines"), r"two\nlines");
//! assert_eq!(display::escape_lines("two\nlines\u{a0}"), "two\nlines\\u00a0");
//! // JSON stays JSON, with the same value.
//! let args = json!({"table": "\u{202e}DORP\u{202c}_orders_test"});
//! let shown = display::json(&args);
//! assert_eq!(shown, r#"{"table":"\u202eDORP\u202c_orders_test"}"#);
//! assert_eq!(serde_json::from_str::<serde_json::Value>(&shown).unwrap(), args);
//! ```

use std::borrow::Cow;
use std::fmt::Write as _;

use serde_json::Value;

/// Is `c` a character a reader would not see, or would not see as what it is: a
/// control character (C0, DEL, C1), a bidi control (U+061C, U+200E–U+200F,
/// U+202A–U+202E, U+2066–U+2069), a zero-width or other invisible format character
/// (U+00AD, U+034F, U+180B–U+180F, U+200B–U+200D, U+2060–U+2064, U+206A–U+206F,
/// U+FEFF, variation selectors, tags, Hangul fillers, …), or a space other than U+0020
/// (U+00A0, U+1680, U+2000–U+200A, U+2028–U+2029, U+202F, U+205F, U+3000)?
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00a0}'
                | '\u{00ad}'
                | '\u{034f}'
                | '\u{061c}'
                | '\u{115f}'..='\u{1160}'
                | '\u{1680}'
                | '\u{17b4}'..='\u{17b5}'
                | '\u{180b}'..='\u{180f}'
                | '\u{2000}'..='\u{200f}'
                | '\u{2028}'..='\u{202f}'
                | '\u{205f}'..='\u{206f}'
                | '\u{3000}'
                | '\u{3164}'
                | '\u{fe00}'..='\u{fe0f}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{fff0}'..='\u{fffb}'
                | '\u{1bca0}'..='\u{1bca3}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0000}'..='\u{e0fff}'
        )
}

/// `text` on one line: every hidden character escaped, line feeds, carriage returns and
/// tabs as `\n`, `\r`, `\t`, so nothing in it can push what follows out of view.
pub fn escape(text: &str) -> Cow<'_, str> {
    escaped(text, false)
}

/// `text` with its line breaks kept (for text whose lines are its own, such as a
/// policy's description) and every other hidden character escaped.
pub fn escape_lines(text: &str) -> Cow<'_, str> {
    escaped(text, true)
}

/// `value` as compact JSON with the hidden characters of its strings escaped: still
/// JSON, of the same value, and for plain text the same bytes as `value.to_string()`.
pub fn json(value: &Value) -> String {
    owned(value.to_string(), escape)
}

/// [`json`], indented.
pub fn json_pretty(value: &Value) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    // serde_json escapes control characters inside strings, so a line feed left in the
    // text is its own indentation.
    owned(text, escape_lines)
}

/// A value as one line: a string as its escaped text, anything else as [`json`].
pub fn value(value: &Value) -> String {
    match value {
        Value::String(text) => owned(text.clone(), escape),
        other => json(other),
    }
}

/// `text` through `escape`, without copying it again when nothing needed escaping.
fn owned(text: String, escape: fn(&str) -> Cow<'_, str>) -> String {
    match escape(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(shown) => shown,
    }
}

fn escaped(text: &str, keep_lines: bool) -> Cow<'_, str> {
    let shown = |c: char| !is_hidden(c) || (keep_lines && c == '\n');
    if text.chars().all(shown) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            c if shown(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    Cow::Owned(out)
}
