//! The one compare-and-set loop: read a thread, decide what it becomes (a pure
//! function of it), save that on the version read, and on a conflict (another request
//! saved first) read it again and decide again.

use crate::{PausedLedger, SaveError, StoreError, Thread};

/// What an update does with the thread it read.
#[derive(Debug)]
pub(crate) enum Step<T> {
    /// Leave it as it is; the update answers `T`.
    Leave(T),
    /// Save this thread (its version bumped past the one read) compare-and-set; the
    /// update answers `T`.
    Save(Thread, T),
    /// Save this thread finished (no longer counted as paused) compare-and-set; the
    /// update answers `T`.
    Finish(Thread, T),
}

/// Updates thread `id` as `f` says, again on each conflict; `None` when there is no
/// such thread (or it went meanwhile).
pub(crate) async fn update<T>(
    store: &dyn PausedLedger,
    id: &str,
    f: impl FnMut(&Thread) -> Step<T>,
) -> Result<Option<T>, StoreError> {
    let thread = store.load(id).await?;
    update_from(store, thread, f).await
}

/// [`update`] from `thread` as read already.
pub(crate) async fn update_from<T>(
    store: &dyn PausedLedger,
    mut thread: Option<Thread>,
    mut f: impl FnMut(&Thread) -> Step<T>,
) -> Result<Option<T>, StoreError> {
    while let Some(current) = thread {
        let expected = current.version;
        let (saved, answer) = match f(&current) {
            Step::Leave(answer) => return Ok(Some(answer)),
            Step::Save(next, answer) => (store.save(next, Some(expected)).await, answer),
            Step::Finish(next, answer) => {
                let owner = next.owner.clone();
                (store.save_finished(next, expected, owner.as_deref()).await, answer)
            }
        };
        match saved {
            Ok(()) => return Ok(Some(answer)),
            Err(SaveError::Conflict(_)) => thread = store.load(&current.id).await?,
            Err(SaveError::Store(e)) => return Err(e),
        }
    }
    Ok(None)
}

#[cfg(test)]
pub(crate) mod tests;
