//! What a person is shown of a value: hidden characters as escapes, plain text as it is.

use hitl_protocol::display::{escape, escape_lines, is_hidden, json, json_pretty, value};
use proptest::prelude::*;
use serde_json::{Value, json};

#[test]
fn bidi_controls_and_invisible_characters_show_as_escapes() {
    assert_eq!(escape("\u{202e}DORP\u{202c}_orders_test"), r"\u202eDORP\u202c_orders_test");
    let cases = [
        ("a\u{200b}b", r"a\u200bb"),
        ("\u{2066}x\u{2069}", r"\u2066x\u2069"),
        ("soft\u{ad}hyphen", r"soft\u00adhyphen"),
        ("bom\u{feff}", r"bom\ufeff"),
        ("join\u{2060}er", r"join\u2060er"),
        ("nbsp\u{a0}\u{a0}pad", r"nbsp\u00a0\u00a0pad"),
        ("thin\u{2009}space", r"thin\u2009space"),
        ("ideographic\u{3000}space", r"ideographic\u3000space"),
        ("nul\u{0}del\u{7f}c1\u{85}", r"nul\u0000del\u007fc1\u0085"),
        ("esc\u{1b}[31m", r"esc\u001b[31m"),
        ("line\nfeed\rtab\t", r"line\nfeed\rtab\t"),
        ("tag\u{e0041}", r"tag\udb40\udc41"),
        ("vs16\u{fe0f}", r"vs16\ufe0f"),
    ];
    for (raw, shown) in cases {
        assert_eq!(escape(raw), shown, "{raw:?}");
    }
}

#[test]
fn plain_text_is_left_as_it_is() {
    for plain in ["p1", "orders", "Drop p1 on orders?", "héllo wörld", "日本語", "a \\ b \"c\"", "{x}", ""] {
        assert!(matches!(escape(plain), std::borrow::Cow::Borrowed(_)), "{plain:?} is not copied");
        assert_eq!(escape(plain), plain);
    }
}

#[test]
fn lines_keep_their_breaks_and_nothing_else() {
    assert_eq!(escape_lines("Drop it?\n\nSure\u{202e}"), "Drop it?\n\nSure\\u202e");
    assert_eq!(escape_lines("cr\r\ntab\t"), "cr\\r\ntab\\t");
}

#[test]
fn json_stays_json_and_plain_json_keeps_its_bytes() {
    let plain = json!({"partition": "p1", "database": "orders", "n": 3, "nested": {"a": [1, "b\\c"]}});
    assert_eq!(json(&plain), plain.to_string());
    assert_eq!(json_pretty(&plain), serde_json::to_string_pretty(&plain).unwrap());
    let tricky = json!({"t\u{200b}able": "\u{202e}DORP\u{202c}", "pad": "x\u{a0}\u{a0}y", "nl": "a\nb"});
    assert_eq!(json(&tricky), r#"{"t\u200bable":"\u202eDORP\u202c","pad":"x\u00a0\u00a0y","nl":"a\nb"}"#);
    for text in [json(&tricky), json_pretty(&tricky)] {
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), tricky, "{text}");
    }
    assert_eq!(value(&json!("a\u{202e}")), r"a\u202e");
    assert_eq!(value(&json!(["a\u{202e}"])), r#"["a\u202e"]"#);
    assert_eq!(value(&json!(3)), "3");
}

fn hidden_or_plain() -> impl Strategy<Value = String> {
    let hidden = prop::sample::select(vec![
        '\u{0}',
        '\n',
        '\u{1b}',
        '\u{7f}',
        '\u{85}',
        '\u{a0}',
        '\u{ad}',
        '\u{200b}',
        '\u{200f}',
        '\u{202a}',
        '\u{202e}',
        '\u{2066}',
        '\u{2069}',
        '\u{2060}',
        '\u{2064}',
        '\u{feff}',
        '\u{3000}',
        '\u{e0001}',
    ]);
    let any_char = prop_oneof![3 => any::<char>(), 1 => hidden];
    prop::collection::vec(any_char, 0..40).prop_map(|chars| chars.into_iter().collect())
}

proptest! {
    #[test]
    fn nothing_hidden_is_left_and_escaping_twice_changes_nothing(text in hidden_or_plain()) {
        let shown = escape(&text);
        prop_assert!(!shown.chars().any(is_hidden), "{:?}", shown);
        prop_assert_eq!(escape(&shown), shown.clone());
        let lines = escape_lines(&text);
        prop_assert!(!lines.chars().any(|c| is_hidden(c) && c != '\n'));
        prop_assert_eq!(lines.matches('\n').count(), text.matches('\n').count(), "the line breaks are kept");
    }

    #[test]
    fn shown_json_reads_back_as_the_same_value(key in hidden_or_plain(), text in hidden_or_plain()) {
        let original = json!({ key: [text.clone(), {"v": text}] });
        for shown in [json(&original), json_pretty(&original)] {
            prop_assert!(!shown.chars().any(|c| is_hidden(c) && c != '\n'), "{:?}", shown);
            prop_assert_eq!(serde_json::from_str::<Value>(&shown).unwrap(), original.clone());
        }
    }

    #[test]
    fn text_without_hidden_characters_is_unchanged(text in "[^\\p{Cc}\\p{Cf}\\p{Zs}\\p{Zl}\\p{Zp}]{0,40}") {
        let text: String = text.chars().filter(|c| !is_hidden(*c)).collect();
        prop_assert_eq!(escape(&text), text.clone());
        prop_assert_eq!(json(&Value::String(text.clone())), Value::String(text).to_string());
    }
}
