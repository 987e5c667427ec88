//! What operators see of paused calls, and the one thing they may do to them: cancel.
//! A paused call is shown by its tool, caller, age, round and the keys of its open
//! questions; never its `requestState`, a secret, or what a question asks (a review's
//! arguments may be sensitive).

use std::sync::Arc;

use serde::Serialize;

use crate::round;
use crate::shared::Core;
use crate::update::{Step, update};
use crate::{EngineError, StoreError, Thread};

/// A paused call as operators see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PausedCall {
    /// The thread id.
    pub id: String,
    /// The tool (`prompt:<name>` for a prompt).
    pub tool: String,
    /// Who made the call, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// When the call was made (ms since the epoch, from the thread's UUIDv7).
    pub created_at_ms: u64,
    /// When it expires unless answered.
    pub expires_at_ms: u64,
    /// The open round's number (none while a task's first run goes on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    /// The keys of the open round's questions not answered yet.
    pub pending: Vec<String>,
    /// `waiting` (for answers), `running` (a request or a task's run holds it).
    pub state: &'static str,
    /// Followed as a task (the Tasks extension).
    pub task: bool,
}

impl PausedCall {
    /// `thread` as shown at `now_ms`, when it is paused (or a task that runs on).
    fn of(thread: &Thread, now_ms: u64) -> Option<Self> {
        let task = thread.task.as_ref();
        let running = thread.live_claim(now_ms).is_some();
        if task.is_some_and(|t| t.cancelled || t.error.is_some())
            || (thread.paused().is_none() && !thread.working(now_ms))
        {
            return None;
        }
        let pending = thread.round().map_or_else(Vec::new, |round| {
            let answered = |key: &str| task.is_some_and(|t| t.partial.contains_key(key));
            round.questions.iter().filter(|q| !answered(&q.key)).map(|q| q.key.clone()).collect()
        });
        Some(Self {
            id: thread.id.to_string(),
            tool: thread.tool.to_string(),
            principal: thread.principal.as_deref().map(str::to_owned),
            created_at_ms: created_at_ms(&thread.id),
            expires_at_ms: thread.expires_at_ms,
            round: thread.round().map(|r| r.n),
            pending,
            state: if running { "running" } else { "waiting" },
            task: task.is_some(),
        })
    }
}

/// A page of paused calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PausedCalls {
    /// The paused calls of the page.
    #[serde(rename = "threads")]
    pub calls: Vec<PausedCall>,
    /// How many paused calls there are in all.
    pub total: u64,
    /// The ids of the page's records this build cannot read (a newer build's format, or
    /// corrupt): counted, not shown.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

/// When the UUIDv7 `id` was made (0 for another id).
fn created_at_ms(id: &str) -> u64 {
    uuid::Uuid::try_parse(id).ok().and_then(|u| u.get_timestamp()).map_or(0, |t| {
        let (secs, nanos) = t.to_unix();
        secs * 1000 + u64::from(nanos / 1_000_000)
    })
}

/// What operators may do with paused calls: list them, show one, cancel one. Handed out
/// by [`Engine::admin`](crate::Engine::admin).
#[derive(Clone)]
pub struct Admin {
    core: Arc<Core>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").finish_non_exhaustive()
    }
}

/// What cancelling a paused call comes to.
enum Cancel {
    /// Not a paused call.
    No,
    /// A call that is not a task: its thread goes, and its owner's count.
    Delete { owner: Option<Arc<str>>, tool: Arc<str> },
    /// A task: saved cancelled.
    Ended,
}

impl Admin {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        Self { core }
    }

    /// The paused calls, soonest to expire first: from `offset`, at most `limit`.
    pub async fn paused_calls(&self, offset: usize, limit: usize) -> Result<PausedCalls, EngineError> {
        let store = &self.core.store;
        let (ids, total) = store.paused(offset, limit).await?;
        let loads = ids.iter().map(|id| store.load(id));
        let now = self.core.now_ms();
        let mut listed = PausedCalls { calls: Vec::with_capacity(ids.len()), total, unreadable: Vec::new() };
        for (id, loaded) in ids.iter().zip(futures_util::future::join_all(loads).await) {
            match loaded {
                Ok(thread) => listed.calls.extend(thread.as_ref().and_then(|t| PausedCall::of(t, now))),
                // One record this build cannot read does not hide the others.
                Err(StoreError::NewerFormat { .. } | StoreError::Corrupt { .. }) => listed.unreadable.push(id.clone()),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(listed)
    }

    /// Paused call `id` (`None`: no such call, or it is not paused).
    pub async fn paused_call(&self, id: &str) -> Result<Option<PausedCall>, EngineError> {
        if uuid::Uuid::try_parse(id).is_err() {
            return Ok(None);
        }
        Ok(self.core.store.load(id).await?.as_ref().and_then(|t| PausedCall::of(t, self.core.now_ms())))
    }

    /// Cancels paused call `id` (`false`: no such paused call): its next resend gets
    /// `Invalid or expired requestState`; a task shows `cancelled` (and a run of this
    /// process stops). A request running its round at that moment loses its outcome.
    pub async fn cancel(&self, id: &str) -> Result<bool, EngineError> {
        if uuid::Uuid::try_parse(id).is_err() {
            return Ok(false);
        }
        let core = &self.core;
        let cancel = update(core.store.as_ref(), id, |thread| {
            let now = core.now_ms();
            if PausedCall::of(thread, now).is_none() {
                Step::Leave(Cancel::No)
            } else if thread.task.is_none() {
                Step::Leave(Cancel::Delete { owner: thread.owner.clone(), tool: thread.tool.clone() })
            } else {
                Step::Finish(round::cancelled(thread.clone(), now, &core.lifetimes), Cancel::Ended)
            }
        })
        .await?;
        match cancel.unwrap_or(Cancel::No) {
            Cancel::No => Ok(false),
            Cancel::Delete { owner, tool } => {
                core.store.delete(id).await?;
                if let Some(owner) = &owner {
                    core.store.uncount_paused(owner, id, &tool).await?;
                }
                Ok(true)
            }
            Cancel::Ended => {
                core.running.stop(id);
                Ok(true)
            }
        }
    }
}
