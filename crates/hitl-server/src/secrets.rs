//! The secret that signs `requestState`, and the one before it during a rotation.

use std::path::Path;

use anyhow::{Context as _, bail};
use hitl_interrupt::Secret;

/// Where the secrets come from: the environment's values and the command line's files.
pub(crate) struct Sources<'a> {
    pub(crate) env: Option<String>,
    pub(crate) file: Option<&'a Path>,
    pub(crate) previous_env: Option<String>,
    pub(crate) previous_file: Option<&'a Path>,
}

impl Sources<'_> {
    /// Reads `HITL_SECRET`, `HITL_PREVIOUS_SECRET` and the matching variables of this
    /// process.
    pub(crate) fn env_values() -> (Option<String>, Option<String>) {
        (std::env::var("HITL_SECRET").ok(), std::env::var("HITL_PREVIOUS_SECRET").ok())
    }
}

/// The server secret: from `HITL_SECRET` or `--secret-file` (never both), else (when
/// the store is this process's own) a random one. `shared` names a shared store, which
/// needs a secret every replica has.
pub(crate) fn load(sources: &Sources<'_>, shared: Option<&str>) -> anyhow::Result<Secret> {
    let current = one("HITL_SECRET", sources.env.as_deref(), "--secret-file", sources.file)?;
    let previous =
        one("HITL_PREVIOUS_SECRET", sources.previous_env.as_deref(), "--previous-secret-file", sources.previous_file)?;
    let secret = match (current, shared) {
        (Some(secret), _) => secret,
        (None, Some(store)) => bail!(
            "--store {store} is shared by every replica, so they must share the secret that signs requestState: \
             set HITL_SECRET or --secret-file (at least {} bytes)",
            Secret::MIN_LEN
        ),
        (None, None) if previous.is_some() => {
            bail!("a previous secret is set but no current one: set HITL_SECRET or --secret-file too")
        }
        (None, None) => Secret::generate(),
    };
    Ok(match previous {
        Some(previous) => secret.with_previous(previous),
        None => secret,
    })
}

/// A secret from an environment variable or a file, refusing both at once.
fn one(env_name: &str, env: Option<&str>, flag: &str, file: Option<&Path>) -> anyhow::Result<Option<Secret>> {
    match (env, file) {
        (Some(_), Some(path)) => {
            bail!("both {env_name} and {flag} {} are set: give the secret one way only", path.display())
        }
        (Some(value), None) => from_bytes(value.as_bytes()).with_context(|| env_name.to_owned()).map(Some),
        (None, Some(path)) => read_file(path).with_context(|| format!("{flag} {}", path.display())).map(Some),
        (None, None) => Ok(None),
    }
}

/// Surrounding whitespace (a trailing newline) is not part of a secret, wherever it
/// comes from: replicas given the same secret two ways must agree.
fn from_bytes(bytes: &[u8]) -> anyhow::Result<Secret> {
    Ok(Secret::new(bytes.trim_ascii())?)
}

fn read_file(path: &Path) -> anyhow::Result<Secret> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        let metadata = std::fs::metadata(path).context("reading its metadata")?;
        if !private_enough(metadata.mode(), metadata.uid()) {
            bail!(
                "the file is open to group or others (mode {:o}): run `chmod 600 {}`",
                metadata.mode() & 0o777,
                path.display()
            );
        }
    }
    from_bytes(&std::fs::read(path).context("reading it")?)
}

/// A secret file is private to its owner (mode 600 or tighter), or it is root's and
/// its group may only read it (640 or tighter). The second is how an administrator
/// grants one service's group a key (PostgreSQL accepts the same for its key files),
/// and what Kubernetes makes of a Secret mounted for a non-root pod: with `fsGroup`
/// the kubelet adds group read to the volume's `defaultMode` and root owns the file.
#[cfg(unix)]
fn private_enough(mode: u32, owner: u32) -> bool {
    const ROOT: u32 = 0;
    mode & 0o077 == 0 || (owner == ROOT && mode & 0o037 == 0)
}

#[cfg(all(test, unix))]
mod tests {
    use super::private_enough;

    #[test]
    fn only_the_owner_or_root_and_its_group_may_read_a_secret() {
        let cases = [
            (0o600, 1000, true),
            (0o400, 1000, true),
            (0o640, 1000, false),
            (0o440, 1000, false),
            (0o644, 1000, false),
            (0o604, 1000, false),
            // Root's file that its group may read: a Kubernetes Secret with `fsGroup`.
            (0o440, 0, true),
            (0o640, 0, true),
            (0o600, 0, true),
            (0o660, 0, false),
            (0o650, 0, false),
            (0o644, 0, false),
            (0o444, 0, false),
        ];
        for (mode, owner, private) in cases {
            // The file-type bits `metadata().mode()` carries do not matter.
            let regular = 0o100_000 | mode;
            assert_eq!(private_enough(regular, owner), private, "mode {mode:o} owned by uid {owner}");
        }
    }
}
