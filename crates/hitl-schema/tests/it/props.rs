//! Property tests: conversion never panics, and every form it emits is valid for the
//! MCP rules of elicitation forms.

use std::path::Path;
use std::sync::OnceLock;

use hitl_schema::{FormOptions, to_form};
use proptest::prelude::*;
use serde_json::{Value, json};

fn mcp_rules() -> &'static jsonschema::Validator {
    static RULES: OnceLock<jsonschema::Validator> = OnceLock::new();
    RULES.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp-form.schema.json");
        let schema: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        jsonschema::validator_for(&schema).unwrap()
    })
}

fn assert_mcp_form(input: &Value) {
    if let Ok(form) = to_form(input, &FormOptions::default()) {
        let emitted = serde_json::to_value(&form.schema).unwrap();
        let errors: Vec<String> = mcp_rules().iter_errors(&emitted).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{input} became {emitted}, which breaks the MCP rules: {errors:?}");
    }
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        "[a-z]{0,6}".prop_map(Value::from),
        prop_oneof![
            Just("string"),
            Just("integer"),
            Just("number"),
            Just("boolean"),
            Just("object"),
            Just("array"),
            Just("null")
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("type".to_owned()),
                        Just("properties".to_owned()),
                        Just("enum".to_owned()),
                        Just("items".to_owned()),
                        Just("anyOf".to_owned()),
                        Just("oneOf".to_owned()),
                        Just("$ref".to_owned()),
                        Just("const".to_owned()),
                        Just("default".to_owned()),
                        Just("format".to_owned()),
                        Just("title".to_owned()),
                        Just("required".to_owned()),
                        "[a-z]{1,5}",
                    ],
                    inner
                ),
                0..5
            )
            .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

fn field() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({"type": "string"})),
        Just(json!({"type": "string", "format": "email", "default": "a@b.c"})),
        Just(json!({"type": "integer", "format": "int32", "minimum": 1})),
        Just(json!({"type": ["number", "null"], "maximum": 3.5})),
        Just(json!({"type": "boolean", "default": false, "title": "B"})),
        Just(json!({"enum": ["a", "b"]})),
        Just(json!({"const": "x"})),
        Just(json!({"anyOf": [{"type": "string"}, {"type": "null"}], "default": null})),
        Just(json!({"type": "string", "oneOf": [{"const": "a", "title": "A"}]})),
        Just(json!({"type": "array", "items": {"enum": ["a"]}, "uniqueItems": true})),
        Just(json!({"type": "array", "items": {"anyOf": [{"const": "a", "title": "A"}]}, "maxItems": 1})),
        Just(json!({"$ref": "#/$defs/E", "description": "d"})),
        Just(json!({"allOf": [{"$ref": "#/$defs/E"}]})),
        Just(json!({"type": "object"})),
        Just(json!({"type": "string", "pattern": "x"})),
    ]
}

proptest! {
    #[test]
    fn conversion_never_panics(input in any_json()) {
        let _ = to_form(&input, &FormOptions::default());
        assert_mcp_form(&input);
    }

    #[test]
    fn emitted_forms_follow_the_mcp_rules(
        fields in prop::collection::vec(("[a-z]{1,8}", field()), 1..8),
        root_title in proptest::option::of("[A-Z][a-z]{0,5}"),
    ) {
        let mut schema = json!({"type": "object", "$defs": {"E": {"enum": ["x", "y"], "type": "string"}}});
        schema["properties"] = Value::Object(fields.into_iter().collect());
        if let Some(t) = root_title {
            schema["title"] = json!(t);
        }
        assert_mcp_form(&schema);
    }
}
