//! From what an agent asks to an MCP elicitation form, and answers checked against it.
//!
//! A form is the flat object schema MCP allows in `elicitation/create`
//! ([`RequestedSchema`]): fields that are strings (with `email`, `uri`, `date` or
//! `date-time` formats), numbers, integers, booleans, single-choice enums, or
//! multi-selects of string choices. This crate
//! - turns any JSON Schema (as schemars or Pydantic write it) into a form, or says
//!   precisely why it can't, with the JSON Pointer of the offending keyword
//!   ([`to_form`], [`CannotAsk`]);
//! - builds the forms of text questions ([`text_form`]) and tool-call reviews
//!   ([`review_form`]), and checks URL questions ([`check_url`]);
//! - checks every answer before an agent sees it ([`validate`]).
//!
//! ```
//! use hitl_schema::{FormOptions, to_form, validate};
//! use serde_json::json;
//!
//! // Pydantic: class Deployment(BaseModel): region: Literal[...]; replicas: int = Field(ge=1, le=10)
//! let pydantic = json!({
//!     "title": "Deployment", "type": "object",
//!     "properties": {
//!         "region": {"enum": ["us-east-1", "eu-west-1"], "title": "Region", "type": "string"},
//!         "replicas": {"maximum": 10, "minimum": 1, "title": "Replicas", "type": "integer"}
//!     },
//!     "required": ["region", "replicas"]
//! });
//! let form = to_form(&pydantic, &FormOptions::default()).unwrap();
//! assert!(!form.wrapped);
//! assert!(validate(&form.schema, json!({"region": "eu-west-1", "replicas": 3}).as_object().unwrap()).is_ok());
//! let violations = validate(&form.schema, json!({"region": "eu-west-1", "replicas": 20}).as_object().unwrap()).unwrap_err();
//! assert_eq!(violations[0].field, "replicas");
//!
//! // A schema that cannot be asked says where and why.
//! let err = to_form(&json!({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]+$"}}}),
//!                   &FormOptions::default()).unwrap_err();
//! assert_eq!(err.pointer, "/properties/code/pattern");
//! ```

mod convert;
mod downgrade;
mod review;
pub mod sensitive;
mod url;
mod validate;

use hitl_protocol::RequestedSchema;
use serde_json::{Map, Value};

pub use convert::{Form, FormOptions, to_form};
pub use downgrade::downgrade_2025_06_18;
pub use review::{COVER_FIELD, DecisionKind, MAX_PREFILL_BYTES, offer_cover, offers_cover, review_form};
pub use url::{MAX_URL_LEN, check_url};
pub use validate::{CACHE_CAPACITY, Violation, deserialize_answer, validate, validate_value};

/// The field a text question's answer (and a non-object schema's value) comes back in.
pub const RESPONSE_FIELD: &str = "response";

/// Why a question cannot be asked over MCP.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (at {pointer})")]
pub struct CannotAsk {
    /// JSON Pointer of the offending keyword in the schema (or request) given.
    pub pointer: String,
    /// What is wrong.
    pub reason: String,
}

impl CannotAsk {
    /// An error at `pointer` (`""` is the whole schema).
    pub fn at(pointer: &str, reason: impl Into<String>) -> Self {
        let pointer = if pointer.is_empty() { "/".to_owned() } else { pointer.to_owned() };
        Self { pointer, reason: reason.into() }
    }
}

/// The form of a text question: one required string field, `response`. Its maps are
/// made to size: a paused call keeps its form, so room for more fields would be kept too.
pub fn text_form() -> RequestedSchema {
    let mut field = Map::with_capacity(1);
    field.insert("type".into(), Value::from("string"));
    let mut properties = Map::with_capacity(1);
    properties.insert(RESPONSE_FIELD.into(), Value::Object(field));
    RequestedSchema { schema: None, type_: "object".into(), properties, required: Some(vec![RESPONSE_FIELD.into()]) }
}
