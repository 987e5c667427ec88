//! `_meta`, capabilities and versions.

use hitl_protocol::version::{Era, era_of, negotiate_legacy};
use hitl_protocol::{ClientCapabilities, ErrorCode, ErrorObject, Meta, Needs, RequestMeta};
use serde_json::json;

fn meta(v: serde_json::Value) -> Meta {
    serde_json::from_value(v).unwrap()
}

#[test]
fn modern_meta_requires_version_and_capabilities() {
    let err = meta(json!({})).require_modern().unwrap_err();
    assert_eq!(err.code, ErrorCode::INVALID_PARAMS);
    assert!(err.message.contains("protocolVersion"));
    let err = meta(json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"})).require_modern().unwrap_err();
    assert!(err.message.contains("clientCapabilities"));
    let m = meta(json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"url": {}}},
        "progressToken": "p1",
        "io.modelcontextprotocol/logLevel": "debug",
        "com.example/x": 1
    }));
    let modern = m.require_modern().unwrap();
    assert!(modern.client_capabilities.elicits_url());
    assert!(!modern.client_capabilities.elicits_form(), "url only is not form");
    assert_eq!(m.progress_token(), Some(&json!("p1")));
    assert_eq!(m.log_level(), Some("debug"));
    assert_eq!(serde_json::to_value(&m).unwrap()["com.example/x"], 1, "unknown keys are kept");
}

#[test]
fn capability_questions() {
    let caps: ClientCapabilities = serde_json::from_value(json!({"elicitation": {}})).unwrap();
    assert!(caps.elicits_form() && !caps.elicits_url() && !caps.samples() && !caps.lists_roots());
    let caps: ClientCapabilities =
        serde_json::from_value(json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}})).unwrap();
    assert!(caps.elicits_form() && caps.elicits_url() && caps.samples() && caps.lists_roots());
    assert!(!ClientCapabilities::default().elicits_form());
}

/// Capabilities read key by key: the known ones typed, every other key kept as sent, a
/// known key given twice refused, the same from text as from a JSON tree.
#[test]
fn capabilities_keep_unknown_keys_and_refuse_a_repeated_known_one() {
    let text = r#"{"elicitation":{"form":{"x":1},"com.example/mode":true},"sampling":null,"com.example/y":[1],"com.example/y":[2]}"#;
    let from_text: ClientCapabilities = serde_json::from_str(text).unwrap();
    let from_tree: ClientCapabilities =
        serde_json::from_value(serde_json::from_str::<serde_json::Value>(text).unwrap()).unwrap();
    assert_eq!(from_text, from_tree);
    assert!(from_text.elicits_form() && !from_text.samples(), "null is absent, as derived");
    assert_eq!(from_text.other["com.example/y"], json!([2]), "the last of a repeated unknown key");
    let elicitation = from_text.elicitation.as_ref().unwrap();
    assert_eq!(
        (elicitation.form.as_ref().unwrap()["x"].clone(), elicitation.other["com.example/mode"].clone()),
        (json!(1), json!(true))
    );
    assert_eq!(
        serde_json::to_value(&from_text).unwrap()["elicitation"]["com.example/mode"],
        true,
        "kept keys are written back"
    );
    let twice = serde_json::from_str::<ClientCapabilities>(r#"{"roots":null,"roots":{}}"#).unwrap_err();
    assert!(twice.to_string().contains("duplicate field `roots`"), "{twice}");
    let not_an_object = serde_json::from_value::<ClientCapabilities>(json!([{}])).unwrap_err();
    assert!(not_an_object.to_string().contains("expected struct ClientCapabilities"), "{not_an_object}");
}

/// A request's `_meta` read straight from its text: the keys a server acts on, typed
/// and borrowed; a key of the wrong type, `null` included, fails the read.
#[test]
fn a_request_meta_reads_what_the_server_acts_on() {
    let text = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},"progressToken":7,"com.example/x":{"deep":[1]}}"#;
    let mut meta: RequestMeta<'_> = serde_json::from_str(text).unwrap();
    let text_start = text.as_ptr() as usize..text.as_ptr() as usize + text.len();
    let version = meta.protocol_version().unwrap();
    assert!(text_start.contains(&(version.as_ptr() as usize)), "borrowed from the text, not copied");
    assert_eq!(meta.progress_token(), Some(&json!(7)));
    let (version, capabilities) = meta.require_modern().unwrap();
    assert_eq!((&*version, capabilities.elicits_form()), ("2026-07-28", true));
    let mut missing: RequestMeta<'_> =
        serde_json::from_str(r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#).unwrap();
    assert!(missing.require_modern().unwrap_err().message.contains("clientCapabilities"));
    for wrong in [
        r#"{"io.modelcontextprotocol/protocolVersion":null}"#,
        r#"{"io.modelcontextprotocol/clientCapabilities":[]}"#,
        r#"{"io.modelcontextprotocol/clientInfo":{"name":"only"}}"#,
        r#"{"progressToken":1,"progressToken":2}"#,
        // An object only: a struct would also read from an array, by position.
        r#"["2026-07-28",{}]"#,
        "[]",
    ] {
        assert!(serde_json::from_str::<RequestMeta<'_>>(wrong).is_err(), "{wrong}");
    }
    let object: RequestMeta<'_> = serde_json::from_str(r#"{"progressToken":{"a":1}}"#).unwrap();
    assert_eq!(object.progress_token(), None, "a token is a string or an integer");
}

/// A client sends the same capabilities on every request: read once, then shared, while
/// other text is read as itself and wrong text still fails the read.
#[test]
fn capabilities_sent_again_are_shared_not_read_again() {
    let capabilities = |text: &str| {
        let text = format!(
            r#"{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{text}}}"#
        );
        serde_json::from_str::<RequestMeta<'_>>(&text).map(|mut meta| meta.require_modern().unwrap().1)
    };
    let (one, again) = (capabilities(r#"{"elicitation":{}}"#).unwrap(), capabilities(r#"{"elicitation":{}}"#).unwrap());
    assert!(std::sync::Arc::ptr_eq(&one, &again), "the same text, one value");
    let other = capabilities(r#"{"elicitation":{"url":{}}}"#).unwrap();
    assert!(other.elicits_url() && !one.elicits_url(), "other text reads as itself");
    assert!(!capabilities(r#"{"elicitation":{}}"#).unwrap().elicits_url(), "and the first again as itself");
    for wrong in ["null", "[]", r#"{"elicitation":{},"elicitation":{}}"#, r#"{"elicitation":5}"#] {
        assert!(capabilities(wrong).is_err(), "{wrong}");
    }
    let large = format!(r#"{{"experimental":{{"x":"{}"}}}}"#, "y".repeat(10_000));
    let (one, again) = (capabilities(&large).unwrap(), capabilities(&large).unwrap());
    assert!(!std::sync::Arc::ptr_eq(&one, &again), "a large text is not kept");
    assert_eq!(one, again);
}

#[test]
fn needs_render_as_required_capabilities() {
    let needs = Needs { form: true, url: true, ..Needs::default() };
    let missing = needs.missing_from(&serde_json::from_value(json!({"elicitation": {}})).unwrap());
    assert_eq!(missing, Needs { url: true, ..Needs::default() });
    let err = ErrorObject::missing_capability("m", &needs.to_capabilities());
    assert_eq!(err.data.unwrap(), json!({"requiredCapabilities": {"elicitation": {"form": {}, "url": {}}}}));
}

#[test]
fn eras_and_negotiation() {
    assert_eq!(era_of("2026-07-28"), Era::Modern);
    assert_eq!(era_of("2099-01-01"), Era::Modern);
    assert_eq!(era_of("v999.0.0"), Era::Modern);
    assert_eq!(era_of("2025-11-25"), Era::Legacy);
    assert_eq!(era_of("2024-11-05"), Era::Legacy);
    assert_eq!(negotiate_legacy("2025-06-18"), "2025-06-18");
    assert_eq!(negotiate_legacy("2024-11-05"), "2025-11-25");
}
