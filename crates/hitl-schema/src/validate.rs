//! Answers checked against the form they answer, with the `jsonschema` crate.
//! Validators are compiled once per distinct form and cached.

use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::{Arc, Mutex, OnceLock};

use hitl_protocol::RequestedSchema;
use jsonschema::error::ValidationErrorKind;
use serde_json::{Map, Value};

/// How many distinct forms keep a compiled validator. Forms are few (one per question
/// an agent can ask, and review forms per tool-call shape); when the cache is full it
/// is emptied and fills again, so memory stays bounded whatever agents ask.
pub const CACHE_CAPACITY: usize = 1024;

/// One way an answer does not fit its form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Violation {
    /// The field (property name) at fault; empty for the answer as a whole.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// Compiled validators by a 128-bit digest of the schema's JSON (two salted SipHash
/// runs), so a lookup serializes the schema into a hasher and allocates nothing.
type Cache = Mutex<HashMap<(u64, u64), Arc<jsonschema::Validator>>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Feeds serialized JSON to two hashers at once (the schema is serialized once).
struct HashWriter<'a, H: Hasher>(&'a mut H, &'a mut H);

impl<H: Hasher> std::io::Write for HashWriter<'_, H> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.write(bytes);
        self.1.write(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn digest(schema: &impl serde::Serialize) -> (u64, u64) {
    let mut first = std::hash::DefaultHasher::new();
    let mut second = std::hash::DefaultHasher::new();
    second.write_u8(0x5a);
    let _ = serde_json::to_writer(HashWriter(&mut first, &mut second), schema);
    (first.finish(), second.finish())
}

fn validator(schema: &impl serde::Serialize) -> Result<Arc<jsonschema::Validator>, Violation> {
    let key = digest(schema);
    if let Some(v) = cache().lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(v.clone());
    }
    let schema = serde_json::to_value(schema).unwrap_or_default();
    let compiled = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(&schema)
        .map_err(|e| Violation { field: String::new(), message: format!("the schema is not valid: {e}") })?;
    let compiled = Arc::new(compiled);
    let mut cache = cache().lock().unwrap_or_else(|p| p.into_inner());
    if cache.len() >= CACHE_CAPACITY {
        cache.clear();
    }
    cache.insert(key, compiled.clone());
    Ok(compiled)
}

/// Checks an accepted answer against the form it answers and returns every violation,
/// each naming its field: missing required fields, values of the wrong type, choices
/// outside the list, numbers, strings and arrays outside their bounds, bad formats.
pub fn validate(form: &RequestedSchema, content: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    let validator = validator(form).map_err(|v| vec![v])?;
    let instance = Value::Object(content.clone());
    let violations: Vec<Violation> = validator
        .iter_errors(&instance)
        .map(|error| {
            let field = match error.kind() {
                ValidationErrorKind::Required { property } => property.as_str().unwrap_or_default().to_owned(),
                _ => {
                    let path = error.instance_path().as_str().trim_start_matches('/');
                    let first = path.split('/').next().unwrap_or_default();
                    first.replace("~1", "/").replace("~0", "~")
                }
            };
            Violation { field, message: error.to_string() }
        })
        .collect();
    if violations.is_empty() { Ok(()) } else { Err(violations) }
}

/// Checks any JSON value against any JSON Schema (tool arguments against a tool's input
/// schema), sharing the validator cache. Each violation's `field` is the JSON Pointer
/// of the offending value (`""` for the value as a whole).
pub fn validate_value(schema: &Value, instance: &Value) -> Result<(), Vec<Violation>> {
    let validator = validator(schema).map_err(|v| vec![v])?;
    let violations: Vec<Violation> = validator
        .iter_errors(instance)
        .map(|error| Violation { field: error.instance_path().as_str().to_owned(), message: error.to_string() })
        .collect();
    if violations.is_empty() { Ok(()) } else { Err(violations) }
}

/// Deserializes accepted content into a Rust type, for typed questions: a failure is a
/// [`Violation`] naming the field at fault, reported like any answer that does not fit.
pub fn deserialize_answer<T: serde::de::DeserializeOwned>(content: &Map<String, Value>) -> Result<T, Violation> {
    serde_path_to_error::deserialize(Value::Object(content.clone())).map_err(|e| {
        let path = e.path().to_string();
        let field = path.split('.').next().filter(|f| *f != "?").unwrap_or_default().to_owned();
        Violation { field, message: e.into_inner().to_string() }
    })
}
