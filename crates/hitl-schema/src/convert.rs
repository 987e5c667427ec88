//! JSON Schema (as schemars and Pydantic write it) to an MCP form.

use std::collections::BTreeSet;

use hitl_protocol::RequestedSchema;
use serde_json::{Map, Value, json};

use crate::{CannotAsk, RESPONSE_FIELD, sensitive};

/// Limits of a form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FormOptions {
    /// The most fields a form may have.
    pub max_fields: usize,
    /// The largest schema accepted, in bytes of compact JSON.
    pub max_schema_bytes: usize,
}

impl Default for FormOptions {
    fn default() -> Self {
        Self { max_fields: 100, max_schema_bytes: 1024 * 1024 }
    }
}

/// A form, and how its answer maps back to what the agent asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Form {
    /// The form as sent in `requestedSchema`.
    pub schema: RequestedSchema,
    /// `true` when the schema did not describe an object: the form has one `response`
    /// field and the agent gets that field's value.
    pub wrapped: bool,
}

impl Form {
    /// What the agent resumes with, given accepted (and validated) content: the bare
    /// value of a wrapped form, else the content without fields the form did not ask.
    pub fn unwrap_answer(&self, content: &Map<String, Value>) -> Value {
        if self.wrapped {
            content.get(RESPONSE_FIELD).cloned().unwrap_or(Value::Null)
        } else {
            let asked = content.iter().filter(|(k, _)| self.schema.properties.contains_key(*k));
            Value::Object(asked.map(|(k, v)| (k.clone(), v.clone())).collect())
        }
    }
}

/// Keywords that only annotate a field; dropped without a word.
const ANNOTATIONS: &[&str] = &["$comment", "examples", "readOnly", "writeOnly", "deprecated", "$id", "$anchor"];
/// String formats MCP forms allow.
const FORMATS: &[&str] = &["email", "uri", "date", "date-time"];

/// Turns `schema` into a form, or says precisely (with a JSON Pointer into `schema`)
/// why it cannot be asked.
pub fn to_form(schema: &Value, options: &FormOptions) -> Result<Form, CannotAsk> {
    let size = serde_json::to_vec(schema).map_or(usize::MAX, |v| v.len());
    if size > options.max_schema_bytes {
        return Err(CannotAsk::at("", format!("the schema is {size} bytes, more than {}", options.max_schema_bytes)));
    }
    let ctx = Resolver { root: schema };
    let root = ctx.normalize(schema, "", &mut Vec::new())?;
    let is_object = root.get("type").and_then(Value::as_str) == Some("object") || root.contains_key("properties");
    if !is_object {
        let field = ctx.field(&Value::Object(root), "", &mut Vec::new())?;
        let mut properties = Map::new();
        properties.insert(RESPONSE_FIELD.into(), field);
        let schema = RequestedSchema {
            schema: None,
            type_: "object".into(),
            properties,
            required: Some(vec![RESPONSE_FIELD.into()]),
        };
        return Ok(Form { schema, wrapped: true });
    }
    for key in root.keys() {
        let allowed = matches!(
            key.as_str(),
            "type"
                | "properties"
                | "required"
                | "title"
                | "description"
                | "$schema"
                | "$defs"
                | "definitions"
                | "additionalProperties"
        ) || ANNOTATIONS.contains(&key.as_str());
        if !allowed {
            return Err(CannotAsk::at(&format!("/{}", escape(key)), format!("the form cannot use the keyword {key}")));
        }
    }
    let empty = Map::new();
    let props = root.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    if props.is_empty() {
        return Err(CannotAsk::at("/properties", "the form has no fields"));
    }
    if props.len() > options.max_fields {
        return Err(CannotAsk::at(
            "/properties",
            format!("the form has {} fields, more than {}", props.len(), options.max_fields),
        ));
    }
    let mut properties = Map::new();
    for (name, prop) in props {
        let pointer = format!("/properties/{}", escape(name));
        let field = ctx.field(prop, &pointer, &mut Vec::new())?;
        sensitive::check(name, field.get("title").and_then(Value::as_str), &pointer)?;
        properties.insert(name.clone(), field);
    }
    let required: Vec<String> = root
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter().filter_map(Value::as_str).filter(|n| properties.contains_key(*n)).map(str::to_owned).collect()
        })
        .unwrap_or_default();
    let schema = RequestedSchema {
        schema: None,
        type_: "object".into(),
        properties,
        required: (!required.is_empty()).then_some(required),
    };
    Ok(Form { schema, wrapped: false })
}

/// A JSON Pointer token.
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

struct Resolver<'a> {
    root: &'a Value,
}

impl Resolver<'_> {
    /// Resolves local `$ref`s and flattens `allOf` of one schema and optional forms
    /// (`anyOf [T, null]`, `type [T, "null"]`), keeping sibling keywords over the target.
    fn normalize(
        &self,
        schema: &Value,
        pointer: &str,
        seen: &mut Vec<String>,
    ) -> Result<Map<String, Value>, CannotAsk> {
        let Value::Object(map) = schema else {
            return match schema {
                Value::Bool(true) => Err(CannotAsk::at(pointer, "a field must say its type")),
                _ => Err(CannotAsk::at(pointer, "a schema must be an object")),
            };
        };
        let mut out = map.clone();
        if let Some(reference) = out.remove("$ref") {
            let reference = reference.as_str().unwrap_or_default().to_owned();
            let target = self.resolve(&reference, pointer, seen)?;
            seen.push(reference);
            let merged = self.normalize(&target, pointer, seen);
            seen.pop();
            out = under(merged?, out);
        }
        if let Some(all) = out.remove("allOf") {
            let Some([single]) = all.as_array().map(Vec::as_slice) else {
                let why = "allOf of several schemas cannot be flattened";
                return Err(CannotAsk::at(&format!("{pointer}/allOf"), why));
            };
            out = under(self.normalize(single, &format!("{pointer}/allOf/0"), seen)?, out);
        }
        for keyword in ["anyOf", "oneOf"] {
            out = self.flatten_union(out, keyword, pointer, seen)?;
        }
        one_type(&mut out, pointer)?;
        if out.get("default") == Some(&Value::Null) {
            out.remove("default");
        }
        if let Some(keyword) = ["not", "if", "then", "else"].into_iter().find(|k| out.contains_key(*k)) {
            return Err(CannotAsk::at(&format!("{pointer}/{keyword}"), format!("{keyword} cannot be asked in a form")));
        }
        Ok(out)
    }

    /// `anyOf`/`oneOf` (`keyword`) in a form: a choice of `const`s, or one schema or
    /// null (an optional field); anything else cannot be asked.
    fn flatten_union(
        &self,
        mut out: Map<String, Value>,
        keyword: &str,
        pointer: &str,
        seen: &mut Vec<String>,
    ) -> Result<Map<String, Value>, CannotAsk> {
        let Some(options) = out.get(keyword).and_then(Value::as_array) else { return Ok(out) };
        // Choices: `oneOf`/`anyOf` of `const`. Titled ones stay as they are (MCP's
        // titled selects); untitled ones (schemars writes them for documented enum
        // variants) become a plain `enum`.
        if !options.is_empty() && options.iter().all(|o| o.get("const").is_some()) {
            if !options.iter().all(|o| o.get("title").is_some_and(Value::is_string)) {
                let values: Vec<Value> = options.iter().map(|o| o["const"].clone()).collect();
                out.remove(keyword);
                if values.iter().all(Value::is_string) {
                    out.entry("type").or_insert_with(|| json!("string"));
                }
                out.insert("enum".into(), Value::Array(values));
            }
            return Ok(out);
        }
        let is_null = |o: &Value| o.get("type").and_then(Value::as_str) == Some("null");
        let non_null: Vec<(usize, &Value)> = options.iter().enumerate().filter(|(_, o)| !is_null(o)).collect();
        match non_null.as_slice() {
            [(index, only)] if non_null.len() < options.len() => {
                let (only, at) = ((*only).clone(), format!("{pointer}/{keyword}/{index}"));
                out.remove(keyword);
                Ok(under(self.normalize(&only, &at, seen)?, out))
            }
            _ => Err(CannotAsk::at(
                &format!("{pointer}/{keyword}"),
                format!("{keyword} of several schemas cannot be asked in a form"),
            )),
        }
    }

    fn resolve(&self, reference: &str, pointer: &str, seen: &[String]) -> Result<Value, CannotAsk> {
        let at = format!("{pointer}/$ref");
        let Some(local) = reference.strip_prefix('#') else {
            return Err(CannotAsk::at(&at, format!("the reference {reference} is not local to the schema")));
        };
        if seen.iter().any(|s| s == reference) {
            return Err(CannotAsk::at(&at, format!("the reference {reference} is cyclic")));
        }
        self.root
            .pointer(local)
            .cloned()
            .ok_or_else(|| CannotAsk::at(&at, format!("the reference {reference} points nowhere")))
    }

    /// One field of the form.
    fn field(&self, schema: &Value, pointer: &str, seen: &mut Vec<String>) -> Result<Value, CannotAsk> {
        let mut field = self.normalize(schema, pointer, seen)?;
        for keyword in ANNOTATIONS {
            field.remove(*keyword);
        }
        let ty = field_type(&mut field, pointer)?;
        check_keywords(&field, allowed_keywords(&ty, pointer)?, pointer)?;
        match ty.as_str() {
            "string" => self.string_field(&mut field, pointer)?,
            "number" | "integer" => {
                // schemars' `int32`, `uint8`, `double`: informational, not MCP formats.
                field.remove("format");
            }
            "array" => self.array_field(&mut field, pointer, seen)?,
            _ => {}
        }
        check_default(&field, &ty, pointer)?;
        Ok(Value::Object(field))
    }

    fn string_field(&self, field: &mut Map<String, Value>, pointer: &str) -> Result<(), CannotAsk> {
        if let Some(format) = field.get("format") {
            let format = format.as_str().unwrap_or_default();
            if !FORMATS.contains(&format) {
                return Err(CannotAsk::at(
                    &format!("{pointer}/format"),
                    format!("the format {format} cannot be asked in a form (email, uri, date, date-time can)"),
                ));
            }
        }
        if let Some(choices) = field.get("enum")
            && !choices.as_array().is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_string))
        {
            return Err(CannotAsk::at(&format!("{pointer}/enum"), "a choice must list strings"));
        }
        if let Some(choices) = field.get("oneOf") {
            let titled = |o: &Value| {
                o.get("const").is_some_and(Value::is_string) && o.get("title").is_some_and(Value::is_string)
            };
            if !choices.as_array().is_some_and(|a| !a.is_empty() && a.iter().all(titled)) {
                return Err(CannotAsk::at(
                    &format!("{pointer}/oneOf"),
                    "a titled choice needs a const and a title per option",
                ));
            }
        }
        Ok(())
    }

    fn array_field(
        &self,
        field: &mut Map<String, Value>,
        pointer: &str,
        seen: &mut Vec<String>,
    ) -> Result<(), CannotAsk> {
        // A multi-select is a set of choices already.
        field.remove("uniqueItems");
        let items_pointer = format!("{pointer}/items");
        let Some(items) = field.get("items") else {
            return Err(CannotAsk::at(pointer, "an array field must list its choices in items"));
        };
        let mut items = self.normalize(items, &items_pointer, seen)?;
        if let Some(constant) = items.remove("const") {
            items.insert("enum".into(), json!([constant]));
        }
        let strings = |v: &Value| v.as_array().is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_string));
        let titled = |v: &Value| {
            v.as_array().is_some_and(|a| {
                !a.is_empty()
                    && a.iter().all(|o| {
                        o.get("const").is_some_and(Value::is_string) && o.get("title").is_some_and(Value::is_string)
                    })
            })
        };
        let keys: BTreeSet<&str> = items.keys().map(String::as_str).collect();
        let normalized = if items.get("enum").is_some_and(strings)
            && keys.iter().all(|k| matches!(*k, "type" | "enum" | "title" | "description"))
        {
            json!({"type": "string", "enum": items["enum"]})
        } else if items.get("anyOf").is_some_and(titled)
            && keys.iter().all(|k| matches!(*k, "anyOf" | "type" | "title" | "description"))
        {
            json!({"anyOf": items["anyOf"]})
        } else {
            return Err(CannotAsk::at(&items_pointer, "an array field must be a multi-select of string choices"));
        };
        field.insert("items".into(), normalized);
        Ok(())
    }
}

/// The field's type: as written, or `string` for enums of strings and choices written
/// without one (`Literal["x"]` too, whose `const` becomes a one-value `enum`).
fn field_type(field: &mut Map<String, Value>, pointer: &str) -> Result<String, CannotAsk> {
    if let Some(constant) = field.remove("const") {
        field.insert("enum".into(), json!([constant]));
    }
    if !field.contains_key("type") {
        let strings = |v: &Value| v.as_array().is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_string));
        if field.get("enum").is_some_and(strings) || field.contains_key("oneOf") {
            field.insert("type".into(), json!("string"));
        }
    }
    match field.get("type").and_then(Value::as_str) {
        Some(t) => Ok(t.to_owned()),
        None => Err(CannotAsk::at(pointer, "a field must say its type")),
    }
}

/// The keywords MCP's form fields of type `ty` may carry.
fn allowed_keywords(ty: &str, pointer: &str) -> Result<&'static [&'static str], CannotAsk> {
    Ok(match ty {
        "string" => &[
            "type",
            "title",
            "description",
            "default",
            "minLength",
            "maxLength",
            "format",
            "enum",
            "enumNames",
            "oneOf",
        ],
        "number" | "integer" => &["type", "title", "description", "default", "minimum", "maximum", "format"],
        "boolean" => &["type", "title", "description", "default"],
        "array" => &["type", "title", "description", "default", "minItems", "maxItems", "items", "uniqueItems"],
        "object" => return Err(CannotAsk::at(pointer, "nested objects cannot be asked in a form")),
        other => {
            return Err(CannotAsk::at(
                &format!("{pointer}/type"),
                format!("the type {other} cannot be asked in a form"),
            ));
        }
    })
}

/// Every keyword is `allowed` and its value has the type MCP gives it.
fn check_keywords(field: &Map<String, Value>, allowed: &[&str], pointer: &str) -> Result<(), CannotAsk> {
    if let Some(keyword) = field.keys().find(|k| !allowed.contains(&k.as_str())) {
        let why = match keyword.as_str() {
            "exclusiveMinimum" | "exclusiveMaximum" => {
                format!("{keyword} cannot be asked in a form (use minimum or maximum, e.g. Field(ge=…) instead of gt)")
            }
            _ => format!("the keyword {keyword} cannot be asked in a form"),
        };
        return Err(CannotAsk::at(&format!("{pointer}/{}", escape(keyword)), why));
    }
    for (keyword, value) in field {
        let fits = match keyword.as_str() {
            "title" | "description" => value.is_string(),
            "minLength" | "maxLength" | "minItems" | "maxItems" => value.is_u64(),
            "minimum" | "maximum" => value.is_number(),
            "enumNames" => value.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            "uniqueItems" => value.is_boolean(),
            _ => true,
        };
        if !fits {
            return Err(CannotAsk::at(
                &format!("{pointer}/{}", escape(keyword)),
                format!("the keyword {keyword} has a value of the wrong type"),
            ));
        }
    }
    Ok(())
}

/// A default, when there is one, has the field's type.
fn check_default(field: &Map<String, Value>, ty: &str, pointer: &str) -> Result<(), CannotAsk> {
    let Some(default) = field.get("default") else { return Ok(()) };
    let fits = match ty {
        "string" => default.is_string(),
        "number" => default.is_number(),
        "integer" => default.is_i64() || default.is_u64(),
        "boolean" => default.is_boolean(),
        _ => default.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
    };
    if fits {
        return Ok(());
    }
    Err(CannotAsk::at(&format!("{pointer}/default"), format!("the default does not fit the type {ty}")))
}

/// `base` with `over`'s keywords on top (a schema's own keywords win over those it
/// refers to).
fn under(mut base: Map<String, Value>, over: Map<String, Value>) -> Map<String, Value> {
    base.extend(over);
    base
}

/// A `type` list of one type and `null` becomes that type.
fn one_type(out: &mut Map<String, Value>, pointer: &str) -> Result<(), CannotAsk> {
    let Some(Value::Array(types)) = out.get("type") else { return Ok(()) };
    match types.iter().filter(|t| t.as_str() != Some("null")).collect::<Vec<_>>().as_slice() {
        [only] => {
            let only = (*only).clone();
            out.insert("type".into(), only);
            Ok(())
        }
        _ => Err(CannotAsk::at(&format!("{pointer}/type"), "a field must have one type")),
    }
}
