//! How a round is put to a client: its `input_required` result with the round's
//! `requestState`, or `-32021` when the client lacks a mode the round needs. Pure.

use std::sync::Arc;

use hitl_protocol::{CallToolResponse, ClientCapabilities, ErrorObject, InputRequests, InputRequiredResult};

use crate::state::{Minted, Secret};
use crate::{Answered, Round, questions};

/// The round as an `input_required` reply, or `-32021` when the client lacks a mode
/// it needs.
pub(crate) fn ask(thread_id: &str, round: &Round, capabilities: &ClientCapabilities, secret: &Secret) -> Answered {
    match missing_capability(round, capabilities) {
        Some(e) => Err(e),
        None => Ok(render(thread_id, round, secret, None)),
    }
}

/// `-32021` naming every mode the round needs that the client lacks, if it lacks one.
pub(crate) fn missing_capability(round: &Round, capabilities: &ClientCapabilities) -> Option<ErrorObject> {
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

/// The round's `input_required` result with its `requestState` (its token `minted`
/// with the round, when it was just made).
pub(crate) fn render(thread_id: &str, round: &Round, secret: &Secret, minted: Option<&Minted>) -> CallToolResponse {
    let request_state = secret.request_state_of(thread_id, round.n, &round.nonce, minted);
    input_required(copied(round), request_state)
}

/// A round's reply, made once the round is stored: its questions are moved into it
/// when nothing else holds the round any more (a store keeps a round encoded, not
/// shared), and copied only when something does.
#[derive(Debug)]
pub(crate) struct Unsent {
    round: Arc<Round>,
    request_state: String,
}

impl Unsent {
    /// The reply to `round` of thread `thread_id` (its token `minted` with it, when it
    /// was just made).
    pub(crate) fn new(thread_id: &str, round: Arc<Round>, secret: &Secret, minted: Option<&Minted>) -> Self {
        let request_state = secret.request_state_of(thread_id, round.n, &round.nonce, minted);
        Self { round, request_state }
    }

    /// The `input_required` result.
    pub(crate) fn reply(self) -> CallToolResponse {
        let requests = match Arc::try_unwrap(self.round) {
            Ok(round) => round.questions.into_iter().map(|q| (q.key, q.request)).collect(),
            Err(shared) => copied(&shared),
        };
        input_required(requests, self.request_state)
    }
}

fn copied(round: &Round) -> InputRequests {
    round.questions.iter().map(|q| (q.key.clone(), q.request.clone())).collect()
}

fn input_required(requests: InputRequests, request_state: String) -> CallToolResponse {
    CallToolResponse::InputRequired(InputRequiredResult::new(requests, request_state))
}
