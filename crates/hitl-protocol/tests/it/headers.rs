//! The 2026-07-28 header rules.

use hitl_protocol::ErrorCode;
use hitl_protocol::headers::{check_method_and_name, check_params, check_version, decode_value};
use serde_json::json;

fn lookup<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a [u8]> {
    move |name| pairs.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_bytes())
}

#[test]
fn values_are_trimmed_and_base64_decoded_strictly() {
    assert_eq!(decode_value(b"  tools/call \t").as_deref(), Some("tools/call"));
    assert_eq!(decode_value(b"=?base64?SGVsbG8=?=").as_deref(), Some("Hello"));
    assert_eq!(decode_value(b"=?base64?SGVsbG8?="), None, "bad padding");
    assert_eq!(decode_value(b"=?base64?SGVs!!!bG8=?="), None, "bad alphabet");
    assert_eq!(decode_value(b"SGVsbG8=").as_deref(), Some("SGVsbG8="), "plain value is literal");
    assert_eq!(decode_value(b"=?base64?SGVsbG8=").as_deref(), Some("=?base64?SGVsbG8="), "unterminated is literal");
    assert_eq!(decode_value(&[0xff, 0xfe]), None);
}

#[test]
fn method_header_must_match() {
    let ok = [("Mcp-Method", "tools/list")];
    assert!(check_method_and_name(lookup(&ok), "tools/list", None).is_ok());
    let wrong = [("mcp-method", "prompts/list")];
    let err = check_method_and_name(lookup(&wrong), "tools/list", None).unwrap_err();
    assert_eq!(err.code, ErrorCode::HEADER_MISMATCH);
    assert!(err.message.contains("Mcp-Method"));
    let err = check_method_and_name(lookup(&[]), "tools/list", None).unwrap_err();
    assert!(err.message.contains("required"));
    let upper = [("MCP-METHOD", "TOOLS/LIST")];
    assert!(check_method_and_name(lookup(&upper), "tools/list", None).is_err(), "values are case-sensitive");
}

#[test]
fn name_header_comes_from_name_or_uri() {
    let params = json!({"name": "greeter"});
    let ok = [("mcp-method", "tools/call"), ("MCP-NAME", "  greeter  ")];
    assert!(check_method_and_name(lookup(&ok), "tools/call", Some(&params)).is_ok());
    let missing = [("mcp-method", "tools/call")];
    assert!(check_method_and_name(lookup(&missing), "tools/call", Some(&params)).is_err());
    let uri = json!({"uri": "test://x"});
    let ok = [("mcp-method", "resources/read"), ("mcp-name", "test://x")];
    assert!(check_method_and_name(lookup(&ok), "resources/read", Some(&uri)).is_ok());
}

#[test]
fn version_header_must_equal_meta() {
    assert!(check_version("2026-07-28", "2026-07-28").is_ok());
    let err = check_version("2026-07-28", "v999.0.0").unwrap_err();
    assert_eq!(err.code, ErrorCode::HEADER_MISMATCH);
    assert!(err.data.is_none());
}

#[test]
fn param_headers_follow_x_mcp_header() {
    let schema = json!({"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"},
                                                          "count": {"type": "integer", "x-mcp-header": "Count"},
                                                          "note": {"type": "string"}}});
    let args = json!({"region": "Hello", "count": 3, "note": "x"});
    let args = args.as_object();
    let ok = [("Mcp-Param-Region", "=?base64?SGVsbG8=?="), ("mcp-param-count", "3")];
    assert!(check_params(lookup(&ok), &schema, args).is_ok());
    for bad in [
        vec![("Mcp-Param-Region", "=?base64?SGVsbG8?="), ("mcp-param-count", "3")],
        vec![("Mcp-Param-Region", "=?base64?SGVs!!!bG8=?="), ("mcp-param-count", "3")],
        vec![("mcp-param-count", "3")],
        vec![("Mcp-Param-Region", "Hello"), ("mcp-param-count", "4")],
    ] {
        let err = check_params(lookup(&bad), &schema, args).unwrap_err();
        assert_eq!(err.code, ErrorCode::HEADER_MISMATCH, "{bad:?}");
    }
    let literal = json!({"region": "=?base64?SGVsbG8=", "count": 1});
    let headers = [("Mcp-Param-Region", "=?base64?SGVsbG8="), ("Mcp-Param-Count", "1")];
    assert!(check_params(lookup(&headers), &schema, literal.as_object()).is_ok(), "unterminated is literal");
}
