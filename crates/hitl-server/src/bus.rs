//! The replicas' buses on the store's Redis: the gateway's [`Bus`] (each replica
//! listens on `hitl:replica:<id>`, so an answer to a call another replica holds
//! reaches it) and push elicitation's [`PushBus`] (`hitl:push:<id>`: a client's
//! response reaches the replica whose stream asked).

use std::sync::Arc;

use hitl_gateway::Bus;
use hitl_store_redis::Channels;
use hitl_tower::PushBus;

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

/// Pub/sub channels for pushed questions' responses, one per replica.
#[derive(Debug)]
pub(crate) struct RedisPushBus(pub(crate) Channels);

fn push_channel(replica: &str) -> String {
    format!("hitl:push:{replica}")
}

#[async_trait::async_trait]
impl PushBus for RedisPushBus {
    async fn send(&self, to: &str, message: Vec<u8>) -> Result<bool, String> {
        let received = self.0.publish(&push_channel(to), &message).await.map_err(|e| e.to_string())?;
        Ok(received > 0)
    }

    async fn listen(&self, me: &str, deliver: Arc<dyn Fn(Vec<u8>) + Send + Sync>) -> Result<(), String> {
        self.0.subscribe(&push_channel(me), deliver).await.map_err(|e| e.to_string())
    }
}
