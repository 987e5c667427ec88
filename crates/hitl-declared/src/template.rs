//! `{name}` templates: a name is letters, digits and `_`; any other brace is text (a
//! message may show JSON).

use serde_json::{Map, Value};

/// The names a template uses, in order.
pub(crate) fn names(template: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) if is_name(&after[..close]) => {
                found.push(&after[..close]);
                rest = &after[close + 1..];
            }
            _ => rest = after,
        }
    }
    found
}

fn is_name(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `template` with each name replaced by its value in `scope` (strings as they are,
/// other values as JSON); names not in scope stay as written.
pub(crate) fn fill(template: &str, scope: &Map<String, Value>) -> String {
    hitl_gateway::fill(template, scope)
}

/// A call's arguments with their string templates filled; a string that is one
/// template and nothing else (`"{count}"`) takes the value as it is, with its type.
pub(crate) fn fill_value(value: &Value, scope: &Map<String, Value>) -> Value {
    match value {
        Value::String(text) => match names(text).as_slice() {
            [name] if text.len() == name.len() + 2 && scope.contains_key(*name) => scope[*name].clone(),
            [] => value.clone(),
            _ => Value::String(fill(text, scope)),
        },
        Value::Array(items) => Value::Array(items.iter().map(|v| fill_value(v, scope)).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), fill_value(v, scope))).collect()),
        other => other.clone(),
    }
}

/// Every name the string templates in `value` use.
pub(crate) fn names_in(value: &Value) -> Vec<&str> {
    match value {
        Value::String(text) => names(text),
        Value::Array(items) => items.iter().flat_map(names_in).collect(),
        Value::Object(map) => map.values().flat_map(names_in).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn templates_name_fields_and_keep_types() {
        assert_eq!(names("Deploying {service} ({version}) {not a name} {\"json\": 1}"), ["service", "version"]);
        let scope: Map<String, Value> =
            serde_json::from_value(json!({"service": "api", "count": 3, "dry": false})).unwrap();
        let args = json!({"service": "{service}", "n": "{count}", "label": "{service}-{count}", "dry": "{dry}",
                          "nested": ["{service}"], "other": "{missing}"});
        assert_eq!(
            fill_value(&args, &scope),
            json!({"service": "api", "n": 3, "label": "api-3", "dry": false, "nested": ["api"], "other": "{missing}"})
        );
        let mut used = names_in(&args);
        used.sort_unstable();
        used.dedup();
        assert_eq!(used, ["count", "dry", "missing", "service"]);
    }
}
