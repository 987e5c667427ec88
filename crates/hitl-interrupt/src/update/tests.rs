//! The compare-and-set combinator on the memory store: what each step stores, and a
//! conflict decided again on the thread as it is then.

use std::sync::Arc;

use super::{Step, update, update_from};
use crate::{MemoryStore, PausedLedger, PausedLimits, Thread, ThreadStore};

/// A finished thread at `version` (the lease's tests hold one too).
pub(crate) fn thread(version: u64) -> Thread {
    Thread {
        format: crate::THREAD_FORMAT,
        id: "01a22f1a-68fb-738c-b3ca-9f64075178aa".into(),
        version,
        tool: "greeter".into(),
        args_digest: "digest".into(),
        principal: None,
        owner: Some("anonymous".into()),
        state: crate::ThreadState::Finished,
        last: None,
        task: None,
        expires_at_ms: u64::MAX / 2,
    }
}

/// `thread` with `tool` renamed and its version bumped: what a step saves.
fn renamed(thread: &Thread, tool: &str) -> Thread {
    Thread { tool: tool.into(), version: thread.version + 1, ..thread.clone() }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
}

#[test]
fn each_step_stores_what_it_says() {
    block_on(async {
        let store = Arc::new(MemoryStore::default());
        let id = thread(1).id;
        let none = update(store.as_ref(), &id, |_| Step::Leave(())).await.unwrap();
        assert_eq!(none, None, "no such thread");
        store.create_paused(thread(1), "anonymous", PausedLimits::default()).await.unwrap().unwrap();

        let left = update(store.as_ref(), &id, |t| Step::Leave(t.version)).await.unwrap();
        assert_eq!(left, Some(1));
        assert_eq!(store.load(&id).await.unwrap().unwrap().version, 1, "left as it was");

        let saved = update(store.as_ref(), &id, |t| Step::Save(renamed(t, "saved"), "saved")).await.unwrap();
        assert_eq!(saved, Some("saved"));
        let stored = store.load(&id).await.unwrap().unwrap();
        assert_eq!((stored.version, &*stored.tool), (2, "saved"));
        assert_eq!(store.paused(0, 10).await.unwrap().1, 1, "still counted");

        let finished = update(store.as_ref(), &id, |t| Step::Finish(renamed(t, "done"), ())).await.unwrap();
        assert_eq!(finished, Some(()));
        assert_eq!(store.load(&id).await.unwrap().unwrap().tool, "done".into());
        assert_eq!(store.paused(0, 10).await.unwrap().1, 0, "no longer counted");
    });
}

#[test]
fn a_conflict_is_decided_again_on_the_thread_as_it_is_then() {
    block_on(async {
        let store = Arc::new(MemoryStore::default());
        store.create_paused(thread(1), "anonymous", PausedLimits::default()).await.unwrap().unwrap();
        // Another request saved version 2 after this one read version 1.
        let stale = thread(1);
        let id = stale.id.clone();
        store.save(renamed(&stale, "theirs"), Some(1)).await.unwrap();
        let mut seen = Vec::new();
        let saved = update_from(store.as_ref(), Some(stale), |t| {
            seen.push((t.version, t.tool.to_string()));
            Step::Save(renamed(t, &format!("{}+mine", t.tool)), t.version)
        })
        .await
        .unwrap();
        assert_eq!(seen, [(1, "greeter".to_owned()), (2, "theirs".to_owned())]);
        assert_eq!(saved, Some(2), "the answer of the step that saved");
        let stored = store.load(&id).await.unwrap().unwrap();
        assert_eq!((stored.version, &*stored.tool), (3, "theirs+mine"));
    });
}
