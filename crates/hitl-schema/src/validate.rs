//! Answers checked against the form they answer, with the `jsonschema` crate.
//! Validators are compiled once per distinct form and cached.

use std::collections::HashMap;
use std::hash::{BuildHasher as _, Hasher};
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

/// Compiled validators by a 128-bit key of the schema: two hashes under seeds drawn at
/// start. A schema held as JSON is hashed by walking it, with no text made; a form is
/// hashed as it is serialized (into the hashers, allocating nothing). Each entry keeps
/// its schema, compared on a hit, so two schemas that share a key never share a
/// validator.
type Cache = Mutex<HashMap<(u64, u64), (Keyed, Arc<jsonschema::Validator>), foldhash::fast::FixedState>>;

/// The schema a cached validator was compiled from.
#[derive(PartialEq)]
enum Keyed {
    Form(RequestedSchema),
    Value(Value),
}

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::with_hasher(foldhash::fast::FixedState::default())))
}

/// The two hashers of a key, seeded once per process.
type KeyHasher = <foldhash::quality::RandomState as std::hash::BuildHasher>::Hasher;

fn hashers() -> (KeyHasher, KeyHasher) {
    static SEEDS: OnceLock<(foldhash::quality::RandomState, foldhash::quality::RandomState)> = OnceLock::new();
    let (first, second) = SEEDS.get_or_init(Default::default);
    (first.build_hasher(), second.build_hasher())
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

/// The key of a form, from its JSON text.
fn form_key(form: &RequestedSchema) -> (u64, u64) {
    let (mut first, mut second) = hashers();
    first.write_u8(b'f');
    second.write_u8(b'f');
    let _ = serde_json::to_writer(HashWriter(&mut first, &mut second), form);
    (first.finish(), second.finish())
}

/// The key of a schema held as JSON, from its tree: each value's kind, then its content
/// (a string's length before its bytes), so two different trees feed different input.
fn value_key(schema: &Value) -> (u64, u64) {
    fn feed(value: &Value, h: &mut impl Hasher) {
        match value {
            Value::Null => h.write_u8(0),
            Value::Bool(b) => h.write_u8(1 + u8::from(*b)),
            Value::Number(n) => {
                h.write_u8(3);
                text(&n.to_string(), h);
            }
            Value::String(s) => {
                h.write_u8(4);
                text(s, h);
            }
            Value::Array(items) => {
                h.write_u8(5);
                h.write_usize(items.len());
                items.iter().for_each(|item| feed(item, h));
            }
            Value::Object(map) => {
                h.write_u8(6);
                h.write_usize(map.len());
                for (key, item) in map {
                    text(key, h);
                    feed(item, h);
                }
            }
        }
    }
    fn text(s: &str, h: &mut impl Hasher) {
        h.write_usize(s.len());
        h.write(s.as_bytes());
    }
    let (mut first, mut second) = hashers();
    first.write_u8(b'v');
    second.write_u8(b'v');
    feed(schema, &mut first);
    feed(schema, &mut second);
    (first.finish(), second.finish())
}

/// The validator of the schema `key` and `is` name: cached, or compiled from `make`
/// (the schema as kept, and as JSON) and cached.
fn validator(
    key: (u64, u64),
    is: impl Fn(&Keyed) -> bool,
    make: impl FnOnce() -> (Keyed, Value),
) -> Result<Arc<jsonschema::Validator>, Violation> {
    if let Some((_, v)) = cache().lock().unwrap_or_else(|p| p.into_inner()).get(&key).filter(|(kept, _)| is(kept)) {
        return Ok(v.clone());
    }
    let (kept, schema) = make();
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
    cache.insert(key, (kept, compiled.clone()));
    Ok(compiled)
}

/// Checks an accepted answer against the form it answers and returns every violation,
/// each naming its field: missing required fields, values of the wrong type, choices
/// outside the list, numbers, strings and arrays outside their bounds, bad formats.
pub fn validate(form: &RequestedSchema, content: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    if plainly_valid(form, content) {
        return Ok(());
    }
    let made = || (Keyed::Form(form.clone()), serde_json::to_value(form).unwrap_or_default());
    let validator =
        validator(form_key(form), |kept| matches!(kept, Keyed::Form(f) if f == form), made).map_err(|v| vec![v])?;
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

/// Whether `content` fits `form` by a check that needs no validator: every property of
/// the form says only its `type`, `string` or `boolean`, every required one is given,
/// and every given one has its type (the text question's form, and others as plain).
/// `false` says nothing: the validator decides, and names what is wrong.
fn plainly_valid(form: &RequestedSchema, content: &Map<String, Value>) -> bool {
    let plain = |property: &Value| match property.as_object().filter(|p| p.len() == 1).and_then(|p| p.get("type")) {
        Some(Value::String(t)) if t == "string" => Some(Value::is_string as fn(&Value) -> bool),
        Some(Value::String(t)) if t == "boolean" => Some(Value::is_boolean as fn(&Value) -> bool),
        _ => None,
    };
    form.schema.is_none()
        && form.type_ == "object"
        && form.required.iter().flatten().all(|key| content.contains_key(key))
        && form
            .properties
            .iter()
            .all(|(key, property)| plain(property).is_some_and(|fits| content.get(key).is_none_or(fits)))
}

/// Checks any JSON value against any JSON Schema (tool arguments against a tool's input
/// schema), sharing the validator cache. Each violation's `field` is the JSON Pointer
/// of the offending value (`""` for the value as a whole).
pub fn validate_value(schema: &Value, instance: &Value) -> Result<(), Vec<Violation>> {
    if plainly_valid_value(schema, instance) {
        return Ok(());
    }
    validated_value(schema, instance)
}

/// [`validate_value`] by the schema's validator (no check without one first).
fn validated_value(schema: &Value, instance: &Value) -> Result<(), Vec<Violation>> {
    let made = || (Keyed::Value(schema.clone()), schema.clone());
    let validator = validator(value_key(schema), |kept| matches!(kept, Keyed::Value(v) if v == schema), made)
        .map_err(|v| vec![v])?;
    let violations: Vec<Violation> = validator
        .iter_errors(instance)
        .map(|error| Violation { field: error.instance_path().as_str().to_owned(), message: error.to_string() })
        .collect();
    if violations.is_empty() { Ok(()) } else { Err(violations) }
}

/// Whether `instance` fits `schema` by a check that needs no validator (looking the
/// validator up walks the whole schema): the schema is an object schema saying only its
/// `type`, `properties` that each say only `type` `string` or `boolean` (and perhaps a
/// `title` and a `description`), distinct `required` names, a boolean
/// `additionalProperties`, a `title` and a `description`; every required property is
/// given, every given one has its type, and no other is given where none may be (a
/// tool's plain arguments, none at all among them). `false` says nothing: the validator
/// decides, and names what is wrong.
fn plainly_valid_value(schema: &Value, instance: &Value) -> bool {
    let (Some(schema), Some(instance)) = (schema.as_object(), instance.as_object()) else { return false };
    let (mut object, mut properties, mut required, mut closed) = (false, None, None, false);
    for (key, value) in schema {
        match (key.as_str(), value) {
            ("type", Value::String(t)) if t == "object" => object = true,
            ("properties", Value::Object(p)) => properties = Some(p),
            ("required", Value::Array(r)) => required = Some(r),
            ("additionalProperties", Value::Bool(open)) => closed = !open,
            ("title" | "description", Value::String(_)) => {}
            _ => return false,
        }
    }
    let plain = |property: &Value| {
        let property = property.as_object()?;
        let annotations = property
            .iter()
            .all(|(k, v)| k == "type" || (matches!(k.as_str(), "title" | "description") && v.is_string()));
        match property.get("type")? {
            Value::String(t) if annotations && t == "string" => Some(Value::is_string as fn(&Value) -> bool),
            Value::String(t) if annotations && t == "boolean" => Some(Value::is_boolean as fn(&Value) -> bool),
            _ => None,
        }
    };
    let empty = Map::new();
    let properties = properties.unwrap_or(&empty);
    let required = required.map_or(&[][..], Vec::as_slice);
    object
        && properties.values().all(|p| plain(p).is_some())
        && required.iter().enumerate().all(|(i, name)| {
            name.as_str().is_some_and(|name| instance.contains_key(name) && !required[..i].iter().any(|n| n == name))
        })
        && instance.iter().all(|(key, value)| match properties.get(key) {
            Some(property) => plain(property).is_some_and(|fits| fits(value)),
            None => !closed,
        })
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Keyed, cache, validate_value, validator, value_key};

    #[test]
    fn schemas_that_differ_get_different_keys_and_validators() {
        let pairs = [
            (json!({"type": "string"}), json!({"type": "integer"})),
            (json!({"ab": "c"}), json!({"a": "bc"})),
            (json!(["a", "b"]), json!(["ab"])),
            (json!({"minimum": 1}), json!({"minimum": 1.0})),
            (json!({"enum": [null]}), json!({"enum": [false]})),
        ];
        for (one, other) in pairs {
            assert_ne!(value_key(&one), value_key(&other), "{one} and {other}");
        }
        assert_eq!(value_key(&json!({"type": "string"})), value_key(&json!({"type": "string"})));
        // Each schema is checked with its own validator, whatever was cached before.
        assert!(validate_value(&json!({"type": "string"}), &json!("x")).is_ok());
        assert!(validate_value(&json!({"type": "integer"}), &json!("x")).is_err());
        assert!(validate_value(&json!({"type": "string"}), &json!(3)).is_err());
    }

    #[test]
    fn a_key_shared_by_another_schema_never_lends_its_validator() {
        // As if two schemas hashed alike: the cache holds the other's under this key.
        let (mine, other) = (json!({"type": "boolean", "title": "k1"}), json!({"type": "number", "title": "k2"}));
        let theirs = validator((7, 7), |_| false, || (Keyed::Value(other.clone()), other.clone())).unwrap();
        cache().lock().unwrap().insert(value_key(&mine), (Keyed::Value(other.clone()), theirs));
        assert!(validate_value(&mine, &json!(true)).is_ok(), "checked by its own schema");
        assert!(validate_value(&mine, &json!(3)).is_err());
    }
}

#[cfg(test)]
mod plain_values {
    use serde_json::json;

    use super::{plainly_valid_value, validated_value};

    /// The check without a validator never passes what the validator refuses.
    #[test]
    fn plain_arguments_pass_without_a_validator_only_where_the_validator_passes_them() {
        let schemas = [
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
            json!({"type": "object", "properties": {"region": {"type": "string", "description": "where"}}, "required": ["region"]}),
            json!({"type": "object", "properties": {"dry": {"type": "boolean", "title": "Dry run"}}, "additionalProperties": false}),
            json!({"type": "object", "title": "t", "description": "d"}),
            json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
            json!({"type": "object", "properties": {"s": {"type": "string", "maxLength": 2}}}),
            json!({"type": "object", "properties": {"s": {"type": "string", "title": 5}}}),
            json!({"type": "object", "required": ["a", "a"]}),
            json!({"type": "object", "required": [1]}),
            json!({"type": "object", "minProperties": 2}),
            json!({"properties": {"s": {"type": "string"}}}),
            json!({"type": ["object", "null"]}),
            json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}),
            json!(true),
        ];
        let instances = [
            json!({}),
            json!({"region": "eu"}),
            json!({"region": 5}),
            json!({"dry": true}),
            json!({"dry": "yes"}),
            json!({"other": 1}),
            json!({"n": 1.5}),
            json!({"s": "long"}),
            json!({"a": 1}),
            json!([]),
            json!(null),
        ];
        let mut plain = 0;
        for schema in &schemas {
            for instance in &instances {
                if plainly_valid_value(schema, instance) {
                    plain += 1;
                    assert!(validated_value(schema, instance).is_ok(), "{schema} {instance}");
                }
            }
        }
        assert_eq!(plain, 13, "the plain schemas are taken");
        let closed = &schemas[0];
        assert!(plainly_valid_value(closed, &json!({})));
        assert!(!plainly_valid_value(closed, &json!({"other": 1})), "none may be given");
        assert!(!plainly_valid_value(&schemas[1], &json!({})), "a required argument missing");
        assert!(!plainly_valid_value(&schemas[1], &json!({"region": 5})), "of another type");
        assert!(!plainly_valid_value(&schemas[6], &json!({})), "a title that is not text is no annotation");
        assert!(!plainly_valid_value(&schemas[7], &json!({"a": 1})), "required names repeated");
        assert!(super::validate_value(closed, &json!({"other": 1})).is_err(), "the validator still decides");
    }
}

#[cfg(test)]
mod plain {
    use hitl_protocol::RequestedSchema;
    use serde_json::{Map, Value, json};

    use super::{plainly_valid, validate};

    /// The check without a validator never passes what the validator refuses, and it
    /// takes the plain forms (the text question's) it is there for.
    #[test]
    fn what_passes_without_a_validator_the_validator_passes_too() {
        let form = |value: Value| serde_json::from_value::<RequestedSchema>(value).unwrap();
        let text = crate::text_form();
        let forms = [
            text.clone(),
            form(
                json!({"type": "object", "properties": {"ok": {"type": "boolean"}, "why": {"type": "string"}}, "required": ["ok"]}),
            ),
            form(json!({"type": "object", "properties": {"n": {"type": "integer"}}})),
            form(json!({"type": "object", "properties": {"c": {"type": "string", "enum": ["a", "b"]}}})),
            form(json!({"type": "object", "properties": {"s": {"type": "string", "maxLength": 2}}, "required": ["s"]})),
            form(
                json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "properties": {"s": {"type": "string"}}}),
            ),
        ];
        let contents = [
            json!({"response": "eu-west-1"}),
            json!({"response": 5}),
            json!({}),
            json!({"response": "x", "other": [1]}),
            json!({"ok": true}),
            json!({"ok": "yes"}),
            json!({"ok": false, "why": "no"}),
            json!({"n": 1}),
            json!({"c": "z"}),
            json!({"s": "long"}),
            json!({"s": "ok"}),
        ];
        let mut plain = 0;
        for form in &forms {
            for content in &contents {
                let content: Map<String, Value> = content.as_object().unwrap().clone();
                if plainly_valid(form, &content) {
                    plain += 1;
                    assert!(validate(form, &content).is_ok(), "{form:?} {content:?}");
                }
            }
        }
        assert!(plainly_valid(&text, json!({"response": "eu"}).as_object().unwrap()));
        assert!(!plainly_valid(&text, json!({"response": 5}).as_object().unwrap()));
        assert!(!plainly_valid(&text, &Map::new()), "a required answer missing");
        assert_eq!(plain, 4, "the plain forms are taken (two contents each)");
        let err = validate(&text, json!({"response": 5}).as_object().unwrap()).unwrap_err();
        assert_eq!(err[0].field, "response", "what is wrong is still named: {err:?}");
    }
}
