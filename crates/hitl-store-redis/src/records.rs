//! [`Records`] on Redis: the approvals listing is a hash of entries and a sorted set of
//! their times (`hitl:{approvals}:…`, one hash tag so a script sees both on a cluster);
//! the audit trail is a stream, `hitl:audit`, a batch of lines an entry, capped near
//! [`AUDIT_KEPT`] lines (trimmed every [`AUDIT_TRIM_EVERY`] lines a store appends).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

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
/// How many audit lines a store appends between trims of the trail to about
/// [`AUDIT_KEPT`] lines (`XTRIM … MAXLEN ~`, sent with the lines), and at its first
/// append: the cap checked at every `XADD` cost Redis ~2,800 instructions an entry, a
/// trim ~5,800 (docs/performance.md, stop 52). The trail passes the cap by at most about
/// this many lines per replica between trims.
pub const AUDIT_TRIM_EVERY: usize = 256;

/// Most audit lines one stream entry holds. A batch the ledger hands over is written
/// as one entry (several past this many), not one `XADD` a line: an `XADD` of one line
/// cost Redis about as much as six more lines in one (docs/performance.md, stop 56).
/// The trail is trimmed by entries, as many as hold about [`AUDIT_KEPT`] lines at the
/// rate this store fills them, so at most this many times the cap even where another
/// replica filled its entries fuller.
pub const AUDIT_LINES_PER_ENTRY: usize = 16;

/// What a store has appended to the trail, for its trims.
#[derive(Default)]
pub(crate) struct AuditCounts {
    /// Lines appended since the last trim ([`AUDIT_TRIM_EVERY`]).
    untrimmed: AtomicUsize,
    /// Lines, and the stream entries that hold them, appended since the store began.
    lines: AtomicU64,
    entries: AtomicU64,
}

impl AuditCounts {
    /// Counts for a store that trims at its first append.
    pub(crate) fn new() -> Self {
        Self { untrimmed: AtomicUsize::new(AUDIT_TRIM_EVERY), ..Self::default() }
    }
}

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
        let counts = &self.audit_counts;
        let lines = counts.lines.fetch_add(entries.len() as u64, Ordering::Relaxed) + entries.len() as u64;
        let written = counts.entries.fetch_add(stream_entries as u64, Ordering::Relaxed) + stream_entries as u64;
        let untrimmed = counts.untrimmed.fetch_add(entries.len(), Ordering::Relaxed) + entries.len();
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
            counts.untrimmed.store(0, Ordering::Relaxed);
            pipe.cmd("XTRIM").arg(AUDIT).arg("MAXLEN").arg("~").arg(kept_entries(lines, written)).ignore();
        }
        let sent: Result<(), _> = pipe.query_async(&mut connection).await;
        if sent.is_err() && trim {
            // Not trimmed: the next append trims.
            counts.untrimmed.store(AUDIT_TRIM_EVERY, Ordering::Relaxed);
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
        loop {
            let read: Vec<(String, Vec<(String, String)>)> =
                self.query(redis::cmd("XRANGE").arg(AUDIT).arg(&start).arg("+").arg("COUNT").arg(PAGE)).await?;
            let last = read.last().map(|(id, _)| id.clone());
            for (id, fields) in read {
                let seen = after.filter(|seq| seq.entry == id).map_or(0, |seq| seq.line + 1);
                for (line, (_, e)) in fields.iter().enumerate().skip(seen) {
                    let entry = AuditLine::read_back(e, Seq::of(&id, line))?;
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
    /// `seq` read back, or `None` when this store never gave it.
    fn parse(seq: &'a str) -> Option<Self> {
        let number = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        let mut parts = seq.splitn(3, '-');
        let (ms, n) = (parts.next()?, parts.next()?);
        if !number(ms) || !number(n) || ms.parse::<u64>().is_err() || n.parse::<u64>().is_err() {
            return None;
        }
        let line = match parts.next() {
            None => 0,
            Some(line) if number(line) && !line.starts_with('0') => line.parse().ok()?,
            Some(_) => return None,
        };
        Some(Self { entry: &seq[..ms.len() + 1 + n.len()], line })
    }

    /// The seq of line `line` of entry `id`.
    fn of(id: &str, line: usize) -> String {
        if line == 0 { id.to_owned() } else { format!("{id}-{line}") }
    }
}

/// The stream entries to keep, so that they hold about [`AUDIT_KEPT`] lines, as this
/// store has written them (`lines` in `entries`); never fewer than [`AUDIT_KEPT`] entries
/// of the fullest kind hold.
fn kept_entries(lines: u64, entries: u64) -> u64 {
    let kept = AUDIT_KEPT as u64;
    let per_entry = AUDIT_LINES_PER_ENTRY as u64;
    kept.saturating_mul(entries).div_ceil(lines.max(1)).clamp(kept.div_ceil(per_entry), kept)
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
        ] {
            assert!(Seq::parse(never).is_none(), "{never:?}");
        }
        assert_eq!(Seq::of("5-1", 0), "5-1");
        assert_eq!(Seq::of("5-1", 2), "5-1-2");
    }

    #[test]
    fn the_trail_keeps_as_many_entries_as_hold_its_lines() {
        let kept = AUDIT_KEPT as u64;
        assert_eq!(kept_entries(10, 10), kept, "a line an entry");
        assert_eq!(kept_entries(30, 10), kept.div_ceil(3), "three lines an entry");
        assert_eq!(kept_entries(0, 0), kept.div_ceil(AUDIT_LINES_PER_ENTRY as u64), "none yet");
        assert_eq!(
            kept_entries(u64::MAX / kept, 1),
            kept.div_ceil(AUDIT_LINES_PER_ENTRY as u64),
            "never below full entries"
        );
    }
}
