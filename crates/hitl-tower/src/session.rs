//! Sessions of 2025-era clients, kept by the client alone: the `Mcp-Session-Id` that
//! `initialize` issues carries the negotiated revision and what the client declared it
//! can answer (elicitation, sampling, roots), signed with the server secret. Any
//! replica reads it back without a store, so a pushed question can be asked of a
//! client whose requests reach several replicas.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hitl_interrupt::Secret;
use hitl_protocol::ClientCapabilities;
use serde_json::{Value, json};

/// The label of session tags under the server secret.
const LABEL: &str = "mcp-session";

/// What a session id says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Session {
    /// The id itself (the header's value).
    pub(crate) id: String,
    /// The negotiated revision (`2025-11-25`, `2025-06-18`, …).
    pub(crate) version: String,
    /// What the client can answer, in the shape of 2026-07-28 capabilities.
    pub(crate) capabilities: ClientCapabilities,
}

/// A session id for a client that negotiated `version` and declared `capabilities`.
pub(crate) fn issue(secret: &Secret, version: &str, capabilities: &ClientCapabilities) -> String {
    let mut answers = serde_json::Map::new();
    let declared = [
        ("elicitation", serde_json::to_value(&capabilities.elicitation).unwrap_or_default()),
        ("sampling", serde_json::to_value(&capabilities.sampling).unwrap_or_default()),
        ("roots", serde_json::to_value(&capabilities.roots).unwrap_or_default()),
    ];
    for (name, value) in declared {
        if !value.is_null() {
            answers.insert(name.to_owned(), value);
        }
    }
    let kept = json!({ "v": version, "c": answers });
    let data = format!("{}.{}", uuid::Uuid::new_v4().simple(), URL_SAFE_NO_PAD.encode(kept.to_string()));
    let tag = secret.tag(LABEL, &data);
    format!("{data}.{tag}")
}

/// The session `id` names, when this server (or its previous secret) issued it.
pub(crate) fn read(secret: &Secret, id: &str) -> Option<Session> {
    let (data, tag) = id.rsplit_once('.')?;
    if !secret.verify_tag(LABEL, data, tag) {
        return None;
    }
    let (_, encoded) = data.split_once('.')?;
    let kept: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(encoded).ok()?).ok()?;
    let mut capabilities: ClientCapabilities = serde_json::from_value(kept["c"].clone()).ok()?;
    let version = kept["v"].as_str()?.to_owned();
    if version.as_str() < "2025-11-25" {
        // URL-mode elicitation came with 2025-11-25.
        if let Some(elicitation) = &mut capabilities.elicitation {
            elicitation.url = None;
        }
    }
    Some(Session { id: id.to_owned(), version, capabilities })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_carry_what_the_client_declared_and_cannot_be_forged() {
        let secret = Secret::generate();
        let declared: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}})).unwrap();
        let id = issue(&secret, "2025-11-25", &declared);
        assert!(id.bytes().all(|b| (0x21..=0x7e).contains(&b)), "visible ASCII: {id}");
        let session = read(&secret, &id).unwrap();
        assert_eq!(session.version, "2025-11-25");
        assert!(session.capabilities.elicits_url() && session.capabilities.samples());
        assert!(!session.capabilities.lists_roots());

        let older = read(&secret, &issue(&secret, "2025-06-18", &declared)).unwrap();
        assert!(older.capabilities.elicits_form() && !older.capabilities.elicits_url());

        let (data, _) = id.rsplit_once('.').unwrap();
        let forged = format!("{data}.{}", Secret::generate().tag(LABEL, data));
        assert_eq!(read(&secret, &forged), None, "another server's tag");
        let changed = id.replacen('.', ".e", 1);
        assert_eq!(read(&secret, &changed), None);
        assert_eq!(read(&secret, "plain-uuid"), None);
        let rotated = Secret::generate().with_previous(secret.clone());
        assert!(read(&rotated, &id).is_some(), "a rotation keeps sessions");
    }
}
