//! `hitl audit verify`: checks a chained audit file (`[audit] chain = true`) with the
//! server secret, as `hitl serve` takes it.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};

use crate::secrets;

#[derive(Parser)]
pub(crate) struct AuditArgs {
    #[command(subcommand)]
    pub(crate) command: AuditCommand,
}

#[derive(Subcommand)]
pub(crate) enum AuditCommand {
    /// Check a chained audit file: exit status 0 on an intact chain (printing each
    /// replica's last seq), 1 naming the first line that was changed, removed or
    /// inserted. The secret is read as `hitl serve` reads it (`HITL_SECRET` or
    /// `--secret-file`, and the previous one during a rotation).
    Verify(VerifyArgs),
}

#[derive(Parser)]
pub(crate) struct VerifyArgs {
    /// The audit file; give a rotated `<file>.1` first, then `<file>`, to check them as
    /// one chain.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// A file holding the server secret (or `HITL_SECRET`).
    #[arg(long, env = "HITL_SECRET_FILE")]
    secret_file: Option<PathBuf>,
    /// A file holding the secret before it, during a rotation (or `HITL_PREVIOUS_SECRET`).
    #[arg(long, env = "HITL_PREVIOUS_SECRET_FILE")]
    previous_secret_file: Option<PathBuf>,
    /// The store that keeps the trail too (`redis://…`): a file whose last lines were
    /// removed ends before the store's copy.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// With `--store`: a file holding the CA certificates of a `rediss://` store.
    #[arg(long, value_name = "FILE")]
    redis_ca_file: Option<PathBuf>,
    /// The last seq an operator kept of a replica's chain (`replica=seq`, repeatable):
    /// a file that ends before it lost its last lines.
    #[arg(long, value_name = "REPLICA=SEQ")]
    last_seq: Vec<String>,
}

/// Who writes the audit chain: `HITL_REPLICA`, else the host's name (a pod's name), so a
/// process restarted in its place goes on with its chain.
pub(crate) fn replica() -> String {
    std::env::var("HITL_REPLICA")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "hitl".to_owned())
}

/// `hitl audit verify`: `Ok` with what to print on an intact chain; `Err` naming where
/// it breaks.
pub(crate) async fn verify(args: &VerifyArgs) -> anyhow::Result<String> {
    let (env, previous_env) = secrets::Sources::env_values();
    if env.is_none() && args.secret_file.is_none() {
        bail!("the chain is keyed by the server secret: set HITL_SECRET or --secret-file as for hitl serve");
    }
    let sources = secrets::Sources {
        env,
        file: args.secret_file.as_deref(),
        previous_env,
        previous_file: args.previous_secret_file.as_deref(),
    };
    let keys = secrets::load(&sources, None)?.derive_each(hitl_pages::chain::KEY_LABEL);
    let mut text = String::new();
    for file in &args.files {
        text.push_str(&std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?);
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
    }
    let verified = hitl_pages::chain::verify(text.lines(), &keys).map_err(|broken| anyhow::anyhow!("{broken}"))?;
    if verified.chains.is_empty() {
        bail!("no chained line: is [audit] chain = true set for this file?");
    }
    for kept in &args.last_seq {
        let Some((replica, seq)) = kept.split_once('=') else { bail!("--last-seq {kept:?}: give replica=seq") };
        let seq: u64 = seq.parse().with_context(|| format!("--last-seq {kept:?}: seq is not a number"))?;
        let in_file = verified.last_seq(replica).unwrap_or(0);
        if in_file < seq {
            bail!(
                "the file ends at seq {in_file} of {replica}, before the kept seq {seq}: its last lines were removed"
            );
        }
    }
    if let Some(url) = &args.store {
        let store = crate::store_from_url(url, args.redis_ca_file.as_deref())?;
        let stored = read_trail(store.as_ref()).await?;
        if let Some(missing) = hitl_pages::chain::missing_from(&verified, &stored) {
            bail!("{missing}");
        }
    }
    let mut out = String::from("intact:");
    for (replica, (seq, lines)) in &verified.chains {
        out.push_str(&format!(" {replica} seq {seq} ({lines} lines)"));
    }
    Ok(out)
}

/// The whole trail the store keeps, oldest first.
async fn read_trail(store: &dyn hitl_interrupt::Store) -> anyhow::Result<Vec<serde_json::Value>> {
    const PAGE: usize = 1_000;
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.audit_since(0, after.as_deref(), PAGE).await.context("reading the store's audit trail")?;
        let done = page.len() < PAGE;
        after = page.last().and_then(|e| e["seq"].as_str().map(str::to_owned).or_else(|| Some(e["seq"].to_string())));
        all.extend(page);
        if done || after.is_none() {
            return Ok(all);
        }
    }
}
