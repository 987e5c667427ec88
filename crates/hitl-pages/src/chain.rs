//! The audit file as a hash chain (`[audit] chain = true`): each line names the
//! process that wrote it (`replica`), its place in that replica's chain (`seq`, from 1)
//! and the `hash` of the line before it (`prev`, empty for the first), and ends with
//! its own `hash`: hex HMAC-SHA256, under a key derived from the server secret, of the
//! line's bytes up to its `hash` field, closed with `}`. Changing, removing or inserting
//! a line breaks the chain where it happened, and mending it needs the secret.
//!
//! ```
//! use hitl_pages::chain::{Chain, verify};
//!
//! let key = [7u8; 32];
//! let mut chain = Chain::new(&key, "replica-a");
//! let one = chain.link(r#"{"event":"asked"}"#);
//! let two = chain.link(r#"{"event":"answered"}"#);
//! assert!(one.starts_with(r#"{"event":"asked","replica":"replica-a","seq":1,"prev":"","hash":""#));
//! let text = format!("{one}\n{two}\n");
//! assert_eq!(verify(text.lines(), &[key]).unwrap().last_seq("replica-a"), Some(2));
//! let edited = text.replace("answered", "approved");
//! assert_eq!(verify(edited.lines(), &[key]).unwrap_err().line, 2);
//! ```

use std::collections::BTreeMap;

use ring::hmac;
use serde_json::Value;

/// The label the chain's key is derived from the server secret under.
pub const KEY_LABEL: &str = "audit chain";

/// One replica's chain: where it stands, and the key it links with.
#[derive(Clone)]
pub struct Chain {
    key: hmac::Key,
    replica: String,
    seq: u64,
    prev: String,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain").field("replica", &self.replica).field("seq", &self.seq).finish_non_exhaustive()
    }
}

impl Chain {
    /// A chain of `replica`'s lines under `key` (32 bytes derived from the server
    /// secret), starting at `seq` 1.
    pub fn new(key: &[u8; 32], replica: &str) -> Self {
        Self { key: hmac::Key::new(hmac::HMAC_SHA256, key), replica: replica.to_owned(), seq: 0, prev: String::new() }
    }

    /// This chain continued after the last line this replica wrote in `lines` (its
    /// file, read at start, or the file it rotated to): a restart or a rotation goes on
    /// where the chain stood.
    pub fn resume<'a>(mut self, lines: impl Iterator<Item = &'a str>) -> Self {
        for line in lines {
            let Ok(value) = serde_json::from_str::<Value>(line) else { continue };
            if value["replica"].as_str() != Some(self.replica.as_str()) {
                continue;
            }
            if let (Some(seq), Some(hash)) = (value["seq"].as_u64(), value["hash"].as_str()) {
                (self.seq, self.prev) = (seq, hash.to_owned());
            }
        }
        self
    }

    /// The seq of the last line linked (0: none yet).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// `entry` with `"chain": {"replica", "seq", "hash"}` of the line just linked: the
    /// store's copy of it, which `hitl audit verify --store` compares the file with.
    pub fn place_in(&self, entry: &str) -> String {
        let body = entry.trim_end().strip_suffix('}').unwrap_or("{");
        let comma = if body.trim_end().ends_with('{') { "" } else { "," };
        let place = serde_json::json!({"replica": self.replica, "seq": self.seq, "hash": self.prev});
        format!("{body}{comma}\"chain\":{place}}}")
    }

    /// `entry` (one JSON object, compact) as the chain's next line: with `replica`,
    /// `seq` and `prev` added, then its `hash`.
    pub fn link(&mut self, entry: &str) -> String {
        self.seq += 1;
        let body = entry.trim_end().strip_suffix('}').unwrap_or("{");
        let comma = if body.trim_end().ends_with('{') { "" } else { "," };
        let mut line = format!(
            "{body}{comma}\"replica\":{},\"seq\":{},\"prev\":{}",
            Value::from(self.replica.as_str()),
            self.seq,
            Value::from(self.prev.as_str())
        );
        let hash = sign(&self.key, &line);
        line.push_str(",\"hash\":\"");
        line.push_str(&hash);
        line.push_str("\"}");
        self.prev = hash;
        line
    }
}

/// Hex HMAC-SHA256 of `unhashed` (a line up to its `hash` field) closed with `}`.
fn sign(key: &hmac::Key, unhashed: &str) -> String {
    let mut context = hmac::Context::with_key(key);
    context.update(unhashed.as_bytes());
    context.update(b"}");
    hitl_thread::hex(context.sign().as_ref())
}

/// An intact chain: how far each replica's chain reaches.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verified {
    /// By replica: the last `seq` and the count of lines read.
    pub chains: BTreeMap<String, (u64, usize)>,
}

impl Verified {
    /// The last `seq` of `replica`'s chain.
    pub fn last_seq(&self, replica: &str) -> Option<u64> {
        self.chains.get(replica).map(|(seq, _)| *seq)
    }
}

/// Where a chain breaks: the line (from 1, over every file read in order) and why.
#[derive(Debug, PartialEq, Eq)]
pub struct Broken {
    /// The first line that was changed, removed (the line after the gap) or inserted.
    pub line: usize,
    /// What is wrong there.
    pub why: String,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.why)
    }
}

/// Checks chained `lines` (one file, or a rotated file then the one after it) under
/// any of `keys` (the current secret's, then the previous one's): each line's hash,
/// and each replica's `seq` and `prev` following its line before. A replica's first
/// line here may continue a chain begun in an older file (any `seq` and `prev`).
pub fn verify<'a>(lines: impl Iterator<Item = &'a str>, keys: &[[u8; 32]]) -> Result<Verified, Broken> {
    let keys: Vec<hmac::Key> = keys.iter().map(|k| hmac::Key::new(hmac::HMAC_SHA256, k)).collect();
    let mut verified = Verified::default();
    let mut heads: BTreeMap<String, (u64, String)> = BTreeMap::new();
    for (n, line) in lines.enumerate().map(|(i, l)| (i + 1, l)) {
        if line.trim().is_empty() {
            continue;
        }
        let broken = |why: String| Broken { line: n, why };
        let value: Value = serde_json::from_str(line).map_err(|e| broken(format!("not JSON ({e}): changed")))?;
        let (Some(replica), Some(seq), Some(prev), Some(hash)) =
            (value["replica"].as_str(), value["seq"].as_u64(), value["prev"].as_str(), value["hash"].as_str())
        else {
            return Err(broken("no replica, seq, prev and hash: not a chained line (inserted, or changed)".into()));
        };
        let suffix = format!(",\"hash\":\"{hash}\"}}");
        let Some(unhashed) = line.trim_end().strip_suffix(&suffix) else {
            return Err(broken("its hash is not its last field: changed".into()));
        };
        if !keys.iter().any(|key| constant_eq(sign(key, unhashed).as_bytes(), hash.as_bytes())) {
            return Err(broken(format!(
                "its hash does not match its text (seq {seq} of {replica}): changed or inserted"
            )));
        }
        if let Some((last, last_hash)) = heads.get(replica) {
            if seq <= *last {
                return Err(broken(format!("seq {seq} of {replica} comes after seq {last}: inserted or moved")));
            }
            if seq > last + 1 {
                return Err(broken(format!(
                    "seq {seq} of {replica} follows seq {last}: {} line(s) before it were removed",
                    seq - last - 1
                )));
            }
            if prev != last_hash {
                return Err(broken(format!("its prev is not the hash of seq {last} of {replica}: inserted")));
            }
        }
        heads.insert(replica.to_owned(), (seq, hash.to_owned()));
        let entry = verified.chains.entry(replica.to_owned()).or_default();
        *entry = (seq, entry.1 + 1);
    }
    Ok(verified)
}

/// What the store's copy of the trail says that `verified` (the file) lacks: a
/// replica whose chain reaches a later `seq` in the store than at the file's end (its
/// last lines were removed). `stored` are the store's entries, as `GET /api/audit`
/// reads them.
pub fn missing_from(verified: &Verified, stored: &[Value]) -> Option<String> {
    let mut last: BTreeMap<&str, u64> = BTreeMap::new();
    for entry in stored {
        let place = &entry["chain"];
        let (Some(replica), Some(seq)) = (place["replica"].as_str(), place["seq"].as_u64()) else { continue };
        let kept = last.entry(replica).or_default();
        *kept = (*kept).max(seq);
    }
    last.into_iter().find_map(|(replica, seq)| {
        let in_file = verified.last_seq(replica).unwrap_or(0);
        (seq > in_file).then(|| {
            format!(
                "the store has seq {seq} of {replica}, the file ends at seq {in_file}: its last {} line(s) of {replica} were removed",
                seq - in_file
            )
        })
    })
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [9; 32];

    fn chained(entries: &[&str]) -> Vec<String> {
        let mut chain = Chain::new(&KEY, "a");
        entries.iter().map(|e| chain.link(e)).collect()
    }

    fn check(lines: &[String]) -> Result<Verified, Broken> {
        verify(lines.iter().map(String::as_str), &[KEY])
    }

    #[test]
    fn a_chain_verifies_and_names_the_first_line_changed_removed_or_inserted() {
        let lines =
            chained(&[r#"{"event":"asked","n":1}"#, r#"{"event":"answered"}"#, "{}", r#"{"event":"finished"}"#]);
        assert_eq!(check(&lines).unwrap().last_seq("a"), Some(4));
        assert!(lines[2].starts_with(r#"{"replica":"a","seq":3,"prev":""#), "an empty object: {}", lines[2]);

        let mut changed = lines.clone();
        changed[1] = changed[1].replace("answered", "approved");
        assert_eq!(check(&changed).unwrap_err().line, 2);
        assert!(check(&changed).unwrap_err().why.contains("changed"));

        let mut removed = lines.clone();
        removed.remove(1);
        let broken = check(&removed).unwrap_err();
        assert_eq!((broken.line, broken.why.contains("removed")), (2, true), "{broken}");

        // A line linked under the right key but out of place, and one made without it.
        let mut inserted = lines.clone();
        inserted.insert(2, lines[0].clone());
        assert_eq!(check(&inserted).unwrap_err().line, 3);
        let mut forged = lines.clone();
        forged.insert(1, Chain::new(&[1; 32], "a").resume(lines[..1].iter().map(String::as_str)).link("{}"));
        assert_eq!(check(&forged).unwrap_err().line, 2);
        let mut plain = lines.clone();
        plain.insert(3, r#"{"event":"asked"}"#.into());
        assert_eq!(check(&plain).unwrap_err().line, 4);
    }

    #[test]
    fn a_chain_continues_after_a_restart_and_replicas_keep_their_own() {
        let first = chained(&["{}", "{}"]);
        let mut again = Chain::new(&KEY, "a").resume(first.iter().map(String::as_str));
        let mut other = Chain::new(&KEY, "b");
        let all = [first.clone(), vec![other.link("{}"), again.link(r#"{"x":1}"#), other.link("{}")]].concat();
        let verified = check(&all).unwrap();
        assert_eq!((verified.last_seq("a"), verified.last_seq("b")), (Some(3), Some(2)));
        // A rotated file's lines alone: its first line continues a chain begun earlier.
        assert_eq!(check(&all[2..]).unwrap().last_seq("a"), Some(3));
        // Under another key nothing verifies; the previous secret's key still does.
        assert!(verify(all.iter().map(String::as_str), &[[1; 32]]).is_err());
        assert!(verify(all.iter().map(String::as_str), &[[1; 32], KEY]).is_ok());
    }
}
