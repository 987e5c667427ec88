//! The store conformance suite: what every store must do, port by port ([`threads`],
//! [`ledger`], [`notes`], [`claims`], [`records`]), run against the in-memory store here
//! and against Redis in `hitl-store-redis`. [`run`] runs all but [`records`].
//!
//! Each check panics with a message naming the rule it broke.

use crate::{
    AuditLine, BoundCall, Claim, ClaimAttempt, LimitReached, Notes, PausedLedger, PausedLimits, Records, Round,
    SaveError, THREAD_FORMAT, Thread, ThreadState, ThreadStore,
};

/// A finished thread (of `choose_region`, no caller), for a store's own tests too.
pub fn thread(id: &str, version: u64, expires_at_ms: u64) -> Thread {
    Thread {
        format: THREAD_FORMAT,
        id: id.into(),
        version,
        tool: "choose_region".into(),
        args_digest: "d".into(),
        principal: None,
        owner: None,
        state: ThreadState::Finished,
        last: None,
        task: None,
        expires_at_ms,
    }
}

/// Runs every check but [`records`] against `store`, with thread ids made unique by
/// `prefix` and expiry times relative to `now_ms` (the store's clock).
pub async fn run<S: PausedLedger + Notes + ?Sized>(store: &S, prefix: &str, now_ms: u64) {
    threads(store, prefix, now_ms).await;
    ledger(store, prefix, now_ms).await;
    notes(store, prefix, now_ms).await;
    claims(store, prefix, now_ms).await;
}

/// What every [`ThreadStore`] must do with records: load what was saved, save as a
/// compare-and-set on the version, delete, and treat an expired thread as absent.
pub async fn threads<S: ThreadStore + ?Sized>(store: &S, prefix: &str, now_ms: u64) {
    let later = now_ms + 3_600_000;
    let id = format!("{prefix}-a");

    assert_eq!(store.load(&id).await.unwrap(), None, "a missing thread loads as None");

    let first = thread(&id, 1, later);
    store.save(first.clone(), None).await.expect("a new thread saves with expected None");
    assert_eq!(store.load(&id).await.unwrap().as_ref(), Some(&first), "a saved thread loads unchanged");

    assert!(
        matches!(store.save(first.clone(), None).await, Err(SaveError::Conflict(_))),
        "saving a new thread over a live one is a conflict"
    );
    let second = thread(&id, 2, later);
    assert!(
        matches!(store.save(second.clone(), Some(7)).await, Err(SaveError::Conflict(_))),
        "a save with a stale expected version is a conflict"
    );
    store.save(second.clone(), Some(1)).await.expect("a save with the current version succeeds");
    assert_eq!(store.load(&id).await.unwrap().map(|t| t.version), Some(2), "the new version is stored");

    store.delete(&id).await.unwrap();
    assert_eq!(store.load(&id).await.unwrap(), None, "a deleted thread is gone");
    store.delete(&id).await.expect("deleting a missing thread is not an error");

    let expired = format!("{prefix}-expired");
    store.save(thread(&expired, 1, now_ms.saturating_sub(1)), None).await.unwrap();
    assert_eq!(store.load(&expired).await.unwrap(), None, "an expired thread loads as None");
    store.save(thread(&expired, 1, later), None).await.expect("an expired thread counts as absent for saves");
}

/// The checkpoint of a graph paused before its first step, `ask`.
fn paused_checkpoint() -> hitl_graph::Checkpoint {
    hitl_graph::Checkpoint::before(serde_json::json!({}), &["ask"])
}

/// A paused thread whose round 1 a load may claim with `token`.
pub(crate) fn claimable(id: &str, token: &str, expires_at_ms: u64) -> Thread {
    let round = Round { n: 1, nonce: "n".into(), questions: Vec::new(), asked_at_ms: 0, proof: crate::proof(token) };
    Thread { state: ThreadState::paused(paused_checkpoint(), round), ..thread(id, 1, expires_at_ms) }
}

/// Claims made as a thread loads ([`ThreadStore::load_claiming`]): only with the open
/// round's token, never over a live claim, over a lapsed one; given back with
/// [`ThreadStore::release_claim`] once. A store that does not claim as it loads must
/// leave the thread untouched. Returns whether the store claimed.
pub async fn claims<S: ThreadStore + ?Sized>(store: &S, prefix: &str, now_ms: u64) -> bool {
    let later = now_ms + 3_600_000;
    let until_ms = now_ms + 30_000;
    let bound = BoundCall::new("choose_region", "d", None);
    let attempt = |token| ClaimAttempt { token, binding: &bound, now_ms, until_ms };
    let id = format!("{prefix}-claim");
    let missing = store.load_claiming(&id, attempt("t0ken")).await.unwrap();
    assert!(missing.thread.is_none() && !missing.claimed, "a missing thread loads as None, unclaimed");

    let paused = claimable(&id, "t0ken", later);
    store.save(paused.clone(), None).await.unwrap();
    let wrong = store.load_claiming(&id, attempt("forged")).await.unwrap();
    assert!(!wrong.claimed, "a token that is not the round's claims nothing");
    let other_caller = BoundCall::new("choose_region", "d", Some("mallory"));
    let elsewhere = ClaimAttempt { binding: &other_caller, ..attempt("t0ken") };
    assert!(!store.load_claiming(&id, elsewhere).await.unwrap().claimed, "nor does another call with the token");
    assert_eq!(store.load(&id).await.unwrap().as_ref(), Some(&paused), "a refused claim leaves the thread");

    let loaded = store.load_claiming(&id, attempt("t0ken")).await.unwrap();
    assert_eq!(loaded.thread.as_ref(), Some(&paused), "load_claiming returns the thread as it was");
    if !loaded.claimed {
        assert_eq!(store.load(&id).await.unwrap().as_ref(), Some(&paused), "a store that did not claim left it");
        assert!(!store.release_claim(&id, 2).await.unwrap(), "no claim to give back");
        return false;
    }
    let claimed = store.load(&id).await.unwrap().expect("still there");
    assert_eq!(claimed.version, 2, "a claim bumps the version");
    assert_eq!(claimed.claim(), Some(&Claim { round: 1, until_ms }), "the claim is the round's, to until_ms");
    let again = store.load_claiming(&id, attempt("t0ken")).await.unwrap();
    assert!(!again.claimed, "a live claim is not claimed again");
    assert_eq!(again.thread.as_ref(), Some(&claimed), "and the thread is returned with it");

    assert!(store.release_claim(&id, 2).await.unwrap(), "the claim is given back");
    assert!(!store.release_claim(&id, 2).await.unwrap(), "once");
    let released = store.load(&id).await.unwrap().expect("still there");
    assert_eq!((released.version, released.claim()), (3, None), "given back: no claim, the version bumped");

    let mut lapsed = claimable(&id, "t0ken", later);
    lapsed.version = 4;
    lapsed.set_claim(Some(Claim { round: 1, until_ms: now_ms }));
    store.save(lapsed, Some(3)).await.expect("saved with a lapsed claim");
    assert!(store.load_claiming(&id, attempt("t0ken")).await.unwrap().claimed, "a lapsed claim is taken over");
    let mut finished = store.load(&id).await.unwrap().expect("still there");
    assert_eq!((finished.version, finished.claim().map(|c| c.until_ms)), (5, Some(until_ms)));
    (finished.state, finished.version) = (ThreadState::Finished, 6);
    store.save(finished.clone(), Some(5)).await.expect("the claimer saves on the claimed version");
    assert_eq!(store.load(&id).await.unwrap().as_ref(), Some(&finished), "a finished thread loads unchanged");
    assert!(!store.load_claiming(&id, attempt("t0ken")).await.unwrap().claimed, "no open round, no claim");
    true
}

/// Claims between two replicas of a store that share their threads (`a` and `b`): a
/// round one wrote is claimed by the other, and by itself, to the same thread; a thread
/// the other wrote again, or deleted, is what a load then sees, whatever the first kept
/// of it. Returns whether the stores claimed.
pub async fn replicas<S: ThreadStore + ?Sized>(a: &S, b: &S, prefix: &str, now_ms: u64) -> bool {
    let later = now_ms + 3_600_000;
    let bound = BoundCall::new("choose_region", "d", None);
    let attempt = |token| ClaimAttempt { token, binding: &bound, now_ms, until_ms: now_ms + 30_000 };

    let mut claimed = true;
    for (n, claimer) in [a, b].into_iter().enumerate() {
        let id = format!("{prefix}-replicas-{n}");
        let paused = claimable(&id, "t0ken", later);
        a.save(paused.clone(), None).await.unwrap();
        let loaded = claimer.load_claiming(&id, attempt("t0ken")).await.unwrap();
        assert_eq!(loaded.thread.as_ref(), Some(&paused), "a round written by a replica loads as written ({n})");
        claimed &= loaded.claimed;
        let version = if loaded.claimed { 2 } else { 1 };
        assert_eq!(a.load(&id).await.unwrap().map(|t| t.version), Some(version), "claimed once ({n})");
    }

    let id = format!("{prefix}-replicas-again");
    a.save(claimable(&id, "t0ken", later), None).await.unwrap();
    let second = Thread { version: 2, ..claimable(&id, "s3cond", later) };
    b.save(second.clone(), Some(1)).await.unwrap();
    let stale = a.load_claiming(&id, attempt("t0ken")).await.unwrap();
    assert!(!stale.claimed, "the token of a round another replica moved past claims nothing");
    assert_eq!(stale.thread.as_ref(), Some(&second), "and the thread loads as the other replica wrote it");
    let next = a.load_claiming(&id, attempt("s3cond")).await.unwrap();
    assert_eq!(next.thread.as_ref(), Some(&second), "the round the other replica wrote loads");
    assert_eq!(next.claimed, claimed, "and is claimed with its own token");

    let gone = format!("{prefix}-replicas-gone");
    a.save(claimable(&gone, "t0ken", later), None).await.unwrap();
    b.delete(&gone).await.unwrap();
    let loaded = a.load_claiming(&gone, attempt("t0ken")).await.unwrap();
    assert!(loaded.thread.is_none() && !loaded.claimed, "a thread another replica deleted loads as None");
    claimed
}

/// What every [`Notes`] must do: a note is put, taken once, replaced, and gone past its
/// time; a key is used once, and its mark read until its time.
pub async fn notes<S: Notes + ?Sized>(store: &S, prefix: &str, now_ms: u64) {
    let key = format!("{prefix}-note");
    assert_eq!(store.take_note(&key).await.unwrap(), None, "a missing note");
    store.put_note(&key, "first", now_ms + 60_000).await.unwrap();
    store.put_note(&key, "second", now_ms + 60_000).await.unwrap();
    assert_eq!(store.take_note(&key).await.unwrap().as_deref(), Some("second"), "the last note put");
    assert_eq!(store.take_note(&key).await.unwrap(), None, "a note is taken once");
    store.put_note(&key, "late", now_ms.saturating_sub(1)).await.unwrap();
    assert_eq!(store.take_note(&key).await.unwrap(), None, "a note past its time is gone");

    let later = now_ms + 3_600_000;
    let once = format!("{prefix}-ticket");
    assert!(!store.used(&once).await.unwrap(), "not marked yet");
    assert!(store.use_once(&once, later).await.unwrap(), "the first use");
    assert!(store.used(&once).await.unwrap() && store.used(&once).await.unwrap(), "marked, and reading keeps it");
    assert!(!store.use_once(&once, later).await.unwrap(), "never a second");
    let lapsed = format!("{prefix}-lapsed");
    assert!(store.use_once(&lapsed, now_ms.saturating_sub(1)).await.unwrap());
    assert!(!store.used(&lapsed).await.unwrap(), "a mark past its time is not read");
    assert!(store.use_once(&lapsed, later).await.unwrap(), "a mark past its time is gone");
}

/// What every [`PausedLedger`] must do: limits per owner and in all, recounts,
/// uncounts, expiry, the listing, and creating and finishing a paused call.
pub async fn ledger<S: PausedLedger + ?Sized>(store: &S, prefix: &str, now_ms: u64) {
    let later = now_ms + 3_600_000;
    let (alice, bob) = (format!("{prefix}-alice"), format!("{prefix}-bob"));
    let limits = PausedLimits { per_owner: 2, total: u64::MAX };
    // Calls of one tool of this prefix's own, so a shared store's other calls do not count.
    let tool = format!("{prefix}-tool");
    let count = |owner: String, id: &'static str, until: u64, limits: PausedLimits| {
        let tool = tool.clone();
        async move { store.count_paused(&owner, &format!("{prefix}-{id}"), &tool, until, limits).await.unwrap() }
    };
    let of_tool = |name: String| async move {
        let counts = store.paused_by_tool().await.unwrap();
        counts.iter().find(|(t, _)| *t == name).map(|(_, n)| *n)
    };
    assert_eq!(count(alice.clone(), "p1", later, limits).await, Ok(()), "a first paused call counts");
    assert_eq!(count(alice.clone(), "p2", later, limits).await, Ok(()), "a second one fits a limit of 2");
    assert_eq!(
        count(alice.clone(), "p3", later, limits).await,
        Err(LimitReached::PerOwner),
        "a third one passes the owner's limit"
    );
    assert_eq!(count(alice.clone(), "p2", later + 1, limits).await, Ok(()), "a counted call is never refused");
    assert_eq!(count(bob.clone(), "p4", later, limits).await, Ok(()), "limits are per owner");
    assert_eq!(of_tool(tool.clone()).await, Some(3), "the calls counted now, per tool");
    store.uncount_paused(&alice, &format!("{prefix}-p1"), &tool).await.unwrap();
    store.uncount_paused(&alice, &format!("{prefix}-p1"), &tool).await.expect("uncounting twice is not an error");
    assert_eq!(count(alice.clone(), "p3", later, limits).await, Ok(()), "an uncounted call frees its place");
    store.uncount_paused(&alice, &format!("{prefix}-p2"), &tool).await.unwrap();
    store.uncount_paused(&alice, &format!("{prefix}-p3"), &tool).await.unwrap();

    let carol = format!("{prefix}-carol");
    assert_eq!(count(carol.clone(), "p5", now_ms.saturating_sub(1), limits).await, Ok(()));
    assert_eq!(count(carol.clone(), "p6", now_ms.saturating_sub(1), limits).await, Ok(()));
    assert_eq!(count(carol.clone(), "p7", later, limits).await, Ok(()), "calls past their time no longer count");
    store.uncount_paused(&carol, &format!("{prefix}-p7"), &tool).await.unwrap();
    store.uncount_paused(&bob, &format!("{prefix}-p4"), &tool).await.unwrap();
    assert_eq!(of_tool(tool.clone()).await, Some(0), "a tool counted before and none now shows 0");

    // The total limit, with one place left for this prefix's owners whatever else the
    // store holds: fill it, then a new owner is refused.
    let dave = format!("{prefix}-dave");
    let total = PausedLimits { per_owner: u64::MAX, total: u64::MAX };
    assert_eq!(count(dave.clone(), "p8", later, total).await, Ok(()));
    // The listing: counted calls only, soonest to expire first, paged, with the total.
    let (listed, counted) = store.paused(0, usize::MAX >> 1).await.unwrap();
    let p8 = format!("{prefix}-p8");
    assert!(listed.contains(&p8), "a counted call is listed");
    for gone in ["p1", "p2", "p5", "p6"] {
        assert!(!listed.contains(&format!("{prefix}-{gone}")), "an uncounted or lapsed call ({gone}) is not listed");
    }
    assert_eq!(counted, listed.len() as u64, "the total is what the whole listing holds");
    let at = listed.iter().position(|id| *id == p8).unwrap();
    assert_eq!(store.paused(at, 1).await.unwrap().0, [p8], "a page starts at its offset");
    let full = PausedLimits { per_owner: u64::MAX, total: 1 };
    assert_eq!(count(format!("{prefix}-erin"), "p9", later, full).await, Err(LimitReached::Total), "the total limit");
    store.uncount_paused(&dave, &format!("{prefix}-p8"), &tool).await.unwrap();

    // Creating and finishing a paused call counts it and stops counting it, in one step
    // where the store can.
    let frank = format!("{prefix}-frank");
    let one = PausedLimits { per_owner: 1, total: u64::MAX };
    let created = thread(&format!("{prefix}-c1"), 1, later);
    assert_eq!(store.create_paused(created.clone(), &frank, one).await.unwrap(), Ok(()), "a paused call is created");
    assert_eq!(store.load(&created.id).await.unwrap().as_ref(), Some(&created));
    let refused = thread(&format!("{prefix}-c2"), 1, later);
    assert_eq!(
        store.create_paused(refused.clone(), &frank, one).await.unwrap(),
        Err(LimitReached::PerOwner),
        "a paused call past the limit is refused"
    );
    assert_eq!(store.load(&refused.id).await.unwrap(), None, "and nothing is stored");
    assert!(
        matches!(
            store.create_paused(created.clone(), &format!("{prefix}-gina"), one).await,
            Err(SaveError::Conflict(_))
        ),
        "creating over a live thread is a conflict"
    );
    let finished = thread(&created.id, 2, later);
    store.save_finished(finished.clone(), 1, Some(&frank)).await.expect("a finished call saves");
    assert_eq!(store.load(&created.id).await.unwrap().map(|t| t.version), Some(2));
    assert_eq!(store.create_paused(refused.clone(), &frank, one).await.unwrap(), Ok(()), "finishing frees the place");
    assert!(
        matches!(store.save_finished(finished.clone(), 1, Some(&frank)).await, Err(SaveError::Conflict(_))),
        "finishing with a stale version is a conflict"
    );
    store.uncount_paused(&format!("{prefix}-gina"), &created.id, &created.tool).await.unwrap();
    store.uncount_paused(&frank, &refused.id, &refused.tool).await.unwrap();
}

/// What every [`Records`] must do: the approvals listing (replace, expire, order) and
/// the audit trail (append, read since a time). Entries are told apart by `prefix`, so
/// a shared store's other entries do not matter.
pub async fn records<S: Records + ?Sized>(store: &S, prefix: &str, now_ms: u64) {
    use serde_json::{Value, json};
    let later = now_ms + 3_600_000;
    let (a, b, gone) = (format!("{prefix}-a"), format!("{prefix}-b"), format!("{prefix}-gone"));
    store.put_approval(&a, json!({"id": a, "status": "pending"}), later).await.unwrap();
    store.put_approval(&b, json!({"id": b, "status": "pending"}), later).await.unwrap();
    store.put_approval(&gone, json!({"id": gone}), now_ms.saturating_sub(1)).await.unwrap();
    store.put_approval(&a, json!({"id": a, "status": "approved"}), later).await.unwrap();
    assert_eq!(store.approval(&a).await.unwrap(), Some(json!({"id": a, "status": "approved"})), "put replaces");
    assert_eq!(store.approval(&gone).await.unwrap(), None, "an entry past its time is gone");
    let mine: Vec<Value> = store
        .approvals()
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e["id"].as_str().is_some_and(|id| id.starts_with(prefix)))
        .collect();
    let ids: Vec<&str> = mine.iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(ids, [a.as_str(), b.as_str()], "live entries, oldest first, a replaced one in its place");
    store.remove_approvals(&[b.clone(), format!("{prefix}-never")]).await.unwrap();
    assert_eq!(store.approval(&b).await.unwrap(), None, "a removed entry is gone");
    let left = store.approvals().await.unwrap();
    assert!(left.iter().any(|e| e["id"] == a.as_str()) && !left.iter().any(|e| e["id"] == b.as_str()));
    store.remove_approvals(&[]).await.unwrap();

    let entries: Vec<AuditLine> = (0..3)
        .map(|n| AuditLine::of(&json!({"at_ms": now_ms + n, "event": "asked", "thread": prefix, "n": n})))
        .collect();
    store.append_audit(&entries).await.unwrap();
    let read = store.audit_since(now_ms + 1, None, 1_000).await.unwrap();
    let mine: Vec<&Value> = read.iter().filter(|e| e["thread"] == prefix).collect();
    assert_eq!(mine.iter().map(|e| e["n"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 2], "entries since, in order");
    assert!(mine.iter().all(|e| !e["seq"].is_null()), "the store numbers entries");
    // Read on from an entry's seq, in the store's order, whatever the entries' times.
    let seq = |e: &Value| e["seq"].as_str().map_or_else(|| e["seq"].to_string(), str::to_owned);
    let out_of_order = [now_ms + 5, now_ms + 3, now_ms + 6]
        .iter()
        .map(|at| AuditLine::of(&json!({"at_ms": at, "event": "asked", "thread": format!("{prefix}-order"), "at": at})))
        .collect::<Vec<_>>();
    store.append_audit(&out_of_order).await.unwrap();
    let all = store.audit_since(now_ms, None, 1_000_000).await.unwrap();
    let mine: Vec<&Value> = all.iter().filter(|e| e["thread"] == format!("{prefix}-order").as_str()).collect();
    assert_eq!(mine.len(), 3);
    let next = store.audit_since(now_ms, Some(&seq(mine[0])), 1_000_000).await.unwrap();
    let after: Vec<u64> = next
        .iter()
        .filter(|e| e["thread"] == format!("{prefix}-order").as_str())
        .map(|e| e["at"].as_u64().unwrap())
        .collect();
    assert_eq!(after, [now_ms + 3, now_ms + 6], "after the first, the rest in the store's order");
    assert!(store.audit_since(now_ms, Some("not-a-seq"), 10).await.unwrap().is_empty(), "a seq it never gave");
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::{Clock, ManualClock, MemoryStore};

    #[tokio::test]
    async fn memory_store_conforms() {
        let clock = Arc::new(ManualClock::new(10_000_000));
        let store = MemoryStore::with_clock(clock.clone());
        super::run(&store, "memory", clock.now_ms()).await;
    }
}
