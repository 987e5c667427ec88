//! The JSON-RPC envelope rules, one test per rule, and a property test that no byte
//! string panics the parser.

use hitl_protocol::jsonrpc::{self, Rejection};
use hitl_protocol::{ClientRequest, ErrorCode, Message, RequestId};
use proptest::prelude::*;

fn reject(bytes: &str) -> Rejection {
    jsonrpc::parse(bytes.as_bytes()).expect_err("must be rejected")
}

/// A request borrowed with its params as their text is the request `parse` reads; any
/// other message, or one that breaks a rule, is left to `parse`.
#[test]
fn a_borrowed_request_is_the_request_parse_reads_and_nothing_else_is_borrowed() {
    let text =
        br#" {"jsonrpc":"2.0","id":"r1","method":"tools/call","params": {"name":"x","arguments":{"a":[1, 2]}} }"#;
    let borrowed = jsonrpc::parse_borrowed(text).expect("a request");
    let Message::Request(tree) = jsonrpc::parse(text).unwrap() else { panic!("a request") };
    assert_eq!((&borrowed.id, borrowed.method), (&tree.id, tree.method.as_str()));
    let params: serde_json::Value = serde_json::from_str(borrowed.params.unwrap().get()).unwrap();
    assert_eq!(Some(params), tree.params);
    for other in [
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":3}"#,
        r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
        r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","result":null}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
        // JSON reads `-0` as a float, which is no id.
        r#"{"jsonrpc":"2.0","id":-0,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":3}"#,
        // Escapes are left to `parse`, which reads them.
        r#"{"jsonrpc":"2\u002e0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools\/call"}"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
        // Fields by position: a batch to `parse`, never a request.
        r#"["2.0",1,"tools/call",{"name":"x"}]"#,
    ] {
        assert!(jsonrpc::parse_borrowed(other.as_bytes()).is_none(), "{other}");
    }
    let empty = jsonrpc::parse_borrowed(br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":null}"#).unwrap();
    assert!(empty.params.is_none(), "null params are none, as `parse` reads them");
}

/// A request read in one pass is the request its envelope, then its params, read: in
/// the order clients write it (the TypeScript SDK puts `method` and `params` first).
/// Anything else, or one that breaks a rule, is left to the two readings.
#[test]
fn a_request_read_in_one_pass_is_the_request_read_in_two() {
    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Params {
        name: String,
        #[serde(default)]
        arguments: Option<serde_json::Value>,
    }
    for text in [
        r#" {"jsonrpc":"2.0","id":"r1","method":"tools/call","params": {"name":"x","arguments":{"a":[1, 2]}} } "#,
        r#"{"method":"tools/call","params":{"name":"x"},"jsonrpc":"2.0","id":7}"#,
        r#"{"id":-3,"method":"tools/call","jsonrpc":"2.0","params":{"arguments":null,"name":"\u0078"}}"#,
    ] {
        let (id, params) = jsonrpc::parse_request_of::<Params>(text.as_bytes(), "tools/call").expect(text);
        let borrowed = jsonrpc::parse_borrowed(text.as_bytes()).expect(text);
        assert_eq!((&id, "tools/call"), (&borrowed.id, borrowed.method), "{text}");
        assert_eq!(params, serde_json::from_str::<Params>(borrowed.params.unwrap().get()).unwrap(), "{text}");
    }
    for other in [
        // `params` before `method`: which type they read into is not known yet.
        r#"{"jsonrpc":"2.0","id":1,"params":{"name":"x"},"method":"tools/call"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"},"params":{"name":"y"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/call","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":-0,"method":"tools/call","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x"}}"#,
        r#"{"id":1,"method":"tools/call","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["x"]}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":3}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","name":"y"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"},"result":null}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"},"extra":1}"#,
        r#"{"\u006asonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}} x"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}]"#,
        r#"["2.0",1,"tools/call",{"name":"x"}]"#,
    ] {
        assert!(jsonrpc::parse_request_of::<Params>(other.as_bytes(), "tools/call").is_none(), "{other}");
    }
    // Bytes that are not UTF-8, where a reading skips them (an unknown key's value, in
    // the params, their `_meta` or the envelope), are left to `parse`: a parse error.
    for (before, after) in [
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","zz":""#, r#""}}"#),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"zz":""#, r#""}}}"#),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"},"zz":""#, r#""}"#),
    ] {
        let bytes = [before.as_bytes(), &[0xff], after.as_bytes()].concat();
        assert!(jsonrpc::parse_request_of::<Params>(&bytes, "tools/call").is_none(), "{before}");
        assert!(jsonrpc::parse_borrowed(&bytes).is_none(), "{before}");
        let rejected = jsonrpc::parse(&bytes).expect_err(before);
        assert_eq!(rejected.error.code, ErrorCode::PARSE_ERROR, "{before}");
    }
}

#[test]
fn bad_json_is_parse_error() {
    let r = reject(r#"{"jsonrpc":"2.0","#);
    assert_eq!(r.error.code, ErrorCode::PARSE_ERROR);
    assert_eq!(r.id, None);
}

/// An object is read straight into its fields; one that does not read so is read as a
/// JSON tree, as before: a repeated key keeps its last value, trailing bytes are bad JSON.
#[test]
fn an_object_reads_the_same_by_either_path() {
    let repeated = jsonrpc::parse(br#" {"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#).unwrap();
    assert!(matches!(repeated, Message::Request(r) if r.id == RequestId::Number(2) && r.method == "ping"));
    let trailing = reject(r#"{"jsonrpc":"2.0","id":1,"method":"ping"} x"#);
    assert_eq!((trailing.error.code, trailing.id), (ErrorCode::PARSE_ERROR, None));
    let version = reject(r#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#);
    assert_eq!((version.error.code, version.id), (ErrorCode::INVALID_REQUEST, Some(RequestId::String("a".into()))));
}

#[test]
fn batch_is_invalid_request() {
    let r = reject(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#);
    assert_eq!(r.error.code, ErrorCode::INVALID_REQUEST);
    assert!(r.error.message.contains("batch"));
}

#[test]
fn non_object_is_invalid_request() {
    assert_eq!(reject("42").error.code, ErrorCode::INVALID_REQUEST);
    assert_eq!(reject("\"x\"").error.code, ErrorCode::INVALID_REQUEST);
}

#[test]
fn bad_jsonrpc_version_is_invalid_request_with_id() {
    let r = reject(r#"{"jsonrpc":"1.0","id":"abc","method":"ping"}"#);
    assert_eq!(r.error.code, ErrorCode::INVALID_REQUEST);
    assert_eq!(r.id, Some(RequestId::String("abc".into())));
    let r = reject(r#"{"id":5,"method":"ping"}"#);
    assert_eq!(r.id, Some(RequestId::Number(5)));
    assert!(r.error.message.contains("jsonrpc"));
}

#[test]
fn result_and_error_together_is_invalid_request() {
    let r = reject(r#"{"jsonrpc":"2.0","id":9,"result":{},"error":{"code":1,"message":"x"}}"#);
    assert_eq!(r.error.code, ErrorCode::INVALID_REQUEST);
    assert_eq!(r.id, Some(RequestId::Number(9)));
}

#[test]
fn bad_ids_are_invalid_requests() {
    for id in ["1.5", "null", "true", "{}", "[]"] {
        let r = reject(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
        assert_eq!(r.error.code, ErrorCode::INVALID_REQUEST, "id {id}");
    }
}

#[test]
fn method_must_be_a_string_and_params_structured() {
    assert_eq!(reject(r#"{"jsonrpc":"2.0","id":1,"method":7}"#).error.code, ErrorCode::INVALID_REQUEST);
    assert_eq!(reject(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":3}"#).error.code, ErrorCode::INVALID_REQUEST);
}

#[test]
fn requests_notifications_and_responses_are_told_apart() {
    let parse = |s: &str| jsonrpc::parse(s.as_bytes()).unwrap();
    assert!(matches!(parse(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Message::Request(_)));
    assert!(matches!(parse(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), Message::Notification(_)));
    assert!(matches!(parse(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#), Message::Response { .. }));
    assert!(matches!(
        parse(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#),
        Message::Error { .. }
    ));
}

#[test]
fn unknown_method_is_method_not_found() {
    let err = ClientRequest::parse("resources/watch", None).unwrap_err();
    assert!(ClientRequest::parse("logging/setLevel", Some(serde_json::json!({"level": "debug"}))).is_ok());
    assert_eq!(err.code, ErrorCode::METHOD_NOT_FOUND);
    assert!(err.message.contains("resources/watch"));
}

#[test]
fn bad_params_name_the_path() {
    let params = serde_json::json!({"name": "greeter", "arguments": {}, "requestState": 12});
    let err = ClientRequest::parse("tools/call", Some(params)).unwrap_err();
    assert_eq!(err.code, ErrorCode::INVALID_PARAMS);
    assert!(err.message.contains("requestState"), "{}", err.message);
    let err = ClientRequest::parse("tools/call", Some(serde_json::json!({"arguments": {}}))).unwrap_err();
    assert!(err.message.contains("name"), "{}", err.message);
    let err = ClientRequest::parse("tools/call", Some(serde_json::json!([1]))).unwrap_err();
    assert_eq!(err.code, ErrorCode::INVALID_PARAMS);
}

#[test]
fn error_response_echoes_id() {
    let response = hitl_protocol::Response::Error {
        id: Some(RequestId::Number(101)),
        error: hitl_protocol::ErrorObject::method_not_found("x"),
    };
    let v = response.to_value();
    assert_eq!(v["id"], 101);
    assert_eq!(v["error"]["code"], -32601);
    let v = hitl_protocol::Response::Error { id: None, error: hitl_protocol::ErrorObject::parse_error("x") }.to_value();
    assert!(v["id"].is_null());
}

proptest! {
    #[test]
    fn no_bytes_panic_the_parser(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(Message::Request(r)) = jsonrpc::parse(&bytes) {
            let _ = ClientRequest::parse(&r.method, r.params);
        }
        let _ = jsonrpc::parse_request_of::<serde_json::Value>(&bytes, "tools/call");
    }

    #[test]
    fn no_json_shaped_text_panics_the_parser(
        method in "(tools/call|tools/list|server/discover|initialize|ping|prompts/get|[a-z/]{0,12})",
        params in "(\\{\\}|\\[\\]|null|1|\"s\"|\\{\"name\":[0-9]\\}|\\{\"_meta\":\\{\\}\\})",
        id in "(1|\"a\"|null|1\\.5|\\[\\])",
    ) {
        let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#);
        if let Ok(Message::Request(r)) = jsonrpc::parse(text.as_bytes()) {
            let _ = ClientRequest::parse(&r.method, r.params);
        }
    }
}

#[test]
fn response_bytes_equal_the_response_value() {
    let result =
        hitl_protocol::Response::Result { id: RequestId::String("a".into()), result: serde_json::json!({"x": [1, 2]}) };
    let error = hitl_protocol::Response::Error { id: None, error: hitl_protocol::ErrorObject::parse_error("bad") };
    for response in [result, error] {
        let from_bytes: serde_json::Value = serde_json::from_slice(&response.to_bytes()).unwrap();
        assert_eq!(from_bytes, response.to_value());
    }
}

#[test]
fn url_elicitation_required_carries_the_2025_11_25_error_data() {
    let page = hitl_protocol::UrlElicitation {
        message: "Sign in".into(),
        url: "https://example.com/sign-in".into(),
        elicitation_id: Some("e1".into()),
        meta: None,
    };
    let error = hitl_protocol::ErrorObject::url_elicitation_required("Sign in first", vec![page]);
    let value = serde_json::to_value(&error).unwrap();
    assert_eq!(value["code"], -32042);
    assert_eq!(value["data"]["elicitations"][0]["elicitationId"], "e1");
    assert_eq!(value["data"]["elicitations"][0]["url"], "https://example.com/sign-in");
}
