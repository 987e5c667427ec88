//! `_meta`, capabilities and versions.

use hitl_protocol::version::{Era, era_of, negotiate_legacy};
use hitl_protocol::{ClientCapabilities, ErrorCode, ErrorObject, Meta, Needs};
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
