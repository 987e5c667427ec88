//! [`Records`] on Redis: the approvals listing is a hash of entries and a sorted set of
//! their times (`hitl:{approvals}:…`, one hash tag so a script sees both on a cluster);
//! the audit trail is a stream, `hitl:audit`, a batch of up to [`AUDIT_LINES_PER_ENTRY`]
//! lines an entry, capped near [`AUDIT_KEPT`] entries (trimmed every [`AUDIT_TRIM_EVERY`]
//! entries a store appends).

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
/// Stream entries read per `XRANGE`.
const PAGE: usize = 1_000;
/// How many stream entries a store appends between trims of the trail to
/// [`AUDIT_KEPT`] entries (`XTRIM … MAXLEN ~`, sent with the entries), and at its first
/// append: the cap checked at every `XADD` cost Redis ~2,800 instructions an entry, a
/// trim ~5,800 (docs/performance.md, stop 52). The trail passes the cap by at most about
/// this many entries per replica between trims.
pub const AUDIT_TRIM_EVERY: usize = 256;

/// Most audit lines one stream entry holds. A batch the ledger hands over is written
/// as entries of this many lines (the last of them fewer), not one `XADD` a line: an
/// `XADD` of one line cost Redis about as much as six more lines in one
/// (docs/performance.md, stop 56). The trail keeps [`AUDIT_KEPT`] entries, so at least
/// that many lines, and at most this many times as many.
pub const AUDIT_LINES_PER_ENTRY: usize = 4;

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
        let stream_entries = entries.len().div_ceil(AUDIT_LINES_PER_ENTRY);
        let untrimmed = self.untrimmed.fetch_add(stream_entries, Ordering::Relaxed) + stream_entries;
        let trim = untrimmed >= AUDIT_TRIM_EVERY;
        // Redis numbers the entries by its clock (ms), which `since` reads by. Each
        // command made with room for its arguments, not grown one at a time.
        let mut pipe = redis::Pipeline::with_capacity(stream_entries + usize::from(trim));
        for lines in entries.chunks(AUDIT_LINES_PER_ENTRY) {
            let bytes: usize = lines.iter().map(|line| line.json.len() + 8).sum();
            let mut xadd = redis::Cmd::with_capacity(3 + 2 * lines.len(), 32 + bytes);
            xadd.arg("XADD").arg(AUDIT).arg("*");
            for line in lines {
                xadd.arg("e").arg(&*line.json);
            }
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
        let after = match after.map(Seq::parse) {
            Some(None) => return Ok(Vec::new()), // nothing this store gave
            Some(Some(seq)) => Some(seq),
            None => None,
        };
        // Entries are numbered by Redis's clock and filtered by their own `at_ms`: read
        // from a minute before, for clocks that differ, a page at a time. After a seq,
        // from its entry on, whose lines up to the seq's are skipped.
        let mut start = match after {
            Some(seq) => seq.entry.to_owned(),
            None => since_ms.saturating_sub(SKEW_MS).to_string(),
        };
        let mut found = Vec::new();
        // An entry holds a line at least: the first read asks for no more entries than
        // lines wanted, and the cursor's own entry besides; any after it (the first was
        // older than `since`, or its lines fewer) a whole page.
        let mut count = limit.saturating_add(1).min(PAGE);
        'pages: while found.len() < limit {
            let read: Vec<(String, Vec<(String, String)>)> =
                self.query(redis::cmd("XRANGE").arg(AUDIT).arg(&start).arg("+").arg("COUNT").arg(count)).await?;
            let Some(last) = read.last().map(|(id, _)| format!("({id}")) else { break };
            for (id, fields) in read {
                let seen = after.filter(|seq| seq.entry == id).map_or(0, |seq| seq.line + 1);
                for (line, (_, e)) in fields.iter().enumerate().skip(seen) {
                    let entry = AuditLine::read_back(e, Seq::of(&id, line))?;
                    if entry.get("at_ms").and_then(Value::as_u64).unwrap_or(0) >= since_ms {
                        found.push(entry);
                        if found.len() == limit {
                            break 'pages;
                        }
                    }
                }
            }
            start = last;
            count = PAGE;
        }
        Ok(found)
    }
}

/// Where a line is in the trail: its stream entry's id, `<ms>-<n>`, and its place among
/// the entry's lines. A seq names the first line by the id alone (as every line was
/// named before entries held more than one, so a cursor kept from then reads on), any
/// other as `<ms>-<n>-<line>`.
#[derive(Clone, Copy)]
struct Seq<'a> {
    entry: &'a str,
    line: usize,
}

impl<'a> Seq<'a> {
    /// `seq` read back, or `None` when this store never gave it: numbers as Redis
    /// writes them (no sign, no leading zero), a line within an entry's.
    fn parse(seq: &'a str) -> Option<Self> {
        let number = |part: &str| {
            let digits = !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
            (digits && (part == "0" || !part.starts_with('0'))).then(|| part.parse::<u64>().ok()).flatten()
        };
        let mut parts = seq.splitn(3, '-');
        let (ms, n) = (parts.next()?, parts.next()?);
        number(ms)?;
        number(n)?;
        let line = match parts.next() {
            None => 0,
            Some(line) => usize::try_from(number(line)?).ok().filter(|&l| (1..AUDIT_LINES_PER_ENTRY).contains(&l))?,
        };
        Some(Self { entry: &seq[..ms.len() + 1 + n.len()], line })
    }

    /// The seq of line `line` of entry `id`.
    fn of(id: &str, line: usize) -> String {
        if line == 0 { id.to_owned() } else { format!("{id}-{line}") }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seq_names_an_entry_and_a_line_in_it() {
        let read = |seq| Seq::parse(seq).map(|s| (s.entry.to_owned(), s.line));
        assert_eq!(read("1796543987708-18"), Some(("1796543987708-18".into(), 0)));
        assert_eq!(read("1796543987708-18-3"), Some(("1796543987708-18".into(), 3)));
        for never in [
            "",
            "-",
            "1-",
            "-1",
            "1-2-",
            "1-2-0",
            "1-2-03",
            "1-2-x",
            "1-2-3-4",
            "+1-2",
            "1- 2",
            "x-1",
            "18446744073709551616-0",
            "01-2",
            "1-02",
            "1-2-4",
            "1-2-18446744073709551615",
            "1-2-99999999999999999999",
        ] {
            assert!(Seq::parse(never).is_none(), "{never:?}");
        }
        assert_eq!(read("0-0"), Some(("0-0".into(), 0)), "the lowest id Redis gives");
        assert_eq!(Seq::of("5-1", 0), "5-1");
        assert_eq!(Seq::of("5-1", 2), "5-1-2");
    }
}
