//! Resends: the answers that resolved a round are kept (as [`Last`]: the round's token
//! material, its question keys and a digest of the answers), so the same answers sent
//! again get what they led to, once the round is gone. Pure.

use hitl_protocol::{CallToolResponse, ClientCapabilities, InputResponses};

use crate::state::Secret;
use crate::{Answered, Last, LastOutcome, Round, Thread, ask};
use hitl_thread::digest_hex_of_entries;

/// A resend of the last round's answers gets what they led to; `None` when these are
/// not that round's token and answers.
pub(crate) fn replay(
    thread: &Thread,
    responses: &InputResponses,
    token: &str,
    capabilities: &ClientCapabilities,
    secret: &Secret,
) -> Option<Answered> {
    let last = thread.last.as_ref()?;
    if !secret.verify(&thread.id, last.round, &last.nonce, token) {
        return None;
    }
    if answers_digest(&last.keys, responses) != last.answers_digest {
        return None;
    }
    Some(match &last.outcome {
        LastOutcome::Result { result } => Ok(CallToolResponse::Complete(result.clone())),
        LastOutcome::NextRound => ask::ask(&thread.id, thread.round()?, capabilities, secret),
    })
}

/// The answered round, as kept for resends.
pub(crate) fn last(round: &Round, responses: &InputResponses, outcome: LastOutcome) -> Last {
    Last {
        round: round.n,
        nonce: round.nonce.clone(),
        keys: round.questions.iter().map(|q| q.key.clone()).collect(),
        answers_digest: answers_digest_of(round, responses),
        outcome,
    }
}

/// Digest of the answers to `keys` (others are ignored), to recognise a resend of the
/// same answers.
pub(crate) fn answers_digest(keys: &[String], responses: &InputResponses) -> String {
    answers_digest_by(keys.iter().map(String::as_str), responses)
}

/// [`answers_digest`] over the round's own keys.
pub(crate) fn answers_digest_of(round: &Round, responses: &InputResponses) -> String {
    answers_digest_by(round.questions.iter().map(|q| q.key.as_str()), responses)
}

/// The digest of the object of the answers to `keys`, made without copying them.
fn answers_digest_by<'a>(keys: impl Iterator<Item = &'a str>, responses: &'a InputResponses) -> String {
    digest_hex_of_entries(keys.filter_map(|k| responses.get(k).map(|v| (k, v))))
}
