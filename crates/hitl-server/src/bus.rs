//! The gateway's [`Bus`] on the store's Redis: each replica listens on
//! `hitl:replica:<id>`, so an answer to a call another replica holds reaches it.

use std::sync::Arc;

use hitl_gateway::Bus;
use hitl_store_redis::Channels;

/// Pub/sub channels, one per replica.
#[derive(Debug)]
pub(crate) struct RedisBus(pub(crate) Channels);

fn channel(replica: &str) -> String {
    format!("hitl:replica:{replica}")
}

#[async_trait::async_trait]
impl Bus for RedisBus {
    async fn send(&self, to: &str, message: Vec<u8>) -> Result<bool, String> {
        let received = self.0.publish(&channel(to), &message).await.map_err(|e| e.to_string())?;
        Ok(received > 0)
    }

    async fn listen(&self, me: &str, deliver: Arc<dyn Fn(Vec<u8>) + Send + Sync>) -> Result<(), String> {
        self.0.subscribe(&channel(me), deliver).await.map_err(|e| e.to_string())
    }
}
