//! The round's thread transitions as pure functions of (thread record, request, now,
//! secret): no store, no clock, no runtime. The engine loads, calls [`decide`], and
//! carries out what it returns.

use std::time::Duration;

use hitl_protocol::{
    CallToolResponse, CallToolResult, ClientCapabilities, ErrorObject, InputRequests, InputRequiredResult,
    InputResponses,
};

use crate::questions::{self, Verdict};
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
    match questions::judge(&round, request.responses) {
        Verdict::Missing => Next::Reask(ask(&thread.id, &round, request.capabilities, secret)),
        Verdict::Invalid(e) => Next::Reject(e),
        Verdict::Finish(result) => {
            let last = last(&round, request.responses, LastOutcome::Result { result: result.clone() });
            Next::Finish(Box::new(Finishing { thread, last, result }))
        }
        Verdict::Resume(values) => {
            // Resume once: a live claim on this round means another request runs it.
            if thread.claim.as_ref().is_some_and(|c| c.round == round.n && c.until_ms > now_ms) {
                return Next::Wait;
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

/// A resend of the last round's answers gets what they led to; `None` when these are
/// not that round's token and answers.
pub fn replay(
    thread: &Thread,
    responses: &InputResponses,
    token: &str,
    capabilities: &ClientCapabilities,
    secret: &Secret,
) -> Option<Reply> {
    let last = thread.last.as_ref()?;
    if !secret.verify(&thread.id, last.round, &last.nonce, token) {
        return None;
    }
    if questions::answers_digest(&last.keys, responses) != last.answers_digest {
        return None;
    }
    Some(match &last.outcome {
        LastOutcome::Result { result } => Ok(CallToolResponse::Complete(result.clone())),
        LastOutcome::NextRound => ask(&thread.id, thread.round.as_ref()?, capabilities, secret),
    })
}

/// The round as an `input_required` reply, or `-32021` when the client lacks a mode
/// it needs.
pub fn ask(thread_id: &str, round: &Round, capabilities: &ClientCapabilities, secret: &Secret) -> Reply {
    match missing_capability(round, capabilities) {
        Some(e) => Err(e),
        None => Ok(render(thread_id, round, secret)),
    }
}

/// The answered round, as kept for resends.
pub fn last(round: &Round, responses: &InputResponses, outcome: LastOutcome) -> Last {
    Last {
        round: round.n,
        nonce: round.nonce.clone(),
        keys: round.questions.iter().map(|q| q.key.clone()).collect(),
        answers_digest: questions::answers_digest_of(round, responses),
        outcome,
    }
}

/// `-32021` naming every mode the round needs that the client lacks, if it lacks one.
pub fn missing_capability(round: &Round, capabilities: &ClientCapabilities) -> Option<ErrorObject> {
    let needs = questions::needs(&round.questions);
    let missing = needs.missing_from(capabilities);
    if missing.is_empty() {
        return None;
    }
    let mode = if missing.form {
        "form elicitation"
    } else if missing.url {
        "url elicitation"
    } else if missing.sampling {
        "sampling"
    } else {
        "roots"
    };
    // Every mode the round needs among the kinds the client misses (so a client that
    // lacks elicitation altogether learns of both form and url).
    let elicitation_missing = missing.form || missing.url;
    let required = hitl_protocol::Needs {
        form: elicitation_missing && needs.form,
        url: elicitation_missing && needs.url,
        sampling: missing.sampling,
        roots: missing.roots,
    };
    Some(ErrorObject::missing_capability(
        format!("This tool asks for human input and needs {mode}."),
        &required.to_capabilities(),
    ))
}

/// The round's `input_required` result with its `requestState`.
pub fn render(thread_id: &str, round: &Round, secret: &Secret) -> CallToolResponse {
    let requests: InputRequests = round.questions.iter().map(|q| (q.key.clone(), q.request.clone())).collect();
    let request_state = secret.request_state(thread_id, round.n, &round.nonce);
    CallToolResponse::InputRequired(InputRequiredResult::new(requests, request_state))
}

#[cfg(test)]
mod tests;
