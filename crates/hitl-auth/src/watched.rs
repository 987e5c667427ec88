//! Files read again while the server runs (the tokens file, a JWKS file): on SIGHUP, and
//! when their modification time changes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How often a watched file's modification time is looked at.
const POLL: Duration = Duration::from_secs(2);

/// A file and the modification time it was last read at.
#[derive(Debug)]
pub(crate) struct Watched {
    path: PathBuf,
    modified: Mutex<Option<SystemTime>>,
}

impl Watched {
    pub(crate) fn new(path: &Path) -> Self {
        Self { path: path.to_owned(), modified: Mutex::default() }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file and hands its text to `take`. Its modification time counts as
    /// seen only when `take` succeeds, so a file that does not parse is tried again.
    pub(crate) fn read<T>(&self, take: impl FnOnce(&str) -> Result<T, String>) -> Result<T, String> {
        let modified = self.modified_now();
        let text = std::fs::read_to_string(&self.path).map_err(|e| format!("{}: {e}", self.path.display()))?;
        let taken = take(&text)?;
        *self.modified.lock().unwrap_or_else(|p| p.into_inner()) = modified;
        Ok(taken)
    }

    fn changed(&self) -> bool {
        self.modified_now() != *self.modified.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn modified_now(&self) -> Option<SystemTime> {
        std::fs::metadata(&self.path).and_then(|m| m.modified()).ok()
    }
}

/// Calls `reload` on `target` at each SIGHUP and whenever its watched file changed, for
/// as long as the returned task runs and `target` lives.
pub(crate) fn watch<T: Send + Sync + 'static>(
    target: &Arc<T>,
    watched: fn(&T) -> Option<&Watched>,
    reload: fn(&T),
) -> tokio::task::JoinHandle<()> {
    let target = Arc::downgrade(target);
    tokio::spawn(async move {
        let mut hangup = hangup();
        loop {
            let signalled = tokio::select! {
                _ = tokio::time::sleep(POLL) => false,
                _ = next(&mut hangup) => true,
            };
            let Some(target) = target.upgrade() else { return };
            if signalled || watched(&target).is_some_and(Watched::changed) {
                reload(&target);
            }
        }
    })
}

/// SIGHUP, when this platform has it and it can be listened to.
#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = ();

fn hangup() -> Hangup {
    #[cfg(unix)]
    return tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
}

/// Resolves at the next SIGHUP (never, without one).
async fn next(hangup: &mut Hangup) {
    #[cfg(unix)]
    if let Some(signal) = hangup.as_mut()
        && signal.recv().await.is_some()
    {
        return;
    }
    let _ = hangup;
    std::future::pending::<()>().await
}
