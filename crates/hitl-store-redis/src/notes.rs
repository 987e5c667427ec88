//! [`Notes`] on Redis: a note is a string key, `hitl:note:<key>`, and a single-use mark
//! `hitl:used:<key>`, each expiring at its time (`PXAT`), so Redis drops them itself.

use async_trait::async_trait;
use hitl_thread::{Notes, StoreError};

use crate::{RedisStore, now_ms};

/// The key of a note (one key: any Cluster slot).
fn note_key(key: &str) -> String {
    format!("hitl:note:{key}")
}

#[async_trait]
impl Notes for RedisStore {
    async fn put_note(&self, key: &str, value: &str, until_ms: u64) -> Result<(), StoreError> {
        if until_ms <= now_ms() {
            let _: i64 = self.query(redis::cmd("DEL").arg(note_key(key))).await?;
            return Ok(());
        }
        self.query(redis::cmd("SET").arg(note_key(key)).arg(value).arg("PXAT").arg(until_ms)).await
    }

    async fn take_note(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.query(redis::cmd("GETDEL").arg(note_key(key))).await
    }

    async fn use_once(&self, key: &str, until_ms: u64) -> Result<bool, StoreError> {
        if until_ms <= now_ms() {
            return Ok(true);
        }
        let set: Option<String> = self
            .query(redis::cmd("SET").arg(format!("hitl:used:{key}")).arg(1).arg("NX").arg("PXAT").arg(until_ms))
            .await?;
        Ok(set.is_some())
    }

    async fn used(&self, key: &str) -> Result<bool, StoreError> {
        // The key's own expiry (PXAT) drops a mark past its time.
        self.query(redis::cmd("EXISTS").arg(format!("hitl:used:{key}"))).await
    }
}
