//! Client and server capabilities, and the questions the server asks of them.

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::text::Text;

/// A JSON object, as capabilities use for their sub-options.
pub type JsonObject = Map<String, Value>;

/// What a client declares it can do (`io.modelcontextprotocol/clientCapabilities` in
/// 2026-07-28, `capabilities` of `initialize` before).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientCapabilities {
    /// Non-standard capabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<Box<Map<String, Value>>>,
    /// `roots/list` (deprecated in 2026-07-28, still functional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roots: Option<Box<JsonObject>>,
    /// `sampling/createMessage` (deprecated in 2026-07-28, still functional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<Box<JsonObject>>,
    /// `elicitation/create`, with its modes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation: Option<Box<ElicitationCapability>>,
    /// Extensions, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Box<Map<String, Value>>>,
    /// Anything else the client sent, kept as it was.
    #[serde(flatten)]
    pub other: JsonObject,
}

/// The `elicitation` capability. `{}` means form mode only.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ElicitationCapability {
    /// Form mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form: Option<JsonObject>,
    /// URL mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<JsonObject>,
    /// Anything else the client sent.
    #[serde(flatten)]
    pub other: JsonObject,
}

/// `Deserialize` for an object of optional typed fields whose other keys are kept in
/// `other`, read key by key: `#[serde(flatten)]` would buffer the whole object first (an
/// allocation per key and value, on every request that carries capabilities). A known
/// key given twice is an error, as derived; another key given twice keeps its last value.
macro_rules! keeps_other_keys {
    ($ty:ident, $expecting:literal, { $($key:literal => $field:ident),* $(,)? }) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Visit;
                impl<'de> Visitor<'de> for Visit {
                    type Value = $ty;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<$ty, A::Error> {
                        let mut out = $ty::default();
                        let mut seen = 0u32;
                        'keys: while let Some(Text(key)) = map.next_key()? {
                            let mut bit = 1u32;
                            $(
                                if key == $key {
                                    if seen & bit != 0 {
                                        return Err(de::Error::duplicate_field($key));
                                    }
                                    seen |= bit;
                                    out.$field = map.next_value()?;
                                    continue 'keys;
                                }
                                bit <<= 1;
                            )*
                            let _ = bit;
                            let value = map.next_value()?;
                            out.other.insert(key.into_owned(), value);
                        }
                        Ok(out)
                    }
                }
                deserializer.deserialize_map(Visit)
            }
        }
    };
}

keeps_other_keys!(ClientCapabilities, "struct ClientCapabilities", {
    "experimental" => experimental,
    "roots" => roots,
    "sampling" => sampling,
    "elicitation" => elicitation,
    "extensions" => extensions,
});

keeps_other_keys!(ElicitationCapability, "struct ElicitationCapability", {
    "form" => form,
    "url" => url,
});

impl ClientCapabilities {
    /// Does the client take form-mode elicitation? `elicitation: {}` counts as form.
    pub fn elicits_form(&self) -> bool {
        self.elicitation.as_ref().is_some_and(|e| e.form.is_some() || e.url.is_none())
    }

    /// Does the client take URL-mode elicitation?
    pub fn elicits_url(&self) -> bool {
        self.elicitation.as_ref().is_some_and(|e| e.url.is_some())
    }

    /// Does the client take `sampling/createMessage`?
    pub fn samples(&self) -> bool {
        self.sampling.is_some()
    }

    /// Does the client answer `roots/list`?
    pub fn lists_roots(&self) -> bool {
        self.roots.is_some()
    }
}

/// What input a round of questions needs from the client. Also the value of
/// `data.requiredCapabilities` in a `-32021` error, through [`Needs::to_capabilities`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Needs {
    /// Form-mode elicitation.
    pub form: bool,
    /// URL-mode elicitation.
    pub url: bool,
    /// Sampling.
    pub sampling: bool,
    /// Roots.
    pub roots: bool,
}

impl Needs {
    /// The needs that `caps` does not meet.
    pub fn missing_from(&self, caps: &ClientCapabilities) -> Needs {
        Needs {
            form: self.form && !caps.elicits_form(),
            url: self.url && !caps.elicits_url(),
            sampling: self.sampling && !caps.samples(),
            roots: self.roots && !caps.lists_roots(),
        }
    }

    /// Nothing needed.
    pub fn is_empty(&self) -> bool {
        !(self.form || self.url || self.sampling || self.roots)
    }

    /// The needs as capabilities, e.g. `{"elicitation": {"form": {}}}`.
    pub fn to_capabilities(&self) -> ClientCapabilities {
        let mut caps = ClientCapabilities::default();
        if self.form || self.url {
            caps.elicitation = Some(Box::new(ElicitationCapability {
                form: self.form.then(JsonObject::new),
                url: self.url.then(JsonObject::new),
                other: JsonObject::new(),
            }));
        }
        caps.sampling = self.sampling.then(Box::default);
        caps.roots = self.roots.then(Box::default);
        caps
    }
}

/// What the server declares (`server/discover`, `initialize`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerCapabilities {
    /// Tools, when served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<JsonObject>,
    /// Prompts, when served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<JsonObject>,
    /// Resources, when served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<JsonObject>,
    /// Logging, when served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<JsonObject>,
    /// Extensions, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Map<String, Value>>,
    /// Anything else.
    #[serde(flatten)]
    pub other: JsonObject,
}
