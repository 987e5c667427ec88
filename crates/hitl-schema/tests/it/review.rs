//! The review form and the 2025-06-18 downgrade.

use hitl_schema::{DecisionKind, MAX_PREFILL_BYTES, downgrade_2025_06_18, review_form};
use serde_json::{Map, Value, json};

fn args(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[test]
fn seed_review_form_is_exact() {
    let (form, offered) =
        review_form(&DecisionKind::ALL, &args(json!({"to": "ada@example.com", "subject": "Launch"}))).unwrap();
    assert_eq!(offered, DecisionKind::ALL.to_vec());
    // The seed's own example, kept once in hitl-protocol's golden fixtures.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../hitl-protocol/tests/fixtures/seed_review_question.json");
    let fixture: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let seed = fixture["json"]["review-7c69d526bcc899c4.1"]["params"]["requestedSchema"].clone();
    assert_eq!(serde_json::to_value(&form).unwrap(), seed);
    let keys: Vec<&String> = form.properties.keys().collect();
    assert_eq!(keys, ["decision", "message", "args"]);
}

#[test]
fn review_fields_follow_the_allowed_decisions() {
    let (form, _) = review_form(&[DecisionKind::Approve], &Map::new()).unwrap();
    assert_eq!(form.properties.keys().collect::<Vec<_>>(), ["decision"]);
    let (form, _) = review_form(&[DecisionKind::Approve, DecisionKind::Edit], &Map::new()).unwrap();
    assert_eq!(form.properties.keys().collect::<Vec<_>>(), ["decision", "args"]);
}

#[test]
fn large_arguments_drop_the_edit_choice() {
    let big = args(json!({"body": "x".repeat(MAX_PREFILL_BYTES)}));
    let (form, offered) = review_form(&DecisionKind::ALL, &big).unwrap();
    assert!(!offered.contains(&DecisionKind::Edit));
    assert!(!form.properties.contains_key("args"));
    let err = review_form(&[DecisionKind::Edit], &big).unwrap_err();
    assert!(err.reason.contains("only edit"), "{err}");
}

#[test]
fn downgrade_keeps_boolean_defaults_and_uses_enum_names() {
    let (form, _) = review_form(&DecisionKind::ALL, &Map::new()).unwrap();
    let old = downgrade_2025_06_18(&form).unwrap();
    let decision = &old.properties["decision"];
    assert_eq!(decision["enum"], json!(["approve", "edit", "reject", "respond"]));
    assert_eq!(decision["enumNames"][1], "Edit the arguments");
    assert!(decision.get("oneOf").is_none());
    assert!(old.properties["args"].get("default").is_none());
    let with_bool = hitl_schema::to_form(
        &json!({"type": "object", "properties": {"ok": {"type": "boolean", "default": true}}}),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(downgrade_2025_06_18(&with_bool.schema).unwrap().properties["ok"]["default"], true);
    let multi = hitl_schema::to_form(
        &json!({"type": "object", "properties": {"t": {"type": "array", "items": {"enum": ["a"]}}}}),
        &Default::default(),
    )
    .unwrap();
    assert!(downgrade_2025_06_18(&multi.schema).is_err());
}
