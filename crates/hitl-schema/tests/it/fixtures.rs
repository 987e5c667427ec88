//! `tests/fixtures/*.json`: `{description, input, expected | error}` cases.

use std::path::Path;

use hitl_schema::{FormOptions, check_url, to_form, validate};
use serde_json::Value;

fn cases(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(file);
    let cases: Vec<Value> = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert!(!cases.is_empty());
    cases
}

/// Converts `case.input` and compares with `expected`, or with `error` (pointer and a
/// part of the reason).
fn check(case: &Value) {
    let description = case["description"].as_str().unwrap();
    let result = to_form(&case["input"], &FormOptions::default());
    match (case.get("error"), result) {
        (Some(error), Err(e)) => {
            assert_eq!(e.pointer, error["pointer"].as_str().unwrap(), "{description}: {e}");
            assert!(e.reason.contains(error["contains"].as_str().unwrap()), "{description}: {e}");
        }
        (Some(_), Ok(form)) => panic!("{description}: expected an error, got {:?}", form.schema),
        (None, Err(e)) => panic!("{description}: {e}"),
        (None, Ok(form)) => {
            let got = serde_json::to_value(&form.schema).unwrap();
            if let Some(expected) = case.get("expected") {
                assert_eq!(got, *expected, "{description}");
            }
            if let Some(order) = case.get("expected_order") {
                let keys: Vec<&String> = form.schema.properties.keys().collect();
                assert_eq!(serde_json::to_value(keys).unwrap(), *order, "{description}");
            }
            assert_eq!(form.wrapped, case.get("wrapped").is_some_and(|w| w == true), "{description}");
        }
    }
}

#[test]
fn conversion_fixtures() {
    cases("convert.json").iter().for_each(check);
}

#[test]
fn refusal_fixtures() {
    cases("refuse.json").iter().for_each(check);
}

#[test]
fn validation_fixtures() {
    for case in cases("validate.json") {
        let description = case["description"].as_str().unwrap();
        let form = to_form(&case["form"], &FormOptions::default()).unwrap().schema;
        let fields: Vec<String> = match validate(&form, case["content"].as_object().unwrap()) {
            Ok(()) => Vec::new(),
            Err(violations) => {
                violations.iter().for_each(|v| assert!(!v.message.is_empty(), "{description}"));
                let mut f: Vec<String> = violations.into_iter().map(|v| v.field).collect();
                f.sort();
                f
            }
        };
        assert_eq!(serde_json::to_value(fields).unwrap(), case["violations"], "{description}");
    }
}

#[test]
fn url_fixtures() {
    for case in cases("url.json") {
        let url = case["url"].as_str().unwrap();
        match (case["ok"].as_bool().unwrap(), check_url(url)) {
            (true, Ok(())) => {}
            (true, Err(e)) => panic!("{url}: {e}"),
            (false, Ok(())) => panic!("{url} should be refused"),
            (false, Err(e)) => {
                assert_eq!(e.pointer, "/url");
                assert!(e.reason.contains(case["contains"].as_str().unwrap()), "{url}: {e}");
            }
        }
    }
}

#[test]
fn a_schema_over_one_mebibyte_is_refused() {
    let big = serde_json::json!({"type": "object", "properties": {"a": {"type": "string", "description": "x".repeat(1024 * 1024)}}});
    let err = to_form(&big, &FormOptions::default()).unwrap_err();
    assert_eq!(err.pointer, "/");
    assert!(err.reason.contains("bytes"), "{err}");
}

#[test]
fn wrapped_answers_unwrap_to_the_bare_value() {
    let form = to_form(&serde_json::json!({"type": "integer"}), &FormOptions::default()).unwrap();
    let content = serde_json::json!({"response": 42});
    assert_eq!(form.unwrap_answer(content.as_object().unwrap()), serde_json::json!(42));
    let form = to_form(
        &serde_json::json!({"type": "object", "properties": {"a": {"type": "string"}}}),
        &FormOptions::default(),
    )
    .unwrap();
    let content = serde_json::json!({"a": "x", "extra": 1});
    assert_eq!(form.unwrap_answer(content.as_object().unwrap()), serde_json::json!({"a": "x"}));
}

#[test]
fn typed_answers_deserialize_or_name_the_field() {
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Deployment {
        region: String,
        replicas: u8,
    }
    let ok: Deployment =
        hitl_schema::deserialize_answer(serde_json::json!({"region": "eu-west-1", "replicas": 3}).as_object().unwrap())
            .unwrap();
    assert_eq!(ok, Deployment { region: "eu-west-1".into(), replicas: 3 });
    let err = hitl_schema::deserialize_answer::<Deployment>(
        serde_json::json!({"region": "eu-west-1", "replicas": 300}).as_object().unwrap(),
    )
    .unwrap_err();
    assert_eq!(err.field, "replicas");
}
