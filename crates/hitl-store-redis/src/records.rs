//! [`Records`] on Redis: the approvals listing is a hash of entries and a sorted set of
//! their times (`hitl:{approvals}:…`, one hash tag so a script sees both on a cluster);
//! the audit trail is a stream, `hitl:audit`, capped near [`AUDIT_KEPT`] entries (trimmed
//! every [`AUDIT_TRIM_EVERY`] entries a store appends).

use std::sync::atomic::Ordering;

use async_trait::async_trait;
use hitl_thread::{AUDIT_KEPT, AuditLine, Records, StoreError};
use serde_json::Value;

use crate::{RedisStore, now_ms, unavailable};

const ENTRIES: &str = "hitl:{approvals}:entries";
const TIMES: &str = "hitl:{approvals}:until";
/// Insertion order, so listings are oldest first whatever the expiry.
const ORDER: &str = "hitl:{approvals}:order";
const AUDIT: &str = "hitl:audit";
/// How far apart the clocks of Redis and the replicas may be, for `since` reads.
const SKEW_MS: u64 = 60_000;
/// Audit entries read per `XRANGE`.
const PAGE: usize = 1_000;
/// How many audit entries a store appends between trims of the trail to
/// [`AUDIT_KEPT`] (`XTRIM … MAXLEN ~`, sent with the entries), and at its first append:
/// the cap checked at every `XADD` cost Redis ~2,800 instructions an entry, a trim
/// ~5,800 (docs/performance.md, stop 52). The trail passes the cap by at most about this
/// many entries per replica between trims.
pub const AUDIT_TRIM_EVERY: usize = 256;

/// Drops entries past their time (KEYS: entries, until, order; ARGV: now).
const PRUNE: &str = r"
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
for _, id in ipairs(gone) do
  redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[3], id)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
return #gone
";

fn corrupt(e: serde_json::Error) -> StoreError {
    StoreError::Corrupt { id: "approvals".into(), reason: e.to_string() }
}

#[async_trait]
impl Records for RedisStore {
    async fn put_approval(&self, id: &str, entry: Value, until_ms: u64) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        let order = now_ms();
        let () = redis::pipe()
            .atomic()
            .hset(ENTRIES, id, entry.to_string())
            .ignore()
            .zadd(TIMES, id, until_ms)
            .ignore()
            .cmd("ZADD")
            .arg(ORDER)
            .arg("NX")
            .arg(order)
            .arg(id)
            .ignore()
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn approval(&self, id: &str) -> Result<Option<Value>, StoreError> {
        let mut connection = self.connection().await?;
        let (entry, until): (Option<String>, Option<u64>) = redis::pipe()
            .hget(ENTRIES, id)
            .zscore(TIMES, id)
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        match (entry, until) {
            (Some(entry), Some(until)) if until > now_ms() => serde_json::from_str(&entry).map(Some).map_err(corrupt),
            _ => Ok(None),
        }
    }

    async fn approvals(&self) -> Result<Vec<Value>, StoreError> {
        let _: i64 = self.invoke(&redis::Script::new(PRUNE), &[ENTRIES, TIMES, ORDER], |c| c.arg(now_ms())).await?;
        let ids: Vec<String> = self.query(redis::cmd("ZRANGE").arg(ORDER).arg(0).arg(-1)).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let entries: Vec<Option<String>> = self.query(redis::cmd("HMGET").arg(ENTRIES).arg(&ids)).await?;
        entries.into_iter().flatten().map(|e| serde_json::from_str(&e).map_err(corrupt)).collect()
    }

    async fn remove_approvals(&self, ids: &[String]) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut connection = self.connection().await?;
        let () = redis::pipe()
            .atomic()
            .hdel(ENTRIES, ids)
            .ignore()
            .zrem(TIMES, ids)
            .ignore()
            .zrem(ORDER, ids)
            .ignore()
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn append_audit(&self, entries: &[AuditLine]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut connection = self.connection().await?;
        let untrimmed = self.untrimmed.fetch_add(entries.len(), Ordering::Relaxed) + entries.len();
        let trim = untrimmed >= AUDIT_TRIM_EVERY;
        // Redis numbers the entries by its clock (ms), which `since` reads by. Each
        // command made with room for its five arguments, not grown one at a time.
        let mut pipe = redis::Pipeline::with_capacity(entries.len() + usize::from(trim));
        for entry in entries {
            let mut xadd = redis::Cmd::with_capacity(5, 32 + entry.json.len());
            xadd.arg("XADD").arg(AUDIT).arg("*").arg("e").arg(&*entry.json);
            pipe.add_command(xadd).ignore();
        }
        if trim {
            self.untrimmed.store(0, Ordering::Relaxed);
            pipe.cmd("XTRIM").arg(AUDIT).arg("MAXLEN").arg("~").arg(AUDIT_KEPT).ignore();
        }
        let sent: Result<(), _> = pipe.query_async(&mut connection).await;
        if sent.is_err() && trim {
            // Not trimmed: the next append trims.
            self.untrimmed.store(AUDIT_TRIM_EVERY, Ordering::Relaxed);
        }
        sent.map_err(unavailable)
    }

    async fn audit_since(&self, since_ms: u64, after: Option<&str>, limit: usize) -> Result<Vec<Value>, StoreError> {
        // A stream id, `<ms>-<n>`, or nothing this store gave.
        if after.is_some_and(|id| {
            id.split_once('-').is_none_or(|(ms, n)| ms.parse::<u64>().is_err() || n.parse::<u64>().is_err())
        }) {
            return Ok(Vec::new());
        }
        // Entries are numbered by Redis's clock and filtered by their own `at_ms`: read
        // from a minute before, for clocks that differ, a page at a time.
        let mut start = match after {
            Some(id) => format!("({id}"),
            None => since_ms.saturating_sub(SKEW_MS).to_string(),
        };
        let mut found = Vec::new();
        loop {
            let read: Vec<(String, Vec<(String, String)>)> =
                self.query(redis::cmd("XRANGE").arg(AUDIT).arg(&start).arg("+").arg("COUNT").arg(PAGE)).await?;
            let last = read.last().map(|(id, _)| id.clone());
            for (id, fields) in read {
                for (_, e) in fields {
                    let entry = AuditLine::read_back(&e, id.as_str())?;
                    if entry.get("at_ms").and_then(Value::as_u64).unwrap_or(0) >= since_ms {
                        found.push(entry);
                    }
                }
            }
            match last {
                Some(last) if found.len() < limit => start = format!("({last}"),
                _ => break,
            }
        }
        found.truncate(limit);
        Ok(found)
    }
}
