//! From what an agent asks to an MCP elicitation form, and answers checked against it.
//!
//! A form is the flat object schema MCP allows in `elicitation/create`
//! ([`RequestedSchema`]). This crate builds forms (a text question becomes one
//! required `response` field) and checks answers before an agent sees them.
//!
//! ```
//! use hitl_schema::{text_form, validate};
//! use serde_json::json;
//!
//! let form = text_form();
//! assert_eq!(serde_json::to_value(&form).unwrap(), json!({
//!     "properties": {"response": {"type": "string"}},
//!     "required": ["response"],
//!     "type": "object"
//! }));
//! assert!(validate(&form, json!({"response": "eu-west-1"}).as_object().unwrap()).is_ok());
//! let violations = validate(&form, json!({"response": 3}).as_object().unwrap()).unwrap_err();
//! assert_eq!(violations[0].field, "response");
//! ```

use hitl_protocol::RequestedSchema;
use serde_json::{Map, Value, json};

/// The field a text question's answer comes back in.
pub const RESPONSE_FIELD: &str = "response";

/// The form of a text question: one required string field, `response`.
pub fn text_form() -> RequestedSchema {
    let mut properties = Map::new();
    properties.insert(RESPONSE_FIELD.into(), json!({"type": "string"}));
    RequestedSchema { schema: None, type_: "object".into(), properties, required: Some(vec![RESPONSE_FIELD.into()]) }
}

/// One way an answer does not fit its form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Violation {
    /// The field (property name) at fault.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// Checks an accepted answer against the form it answers and returns every violation:
/// missing required fields, values of the wrong type, enum values outside the choices,
/// numbers and strings outside their bounds.
pub fn validate(form: &RequestedSchema, content: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    let mut violations = Vec::new();
    let mut fail = |field: &str, message: String| violations.push(Violation { field: field.into(), message });
    for required in form.required.iter().flatten() {
        if !content.contains_key(required) {
            fail(required, "is required".into());
        }
    }
    for (field, value) in content {
        let Some(schema) = form.properties.get(field) else { continue };
        let ty = schema.get("type").and_then(Value::as_str).unwrap_or_default();
        let fits = match ty {
            "string" => value.is_string(),
            "number" => value.is_number(),
            "integer" => value.is_i64() || value.is_u64(),
            "boolean" => value.is_boolean(),
            "array" => value.as_array().is_some_and(|items| items.iter().all(Value::is_string)),
            _ => true,
        };
        if !fits {
            fail(field, format!("must be of type {ty}"));
            continue;
        }
        if let Some(choices) = choices(schema)
            && let Some(s) = value.as_str()
            && !choices.contains(&s)
        {
            fail(field, format!("must be one of {}", choices.join(", ")));
        }
        if let Some(n) = value.as_f64() {
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
                && n < min
            {
                fail(field, format!("must be at least {min}"));
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
                && n > max
            {
                fail(field, format!("must be at most {max}"));
            }
        }
    }
    if violations.is_empty() { Ok(()) } else { Err(violations) }
}

fn choices(schema: &Value) -> Option<Vec<&str>> {
    if let Some(items) = schema.get("enum").and_then(Value::as_array) {
        return Some(items.iter().filter_map(Value::as_str).collect());
    }
    schema
        .get("oneOf")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(|i| i.get("const").and_then(Value::as_str)).collect())
}
