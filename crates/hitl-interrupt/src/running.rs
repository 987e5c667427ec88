//! The runs of this process's working tasks, by task id, so `tasks/cancel` (and an
//! operator's cancel) stops a run of this process at once. A leaf: the tasks start and
//! end runs, the administration stops them, neither through the other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::task::AbortHandle;

/// The runs of this process's working tasks (shared by the engine's clones).
#[derive(Clone, Default)]
pub(crate) struct Running(Arc<Mutex<HashMap<String, AbortHandle>>>);

impl Running {
    /// Task `id` runs on here, stopped through `run`.
    pub(crate) fn insert(&self, id: &str, run: AbortHandle) {
        self.lock().insert(id.to_owned(), run);
    }

    /// Task `id`'s run ended.
    pub(crate) fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Stops this process's run of task `id`, if it has one.
    pub(crate) fn stop(&self, id: &str) {
        if let Some(run) = self.lock().remove(id) {
            run.abort();
        }
    }

    /// Does this process run no task?
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, AbortHandle>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
