//! The upstreams' resources and prompts, passed through under the policies: listed
//! with each upstream's tools, resource URIs kept as the upstream gave them, prompt
//! names prefixed like tools. A `resources/read` goes to the upstream that listed the
//! URI, returned it in a result, or lists a template it fits; a URI several upstreams
//! serve goes to the first in the file (the collision is logged once).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;

use hitl_protocol::{ErrorCode, ErrorObject};
use hitl_upstream::UpstreamError;
use serde_json::{Map, Value};

/// Which of hitl's lists changed, for its clients' `notifications/*/list_changed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListChanged {
    /// `tools/list`.
    Tools,
    /// `resources/list` (and the templates).
    Resources,
    /// `prompts/list`.
    Prompts,
}

/// Where the gateway tells that one of its lists changed (after a listing that differs
/// from the one before).
pub type Changed = std::sync::Arc<dyn Fn(ListChanged) + Send + Sync>;

/// Who asks: the policies' `callers` see the principal and groups; `caller` is the
/// engine's key of the caller, whose upstream session (if any) serves the request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Who<'a> {
    /// The caller's principal (`user:<id>`).
    pub principal: Option<&'a str>,
    /// Its groups (`group:<name>`).
    pub groups: &'a [String],
    /// Its key, for the upstream session it has.
    pub caller: Option<&'a str>,
}

/// What one upstream listed besides its tools.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Served {
    pub(crate) tools: Vec<Map<String, Value>>,
    pub(crate) resources: Vec<Map<String, Value>>,
    pub(crate) templates: Vec<Map<String, Value>>,
    pub(crate) prompts: Vec<Map<String, Value>>,
}

/// How many URIs seen in results are remembered (the oldest are forgotten past it),
/// so upstream results cannot grow the process without bound.
const SEEN_CAP: usize = 10_000;

/// URIs the upstreams returned in results (`resource_link`, embedded `resource`).
#[derive(Debug, Default)]
pub(crate) struct Seen {
    inner: Mutex<SeenInner>,
}

#[derive(Debug, Default)]
struct SeenInner {
    by_uri: BTreeMap<String, String>,
    order: VecDeque<String>,
}

impl Seen {
    /// Remembers the URIs of `result`'s content as served by `upstream`; a URI another
    /// upstream returned already stays with it (the order of the file decides at
    /// read time, from the listings).
    pub(crate) fn note(&self, upstream: &str, result: &Result<Value, UpstreamError>) {
        let Ok(result) = result else { return };
        let uris = result_uris(result);
        if uris.is_empty() {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for uri in uris {
            if inner.by_uri.contains_key(&uri) {
                continue;
            }
            inner.by_uri.insert(uri.clone(), upstream.to_owned());
            inner.order.push_back(uri);
            while inner.order.len() > SEEN_CAP {
                if let Some(old) = inner.order.pop_front() {
                    inner.by_uri.remove(&old);
                }
            }
        }
    }

    /// The upstream that returned `uri` in a result, if one did.
    pub(crate) fn upstream_of(&self, uri: &str) -> Option<String> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).by_uri.get(uri).cloned()
    }
}

/// The URIs of a tool result's `resource_link` and embedded `resource` blocks.
fn result_uris(result: &Value) -> Vec<String> {
    let Some(content) = result.get("content").and_then(Value::as_array) else { return Vec::new() };
    content
        .iter()
        .filter_map(|block| match block.get("type").and_then(Value::as_str) {
            Some("resource_link") => block.get("uri"),
            Some("resource") => block.get("resource").and_then(|r| r.get("uri")),
            _ => None,
        })
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// Does `uri` fit the RFC 6570 `template` (each `{…}` expression standing for any run
/// of characters, the literal text between them matched exactly)?
pub(crate) fn fits(template: &str, uri: &str) -> bool {
    let mut glob = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        // Literal `*` and `?` are rare in URIs; they are matched as wildcards too.
        glob.push_str(&rest[..open]);
        glob.push('*');
        match rest[open..].find('}') {
            Some(close) => rest = &rest[open + close + 1..],
            None => return false,
        }
    }
    glob.push_str(rest);
    crate::glob_match(&glob, uri)
}

/// Logs, once each, the URIs that several upstreams list: the first in the file serves
/// them.
#[derive(Debug, Default)]
pub(crate) struct Collisions(Mutex<BTreeSet<String>>);

impl Collisions {
    pub(crate) fn log(&self, uri: &str, first: &str, other: &str) {
        if self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(uri.to_owned()) {
            tracing::warn!(
                uri,
                served_by = first,
                also_listed_by = other,
                "two upstreams list one resource URI; reads go to the first in the file"
            );
        }
    }
}

/// The error a client gets for a read no upstream serves (or that it may not make):
/// the text and code hitl always answered with.
pub(crate) fn not_found(uri: &str) -> ErrorObject {
    ErrorObject::invalid_params(format!("Resource not found: {uri}")).with_data(serde_json::json!({ "uri": uri }))
}

/// What a client gets when an upstream's request failed: its JSON-RPC error as it
/// was (but `-32002`, the 2025-era "resource not found", which the 2026-07-28 wire
/// spells `-32602`), or an internal error naming the upstream.
pub(crate) fn relayed_error(error: UpstreamError) -> ErrorObject {
    match error {
        UpstreamError::Refused { error, .. } => {
            let mut error = *error;
            if error.code == ErrorCode::RESOURCE_NOT_FOUND_LEGACY {
                error.code = ErrorCode::INVALID_PARAMS;
            }
            error
        }
        other => ErrorObject::internal(other.to_string()),
    }
}

/// An upstream's result as hitl's: the upstream's `serverInfo` taken out (hitl stamps
/// its own) and a `_meta` left empty dropped.
pub(crate) fn as_ours(mut result: Value) -> Value {
    if let Some(map) = result.as_object_mut() {
        if let Some(Value::Object(meta)) = map.get_mut("_meta") {
            meta.remove(hitl_protocol::meta_keys::SERVER_INFO);
            if meta.is_empty() {
                map.remove("_meta");
            }
        }
        map.remove("resultType");
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_fit_the_uris_they_make() {
        assert!(fits("demo://resource/dynamic/text/{resourceId}", "demo://resource/dynamic/text/2"));
        assert!(!fits("demo://resource/dynamic/text/{resourceId}", "demo://resource/dynamic/blob/2"));
        assert!(fits("file:///{path}", "file:///etc/hosts"));
        assert!(fits("a://{x}/b/{y}", "a://1/b/2"));
        assert!(!fits("a://{x}/b/{y}", "a://1/c/2"));
        assert!(!fits("a://{x", "a://1"), "an unclosed expression fits nothing");
        assert!(fits("plain://uri", "plain://uri"));
    }

    #[test]
    fn links_and_embedded_resources_are_remembered_and_bounded() {
        let seen = Seen::default();
        let result = serde_json::json!({"content": [
            {"type": "text", "text": "two links"},
            {"type": "resource_link", "uri": "demo://a", "name": "a"},
            {"type": "resource", "resource": {"uri": "demo://b", "text": "b"}},
        ]});
        seen.note("ev", &Ok(result.clone()));
        seen.note("other", &Ok(result));
        assert_eq!(seen.upstream_of("demo://a").as_deref(), Some("ev"), "the first to return it keeps it");
        assert_eq!(seen.upstream_of("demo://b").as_deref(), Some("ev"));
        assert_eq!(seen.upstream_of("demo://c"), None);
        for i in 0..=SEEN_CAP {
            let link = serde_json::json!({"content": [{"type": "resource_link", "uri": format!("x://{i}")}]});
            seen.note("ev", &Ok(link));
        }
        assert_eq!(seen.upstream_of("demo://a"), None, "the oldest is forgotten past the cap");
        assert!(seen.upstream_of(&format!("x://{SEEN_CAP}")).is_some());
    }

    #[test]
    fn a_2025_era_not_found_reaches_clients_as_invalid_params() {
        let refused = UpstreamError::Refused {
            upstream: "ev".into(),
            error: Box::new(ErrorObject {
                code: ErrorCode::RESOURCE_NOT_FOUND_LEGACY,
                message: "Resource not found".into(),
                data: None,
            }),
        };
        assert_eq!(relayed_error(refused).code, ErrorCode::INVALID_PARAMS);
        let down = UpstreamError::Timeout { upstream: "ev".into(), secs: 3 };
        let error = relayed_error(down);
        assert_eq!(error.code, ErrorCode::INTERNAL_ERROR);
        assert!(error.message.contains("upstream ev"), "{}", error.message);
    }
}
