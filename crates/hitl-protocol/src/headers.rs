//! The HTTP header rules of 2026-07-28 Streamable HTTP (`MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name`), written without naming any HTTP library: callers pass a
//! lookup function over their header map.

use base64::Engine as _;

use crate::ErrorObject;

/// `MCP-Protocol-Version`.
pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// `Mcp-Method`.
pub const METHOD: &str = "mcp-method";
/// `Mcp-Name`.
pub const NAME: &str = "mcp-name";

/// Methods whose `Mcp-Name` header is required, and the param it must match.
pub fn name_param(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        // The Tasks extension: routing by task.
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// Decodes a header value: trims surrounding whitespace, and decodes the
/// `=?base64?…?=` form (strict padding). `None` when the value is not valid UTF-8 or
/// the base64 form is malformed. A value that only looks partly like the encoded form
/// (say, without the closing `?=`) is taken literally.
pub fn decode_value(raw: &[u8]) -> Option<std::borrow::Cow<'_, str>> {
    let text = std::str::from_utf8(raw).ok()?.trim_matches([' ', '\t']);
    match text.strip_prefix("=?base64?").and_then(|rest| rest.strip_suffix("?=")) {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
            String::from_utf8(bytes).ok().map(std::borrow::Cow::Owned)
        }
        // A plain value (most are) is borrowed, not copied.
        None => Some(std::borrow::Cow::Borrowed(text)),
    }
}

/// Encodes a header value as a client sends it: as is when it is printable ASCII
/// without surrounding whitespace, else in the `=?base64?…?=` form ([`decode_value`]
/// reads both).
pub fn encode_value(value: &str) -> String {
    let plain = value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !value.starts_with([' ', '\t'])
        && !value.ends_with([' ', '\t'])
        && !value.starts_with("=?base64?");
    if plain {
        return value.to_owned();
    }
    format!("=?base64?{}?=", base64::engine::general_purpose::STANDARD.encode(value))
}

/// Checks the `Mcp-Method` and `Mcp-Name` headers of a 2026-07-28 request against its
/// body. `header` looks a header up by its lowercase name and returns its raw value.
/// Fails with `-32020` saying which header is missing or differs.
pub fn check_method_and_name<'a>(
    header: impl Fn(&str) -> Option<&'a [u8]>,
    method: &str,
    params: Option<&serde_json::Value>,
) -> Result<(), ErrorObject> {
    let name =
        name_param(method).map(|param| params.and_then(|p| p.get(param)).and_then(|v| v.as_str()).unwrap_or_default());
    check_method_and_named(header, method, name)
}

/// [`check_method_and_name`] of a request whose name (its [`name_param`]) the caller
/// has read from its typed params: `None` for a method that names nothing.
pub fn check_method_and_named<'a>(
    header: impl Fn(&str) -> Option<&'a [u8]>,
    method: &str,
    name: Option<&str>,
) -> Result<(), ErrorObject> {
    expect(&header, METHOD, "Mcp-Method", method)?;
    if let Some(body) = name {
        expect(&header, NAME, "Mcp-Name", body)?;
    }
    Ok(())
}

/// Checks the `Mcp-Param-{Name}` headers of a `tools/call`: every argument whose
/// property in the tool's input schema carries `"x-mcp-header": "Name"` must come with
/// that header, equal to the argument (a string as is, a number or boolean as its JSON
/// text). Fails with `-32020` naming the header.
pub fn check_params<'a>(
    header: impl Fn(&str) -> Option<&'a [u8]>,
    input_schema: &serde_json::Value,
    arguments: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<(), ErrorObject> {
    let Some(properties) = input_schema.get("properties").and_then(|p| p.as_object()) else { return Ok(()) };
    for (name, property) in properties {
        let Some(suffix) = property.get("x-mcp-header").and_then(|h| h.as_str()) else { continue };
        let display = format!("Mcp-Param-{suffix}");
        let lookup = display.to_ascii_lowercase();
        let body = match arguments.and_then(|a| a.get(name)) {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
        };
        match (header(&lookup), body) {
            (None, None) => {}
            (None, Some(_)) => {
                return Err(ErrorObject::header_mismatch(format!("Header mismatch: {display} header is required")));
            }
            (Some(_), None) => {
                return Err(ErrorObject::header_mismatch(format!(
                    "Header mismatch: {display} header is set but the argument {name} is not"
                )));
            }
            (Some(_), Some(body)) => expect(&header, &lookup, &display, &body)?,
        }
    }
    Ok(())
}

/// Checks that the `MCP-Protocol-Version` header equals the `_meta` version.
pub fn check_version(header_value: &str, meta_version: &str) -> Result<(), ErrorObject> {
    if header_value == meta_version {
        Ok(())
    } else {
        Err(ErrorObject::header_mismatch(format!(
            "Header mismatch: MCP-Protocol-Version header value '{header_value}' does not match body value '{meta_version}'"
        )))
    }
}

fn expect<'a>(
    header: &impl Fn(&str) -> Option<&'a [u8]>,
    lookup: &str,
    display: &str,
    body: &str,
) -> Result<(), ErrorObject> {
    let Some(raw) = header(lookup) else {
        return Err(ErrorObject::header_mismatch(format!("Header mismatch: {display} header is required")));
    };
    let Some(value) = decode_value(raw) else {
        return Err(ErrorObject::header_mismatch(format!("Header mismatch: {display} header value is not valid")));
    };
    if value == body {
        Ok(())
    } else {
        Err(ErrorObject::header_mismatch(format!(
            "Header mismatch: {display} header value '{value}' does not match body value '{body}'"
        )))
    }
}
