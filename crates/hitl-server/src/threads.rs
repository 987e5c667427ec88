//! `hitl threads list|show|cancel --store URL`: the paused calls of a shared store, for
//! operators (the same as `GET`/`DELETE /api/threads`, without a running server).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use clap::{Parser, Subcommand};
use hitl_interrupt::{Engine, Lifetimes, PausedCall, Secret, SystemClock};

#[derive(Parser)]
pub(crate) struct ThreadsArgs {
    /// The shared store (`redis://…`, `rediss://…`, `redis+cluster://…`); before or
    /// after the action.
    #[arg(long, env = "HITL_STORE", value_name = "URL", global = true)]
    store: Option<String>,
    /// CA certificates for `rediss://` (default: the system's).
    #[arg(long, env = "HITL_REDIS_CA_FILE", value_name = "FILE", global = true)]
    redis_ca_file: Option<PathBuf>,
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// The paused calls, soonest to expire first.
    List {
        /// Skip this many.
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// Show at most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One paused call, as JSON.
    Show {
        /// The thread id.
        id: String,
    },
    /// Cancels a paused call: its next resend gets `Invalid or expired requestState`.
    Cancel {
        /// The thread id.
        id: String,
    },
}

/// Runs `hitl threads …`, writing to `out`.
pub(crate) async fn run(args: ThreadsArgs, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let Some(url) = args.store.as_deref() else {
        bail!("hitl threads needs the store: --store URL (or HITL_STORE)");
    };
    if url == "memory" {
        bail!(
            "the memory store lives in the server's process: use GET /api/threads on the server, or a shared store (redis://…)"
        );
    }
    let store = crate::store_from_url(url, args.redis_ca_file.as_deref())?;
    // Administration verifies no requestState: a secret of its own does.
    let engine = Engine::new(store, Arc::new(SystemClock), Secret::generate(), Lifetimes::default());
    match args.action {
        Action::List { offset, limit, json } => {
            let page = engine.admin().paused_calls(offset, limit).await?;
            let (calls, total) = (&page.calls, page.total);
            if !page.unreadable.is_empty() {
                eprintln!(
                    "{} paused calls this build cannot read (a newer build's, or corrupt): {}",
                    page.unreadable.len(),
                    page.unreadable.join(", ")
                );
            }
            if json {
                for call in calls {
                    writeln!(out, "{}", serde_json::to_string(call)?)?;
                }
                return Ok(());
            }
            writeln!(
                out,
                "{:<36}  {:<24}  {:<20}  {:>8}  {:>5}  {:<8}  PENDING",
                "ID", "TOOL", "PRINCIPAL", "AGE", "ROUND", "STATE"
            )?;
            let now = engine.now_ms();
            for call in calls {
                writeln!(out, "{}", row(call, now))?;
            }
            writeln!(out, "{} shown of {total} paused", calls.len())?;
        }
        Action::Show { id } => match engine.admin().paused_call(&id).await? {
            Some(call) => writeln!(out, "{}", serde_json::to_string_pretty(&call)?)?,
            None => bail!("no paused call has id {id}"),
        },
        Action::Cancel { id } => {
            if !engine.admin().cancel(&id).await? {
                bail!("no paused call has id {id}");
            }
            writeln!(out, "cancelled {id}")?;
        }
    }
    Ok(())
}

fn row(call: &PausedCall, now_ms: u64) -> String {
    let age = Duration::from_millis(now_ms.saturating_sub(call.created_at_ms));
    let round = call.round.map_or_else(|| "-".to_owned(), |n| n.to_string());
    format!(
        "{:<36}  {:<24}  {:<20}  {:>8}  {:>5}  {:<8}  {}",
        call.id,
        call.tool,
        call.principal.as_deref().unwrap_or("-"),
        short(age),
        round,
        call.state,
        call.pending.join(",")
    )
}

/// `age` as `42s`, `17m`, `5h`, `3d`.
fn short(age: Duration) -> String {
    let secs = age.as_secs();
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86400),
    }
}
