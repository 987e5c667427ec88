//! The thread record: one per paused or recently finished call.

use hitl_graph::Checkpoint;
use hitl_protocol::{CallToolResult, InputRequest};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The newest format version of [`Thread`] records this crate reads and writes. A
/// record is written as format 1 unless it needs 2 (a round with a question answered
/// on a page), so replicas of the build before pages keep serving the others during a
/// rolling upgrade, and refuse the ones they would get wrong. Format 4 is a store's:
/// a record whose claim and version the store keeps beside it rather than in it (the
/// Redis store, which claims a round in the step that loads it), so that a replica that
/// would look for the claim inside refuses the record instead of resuming it twice.
pub const THREAD_FORMAT: u32 = 4;

/// The format of records whose claim and version a store keeps beside the record. A
/// store that claims as it loads claims only records of this format; so a later build
/// that changes the record or its checkpoint in a way this one must not resume writes
/// a later format.
pub const CLAIM_BESIDE_FORMAT: u32 = 4;

/// What binds a call to its thread (the tool, its arguments' digest, the caller), as
/// one SHA-256 in hex: a store that claims as it loads compares it with the request's
/// without reading the record, so a request for another call claims nothing.
pub fn binding_digest(tool: &str, args_digest: &str, principal: Option<&str>) -> String {
    let principal = principal.map_or_else(|| "-".to_owned(), |p| format!("+{p}"));
    let bound = format!("hitl/binding/v1\n{tool}\n{args_digest}\n{principal}");
    crate::digest::hex(ring::digest::digest(&ring::digest::SHA256, bound.as_bytes()).as_ref())
}

/// The proof of a token (the part of a `requestState` after the dot): SHA-1 of it, in
/// hex. A record may keep it where it keeps no token: a 256-bit MAC can't be found
/// from its hash. SHA-1 because it is what Redis scripts can compute
/// (`redis.sha1hex`), so a script can check a presented token without the secret.
pub fn proof(token: &str) -> String {
    crate::digest::hex(ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, token.as_bytes()).as_ref())
}

/// The format a record needs: 3 for a task (the Tasks extension), 2 when its open round
/// has a page question, else 1.
pub fn format_of(thread: &Thread) -> u32 {
    let paged = thread.round.as_ref().is_some_and(|r| r.questions.iter().any(|q| q.page.is_some()));
    if thread.task.is_some() {
        3
    } else if paged {
        2
    } else {
        1
    }
}

/// A call its client follows as a task (the Tasks extension): when it was made and last
/// changed, the answers given so far to its open round (a task takes them in parts),
/// and whether it was cancelled.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TaskState {
    /// When the task was made (ms since the epoch).
    pub created_at_ms: u64,
    /// When its state last changed.
    pub updated_at_ms: u64,
    /// Answers to the open round, by question key, until every question has one.
    #[serde(default, skip_serializing_if = "hitl_protocol::InputResponses::is_empty")]
    pub partial: hitl_protocol::InputResponses,
    /// Cancelled by its client.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
    /// The JSON-RPC error its run ended with (the task `failed`; a tool's error result
    /// is a completed task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<hitl_protocol::ErrorObject>,
    /// What the client that made the task can answer: its rounds are run for it, whatever
    /// a later `tasks/update` declares.
    #[serde(default)]
    pub capabilities: hitl_protocol::ClientCapabilities,
}

impl TaskState {
    /// A task made at `now_ms` by a client that can answer `capabilities`.
    pub fn new(now_ms: u64, capabilities: hitl_protocol::ClientCapabilities) -> Self {
        Self {
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            partial: Default::default(),
            cancelled: false,
            error: None,
            capabilities,
        }
    }
}

/// One paused or recently finished tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Thread {
    /// [`THREAD_FORMAT`] when written.
    pub format: u32,
    /// A UUIDv7.
    pub id: String,
    /// Bumped on every save; saves compare and set on it.
    pub version: u64,
    /// The tool the call was made to.
    pub tool: String,
    /// Digest of the canonical JSON of the call's arguments.
    pub args_digest: String,
    /// Who made the call, when the server knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// Whose paused calls this one counts among (the principal, or the caller's
    /// address), while it is counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Where the agent stopped, while it is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Checkpoint>,
    /// The open round, while the agent is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<Round>,
    /// The last round answered and what it led to, for resends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Last>,
    /// A request resuming the open round, while it runs the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<Claim>,
    /// The open round whose run began an effect that must happen at most once
    /// ([`hitl_graph::StepContext::begin_effect`]): if that run never finishes, the
    /// round ends with its outcome unknown instead of running again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begun: Option<u32>,
    /// The call as a task, when its client follows it as one (the Tasks extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskState>,
    /// When the record expires (ms since the epoch).
    pub expires_at_ms: u64,
}

impl Thread {
    /// A task's first run going on in a process (the engine's `Tasks::start`): no
    /// round asked yet and no end, while the run's claim holds.
    pub fn working(&self, now_ms: u64) -> bool {
        self.round.is_none() && self.last.is_none() && self.live_claim(now_ms).is_some()
    }

    /// The claim, while it holds at `now_ms` (a request is running the call); a claim
    /// that lasts until then or before has lapsed.
    pub fn live_claim(&self, now_ms: u64) -> Option<&Claim> {
        self.claim.as_ref().filter(|c| c.until_ms > now_ms)
    }

    /// [`binding_digest`] of this thread's call.
    pub fn binding_digest(&self) -> String {
        binding_digest(&self.tool, &self.args_digest, self.principal.as_deref())
    }

    /// The open round a store may claim in the step that loads it
    /// ([`crate::ThreadStore::load_claiming`]), and its proof: a paused call's (not a
    /// task's) round with a proof, whose run has begun no effect, in a record this build
    /// reads (a newer one is left untouched).
    pub fn claimable(&self) -> Option<(u32, &str)> {
        let round = self.round.as_ref().filter(|r| !r.proof.is_empty())?;
        let readable = self.format <= THREAD_FORMAT
            && self.checkpoint.as_ref().is_some_and(|c| c.format <= hitl_graph::CHECKPOINT_FORMAT);
        let plain = readable && self.task.is_none() && self.begun != Some(round.n);
        plain.then_some((round.n, round.proof.as_str()))
    }

    /// The record without its checkpoint and last round: what observers are shown,
    /// copied without the agent's state.
    pub fn summary(&self) -> Thread {
        Thread {
            format: self.format,
            id: self.id.clone(),
            version: self.version,
            tool: self.tool.clone(),
            args_digest: self.args_digest.clone(),
            principal: self.principal.clone(),
            owner: self.owner.clone(),
            checkpoint: None,
            round: self.round.clone(),
            last: None,
            claim: self.claim.clone(),
            begun: self.begun,
            task: None,
            expires_at_ms: self.expires_at_ms,
        }
    }
}

/// A round claimed by the request that resumes the agent, so that it resumes once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// The round claimed.
    pub round: u32,
    /// When the claim lapses and another request may take the round over.
    pub until_ms: u64,
}

/// A round of questions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Round {
    /// 1 for the first round.
    pub n: u32,
    /// The random input of this round's `requestState` token.
    pub nonce: String,
    /// The questions, in the order asked.
    pub questions: Vec<Question>,
    /// When it was asked (ms since the epoch; 0 in records of builds before it was
    /// kept): the time people take to answer is measured from it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub asked_at_ms: u64,
    /// [`proof`] of this round's token (empty in records of builds before
    /// it was kept): lets a store check a presented `requestState` without the secret,
    /// so that it can claim the round in the step that loads it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub proof: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One question of a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// Its key in `inputRequests`.
    pub key: String,
    /// The request as sent.
    pub request: InputRequest,
    /// How the answer becomes resume values.
    pub kind: QuestionKind,
    /// The interrupts this question answers (several when they asked the same).
    pub interrupt_ids: Vec<String>,
    /// Set when the question is answered on one of hitl's pages (by an approver, or by
    /// the person typing a secret, or by a sign-in's callback), not by the client: the
    /// client is sent there by URL, and its `accept` only says "look again".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<Page>,
}

/// A question answered on a page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page {
    /// Its id in the page's URL (`Secret::page_id` in `hitl-interrupt`).
    pub id: String,
    /// What the page asks.
    pub kind: PageKind,
    /// The page's answer, once given: the review form's content of an approver's
    /// decision, a sealed secret, or a sign-in callback's query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<serde_json::Value>,
    /// Who gave it (a principal), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
    /// When it was given (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_at_ms: Option<u64>,
    /// When the question was asked (ms since the epoch).
    #[serde(default)]
    pub asked_at_ms: u64,
}

/// What a page asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PageKind {
    /// A tool call for one of `approvers` to decide (the question's kind is its review).
    Approval {
        /// `user:<id>` and `group:<name>` entries.
        approvers: Vec<String>,
        /// The policy that asks for the approval.
        policy: String,
        /// The review form the approver fills in (the seed's decision, message, args).
        form: hitl_protocol::RequestedSchema,
        /// What the page shows of the call besides its arguments (absent in records of
        /// builds before it was kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        about: Option<Box<About>>,
    },
    /// A sensitive value.
    Secret {
        /// What the value is.
        label: String,
    },
    /// A third party's sign-in, completed by its redirect to the callback.
    SignIn,
}

/// What an approval page shows of a call besides its arguments, so the approver knows
/// what will run it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct About {
    /// The review text the agent gave (a policy's `description`, filled in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The upstream server that runs the call (none: hitl itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// The tool's own description, as its server lists it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_description: Option<String>,
    /// The tool's annotations, as its server lists them (`destructiveHint`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<serde_json::Map<String, serde_json::Value>>,
    /// Where the policy that asks is written (`hitl.toml:12`), and a digest of its
    /// text (absent in records of builds before they were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_at: Option<String>,
    /// A digest of the policy's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_digest: Option<String>,
}

/// How a question's answer is turned into what the agent resumes with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum QuestionKind {
    /// A string interrupt: the agent gets the `response` field's string.
    Text,
    /// An interrupt with a response schema: the agent gets the form's content, or the
    /// `response` field's value when the schema was not an object (`wrapped`).
    Typed {
        /// Whether the form wraps a non-object schema in one `response` field.
        wrapped: bool,
    },
    /// A relayed request: the agent gets `{"responses": {agent_key: answer}}` with the
    /// answers to every request of its interrupt, declines and cancels included.
    Relay {
        /// The agent's own key for the request.
        agent_key: String,
    },
    /// A tool call to review: the answer becomes the middleware's decision.
    Review(Review),
    /// A secret or a sign-in asked on a page: the agent gets `{"action": …}` with the
    /// `value` or the callback's `params` when accepted.
    Page,
}

/// How a review question's answer goes back to the middleware that asked for the
/// review (the logic is `hitl-interrupt`'s `review` module).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Review {
    /// The tool the call would run.
    pub tool: String,
    /// The arguments the model chose.
    pub args: Map<String, Value>,
    /// The decisions the question offers.
    pub offered: Vec<String>,
    /// Batched (the `index` of the call in its interrupt) or per call.
    pub mode: ReviewMode,
}

/// The interrupt mode of a review question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum ReviewMode {
    /// One interrupt for every call: decisions go back in order.
    Batched {
        /// The call's position in its interrupt.
        index: usize,
        /// How many calls the interrupt holds.
        count: usize,
        /// The JavaScript middleware: edits are `editedAction`.
        camel_case: bool,
    },
    /// One interrupt per call, with a schema every decision must fit.
    PerCall {
        /// The interrupt's response schema.
        schema: Option<Value>,
    },
}

/// The last round answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Last {
    /// Its number.
    pub round: u32,
    /// Its nonce, to recognise its `requestState`.
    pub nonce: String,
    /// The keys it asked.
    pub keys: Vec<String>,
    /// Digest of the answers it was given (to its own keys only).
    pub answers_digest: String,
    /// What the answers led to.
    pub outcome: LastOutcome,
}

/// What answering a round led to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LastOutcome {
    /// The tool's result.
    Result {
        /// The result.
        result: CallToolResult,
    },
    /// The thread's current round.
    NextRound,
}
