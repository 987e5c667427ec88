//! Forms for 2025-06-18 clients, whose elicitation knows fewer shapes: defaults only on
//! booleans, `enum` + `enumNames` instead of titled `oneOf`, no multi-select.

use hitl_protocol::RequestedSchema;
use serde_json::{Value, json};

use crate::CannotAsk;

/// The form as a 2025-06-18 client can show it.
pub fn downgrade_2025_06_18(form: &RequestedSchema) -> Result<RequestedSchema, CannotAsk> {
    let mut out = form.clone();
    out.schema = None;
    for (name, field) in &mut out.properties {
        let Value::Object(field) = field else { continue };
        let ty = field.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
        if ty == "array" {
            return Err(CannotAsk::at(
                &format!("/properties/{name}"),
                "multi-select fields cannot be asked of a 2025-06-18 client",
            ));
        }
        if ty != "boolean" {
            field.remove("default");
        }
        if let Some(Value::Array(options)) = field.remove("oneOf") {
            let values: Vec<Value> = options.iter().map(|o| o["const"].clone()).collect();
            let names: Vec<Value> = options.iter().map(|o| o["title"].clone()).collect();
            field.insert("enum".into(), json!(values));
            field.insert("enumNames".into(), json!(names));
        }
    }
    Ok(out)
}
