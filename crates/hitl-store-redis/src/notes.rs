//! [`Notes`] on Redis: a note is a string key, `hitl:note:<key>`, and a single-use mark
//! `hitl:used:<key>`, each expiring at its time (`PXAT`), so Redis drops them itself.

use async_trait::async_trait;
use hitl_thread::{Notes, StoreError};

use crate::{RedisStore, now_ms, unavailable};

/// The key of a note (one key: any Cluster slot).
fn note_key(key: &str) -> String {
    format!("hitl:note:{key}")
}

#[async_trait]
impl Notes for RedisStore {
    async fn put_note(&self, key: &str, value: &str, until_ms: u64) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        if until_ms <= now_ms() {
            let _: i64 =
                redis::cmd("DEL").arg(note_key(key)).query_async(&mut connection).await.map_err(unavailable)?;
            return Ok(());
        }
        let _: () = redis::cmd("SET")
            .arg(note_key(key))
            .arg(value)
            .arg("PXAT")
            .arg(until_ms)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn take_note(&self, key: &str) -> Result<Option<String>, StoreError> {
        let mut connection = self.connection().await?;
        redis::cmd("GETDEL").arg(note_key(key)).query_async(&mut connection).await.map_err(unavailable)
    }

    async fn use_once(&self, key: &str, until_ms: u64) -> Result<bool, StoreError> {
        if until_ms <= now_ms() {
            return Ok(true);
        }
        let mut connection = self.connection().await?;
        let set: Option<String> = redis::cmd("SET")
            .arg(format!("hitl:used:{key}"))
            .arg(1)
            .arg("NX")
            .arg("PXAT")
            .arg(until_ms)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok(set.is_some())
    }

    async fn used(&self, key: &str) -> Result<bool, StoreError> {
        let mut connection = self.connection().await?;
        // The key's own expiry (PXAT) drops a mark past its time.
        let found: bool = redis::cmd("EXISTS")
            .arg(format!("hitl:used:{key}"))
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok(found)
    }
}
