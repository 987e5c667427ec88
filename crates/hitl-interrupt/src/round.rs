//! The round's thread transitions as pure functions of (thread record, request, now,
//! nonce, secret): no store, no clock, no runtime. The driver loads, calls them, and
//! carries out what they return: [`settle`] (how a run's outcome ends the call or makes
//! its next round), [`open`] and [`first_ask`] (a new call's first pause), [`decide`]
//! (a request with a `requestState`), [`end_run`] (after a claimed round's run),
//! [`finished`], and in `task` the transitions of a call followed as a task.

use std::sync::Arc;
use std::time::Duration;

use hitl_graph::{Checkpoint, Interrupt, Outcome, RunError};
use hitl_protocol::{CallToolResult, ClientCapabilities, ErrorObject, InputResponses};
use serde_json::Value;

use crate::answers::NotAskable;
use crate::ask::{Unsent, ask, missing_capability, render};
use crate::call::ToolCall;
use crate::questions::{self, Verdict};
use crate::resend::{last, replay};
use crate::state::{Minted, Secret};
use crate::{
    Answered, BREAKPOINT, Claim, Last, LastOutcome, Lifetimes, PageKind, Paused, Round, THREAD_FORMAT, TaskState,
    Thread, ThreadState,
};

mod task;

pub(crate) use task::{TaskEnd, TaskNext, cancelled, ready, task_answers, task_ended, task_key, working};

/// What a request that carries a `requestState` brings to its thread.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answering<'a> {
    /// The tool (or `prompt:<name>`) the call is made to.
    pub(crate) binding: &'a str,
    /// Digest of the call's arguments.
    pub(crate) args_digest: &'a str,
    /// Who is calling.
    pub(crate) principal: Option<&'a str>,
    /// The token part of the `requestState`.
    pub(crate) token: &'a str,
    /// The answers, by question key.
    pub(crate) responses: &'a InputResponses,
    /// What the client can do.
    pub(crate) capabilities: &'a ClientCapabilities,
}

/// The error result of a round whose run began an effect that must happen at most once
/// and never finished (the server running it stopped): it is not run again.
pub(crate) const OUTCOME_UNKNOWN: &str = "The outcome of this call is unknown: the server running it stopped after the \
     call began, and it is never run twice. Check its effect before calling again.";

/// What to do with a thread for an answering request.
#[derive(Debug)]
pub(crate) enum Next {
    /// No such thread, or not this call's, or the token does not verify:
    /// `-32602 Invalid or expired requestState`.
    Invalid,
    /// Written by a newer build: leave it, `-32603`.
    Newer,
    /// A resend of answers already given: what they led to.
    Replay(Answered),
    /// Some answer is missing: the same round again (or `-32021`).
    Reask(Answered),
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
        round: Arc<Round>,
        /// What the agent resumes with.
        values: hitl_graph::ResumeValues,
    },
}

/// A call that the answers end.
#[derive(Debug)]
pub(crate) struct Finishing {
    /// The thread as loaded.
    pub(crate) thread: Thread,
    /// The answered round, for resends.
    pub(crate) last: Last,
    /// The tool's result.
    pub(crate) result: CallToolResult,
}

/// The transition for `request` on `thread` (as loaded) at `now_ms`; a claim lasts
/// `lease`.
pub(crate) fn decide(
    thread: Option<Thread>,
    request: &Answering<'_>,
    now_ms: u64,
    lease: Duration,
    secret: &Secret,
) -> Next {
    let Some(mut thread) = thread else { return Next::Invalid };
    if !bound(&thread, request.binding, request.args_digest, request.principal) {
        return Next::Invalid;
    }
    let newer_checkpoint = thread.paused().is_some_and(|p| p.checkpoint.format > hitl_graph::CHECKPOINT_FORMAT);
    if thread.format > THREAD_FORMAT || newer_checkpoint {
        return Next::Newer;
    }
    let open = thread.paused().filter(|p| secret.verify(&thread.id, p.round.n, &p.round.nonce, request.token));
    let Some(Paused { round, claim, begun, .. }) = open else {
        return replay(&thread, request.responses, request.token, request.capabilities, secret)
            .map_or(Next::Invalid, Next::Replay);
    };
    // Resume once: a live claim on this round means another request runs it.
    let claimed = claim.as_ref().is_some_and(|c| c.until_ms > now_ms && c.round == round.n);
    let (round, begun) = (round.clone(), *begun);
    let open = |sealed: &str, page: &str| secret.open(sealed, page);
    match questions::judge_opening(&round, request.responses, &open) {
        Verdict::Missing => Next::Reask(ask(&thread.id, &round, request.capabilities, secret)),
        Verdict::Invalid(e) => Next::Reject(e),
        Verdict::Finish(result) => {
            let last = last(&round, request.responses, LastOutcome::Result { result: result.clone() });
            Next::Finish(Box::new(Finishing { thread, last, result }))
        }
        Verdict::Resume(_) if claimed => Next::Wait,
        // Its run began an effect and then stopped (the server died): never again.
        Verdict::Resume(_) if begun => {
            let result = CallToolResult::error([OUTCOME_UNKNOWN.to_owned()]);
            let last = last(&round, request.responses, LastOutcome::Result { result: result.clone() });
            Next::Finish(Box::new(Finishing { thread, last, result }))
        }
        Verdict::Resume(values) => {
            let until_ms = now_ms.saturating_add(lease.as_millis() as u64);
            thread.set_claim(Some(Claim { round: round.n, until_ms }));
            thread.version += 1;
            Next::Claim { thread: Box::new(thread), round, values }
        }
    }
}

/// What a run's end needs to make the call's next round: read by the driver (now, a
/// fresh nonce) and passed in, so the round is made without a clock or a random source.
#[derive(Debug, Clone)]
pub(crate) struct Asking<'a> {
    /// The thread.
    pub(crate) thread_id: &'a str,
    /// The number of the round to make.
    pub(crate) n: u32,
    /// Now, in ms since the epoch.
    pub(crate) now_ms: u64,
    /// The new round's nonce.
    pub(crate) nonce: String,
    /// The base URL of hitl's pages, when it serves them.
    pub(crate) pages: Option<&'a str>,
    /// Why the call can't be resumed (a legacy client, a deployment without threads),
    /// when it can't: a pause then ends it with this error result.
    pub(crate) unresumable: Option<&'static str>,
    /// The client elicits: a static breakpoint is an error result (else the state).
    pub(crate) can_elicit: bool,
}

/// How a run's outcome settles the call.
#[derive(Debug)]
pub(crate) enum Settled {
    /// The call's result.
    Done(CallToolResult),
    /// The call is answered with a JSON-RPC error (an agent's
    /// [`hitl_graph::payload::ErrorReply`]).
    Failed(ErrorObject),
    /// The agent paused: its checkpoint, the round that asks its interrupts and the
    /// round's token.
    Paused(Box<Checkpoint>, Round, Minted),
}

/// How `outcome` settles the call, making round `asking.n` when the agent paused.
pub(crate) fn settle(outcome: Result<Outcome, RunError>, asking: &Asking<'_>, secret: &Secret) -> Settled {
    let done = Settled::Done;
    match outcome {
        Err(e) => done(CallToolResult::error([format!("The agent failed: {e}")])),
        Ok(Outcome::Done(output)) => match hitl_graph::payload::ErrorReply::parse(&output) {
            Some(hitl_graph::payload::ErrorReply(error)) => {
                Settled::Failed(serde_json::from_value(Value::Object(error)).unwrap_or_else(|e| {
                    ErrorObject::internal(format!("the agent answered an error that is not valid: {e}"))
                }))
            }
            None => done(tool_result(output)),
        },
        Ok(Outcome::Breakpoint { .. }) if asking.can_elicit => done(CallToolResult::error([BREAKPOINT.to_owned()])),
        Ok(Outcome::Breakpoint { state, .. }) => done(CallToolResult::from_json(state)),
        Ok(Outcome::Paused { interrupts, .. }) if asking.unresumable.is_some() => {
            let message = asking.unresumable.unwrap_or_default().to_owned();
            done(CallToolResult::error([message, pending(&interrupts)]))
        }
        Ok(Outcome::Paused { interrupts, checkpoint }) => match new_round(&interrupts, asking, secret) {
            Err(cannot) => done(cannot.to_result()),
            Ok((round, minted)) => Settled::Paused(Box::new(checkpoint), round, minted),
        },
    }
}

/// Round `asking.n` of the thread, asking `interrupts`: its token's proof, and each page
/// question's id and URL; and its token.
pub(crate) fn new_round(
    interrupts: &[Interrupt],
    asking: &Asking<'_>,
    secret: &Secret,
) -> Result<(Round, Minted), NotAskable> {
    let questions = questions::build(interrupts)?;
    let (thread_id, n, nonce) = (asking.thread_id, asking.n, asking.nonce.clone());
    let token = secret.token(thread_id, n, &nonce);
    let proof = crate::state::proof(&token);
    let minted = Minted { thread: thread_id.to_owned(), round: n, nonce: nonce.clone(), token };
    let mut round = Round { n, nonce, questions, asked_at_ms: asking.now_ms, proof };
    for (index, question) in round.questions.iter_mut().enumerate() {
        let Some(page) = &mut question.page else { continue };
        let Some(base) = asking.pages else {
            return Err(NotAskable(format!(
                "question {} is answered on hitl's pages, which this server does not serve",
                question.key
            )));
        };
        page.id = secret.page_id(thread_id, n, index);
        page.asked_at_ms = asking.now_ms;
        let hitl_protocol::InputRequest::Elicit(hitl_protocol::ElicitRequestParams::Url(url)) = &mut question.request
        else {
            continue;
        };
        url.url = match &page.kind {
            PageKind::Approval { .. } => format!("{base}/approvals/{}", page.id),
            PageKind::Secret { .. } => format!("{base}/secrets/{}", page.id),
            PageKind::SignIn => url.url.replace("{state}", &page.id),
        };
        hitl_schema::check_url(&url.url)
            .map_err(|e| NotAskable(format!("the page of question {} cannot be asked: {}", question.key, e.reason)))?;
    }
    Ok((round, minted))
}

/// A new thread's names, made once per call and shared by the thread, its run and its
/// observers.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// The thread id (a UUIDv7).
    pub(crate) id: Arc<str>,
    /// The tool (or `prompt:<name>`) it is bound to.
    pub(crate) binding: Arc<str>,
    /// Digest of the call's arguments.
    pub(crate) args_digest: Arc<str>,
}

impl Names {
    /// A new thread's id: a UUIDv7, written once for the thread and the reply.
    pub(crate) fn new_id() -> Arc<str> {
        Arc::from(&*uuid::Uuid::now_v7().hyphenated().encode_lower(&mut uuid::Uuid::encode_buffer()))
    }
}

/// Whose paused calls a new `thread` of `call` counts among: the owner it was made
/// with (shared, not made again).
pub(crate) fn owner_of(thread: &Thread, call: &ToolCall) -> Arc<str> {
    thread.owner.clone().unwrap_or_else(|| call.owner())
}

/// What a new thread is made of besides its first state: its id and what binds it.
#[derive(Debug, Clone)]
pub(crate) struct NewThread {
    /// Its id and what it is bound to.
    pub(crate) names: Names,
    /// Now, in ms since the epoch.
    pub(crate) now_ms: u64,
    /// The client follows the call as a task (the Tasks extension): its rounds are
    /// answered with [`Tasks::update`](crate::Tasks::update), in parts.
    pub(crate) task: bool,
}

/// A new call's thread paused at its first round (`round`, made by [`settle`] from the
/// agent's interrupts with the nonce passed in): unstored, version 1, living the paused
/// lifetime, a task's when the call is followed as one.
pub(crate) fn open(
    checkpoint: Checkpoint,
    round: Round,
    call: &ToolCall,
    new: NewThread,
    lifetimes: &Lifetimes,
) -> Thread {
    let (now_ms, task) = (new.now_ms, new.task);
    let expires_at_ms = now_ms.saturating_add(lifetimes.paused.as_millis() as u64);
    let mut thread = fresh(call, new, ThreadState::paused(checkpoint, round), expires_at_ms);
    thread.task = task.then(|| Box::new(TaskState::new(now_ms, (*call.capabilities).clone())));
    thread
}

/// A thread of `call` in `state`, with no round answered yet.
fn fresh(call: &ToolCall, new: NewThread, state: ThreadState, expires_at_ms: u64) -> Thread {
    Thread {
        format: THREAD_FORMAT,
        id: new.names.id,
        version: 1,
        tool: new.names.binding,
        args_digest: new.names.args_digest,
        principal: call.principal.as_deref().map(Arc::from),
        owner: Some(call.owner()),
        state,
        last: None,
        task: None,
        expires_at_ms,
    }
}

/// How a new call's first round is asked.
#[derive(Debug)]
pub(crate) enum FirstAsk {
    /// Store the thread (its format set), then answer the round.
    Ask(Box<Thread>, Unsent),
    /// The client lacks a mode the round needs: `-32021`, nothing stored.
    Lacks(ErrorObject),
    /// The record would be too large: the error, nothing stored.
    TooLarge(ErrorObject),
}

/// A new call's paused `thread` (its first round, or the round its answers led to) as
/// stored and asked.
pub(crate) fn first_ask(
    mut thread: Thread,
    capabilities: &ClientCapabilities,
    max_record_bytes: usize,
    secret: &Secret,
    minted: Option<&Minted>,
) -> FirstAsk {
    thread.format = hitl_thread::format_of(&thread);
    let round = thread.round().expect("a new call's thread is paused");
    if let Some(e) = missing_capability(round, capabilities) {
        return FirstAsk::Lacks(e);
    }
    if let Err(e) = fits(&thread, max_record_bytes) {
        return FirstAsk::TooLarge(e);
    }
    let round = thread.paused().map(|p| p.round.clone()).expect("a new call's thread is paused");
    let reply = Unsent::new(&thread.id, round, secret, minted);
    FirstAsk::Ask(Box::new(thread), reply)
}

/// How a resumed run ended (`None`: out of time, `timed_out` the error), its next
/// round made as `asking` says. `paused`: the call is stored, so a transient failure
/// gives the round back to be tried again.
pub(crate) fn ran(
    outcome: Option<Result<Outcome, RunError>>,
    paused: bool,
    timed_out: impl FnOnce() -> ErrorObject,
    asking: &Asking<'_>,
    secret: &Secret,
) -> Ran {
    match outcome {
        None => Ran::TimedOut(timed_out()),
        Some(Err(RunError::Cancelled(kept))) => Ran::Cancelled(kept),
        Some(Err(e @ RunError::Transient { .. })) if paused => {
            let message = format!(
                "The agent failed: {e}. The call is still paused after what it finished: send the same answers again to try again (what was decided and done stands)."
            );
            let RunError::Transient { kept, .. } = e else { unreachable!("matched above") };
            Ran::Retry(kept, CallToolResult::error([message]))
        }
        Some(outcome) => match settle(outcome, asking, secret) {
            Settled::Done(result) => Ran::Done(result),
            // A resumed round stores a result: the error becomes one, its data (say,
            // the pages of a `-32042`) as JSON text after its message.
            Settled::Failed(error) => {
                let data = error.data.as_ref().map(Value::to_string);
                Ran::Done(CallToolResult::error([error.message].into_iter().chain(data)))
            }
            Settled::Paused(checkpoint, next, minted) => Ran::Paused(checkpoint, next, Some(minted)),
        },
    }
}

/// An agent's output as the call's result: an MCP result it returns as is
/// ([`hitl_graph::payload::ToolResult`]), or its output as JSON.
fn tool_result(output: Value) -> CallToolResult {
    let Some(hitl_graph::payload::ToolResult(result)) = hitl_graph::payload::ToolResult::parse(&output) else {
        return CallToolResult::from_json(output);
    };
    serde_json::from_value(Value::Object(result)).unwrap_or_else(|e: serde_json::Error| {
        CallToolResult::error([format!("The agent returned a tool result that is not valid: {e}")])
    })
}

/// The pending interrupts as JSON text, the second block of the error results of calls
/// that can't be resumed.
pub(crate) fn pending(interrupts: &[Interrupt]) -> String {
    let list: Vec<Value> = interrupts.iter().map(|i| serde_json::json!({ "id": i.id, "value": i.value })).collect();
    Value::Array(list).to_string()
}

/// Does `thread` belong to this call: its tool, its arguments, its caller?
pub(crate) fn bound(thread: &Thread, binding: &str, args_digest: &str, principal: Option<&str>) -> bool {
    *thread.tool == *binding && *thread.args_digest == *args_digest && thread.principal.as_deref() == principal
}

/// How a claimed round's run ended, as the engine saw it.
#[derive(Debug)]
pub(crate) enum Ran {
    /// The request's time ran out (the run was dropped mid-step).
    TimedOut(ErrorObject),
    /// The client went away; the checkpoint holds every superstep that finished.
    Cancelled(Box<hitl_graph::Checkpoint>),
    /// A step failed in a way that may pass (a model API down): the checkpoint holds
    /// every superstep that finished; the call gets this error result.
    Retry(Box<hitl_graph::Checkpoint>, CallToolResult),
    /// The run ended with the call's result.
    Done(CallToolResult),
    /// The run paused again: its checkpoint and next round (and the round's token, when
    /// just made).
    Paused(Box<hitl_graph::Checkpoint>, Round, Option<Minted>),
}

/// What to store after a claimed round's run, and what to answer.
#[derive(Debug)]
pub(crate) enum Ending {
    /// Release the round unanswered (the run is to be done again, or continued from
    /// the kept supersteps): store the thread, fail the call with the error.
    GiveBack(Box<Thread>, ErrorObject),
    /// Release the round unanswered, as [`Ending::GiveBack`], answering with an error
    /// result: the same answers sent again try the failed step again.
    Retry(Box<Thread>, CallToolResult),
    /// The call ended: store the finished thread (and stop counting it), answer. The
    /// result answered is the record's own, taken back with [`kept_result`] once the
    /// record is stored (not copied while both live), or, when the record keeps an
    /// error in its place (too large to keep), the one given here.
    Finished(Box<Thread>, Option<CallToolResult>),
    /// The next round: store the thread (and count it to its new expiry), answer.
    NextRound(Box<Thread>, Answered),
}

/// What the end of a run decides, given the thread as claimed (its claim already
/// released and its version the one to compare on).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EndOf<'a> {
    /// The answered round.
    pub(crate) round: &'a Round,
    /// Its answers.
    pub(crate) responses: &'a InputResponses,
    /// What the client can do.
    pub(crate) capabilities: &'a ClientCapabilities,
    /// Now, in ms since the epoch.
    pub(crate) now_ms: u64,
    /// How long threads live.
    pub(crate) lifetimes: &'a crate::Lifetimes,
    /// The largest record stored.
    pub(crate) max_record_bytes: usize,
    /// The last superstep in which the run began an effect (`None`: it began none): a
    /// checkpoint kept past it holds every effect, so the round's outcome is known.
    pub(crate) began_in: Option<u32>,
}

/// The transition at the end of a claimed round's run. `thread` is the thread as loaded
/// at the claim, claim removed; every thread returned has its version bumped past it.
pub(crate) fn end_run(mut thread: Thread, ran: Ran, end: &EndOf<'_>, secret: &Secret) -> Ending {
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
            let last = last(end.round, end.responses, LastOutcome::Result { result });
            let (thread, own) = finished_keeping(thread, last, end.now_ms, end.lifetimes, end.max_record_bytes);
            Ending::Finished(Box::new(thread), own)
        }
        Ran::Paused(checkpoint, next, minted) => {
            let missing = missing_capability(&next, end.capabilities);
            let lifetime = if missing.is_some() { end.lifetimes.waiting_for_capability } else { end.lifetimes.paused };
            let reply = match missing {
                Some(e) => Err(e),
                None => Ok(render(&thread.id, &next, secret, minted.as_ref())),
            };
            thread.version += 1;
            // The fields a next round changes, kept to give the round back unchanged
            // when the new record would be too large (the new state has no claim and has
            // begun nothing).
            let kept_last = thread.last.replace(Arc::new(last(end.round, end.responses, LastOutcome::NextRound)));
            let kept_state = std::mem::replace(&mut thread.state, ThreadState::paused(*checkpoint, next));
            let kept_expiry =
                std::mem::replace(&mut thread.expires_at_ms, end.now_ms.saturating_add(lifetime.as_millis() as u64));
            // A task's answers were for the round just answered.
            let kept_task = thread.task.clone();
            if let Some(task) = &mut thread.task {
                task.partial.clear();
                task.updated_at_ms = end.now_ms;
            }
            thread.format = hitl_thread::format_of(&thread);
            if let Err(e) = fits(&thread, end.max_record_bytes) {
                (thread.last, thread.state, thread.expires_at_ms, thread.task) =
                    (kept_last, kept_state, kept_expiry, kept_task);
                return Ending::GiveBack(Box::new(thread), e);
            }
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
    let Some(paused) = thread.paused_mut().filter(|p| checkpoint.superstep > p.checkpoint.superstep) else { return };
    let superstep = checkpoint.superstep;
    let before = (std::mem::replace(&mut paused.checkpoint, Arc::new(checkpoint)), paused.begun);
    if end.began_in.is_some_and(|began| superstep > began) {
        paused.begun = false;
    }
    if fits(thread, end.max_record_bytes).is_err()
        && let Some(paused) = thread.paused_mut()
    {
        (paused.checkpoint, paused.begun) = before;
    }
}

/// `thread` ended with `last`, version bumped, kept for resends for the finished
/// lifetime. A result too large to keep is replaced, for resends only, by an error
/// result that says so.
pub(crate) fn finished(
    thread: Thread,
    last: Last,
    now_ms: u64,
    lifetimes: &crate::Lifetimes,
    max_record_bytes: usize,
) -> Thread {
    finished_keeping(thread, last, now_ms, lifetimes, max_record_bytes).0
}

/// [`finished`], with the result `last` ended on when the record keeps an error in its
/// place (too large to keep).
fn finished_keeping(
    mut thread: Thread,
    last: Last,
    now_ms: u64,
    lifetimes: &crate::Lifetimes,
    max_record_bytes: usize,
) -> (Thread, Option<CallToolResult>) {
    thread.version += 1;
    thread.state = ThreadState::Finished;
    if let Some(task) = &mut thread.task {
        task.partial.clear();
        task.updated_at_ms = now_ms;
    }
    thread.expires_at_ms = now_ms.saturating_add(lifetimes.finished.as_millis() as u64);
    thread.last = Some(Arc::new(last));
    let mut own = None;
    if let Err(too_large) = fits(&thread, max_record_bytes)
        && let Some(last) = &mut thread.last
    {
        let kept = LastOutcome::Result { result: CallToolResult::error([too_large.message]) };
        if let LastOutcome::Result { result } = std::mem::replace(&mut Arc::make_mut(last).outcome, kept) {
            own = Some(result);
        }
    }
    (thread, own)
}

/// The result a finished record keeps for resends (`last`, taken from the record once
/// it is stored): moved out when nothing else holds it, else copied.
pub(crate) fn kept_result(last: Option<Arc<Last>>) -> CallToolResult {
    let last = last.expect("a finished record keeps its last round");
    match Arc::try_unwrap(last).map_or_else(|shared| shared.outcome.clone(), |last| last.outcome) {
        LastOutcome::Result { result } => result,
        LastOutcome::NextRound => unreachable!("a finished record keeps the result it ended on"),
    }
}

/// Is the record within `max_record_bytes` as JSON? The error says by how much not.
/// Records are only serialized when a cheap upper bound of their size passes the limit.
pub(crate) fn fits(thread: &Thread, max_record_bytes: usize) -> Result<(), ErrorObject> {
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
