//! Pub/sub on the store's Redis: messages between the replicas that share it (the
//! gateway forwards an answer to the replica holding the upstream call it answers).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use hitl_thread::StoreError;
use redis::aio::ConnectionManager;
use tokio::sync::OnceCell;

use crate::{COMMAND_TIMEOUT, redact_url, unavailable};

/// What receives the messages of a channel.
pub type Deliver = Arc<dyn Fn(Vec<u8>) + Send + Sync>;

/// Channels on one Redis node. On a cluster that is the first seed node: publishing
/// and subscribing on one node keeps `PUBLISH`'s count of receivers exact.
#[derive(Clone)]
pub struct Channels {
    client: redis::Client,
    publisher: Arc<OnceCell<ConnectionManager>>,
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channels").finish_non_exhaustive()
    }
}

impl Channels {
    /// Channels on the Redis of store URL `url` (nothing is connected yet), trusting
    /// `ca_pem` for `rediss://` as [`crate::RedisStore::with_tls_roots`] does.
    pub fn new(url: &str, ca_pem: Option<Vec<u8>>) -> Result<Self, StoreError> {
        let node = match url.strip_prefix("redis+cluster://") {
            Some(nodes) => format!("redis://{}", nodes.split(',').next().unwrap_or_default().trim_end_matches('/')),
            None => url.to_owned(),
        };
        let client = crate::single_client(&node, ca_pem)
            .map_err(|e| StoreError::Unavailable(format!("bad Redis URL {}: {e}", redact_url(url))))?;
        Ok(Self { client, publisher: Arc::default() })
    }

    /// Publishes `message` on `channel`: how many subscribers received it.
    pub async fn publish(&self, channel: &str, message: &[u8]) -> Result<u64, StoreError> {
        let publisher = self
            .publisher
            .get_or_try_init(|| async {
                self.client.get_connection_manager_with_config(crate::connection_config()).await.map_err(unavailable)
            })
            .await?;
        let mut connection = publisher.clone();
        redis::cmd("PUBLISH").arg(channel).arg(message).query_async(&mut connection).await.map_err(unavailable)
    }

    /// Hands every message on `channel` to `deliver`, for as long as the process runs:
    /// when the connection is lost it subscribes again (messages published meanwhile
    /// are lost, and their publishers were told no one received them). Returns the
    /// first attempt's error, if any; it keeps trying all the same.
    pub async fn subscribe(&self, channel: &str, deliver: Deliver) -> Result<(), StoreError> {
        let (first, error) = match self.subscribed(channel).await {
            Ok(stream) => (Some(stream), None),
            Err(e) => (None, Some(e)),
        };
        let (this, channel) = (self.clone(), channel.to_owned());
        tokio::spawn(async move {
            let mut current = first;
            loop {
                if let Some(mut stream) = current.take() {
                    while let Some(message) = stream.next().await {
                        deliver(message.get_payload_bytes().to_vec());
                    }
                    tracing::warn!(%channel, "lost the Redis subscription; subscribing again");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                current = this.subscribed(&channel).await.ok();
            }
        });
        error.map_or(Ok(()), Err)
    }

    async fn subscribed(&self, channel: &str) -> Result<redis::aio::PubSubStream, StoreError> {
        let connect = async {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(channel).await?;
            Ok::<_, redis::RedisError>(pubsub.into_on_message())
        };
        match tokio::time::timeout(COMMAND_TIMEOUT, connect).await {
            Ok(subscribed) => subscribed.map_err(unavailable),
            Err(_) => Err(unavailable("subscribing timed out")),
        }
    }
}
