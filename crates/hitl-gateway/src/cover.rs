//! Approvals that cover later calls (`[[policy]] approval_ttl` and `approval_scope`):
//! what an approval covers, and where the approvals that cover are kept for their time
//! ([`Grants`]: in memory here, in Redis for replicas that share it).
//!
//! An approval covers only the calls of the caller it was given for, under the same
//! policy (known by a digest of its text), within its scope: the same tool with the
//! same arguments, or the same tool. So its key is made of exactly those.
//!
//! ```
//! use hitl_gateway::cover::{ApprovalScope, Grants, MemoryGrants, cover_key};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let grants = MemoryGrants::default();
//! let key = cover_key("c68c0fe76ec0", "user:alice", ApprovalScope::Arguments, "fs.write_file", "d1").unwrap();
//! grants.grant(&key, "01a2.1.0.mac", 2_000).await.unwrap();
//! assert_eq!(grants.granted(&key, 1_000).await.unwrap().as_deref(), Some("01a2.1.0.mac"));
//! assert_eq!(grants.granted(&key, 2_000).await.unwrap(), None, "past its time");
//! // `call` covers no later call; nor does any approval cover an unknown caller's.
//! assert!(cover_key("c68c0fe76ec0", "user:alice", ApprovalScope::Call, "fs.write_file", "d1").is_none());
//! # });
//! ```

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use serde::Deserialize;

/// What an approval under a policy with `approval_ttl` covers besides its own call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalScope {
    /// This call only: nothing later.
    #[default]
    Call,
    /// The same caller's later calls of the same tool with identical arguments.
    Arguments,
    /// The same caller's later calls of the same tool, whatever their arguments.
    Tool,
}

impl ApprovalScope {
    /// Its name in `hitl.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Call => "call",
            Self::Arguments => "arguments",
            Self::Tool => "tool",
        }
    }
}

/// The key an approval that covers is kept under: the policy (its digest), the caller,
/// the tool and, for [`ApprovalScope::Arguments`], the arguments' digest. `None` when
/// nothing later is covered: scope `call`, or a caller no one authenticated (an empty
/// principal), whose approval must never let another anonymous caller through.
pub fn cover_key(
    policy_key: &str,
    principal: &str,
    scope: ApprovalScope,
    tool: &str,
    args_digest: &str,
) -> Option<String> {
    if principal.is_empty() {
        return None;
    }
    let covered = match scope {
        ApprovalScope::Call => return None,
        ApprovalScope::Arguments => format!("hitl/cover/v1\n{policy_key}\n{principal}\n{tool}\n{args_digest}"),
        ApprovalScope::Tool => format!("hitl/cover/v1\n{policy_key}\n{principal}\n{tool}\n*"),
    };
    Some(hex(ring::digest::digest(&ring::digest::SHA256, covered.as_bytes()).as_ref()))
}

/// Where approvals that cover later calls are kept until their time is up.
#[async_trait]
pub trait Grants: Send + Sync {
    /// Keeps `approval` (the id of the approval that covers) under `key` until
    /// `until_ms`, replacing what was there.
    async fn grant(&self, key: &str, approval: &str, until_ms: u64) -> Result<(), String>;

    /// The approval kept under `key`, while its time lasts at `now_ms`. `Err` when it
    /// cannot be read: the call is then reviewed, as if nothing covered it.
    async fn granted(&self, key: &str, now_ms: u64) -> Result<Option<String>, String>;
}

/// The most approvals [`MemoryGrants`] keeps; past it those whose time is up are
/// dropped, then the ones that end soonest.
const MEMORY_MAX: usize = 100_000;

/// Grants in this process's memory (one replica, or a memory store).
#[derive(Default)]
pub struct MemoryGrants {
    /// By key: the approval and when it ends (ms).
    kept: Mutex<HashMap<String, (String, u64)>>,
}

#[async_trait]
impl Grants for MemoryGrants {
    async fn grant(&self, key: &str, approval: &str, until_ms: u64) -> Result<(), String> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= MEMORY_MAX && !kept.contains_key(key) {
            let now = now_ms();
            kept.retain(|_, (_, until)| *until > now);
            if kept.len() >= MEMORY_MAX {
                let soonest = kept.iter().min_by_key(|(_, (_, until))| *until).map(|(k, _)| k.clone());
                kept.remove(&soonest.unwrap_or_default());
            }
        }
        kept.insert(key.to_owned(), (approval.to_owned(), until_ms));
        Ok(())
    }

    async fn granted(&self, key: &str, now_ms: u64) -> Result<Option<String>, String> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        Ok(kept.get(key).filter(|(_, until)| *until > now_ms).map(|(approval, _)| approval.clone()))
    }
}

/// Milliseconds since the epoch, now.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// `bytes` as lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What every [`Grants`] must do, for its tests: a grant is read until its time, then
/// not; a later grant replaces it; keys are apart. Panics with the rule it broke.
pub async fn conformance(grants: &dyn Grants, prefix: &str, now_ms: u64) {
    let (one, two) = (format!("{prefix}-one"), format!("{prefix}-two"));
    assert_eq!(grants.granted(&one, now_ms).await.unwrap(), None, "nothing granted yet");
    grants.grant(&one, "a1", now_ms + 60_000).await.unwrap();
    assert_eq!(grants.granted(&one, now_ms).await.unwrap().as_deref(), Some("a1"), "granted");
    assert_eq!(grants.granted(&one, now_ms).await.unwrap().as_deref(), Some("a1"), "read again, still granted");
    assert_eq!(grants.granted(&two, now_ms).await.unwrap(), None, "another key is apart");
    grants.grant(&one, "a2", now_ms + 60_000).await.unwrap();
    assert_eq!(grants.granted(&one, now_ms).await.unwrap().as_deref(), Some("a2"), "a later grant replaces it");
    grants.grant(&two, "b1", now_ms.saturating_sub(1)).await.unwrap();
    assert_eq!(grants.granted(&two, now_ms).await.unwrap(), None, "a grant whose time is up covers nothing");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_grants_conform_and_end_with_their_time() {
        let grants = MemoryGrants::default();
        conformance(&grants, "m", now_ms()).await;
        grants.grant("k", "a", 2_000).await.unwrap();
        assert_eq!(grants.granted("k", 1_999).await.unwrap().as_deref(), Some("a"));
        assert_eq!(grants.granted("k", 2_000).await.unwrap(), None, "it ends at its time");
    }

    #[test]
    fn a_cover_key_is_the_policy_the_caller_the_tool_and_for_arguments_their_digest() {
        let key = |policy, who, scope, tool, args| cover_key(policy, who, scope, tool, args);
        let base = key("p", "user:alice", ApprovalScope::Arguments, "fs.write_file", "d1");
        assert!(base.as_ref().is_some_and(|k| k.len() == 64));
        for (other, why) in [
            (key("q", "user:alice", ApprovalScope::Arguments, "fs.write_file", "d1"), "another policy"),
            (key("p", "user:bob", ApprovalScope::Arguments, "fs.write_file", "d1"), "another caller"),
            (key("p", "user:alice", ApprovalScope::Arguments, "fs.delete", "d1"), "another tool"),
            (key("p", "user:alice", ApprovalScope::Arguments, "fs.write_file", "d2"), "other arguments"),
            (key("p", "user:alice", ApprovalScope::Tool, "fs.write_file", "d1"), "another scope"),
        ] {
            assert_ne!(other, base, "{why}");
        }
        let tool = key("p", "user:alice", ApprovalScope::Tool, "fs.write_file", "d1");
        assert_eq!(tool, key("p", "user:alice", ApprovalScope::Tool, "fs.write_file", "d2"), "tool: any arguments");
        assert_eq!(key("p", "", ApprovalScope::Tool, "fs.write_file", "d1"), None, "never an unknown caller's");
        assert_eq!(key("p", "user:alice", ApprovalScope::Call, "fs.write_file", "d1"), None, "call: nothing later");
    }
}
