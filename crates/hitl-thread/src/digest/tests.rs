use serde_json::json;

#[test]
fn canonical_text_sorts_keys_at_every_level() {
    assert_eq!(super::canonical(&json!({"b": [{"d": 1, "c": "x"}], "a": null})), r#"{"a":null,"b":[{"c":"x","d":1}]}"#);
    assert_eq!(super::digest_hex(&json!({"a": 1, "b": 2})), super::digest_hex(&json!({"b": 2, "a": 1})));
    assert_eq!(super::hex(&[0x00, 0x9f, 0xff]), "009fff");
    assert_eq!(super::short_digest(&json!("q")).len(), 16);
}
