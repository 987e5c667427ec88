//! The replicas' buses on the store's Redis: the gateway's [`Bus`] (each replica
//! listens on `hitl:replica:<id>`, so an answer to a call another replica holds
//! reaches it) and push elicitation's [`PushBus`] (`hitl:push:<id>`: a client's
//! response reaches the replica whose stream asked), and `hitl:decided`, on which a
//! replica that stores an approver's decision names its thread, so every replica
//! wakes the retries it holds for it.

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

/// The channel decisions are announced on.
const DECIDED: &str = "hitl:decided";

/// Announces the decisions `engine` stores on `channels`, and wakes its held retries
/// when another replica announces one (listening again after a lost connection).
pub(crate) async fn share_decisions(engine: &hitl_interrupt::Engine, channels: Channels) -> Result<(), String> {
    let publisher = channels.clone();
    engine.relay_decisions(Arc::new(move |thread_id: &str| {
        let (channels, thread_id) = (publisher.clone(), thread_id.to_owned());
        tokio::spawn(async move {
            if let Err(error) = channels.publish(DECIDED, thread_id.as_bytes()).await {
                // The others still look again at each progress tick.
                tracing::debug!(%error, "cannot announce a decision to the other replicas");
            }
        });
    }));
    let waker = engine.clone();
    let deliver = Arc::new(move |message: Vec<u8>| {
        if let Ok(thread_id) = std::str::from_utf8(&message) {
            waker.wake(thread_id);
        }
    });
    channels.subscribe(DECIDED, deliver).await.map_err(|e| e.to_string())
}
