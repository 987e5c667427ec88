//! `_meta` objects: a map that keeps every key, with typed getters for the reserved ones;
//! and a request's, read straight from its text into the keys a server acts on.

use std::borrow::Cow;
use std::sync::Arc;

use serde::ser::SerializeMap as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
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
#[derive(Debug, Clone, Default)]
pub struct Meta {
    map: Map<String, Value>,
    /// `serverInfo` stamped on a result ([`Meta::stamp_server_info`]): one value shared
    /// by every result, written at its key as the result is serialized, not copied into
    /// each result's map.
    server_info: Option<Arc<Value>>,
}

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
        self.map.is_empty() && self.server_info.is_none()
    }

    /// The raw value of a key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match &self.server_info {
            Some(info) if key == SERVER_INFO => Some(info),
            _ => self.map.get(key),
        }
    }

    /// Sets a key.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        if key == SERVER_INFO {
            self.server_info = None;
        }
        self.map.insert(key, value);
    }

    /// Sets `io.modelcontextprotocol/serverInfo` to `info`, shared, not copied.
    pub fn stamp_server_info(&mut self, info: &Arc<Value>) {
        self.server_info = Some(info.clone());
    }

    /// The keys and values, `serverInfo` among them when it was stamped.
    pub fn into_map(mut self) -> Map<String, Value> {
        if let Some(info) = self.server_info.take() {
            self.map.insert(SERVER_INFO.to_owned(), Arc::unwrap_or_clone(info));
        }
        self.map
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
        self.get(PROGRESS_TOKEN).filter(|v| is_progress_token(v))
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

/// A request's `_meta` read straight from the request's text into the keys a server
/// acts on: strings borrowed, every other key skipped, no map of it built. Anything but
/// an object, a key of the wrong type (an explicit `null` included) or a repeated one
/// fails the whole read: [`Meta`] then says which ([`Meta::require_modern`]). It reads
/// from JSON text (`serde_json::from_str`, `from_slice`), as a request is read: from a
/// [`Value`] or a reader, a `_meta` with client capabilities does not read.
#[derive(Debug, Default)]
pub struct RequestMeta<'a> {
    fields: RequestMetaFields<'a>,
}

/// [`RequestMeta`]'s keys, as derived: a derived struct also reads from an array, by
/// position, which `_meta` must not be.
#[derive(Debug, Default, Deserialize)]
struct RequestMetaFields<'a> {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow, default, deserialize_with = "given_text")]
    protocol_version: Option<Cow<'a, str>>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", default, deserialize_with = "shared_capabilities")]
    client_capabilities: Option<Arc<ClientCapabilities>>,
    /// Read to be checked; the request path does not use it. Boxed: the fields are
    /// moved a few times as a request is read, and this one is most of their size.
    #[serde(rename = "io.modelcontextprotocol/clientInfo", default, deserialize_with = "crate::jsonrpc::present")]
    client_info: Option<Box<Implementation>>,
    #[serde(rename = "progressToken", default)]
    progress_token: Option<Value>,
}

impl<'de: 'a, 'a> Deserialize<'de> for RequestMeta<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        crate::jsonrpc::Object::deserialize(deserializer).map(|fields| RequestMeta { fields: fields.0 })
    }
}

impl<'a> RequestMeta<'a> {
    /// [`Meta::require_modern`]'s check: the keys every 2026-07-28 request must carry,
    /// `-32602` naming the first one missing. Gives the protocol version and the client
    /// capabilities.
    pub fn require_modern(&mut self) -> Result<(Cow<'a, str>, Arc<ClientCapabilities>), ErrorObject> {
        let version = self.fields.protocol_version.take().ok_or_else(|| missing(PROTOCOL_VERSION))?;
        let capabilities = self.fields.client_capabilities.take().ok_or_else(|| missing(CLIENT_CAPABILITIES))?;
        Ok((version, capabilities))
    }

    /// `io.modelcontextprotocol/protocolVersion`, when sent.
    pub fn protocol_version(&self) -> Option<&str> {
        self.fields.protocol_version.as_deref()
    }

    /// `io.modelcontextprotocol/clientInfo`, when sent.
    pub fn client_info(&self) -> Option<&Implementation> {
        self.fields.client_info.as_deref()
    }

    /// [`Meta::progress_token`].
    pub fn progress_token(&self) -> Option<&Value> {
        self.fields.progress_token.as_ref().filter(|v| is_progress_token(v))
    }
}

/// The client capabilities that are there (`null` is not absent: it fails, as
/// [`crate::jsonrpc::present`] reads), read from the request's text once per thread
/// for as long as its requests send the same text (a client sends the same
/// capabilities on every request): the last ones read are kept with their text, and
/// shared. Only text borrowed from the request reads so (a request's `_meta` is read
/// from its text).
fn shared_capabilities<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Arc<ClientCapabilities>>, D::Error> {
    /// The longest text kept: a client's capabilities are a few hundred bytes; a
    /// larger text is read each time rather than kept.
    const KEPT_TEXT: usize = 4096;
    thread_local! {
        static LAST: std::cell::RefCell<Option<(Box<str>, Arc<ClientCapabilities>)>> =
            const { std::cell::RefCell::new(None) };
    }
    let text = <&serde_json::value::RawValue>::deserialize(d)?.get();
    let read = || serde_json::from_str::<ClientCapabilities>(text).map(Arc::new).map_err(serde::de::Error::custom);
    // A thread being torn down reads without the one kept.
    LAST.try_with(|last| {
        if let Some((kept, capabilities)) = &*last.borrow()
            && **kept == *text
        {
            return Ok(Some(capabilities.clone()));
        }
        let capabilities = read()?;
        if text.len() <= KEPT_TEXT {
            *last.borrow_mut() = Some((text.into(), capabilities.clone()));
        }
        Ok(Some(capabilities))
    })
    .unwrap_or_else(|_| read().map(Some))
}

/// A string key that is there (`null` is not absent, as [`crate::jsonrpc::present`]
/// reads), borrowed from the request's text when it can be.
fn given_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    crate::text::Text::deserialize(d).map(|text| Some(text.0))
}

fn is_progress_token(v: &Value) -> bool {
    v.is_string() || v.is_i64() || v.is_u64()
}

impl From<Map<String, Value>> for Meta {
    fn from(map: Map<String, Value>) -> Self {
        Self { map, server_info: None }
    }
}

/// Equal when they serialize to the same keys and values, however `serverInfo` is held.
impl PartialEq for Meta {
    fn eq(&self, other: &Self) -> bool {
        let rest = |meta: &Self| meta.map.iter().filter(|(key, _)| *key != SERVER_INFO).count();
        self.get(SERVER_INFO) == other.get(SERVER_INFO)
            && rest(self) == rest(other)
            && self.map.iter().all(|(key, value)| key == SERVER_INFO || other.map.get(key) == Some(value))
    }
}

impl Serialize for Meta {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Some(info) = &self.server_info else { return self.map.serialize(serializer) };
        let kept = self.map.iter().filter(|(key, _)| *key != SERVER_INFO);
        let mut map = serializer.serialize_map(Some(kept.clone().count() + 1))?;
        for (key, value) in kept {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry(SERVER_INFO, &**info)?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for Meta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Map::deserialize(deserializer).map(Self::from)
    }
}

fn missing(key: &str) -> ErrorObject {
    ErrorObject::invalid_params(format!("Invalid params: _meta[\"{key}\"] is required"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_stamped_server_info_is_written_once_at_its_key_and_reads_as_any_key() {
        let info = Arc::new(json!({"name": "hitl", "version": "1"}));
        let mut meta: Meta = serde_json::from_value(json!({"a": 1, SERVER_INFO: {"name": "upstream"}})).unwrap();
        meta.stamp_server_info(&info);
        let written = serde_json::to_string(&meta).unwrap();
        assert_eq!(written, format!(r#"{{"a":1,"{SERVER_INFO}":{{"name":"hitl","version":"1"}}}}"#));
        assert_eq!(meta.get(SERVER_INFO), Some(&*info));
        assert_eq!(meta.server_info().unwrap().map(|i| i.name), Some("hitl".to_owned()));
        // Read back, the same `_meta`; one that differs in a key is not.
        let read: Meta = serde_json::from_str(&written).unwrap();
        assert_eq!(read, meta);
        let mut other = read.clone();
        other.insert("a", json!(2));
        assert_ne!(other, meta);
        // A key set after the stamp wins, and the map holds it all.
        meta.insert(SERVER_INFO, json!({"name": "set"}));
        assert_eq!(meta.get(SERVER_INFO), Some(&json!({"name": "set"})));
        let stamped_again = {
            let mut m = Meta::new();
            m.stamp_server_info(&info);
            assert!(!m.is_empty());
            m.into_map()
        };
        assert_eq!(Value::Object(stamped_again), json!({SERVER_INFO: {"name": "hitl", "version": "1"}}));
    }
}
