//! The round's thread transitions as pure functions of (thread record, request, now,
//! secret): no store, no clock, no runtime. The engine loads, calls [`decide`], and
//! carries out what it returns.

use std::time::Duration;

use hitl_protocol::{CallToolResult, ClientCapabilities, ErrorObject, InputResponses};

use crate::ask::{ask, missing_capability, render};
use crate::questions::{self, Verdict};
use crate::resend::{last, replay};
use crate::state::Secret;
use crate::{Claim, Last, LastOutcome, Reply, Round, THREAD_FORMAT, Thread};

/// What a request that carries a `requestState` brings to its thread.
#[derive(Debug, Clone, Copy)]
pub struct Answering<'a> {
    /// The tool (or `prompt:<name>`) the call is made to.
    pub binding: &'a str,
    /// Digest of the call's arguments.
    pub args_digest: &'a str,
    /// Who is calling.
    pub principal: Option<&'a str>,
    /// The token part of the `requestState`.
    pub token: &'a str,
    /// The answers, by question key.
    pub responses: &'a InputResponses,
    /// What the client can do.
    pub capabilities: &'a ClientCapabilities,
}

/// The error result of a round whose run began an effect that must happen at most once
/// and never finished (the server running it stopped): it is not run again.
pub const OUTCOME_UNKNOWN: &str = "The outcome of this call is unknown: the server running it stopped after the \
     call began, and it is never run twice. Check its effect before calling again.";

/// What to do with a thread for an answering request.
#[derive(Debug)]
pub enum Next {
    /// No such thread, or not this call's, or the token does not verify:
    /// `-32602 Invalid or expired requestState`.
    Invalid,
    /// Written by a newer build: leave it, `-32603`.
    Newer,
    /// A resend of answers already given: what they led to.
    Replay(Reply),
    /// Some answer is missing: the same round again (or `-32021`).
    Reask(Reply),
    /// An answer does not fit its question: the error; the round stays open.
    Reject(ErrorObject),
    /// Another request is resuming this round: look again shortly.
    Wait,
    /// The answers end the call (a declined question): store the thread finished, and
    /// answer the result.
    Finish(Box<Finishing>),
    /// Resume the agent: store `thread` (claimed, its version bumped) compare-and-set on
    /// the loaded version, then run with `values`.
    Claim {
        /// The thread with the claim.
        thread: Box<Thread>,
        /// The round answered.
        round: Round,
        /// What the agent resumes with.
        values: hitl_graph::ResumeValues,
    },
}

/// A call that the answers end.
#[derive(Debug)]
pub struct Finishing {
    /// The thread as loaded.
    pub thread: Thread,
    /// The answered round, for resends.
    pub last: Last,
    /// The tool's result.
    pub result: CallToolResult,
}

/// The transition for `request` on `thread` (as loaded) at `now_ms`; a claim lasts
/// `lease`.
pub fn decide(thread: Option<Thread>, request: &Answering<'_>, now_ms: u64, lease: Duration, secret: &Secret) -> Next {
    let Some(mut thread) = thread else { return Next::Invalid };
    if !bound(&thread, request.binding, request.args_digest, request.principal) {
        return Next::Invalid;
    }
    let newer_checkpoint = thread.checkpoint.as_ref().is_some_and(|c| c.format > hitl_graph::CHECKPOINT_FORMAT);
    if thread.format > THREAD_FORMAT || newer_checkpoint {
        return Next::Newer;
    }
    let Some(round) = thread.round.clone().filter(|r| secret.verify(&thread.id, r.n, &r.nonce, request.token)) else {
        return replay(&thread, request.responses, request.token, request.capabilities, secret)
            .map_or(Next::Invalid, Next::Replay);
    };
    let open = |sealed: &str, page: &str| secret.open(sealed, page);
    match questions::judge_opening(&round, request.responses, &open) {
        Verdict::Missing => Next::Reask(ask(&thread.id, &round, request.capabilities, secret)),
        Verdict::Invalid(e) => Next::Reject(e),
        Verdict::Finish(result) => {
            let last = last(&round, request.responses, LastOutcome::Result { result: result.clone() });
            Next::Finish(Box::new(Finishing { thread, last, result }))
        }
        Verdict::Resume(values) => {
            // Resume once: a live claim on this round means another request runs it.
            if thread.live_claim(now_ms).is_some_and(|c| c.round == round.n) {
                return Next::Wait;
            }
            // Its run began an effect and then stopped (the server died): never again.
            if thread.begun == Some(round.n) {
                let result = CallToolResult::error([OUTCOME_UNKNOWN.to_owned()]);
                let last = last(&round, request.responses, LastOutcome::Result { result: result.clone() });
                return Next::Finish(Box::new(Finishing { thread, last, result }));
            }
            let until_ms = now_ms.saturating_add(lease.as_millis() as u64);
            thread.claim = Some(Claim { round: round.n, until_ms });
            thread.version += 1;
            Next::Claim { thread: Box::new(thread), round, values }
        }
    }
}

/// Does `thread` belong to this call: its tool, its arguments, its caller?
pub fn bound(thread: &Thread, binding: &str, args_digest: &str, principal: Option<&str>) -> bool {
    thread.tool == binding && thread.args_digest == args_digest && thread.principal.as_deref() == principal
}

/// How a claimed round's run ended, as the engine saw it.
#[derive(Debug)]
pub enum Ran {
    /// The request's time ran out (the run was dropped mid-step).
    TimedOut(ErrorObject),
    /// The client went away; the checkpoint holds every superstep that finished.
    Cancelled(Box<hitl_graph::Checkpoint>),
    /// A step failed in a way that may pass (a model API down): the checkpoint holds
    /// every superstep that finished; the call gets this error result.
    Retry(Box<hitl_graph::Checkpoint>, CallToolResult),
    /// The run ended with the call's result.
    Done(CallToolResult),
    /// The run paused again: its checkpoint and next round.
    Paused(Box<hitl_graph::Checkpoint>, Round),
}

/// What to store after a claimed round's run, and what to answer.
#[derive(Debug)]
pub enum Ending {
    /// Release the round unanswered (the run is to be done again, or continued from
    /// the kept supersteps): store the thread, fail the call with the error.
    GiveBack(Box<Thread>, ErrorObject),
    /// Release the round unanswered, as [`Ending::GiveBack`], answering with an error
    /// result: the same answers sent again try the failed step again.
    Retry(Box<Thread>, CallToolResult),
    /// The call ended: store the finished thread (and stop counting it), answer.
    Finished(Box<Thread>, CallToolResult),
    /// The next round: store the thread (and count it to its new expiry), answer.
    NextRound(Box<Thread>, Reply),
}

/// What the end of a run decides, given the thread as claimed (its claim already
/// released and its version the one to compare on).
#[derive(Debug, Clone, Copy)]
pub struct EndOf<'a> {
    /// The answered round.
    pub round: &'a Round,
    /// Its answers.
    pub responses: &'a InputResponses,
    /// What the client can do.
    pub capabilities: &'a ClientCapabilities,
    /// Now, in ms since the epoch.
    pub now_ms: u64,
    /// How long threads live.
    pub lifetimes: &'a crate::Lifetimes,
    /// The largest record stored.
    pub max_record_bytes: usize,
    /// The last superstep in which the run began an effect (`None`: it began none): a
    /// checkpoint kept past it holds every effect, so the round's outcome is known.
    pub began_in: Option<u32>,
}

/// The transition at the end of a claimed round's run. `thread` is the thread as loaded
/// at the claim, claim removed; every thread returned has its version bumped past it.
pub fn end_run(mut thread: Thread, ran: Ran, end: &EndOf<'_>, secret: &Secret) -> Ending {
    match ran {
        Ran::TimedOut(error) => {
            thread.version += 1;
            Ending::GiveBack(Box::new(thread), error)
        }
        Ran::Cancelled(checkpoint) => {
            keep(&mut thread, *checkpoint, end);
            Ending::GiveBack(Box::new(thread), ErrorObject::internal("the request was cancelled"))
        }
        Ran::Retry(checkpoint, result) => {
            keep(&mut thread, *checkpoint, end);
            Ending::Retry(Box::new(thread), result)
        }
        Ran::Done(result) => {
            let last = last(end.round, end.responses, LastOutcome::Result { result: result.clone() });
            Ending::Finished(Box::new(finished(thread, last, end.now_ms, end.lifetimes, end.max_record_bytes)), result)
        }
        Ran::Paused(checkpoint, next) => {
            let missing = missing_capability(&next, end.capabilities);
            let lifetime = if missing.is_some() { end.lifetimes.waiting_for_capability } else { end.lifetimes.paused };
            thread.version += 1;
            // The fields a next round changes, kept to give the round back unchanged
            // when the new record would be too large.
            let kept_last = thread.last.replace(last(end.round, end.responses, LastOutcome::NextRound));
            let kept_checkpoint = thread.checkpoint.replace(*checkpoint);
            let kept_expiry =
                std::mem::replace(&mut thread.expires_at_ms, end.now_ms.saturating_add(lifetime.as_millis() as u64));
            let kept_round = thread.round.replace(next);
            let kept_begun = thread.begun.take();
            // A task's answers were for the round just answered.
            let kept_task = thread.task.clone();
            if let Some(task) = &mut thread.task {
                task.partial.clear();
                task.updated_at_ms = end.now_ms;
            }
            thread.format = hitl_thread::format_of(&thread);
            if let Err(e) = fits(&thread, end.max_record_bytes) {
                (thread.last, thread.checkpoint, thread.expires_at_ms, thread.round, thread.begun, thread.task) =
                    (kept_last, kept_checkpoint, kept_expiry, kept_round, kept_begun, kept_task);
                return Ending::GiveBack(Box::new(thread), e);
            }
            let round = thread.round.as_ref().expect("the next round was just set");
            let reply = match missing {
                Some(e) => Err(e),
                None => Ok(render(&thread.id, round, secret)),
            };
            Ending::NextRound(Box::new(thread), reply)
        }
    }
}

/// `thread` given back with `checkpoint` when it holds more finished supersteps than
/// the round's own and fits in a record (else the round's checkpoint stays as it was).
/// Effects begun before the kept supersteps ended are in them: the round's outcome is
/// no longer unknown.
fn keep(thread: &mut Thread, checkpoint: hitl_graph::Checkpoint, end: &EndOf<'_>) {
    thread.version += 1;
    if thread.checkpoint.as_ref().is_none_or(|before| checkpoint.superstep <= before.superstep) {
        return;
    }
    let superstep = checkpoint.superstep;
    let before = (thread.checkpoint.replace(checkpoint), thread.begun);
    if end.began_in.is_some_and(|began| superstep > began) {
        thread.begun = None;
    }
    if fits(thread, end.max_record_bytes).is_err() {
        (thread.checkpoint, thread.begun) = before;
    }
}

/// `thread` ended with `last`, version bumped, kept for resends for the finished
/// lifetime. A result too large to keep is replaced, for resends only, by an error
/// result that says so.
pub fn finished(
    mut thread: Thread,
    mut last: Last,
    now_ms: u64,
    lifetimes: &crate::Lifetimes,
    max_record_bytes: usize,
) -> Thread {
    thread.version += 1;
    thread.checkpoint = None;
    thread.round = None;
    thread.claim = None;
    thread.begun = None;
    if let Some(task) = &mut thread.task {
        task.partial.clear();
        task.updated_at_ms = now_ms;
    }
    thread.expires_at_ms = now_ms.saturating_add(lifetimes.finished.as_millis() as u64);
    thread.last = Some(last.clone());
    if let Err(too_large) = fits(&thread, max_record_bytes) {
        last.outcome = LastOutcome::Result { result: CallToolResult::error([too_large.message]) };
        thread.last = Some(last);
    }
    thread
}

/// Is the record within `max_record_bytes` as JSON? The error says by how much not.
/// Records are only serialized when a cheap upper bound of their size passes the limit.
pub fn fits(thread: &Thread, max_record_bytes: usize) -> Result<(), ErrorObject> {
    if crate::size::json_bound(thread).is_some_and(|bound| bound <= max_record_bytes) {
        return Ok(());
    }
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, thread)
        .map_err(|e| ErrorObject::internal(format!("the paused call could not be encoded: {e}")))?;
    if count.0 <= max_record_bytes {
        return Ok(());
    }
    Err(ErrorObject::internal(format!(
        "the paused call's record would take {} bytes, more than the limit of {max_record_bytes} (--max-record-bytes)",
        count.0
    )))
}

#[cfg(test)]
mod tests;
