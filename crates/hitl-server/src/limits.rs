//! Rate limits counted in the Redis store the replicas share.

use async_trait::async_trait;
use hitl_gateway::limit::{Limiter, RateLimit};

/// Counts each window in Redis with one script, so every replica sees one count.
pub(crate) struct RedisLimiter(pub(crate) hitl_store_redis::RedisStore);

#[async_trait]
impl Limiter for RedisLimiter {
    async fn admit(&self, key: &str, limit: RateLimit, now_ms: u64) -> Result<Option<u64>, String> {
        self.0.count_in_window(key, limit.count, limit.window_ms(), now_ms).await.map_err(|e| e.to_string())
    }
}
