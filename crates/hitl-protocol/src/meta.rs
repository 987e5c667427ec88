//! `_meta` objects: a map that keeps every key, with typed getters for the reserved ones.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{ClientCapabilities, ErrorObject};

/// `_meta` key of the protocol version (2026-07-28 requests).
pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of the client capabilities (2026-07-28 requests).
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key of the client's self-description.
pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key of the (deprecated) log level.
pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// `_meta` key of the server's self-description on results.
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key of a progress token.
pub const PROGRESS_TOKEN: &str = "progressToken";

/// A `_meta` object. Unknown keys are kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Meta(pub Map<String, Value>);

/// A name and version, as `clientInfo` and `serverInfo` carry them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Implementation {
    /// Programmatic name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Anything else (description, icons, websiteUrl).
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl Implementation {
    /// A name and a version.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self { name: name.into(), version: version.into(), title: None, other: Map::new() }
    }
}

/// The per-request metadata a 2026-07-28 request must carry, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ModernMeta {
    /// `io.modelcontextprotocol/protocolVersion`.
    pub protocol_version: String,
    /// `io.modelcontextprotocol/clientCapabilities`.
    pub client_capabilities: ClientCapabilities,
    /// `io.modelcontextprotocol/clientInfo`, when sent.
    pub client_info: Option<Implementation>,
}

impl Meta {
    /// An empty `_meta`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Is there no key at all?
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The raw value of a key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// Sets a key.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) {
        self.0.insert(key.into(), value);
    }

    /// `io.modelcontextprotocol/protocolVersion`, when it is a string.
    pub fn protocol_version(&self) -> Option<&str> {
        self.get(PROTOCOL_VERSION).and_then(Value::as_str)
    }

    /// `io.modelcontextprotocol/clientCapabilities`, typed; `None` when absent.
    pub fn client_capabilities(&self) -> Result<Option<ClientCapabilities>, ErrorObject> {
        self.typed(CLIENT_CAPABILITIES)
    }

    /// `io.modelcontextprotocol/clientInfo`, typed; `None` when absent.
    pub fn client_info(&self) -> Result<Option<Implementation>, ErrorObject> {
        self.typed(CLIENT_INFO)
    }

    /// `io.modelcontextprotocol/serverInfo`, typed; `None` when absent.
    pub fn server_info(&self) -> Result<Option<Implementation>, ErrorObject> {
        self.typed(SERVER_INFO)
    }

    /// `progressToken` (a string or an integer).
    pub fn progress_token(&self) -> Option<&Value> {
        self.get(PROGRESS_TOKEN).filter(|v| v.is_string() || v.is_i64() || v.is_u64())
    }

    /// `io.modelcontextprotocol/logLevel`.
    pub fn log_level(&self) -> Option<&str> {
        self.get(LOG_LEVEL).and_then(Value::as_str)
    }

    /// Checks the keys every 2026-07-28 request must carry: `-32602` naming the first one
    /// missing or malformed.
    pub fn require_modern(&self) -> Result<ModernMeta, ErrorObject> {
        let protocol_version = match self.get(PROTOCOL_VERSION) {
            None => return Err(missing(PROTOCOL_VERSION)),
            Some(Value::String(v)) => v.clone(),
            Some(_) => {
                return Err(ErrorObject::invalid_params(format!("_meta[\"{PROTOCOL_VERSION}\"] must be a string")));
            }
        };
        let client_capabilities = self.client_capabilities()?.ok_or_else(|| missing(CLIENT_CAPABILITIES))?;
        let client_info = self.client_info()?;
        Ok(ModernMeta { protocol_version, client_capabilities, client_info })
    }

    fn typed<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<T>, ErrorObject> {
        match self.get(key) {
            None => Ok(None),
            // Read from the borrowed value: no copy of the tree first.
            Some(v) => T::deserialize(v)
                .map(Some)
                .map_err(|e| ErrorObject::invalid_params(format!("Invalid params at _meta[\"{key}\"]: {e}"))),
        }
    }
}

fn missing(key: &str) -> ErrorObject {
    ErrorObject::invalid_params(format!("Invalid params: _meta[\"{key}\"] is required"))
}
