//! Bearer tokens from a file: one `user-id token` or `user-id sha256:<hex>` per line,
//! `#` comments. Tokens are kept as SHA-256 digests and compared in constant time
//! against every line; the file is read again on SIGHUP or when it changes (a file
//! that no longer parses keeps the tokens read before, with an error in the log).

use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::watched::{self, Watched};
use crate::{Credential, Identity, Verify};

/// The tokens of one file.
#[derive(Debug)]
pub struct TokenFile {
    file: Watched,
    entries: RwLock<Arc<Vec<Entry>>>,
}

#[derive(Debug)]
struct Entry {
    user: String,
    digest: [u8; 32],
}

impl TokenFile {
    /// Reads `path`. Errors name the file and line.
    pub fn load(path: &Path) -> Result<Arc<Self>, String> {
        let file = Self { file: Watched::new(path), entries: RwLock::default() };
        file.reload()?;
        Ok(Arc::new(file))
    }

    /// Reads the file again: how many tokens it holds now. On an error the tokens read
    /// before stay.
    pub fn reload(&self) -> Result<usize, String> {
        let shown = self.file.path().display();
        let entries = self.file.read(|text| parse(text).map_err(|e| format!("{shown}:{e}")))?;
        let count = entries.len();
        *self.entries.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(entries);
        Ok(count)
    }

    /// Reads the file again on SIGHUP and whenever its modification time changes, for
    /// as long as the returned task runs.
    pub fn watch(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        watched::watch(
            self,
            |tokens| Some(&tokens.file),
            |tokens| match tokens.reload() {
                Ok(count) => tracing::info!(file = %tokens.file.path().display(), count, "tokens read again"),
                Err(error) => tracing::error!(%error, "the tokens file is not read again; the tokens before stay"),
            },
        )
    }
}

impl Verify for TokenFile {
    fn verify(&self, token: &str) -> Result<Identity, String> {
        let digest = sha256(token.as_bytes());
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner()).clone();
        // Every line is compared, so the time taken says nothing of which one matched.
        let mut found: Option<&str> = None;
        for entry in entries.iter() {
            if same(&entry.digest, &digest) {
                found = Some(&entry.user);
            }
        }
        match found {
            Some(user) => Ok(Identity {
                principal: format!("user:{user}"),
                groups: Vec::new(),
                credential: Credential::Listed(digest),
            }),
            None => Err("the token is not known".into()),
        }
    }

    fn lists(&self, principal: &str, matches: &dyn Fn(&[u8; 32]) -> bool) -> bool {
        let Some(user) = principal.strip_prefix("user:") else { return false };
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner()).clone();
        // Every line is asked, so the time taken says nothing of which one matched.
        entries.iter().fold(false, |found, entry| (entry.user == user && matches(&entry.digest)) | found)
    }
}

/// The entries of a tokens file; errors read `line: message`.
fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let at = index + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [user, secret] = fields[..] else {
            return Err(format!("{at}: write `user-id token` or `user-id sha256:<hex>`"));
        };
        let digest = match secret.strip_prefix("sha256:") {
            Some(hex) => from_hex(hex).ok_or_else(|| format!("{at}: sha256: takes 64 hexadecimal digits"))?,
            None => sha256(secret.as_bytes()),
        };
        entries.push(Entry { user: user.to_owned(), digest });
    }
    Ok(entries)
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

fn from_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Equal digests, compared without stopping at the first difference.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_hashed_tokens_name_their_user() {
        let hashed = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"; // sha256("secret")
        let text = format!("# ops\nalice s3cr3t-alice\n\nbob sha256:{hashed}\n");
        let file = TokenFile {
            file: Watched::new(Path::new("tokens.txt")),
            entries: RwLock::new(Arc::new(parse(&text).unwrap())),
        };
        assert_eq!(file.verify("s3cr3t-alice").unwrap().principal, "user:alice");
        assert_eq!(file.verify("secret").unwrap().principal, "user:bob");
        assert!(file.verify("sha256:2bb8").is_err());
        assert!(file.verify("").is_err());
    }

    #[test]
    fn a_listed_token_is_held_while_its_line_names_its_user() {
        let file = TokenFile {
            file: Watched::new(Path::new("tokens.txt")),
            entries: RwLock::new(Arc::new(
                parse(
                    "alice tok-a
",
                )
                .unwrap(),
            )),
        };
        let Credential::Listed(digest) = file.verify("tok-a").unwrap().credential else { panic!("a listed token") };
        let held = |d: &[u8; 32]| *d == digest;
        assert!(file.lists("user:alice", &held));
        assert!(!file.lists("user:bob", &held), "another user's line");
        *file.entries.write().unwrap() = Arc::new(
            parse(
                "bob tok-a
alice tok-b
",
            )
            .unwrap(),
        );
        assert!(!file.lists("user:alice", &held), "the line is gone");
    }

    #[test]
    fn bad_lines_are_named() {
        assert_eq!(parse("alice\n").err().unwrap(), "1: write `user-id token` or `user-id sha256:<hex>`");
        assert_eq!(parse("# x\nbob sha256:abc\n").err().unwrap(), "2: sha256: takes 64 hexadecimal digits");
        assert!(parse("a b c\n").is_err());
    }
}
