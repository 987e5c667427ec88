//! Rate limits counted, and approvals that cover later calls kept, in the Redis store
//! the replicas share.

use async_trait::async_trait;
use hitl_gateway::cover::Grants;
use hitl_gateway::limit::{Limiter, RateLimit};

/// Counts each window in Redis with one script, so every replica sees one count.
pub(crate) struct RedisLimiter(pub(crate) hitl_store_redis::RedisStore);

#[async_trait]
impl Limiter for RedisLimiter {
    async fn admit(&self, key: &str, limit: RateLimit, now_ms: u64) -> Result<Option<u64>, String> {
        self.0.count_in_window(key, limit.count, limit.window_ms(), now_ms).await.map_err(|e| e.to_string())
    }
}

/// Keeps approvals that cover later calls in Redis until their time (Redis drops them
/// then), so an approval given on one replica covers the caller's calls on every one.
pub(crate) struct RedisGrants(pub(crate) hitl_store_redis::RedisStore);

#[async_trait]
impl Grants for RedisGrants {
    async fn grant(&self, key: &str, approval: &str, until_ms: u64) -> Result<(), String> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let now_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        self.0.keep_until(key, approval, until_ms, now_ms).await.map_err(|e| e.to_string())
    }

    async fn granted(&self, key: &str, _now_ms: u64) -> Result<Option<String>, String> {
        self.0.kept(key).await.map_err(|e| e.to_string())
    }
}
