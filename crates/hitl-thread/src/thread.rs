//! The thread record: one per paused or recently finished call.

use hitl_graph::Checkpoint;
use hitl_protocol::{CallToolResult, InputRequest};
use std::sync::Arc;

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
    crate::digest::sha256_hex(bound.as_bytes())
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
    let paged = thread.round().is_some_and(|r| r.questions.iter().any(|q| q.page.is_some()));
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
///
/// Stores keep it as one flat JSON object, as written since format 1 ([`Record`]):
/// [`ThreadState`] is that object read as the one state the call is in, so the record's
/// JSON did not change when the state became an enum, and builds before it and after
/// it read each other's records.
#[derive(Debug, Clone, PartialEq)]
pub struct Thread {
    /// [`THREAD_FORMAT`] when written.
    pub format: u32,
    /// A UUIDv7. The call's names are shared: a thread's copies (a load from memory,
    /// an observer's, an audit entry's) copy no text.
    pub id: Arc<str>,
    /// Bumped on every save; saves compare and set on it.
    pub version: u64,
    /// The tool the call was made to.
    pub tool: Arc<str>,
    /// Digest of the canonical JSON of the call's arguments.
    pub args_digest: Arc<str>,
    /// Who made the call, when the server knows.
    pub principal: Option<Arc<str>>,
    /// Whose paused calls this one counts among (the principal, or the caller's
    /// address), while it is counted.
    pub owner: Option<Arc<str>>,
    /// Where the call stands: paused at a round, run before its first round, or ended.
    pub state: ThreadState,
    /// The last round answered and what it led to, for resends. Shared, as the open
    /// round: a thread is moved through the futures of a round (small moves are cheap)
    /// and a store keeping it in memory hands out copies without copying it.
    pub last: Option<Arc<Last>>,
    /// The call as a task, when its client follows it as one (the Tasks extension).
    pub task: Option<Box<TaskState>>,
    /// When the record expires (ms since the epoch).
    pub expires_at_ms: u64,
}

/// Where a call stands.
#[derive(Debug, Clone, PartialEq)]
pub enum ThreadState {
    /// The agent stopped at a round of questions.
    Paused(Paused),
    /// A task's first run, going on in a process before it asked any round (the
    /// engine's `Tasks::start`) while its claim holds; a run whose claim lapsed died.
    Working {
        /// The run's claim, on round 0.
        claim: Option<Claim>,
    },
    /// The call ended: [`Thread::last`] holds its result (a task's holds none when it
    /// failed or was cancelled, as its [`TaskState`] says).
    Finished,
}

/// A call paused at a round.
#[derive(Debug, Clone, PartialEq)]
pub struct Paused {
    /// Where the agent stopped. Shared: copies of the thread (for observers, for a
    /// transition that may be given back) do not copy the agent's state.
    pub checkpoint: Arc<Checkpoint>,
    /// The open round. Shared, as the checkpoint: a load from a store that keeps the
    /// thread in memory copies no question (a change is made on a copy of its own,
    /// [`Arc::make_mut`]).
    pub round: Arc<Round>,
    /// A request resuming the round, while it runs the agent.
    pub claim: Option<Claim>,
    /// The round's run began an effect that must happen at most once
    /// ([`hitl_graph::StepContext::begin_effect`]): if that run never finishes, the
    /// round ends with its outcome unknown instead of running again.
    pub begun: bool,
}

impl ThreadState {
    /// Paused at `round` with `checkpoint`, nothing claimed or begun.
    pub fn paused(checkpoint: impl Into<Arc<Checkpoint>>, round: impl Into<Arc<Round>>) -> Self {
        Self::Paused(Paused { checkpoint: checkpoint.into(), round: round.into(), claim: None, begun: false })
    }
}

impl Thread {
    /// The state, while paused.
    pub fn paused(&self) -> Option<&Paused> {
        match &self.state {
            ThreadState::Paused(paused) => Some(paused),
            _ => None,
        }
    }

    /// The state, while paused, to change.
    pub fn paused_mut(&mut self) -> Option<&mut Paused> {
        match &mut self.state {
            ThreadState::Paused(paused) => Some(paused),
            _ => None,
        }
    }

    /// The open round, while paused.
    pub fn round(&self) -> Option<&Round> {
        self.paused().map(|p| &*p.round)
    }

    /// The claim of a request (or a task's first run) running the call, live or lapsed.
    pub fn claim(&self) -> Option<&Claim> {
        match &self.state {
            ThreadState::Paused(Paused { claim, .. }) | ThreadState::Working { claim } => claim.as_ref(),
            ThreadState::Finished => None,
        }
    }

    /// Sets the claim (a store keeping it beside the record puts it back); an ended
    /// call has nothing to claim and keeps none.
    pub fn set_claim(&mut self, claim: Option<Claim>) {
        match &mut self.state {
            ThreadState::Paused(Paused { claim: slot, .. }) | ThreadState::Working { claim: slot } => *slot = claim,
            ThreadState::Finished => {}
        }
    }

    /// Takes the claim out (a store that keeps it beside the record).
    pub fn take_claim(&mut self) -> Option<Claim> {
        match &mut self.state {
            ThreadState::Paused(Paused { claim, .. }) | ThreadState::Working { claim } => claim.take(),
            ThreadState::Finished => None,
        }
    }

    /// A task's first run going on in a process (the engine's `Tasks::start`): no
    /// round asked yet and no end, while the run's claim holds.
    pub fn working(&self, now_ms: u64) -> bool {
        matches!(&self.state, ThreadState::Working { claim: Some(c) } if c.until_ms > now_ms)
    }

    /// The claim, while it holds at `now_ms` (a request is running the call); a claim
    /// that lasts until then or before has lapsed.
    pub fn live_claim(&self, now_ms: u64) -> Option<&Claim> {
        self.claim().filter(|c| c.until_ms > now_ms)
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
        let paused = self.paused().filter(|p| !p.round.proof.is_empty() && !p.begun)?;
        let readable = self.format <= THREAD_FORMAT && paused.checkpoint.format <= hitl_graph::CHECKPOINT_FORMAT;
        (readable && self.task.is_none()).then_some((paused.round.n, paused.round.proof.as_str()))
    }
}

/// A [`Thread`] as stores keep it: one flat object whose optional fields say the state
/// (a round and its checkpoint while paused; neither once ended), unchanged since
/// format 1. Written from a borrowed thread, read into an owned one (a field left out
/// reads as none).
#[derive(Serialize, Deserialize)]
struct Record<C, R, L, K, T, S> {
    format: u32,
    id: S,
    version: u64,
    tool: S,
    args_digest: S,
    #[serde(skip_serializing_if = "Option::is_none")]
    principal: Option<S>,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<S>,
    #[serde(skip_serializing_if = "Option::is_none")]
    checkpoint: Option<C>,
    #[serde(skip_serializing_if = "Option::is_none")]
    round: Option<R>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last: Option<L>,
    #[serde(skip_serializing_if = "Option::is_none")]
    claim: Option<K>,
    /// The round whose run began an effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    begun: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task: Option<T>,
    expires_at_ms: u64,
}

impl Serialize for Thread {
    fn serialize<Z: serde::Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        let paused = self.paused();
        let record = Record {
            format: self.format,
            id: &*self.id,
            version: self.version,
            tool: &*self.tool,
            args_digest: &*self.args_digest,
            principal: self.principal.as_deref(),
            owner: self.owner.as_deref(),
            checkpoint: paused.map(|p| &*p.checkpoint),
            round: paused.map(|p| &*p.round),
            last: self.last.as_deref(),
            claim: self.claim(),
            begun: paused.filter(|p| p.begun).map(|p| p.round.n),
            task: self.task.as_deref(),
            expires_at_ms: self.expires_at_ms,
        };
        record.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Thread {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let record = Record::<Checkpoint, Round, Last, Claim, TaskState, Text>::deserialize(deserializer)?;
        let state = match (record.checkpoint, record.round) {
            (Some(checkpoint), Some(round)) => ThreadState::Paused(Paused {
                begun: record.begun == Some(round.n),
                checkpoint: Arc::new(checkpoint),
                round: Arc::new(round),
                claim: record.claim,
            }),
            (None, Some(round)) => {
                return Err(serde::de::Error::custom(format!("round {} has no checkpoint", round.n)));
            }
            (Some(_), None) => return Err(serde::de::Error::custom("a checkpoint without its round")),
            (None, None) => {
                let running = record.task.as_ref().is_some_and(|t| !t.cancelled && t.error.is_none());
                if running && record.last.is_none() {
                    ThreadState::Working { claim: record.claim }
                } else {
                    ThreadState::Finished
                }
            }
        };
        Ok(Thread {
            format: record.format,
            id: record.id.0,
            version: record.version,
            tool: record.tool.0,
            args_digest: record.args_digest.0,
            principal: record.principal.map(|t| t.0),
            owner: record.owner.map(|t| t.0),
            state,
            last: record.last.map(Arc::new),
            task: record.task.map(Box::new),
            expires_at_ms: record.expires_at_ms,
        })
    }
}

/// A record's name read straight into a shared string (one allocation, as a `String`;
/// serde's own `Arc<str>` reads a `Box<str>` first and copies it).
struct Text(Arc<str>);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Text;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Text, E> {
                Ok(Text(Arc::from(text)))
            }
        }
        deserializer.deserialize_str(Visit)
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
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
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
    pub page: Option<Box<Page>>,
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
    /// What an approval covers besides this call, told to the approver (`[[policy]]
    /// approval_ttl`; absent: this call only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub covers: Option<String>,
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
    /// A tool call to review: the answer becomes the middleware's decision. Boxed: the
    /// other kinds are small, and a paused call keeps its questions.
    Review(Box<Review>),
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
#[allow(clippy::large_enum_variant, reason = "kept once per answered round, shared (Arc) by the loads of its thread")]
pub enum LastOutcome {
    /// The tool's result.
    Result {
        /// The result.
        result: CallToolResult,
    },
    /// The thread's current round.
    NextRound,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record with `fields` besides its identity.
    fn record(fields: &str) -> String {
        let sep = if fields.is_empty() { "" } else { "," };
        format!(r#"{{"format":1,"id":"t","version":2,"tool":"x","args_digest":"d"{sep}{fields},"expires_at_ms":9}}"#)
    }

    const PAUSED: &str = r#""checkpoint":{"format":1,"state":{},"next":["ask"],"superstep":0,"writes":{},"resume":{},"interrupts":[]},"round":{"n":2,"nonce":"n","questions":[]}"#;
    const TASK: &str = r#""task":{"created_at_ms":1,"updated_at_ms":1}"#;

    #[test]
    fn a_records_fields_read_as_one_state_and_write_back_unchanged() {
        let claim = r#""claim":{"round":2,"until_ms":5}"#;
        let rows: [(&str, String, &str); 7] = [
            ("a round and its checkpoint", record(PAUSED), "paused"),
            ("claimed, its effect begun", record(&format!(r#"{PAUSED},{claim},"begun":2"#)), "paused claimed begun"),
            ("an effect begun in an earlier round", record(&format!(r#"{PAUSED},"begun":1"#)), "paused"),
            ("a task's first run", record(&format!(r#"{claim},{TASK}"#)), "working claimed"),
            ("a task whose first run lost its claim", record(TASK), "working"),
            (
                "an answered call",
                record(
                    r#""last":{"round":1,"nonce":"n","keys":[],"answers_digest":"a","outcome":{"type":"next_round"}}"#,
                ),
                "finished",
            ),
            (
                "a cancelled task",
                record(r#""task":{"created_at_ms":1,"updated_at_ms":1,"cancelled":true}"#),
                "finished",
            ),
        ];
        for (case, json, expected) in rows {
            let thread: Thread = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{case}: {e}"));
            let state = match &thread.state {
                ThreadState::Paused(p) => {
                    format!(
                        "paused{}{}",
                        if p.claim.is_some() { " claimed" } else { "" },
                        if p.begun { " begun" } else { "" }
                    )
                }
                ThreadState::Working { claim } => format!("working{}", if claim.is_some() { " claimed" } else { "" }),
                ThreadState::Finished => "finished".into(),
            };
            assert_eq!(state, expected, "{case}");
            let again: Thread = serde_json::from_str(&serde_json::to_string(&thread).unwrap()).unwrap();
            assert_eq!(again, thread, "{case}: written and read again");
        }
        // What is written is what was read, field for field (an earlier round's `begun`
        // says nothing of this one, and is not kept).
        let json = record(&format!(r#"{PAUSED},{claim},"begun":2"#));
        let thread: Thread = serde_json::from_str(&json).unwrap();
        let written: serde_json::Value = serde_json::to_value(&thread).unwrap();
        assert_eq!(written, serde_json::from_str::<serde_json::Value>(&json).unwrap());
        assert!(serde_json::to_string(&thread).unwrap().starts_with(r#"{"format":1,"#), "the format comes first");
    }

    #[test]
    fn a_record_with_half_a_pause_is_refused() {
        let round_only = record(r#""round":{"n":2,"nonce":"n","questions":[]}"#);
        let error = serde_json::from_str::<Thread>(&round_only).unwrap_err().to_string();
        assert!(error.contains("round 2 has no checkpoint"), "{error}");
        let (checkpoint, _) = PAUSED.split_once(r#","round""#).unwrap();
        let error = serde_json::from_str::<Thread>(&record(checkpoint)).unwrap_err().to_string();
        assert!(error.contains("a checkpoint without its round"), "{error}");
    }
}
