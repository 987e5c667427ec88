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
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(path).context("reading its metadata")?.permissions().mode();
        if mode & 0o077 != 0 {
            bail!("the file is open to group or others (mode {:o}): run `chmod 600 {}`", mode & 0o777, path.display());
        }
    }
    from_bytes(&std::fs::read(path).context("reading it")?)
}
