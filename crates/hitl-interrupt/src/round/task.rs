//! The transitions of a call followed as a task (the Tasks extension): a working task
//! made, its answers taken in parts, its first run's end, its cancellation. Pure, as
//! the rest of `round`: the clock is read by the driver and passed in.

use hitl_graph::Checkpoint;
use hitl_protocol::{CallToolResult, ErrorObject, InputResponses};

use super::{NewThread, fits, fresh};
use crate::call::ToolCall;
use crate::{Claim, Last, LastOutcome, Lifetimes, Round, TaskState, Thread, ThreadState};

/// The task key of question `key` of round `n`: unique over the task's life, as the
/// extension requires, even when two rounds ask the same question.
pub(crate) fn task_key(n: u32, key: &str) -> String {
    format!("{n}:{key}")
}

/// A new call's task whose first run goes on past the wait: no round, a claim on round
/// 0 for a lease (its run renews it), living the paused lifetime.
pub(crate) fn working(call: &ToolCall, new: NewThread, lifetimes: &Lifetimes) -> Thread {
    let now_ms = new.now_ms;
    let claim = Claim { round: 0, until_ms: now_ms.saturating_add(lifetimes.lease.as_millis() as u64) };
    let expires_at_ms = now_ms.saturating_add(lifetimes.paused.as_millis() as u64);
    let mut thread = fresh(call, new, ThreadState::Working { claim: Some(claim) }, expires_at_ms);
    thread.task = Some(Box::new(TaskState::new(now_ms, (*call.capabilities).clone())));
    thread.format = hitl_thread::format_of(&thread);
    thread
}

/// What answers sent to a task (`tasks/update`) do to its thread.
#[derive(Debug)]
pub(crate) enum TaskNext {
    /// Nothing: no round takes answers (the task was cancelled or ended, or its first
    /// run goes on), or its round waits for other answers or is run by a request.
    Idle,
    /// The answers would make the record too large: refused, nothing stored.
    TooLarge(ErrorObject),
    /// Store `thread`, which keeps the new answers `fresh` (compare-and-set on the
    /// version read); then, when `ready`, answer its round.
    Keep {
        /// The thread with the answers kept, its version bumped.
        thread: Box<Thread>,
        /// The answers new to it, by question key.
        fresh: InputResponses,
        /// Every question of the round has its answer now, and no request runs it.
        ready: bool,
    },
    /// Nothing new: answer the round with the answers the task keeps (it has them
    /// all, and no request runs it: a page done since, a run that failed).
    Answer,
}

/// `responses` (by task key; others are ignored, as the extension says) sent to task
/// `thread` at `now_ms`.
pub(crate) fn task_answers(
    thread: &Thread,
    responses: &InputResponses,
    now_ms: u64,
    max_record_bytes: usize,
) -> TaskNext {
    let Some(task) = &thread.task else { return TaskNext::Idle };
    let Some(round) = thread.round().filter(|_| !task.cancelled) else { return TaskNext::Idle };
    let fresh: InputResponses = round
        .questions
        .iter()
        .filter(|q| !task.partial.contains_key(&q.key))
        .filter_map(|q| responses.get(&task_key(round.n, &q.key)).map(|v| (q.key.clone(), v.clone())))
        .collect();
    if fresh.is_empty() {
        return if ready(thread, now_ms) { TaskNext::Answer } else { TaskNext::Idle };
    }
    let mut updated = thread.clone();
    let kept = updated.task.as_mut().expect("a task");
    kept.partial.extend(fresh.clone());
    kept.updated_at_ms = now_ms;
    updated.version += 1;
    // Answers are the client's bytes: the record must still fit.
    if let Err(too_large) = fits(&updated, max_record_bytes) {
        return TaskNext::TooLarge(too_large);
    }
    let ready = ready(&updated, now_ms);
    TaskNext::Keep { thread: Box::new(updated), fresh, ready }
}

/// Task `thread` (not over) has an open round with every answer in that no request
/// runs at `now_ms`: it runs when it can.
pub(crate) fn ready(thread: &Thread, now_ms: u64) -> bool {
    let Some(task) = &thread.task else { return false };
    let over = task.cancelled || task.error.is_some();
    let Some(round) = thread.round().filter(|_| !over) else { return false };
    let claimed = thread.live_claim(now_ms).is_some_and(|c| c.round == round.n);
    !claimed && round.questions.iter().all(|q| task.partial.contains_key(&q.key))
}

/// How a working task's first run ended, as the task will show it.
#[derive(Debug)]
pub(crate) enum TaskEnd {
    /// Its result.
    Result(CallToolResult),
    /// Its first round.
    Paused(Box<Checkpoint>, Round),
    /// A JSON-RPC error (a panic, a round the client can't answer, an agent's error).
    Failed(ErrorObject),
}

/// The working task `thread` as its run's end `ended` leaves it at `now_ms`, version
/// bumped. A first round too large to keep fails the task.
pub(crate) fn task_ended(
    thread: &Thread,
    ended: &TaskEnd,
    now_ms: u64,
    lifetimes: &Lifetimes,
    max_record_bytes: usize,
) -> Thread {
    let expiry = |lifetime: std::time::Duration| now_ms.saturating_add(lifetime.as_millis() as u64);
    let mut next = thread.clone();
    // Ended, unless it paused (below).
    next.state = ThreadState::Finished;
    next.version += 1;
    next.task.as_mut().expect("a task").updated_at_ms = now_ms;
    let failed = |mut next: Thread, error: ErrorObject| {
        next.task.as_mut().expect("a task").error = Some(error);
        next.expires_at_ms = expiry(lifetimes.finished);
        next
    };
    match ended {
        TaskEnd::Result(result) => {
            next.last = Some(std::sync::Arc::new(Last {
                round: 0,
                nonce: String::new(),
                keys: Vec::new(),
                answers_digest: String::new(),
                outcome: LastOutcome::Result { result: result.clone() },
            }));
            next.expires_at_ms = expiry(lifetimes.finished);
            next
        }
        TaskEnd::Failed(error) => failed(next, error.clone()),
        TaskEnd::Paused(checkpoint, round) => {
            next.state = ThreadState::paused((**checkpoint).clone(), round.clone());
            next.format = hitl_thread::format_of(&next);
            next.expires_at_ms = expiry(lifetimes.paused);
            // The agent's state is stored with the round: it must fit the record.
            match fits(&next, max_record_bytes) {
                Ok(()) => next,
                Err(too_large) => {
                    next.state = ThreadState::Finished;
                    next.format = hitl_thread::format_of(&next);
                    failed(next, too_large)
                }
            }
        }
    }
}

/// Task `thread` cancelled at `now_ms`: it never runs on, and is kept a while (the
/// finished lifetime) for `tasks/get`.
pub(crate) fn cancelled(mut thread: Thread, now_ms: u64, lifetimes: &Lifetimes) -> Thread {
    let task = thread.task.as_mut().expect("a task");
    (task.cancelled, task.updated_at_ms) = (true, now_ms);
    task.partial.clear();
    thread.state = ThreadState::Finished;
    thread.version += 1;
    thread.expires_at_ms = now_ms.saturating_add(lifetimes.finished.as_millis() as u64);
    thread
}

#[cfg(test)]
mod tests;
