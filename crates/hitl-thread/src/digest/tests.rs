use serde_json::json;

#[test]
fn canonical_text_sorts_keys_at_every_level() {
    assert_eq!(super::canonical(&json!({"b": [{"d": 1, "c": "x"}], "a": null})), r#"{"a":null,"b":[{"c":"x","d":1}]}"#);
    assert_eq!(super::digest_hex(&json!({"a": 1, "b": 2})), super::digest_hex(&json!({"b": 2, "a": 1})));
    assert_eq!(super::hex(&[0x00, 0x9f, 0xff]), "009fff");
    assert_eq!(super::short_digest(&json!("q")).len(), 16);
}

#[test]
fn an_object_of_entries_digests_as_the_map_of_them() {
    let value = json!({"b": {"y": [1, "two", null, true, 2.5], "x": "é\n\"q\""}, "a": -3});
    let map = value.as_object().unwrap();
    let entries = map.iter().map(|(k, v)| (k.as_str(), v));
    assert_eq!(super::digest_hex_of_entries(entries), super::digest_hex(&value));
    // A repeated key counts once, with its last value, as in a map.
    let (one, two) = (json!(1), json!(2));
    let repeated = [("k", &one), ("a", &one), ("k", &two)];
    assert_eq!(super::digest_hex_of_entries(repeated.into_iter()), super::digest_hex(&json!({"a": 1, "k": 2})));
    assert_eq!(super::canonical(&json!({"k": 2, "a": 1})), r#"{"a":1,"k":2}"#);
    // The text hitl has always digested (argument digests are stored in records):
    // SHA-256 of `{"a":-3,"b":{"x":"é\n\"q\"","y":[1,"two",null,true,2.5]}}`.
    assert_eq!(super::digest_hex(&value), "ff90f90ce5c5ead369d58f4bf8d1b73692f67fd1dc0ab10420d9e8adc7a5b28a");
    assert_eq!(
        super::digest_hex(&json!({"version": "1.0", "service": "api"})),
        "c37a37820909a4e66d4d9a59e776352af93ff90d4b47184e6ea66ba017cae6b7"
    );
}

#[test]
fn every_form_of_a_digest_is_the_same_digest() {
    let value = json!({"region": "eu-west", "note": "x".repeat(70_000)});
    let map = value.as_object().unwrap();
    let entries = || map.iter().map(|(k, v)| (k.as_str(), v));
    let hex = super::digest_hex(&value);
    assert_eq!(&*super::digest_hex_shared(&value), hex);
    assert_eq!(super::prefixed_digest_of_entries("answer-", 16, entries()), format!("answer-{}", &hex[..16]));
    assert_eq!(super::prefixed_digest_of_entries("k", 99, entries()), format!("k{hex}"), "at most all 64 digits");
    // A text larger than the buffer kept between digests, then a small one: each digest
    // starts from an empty buffer.
    assert_eq!(super::digest_hex(&json!({})), "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
    assert_eq!(super::digest_hex(&value), hex);
}
