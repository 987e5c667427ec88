//! Push elicitation for 2025-era clients (opt-in, [`crate::ServerOptions::legacy_elicitation`]).
//!
//! A client of 2025-11-25 or earlier answers requests the server sends in the middle of
//! a call. When such a client's `tools/call` or `prompts/get` pauses, the response is an
//! SSE stream carrying one `elicitation/create` (or `sampling/createMessage`,
//! `roots/list`) request per question; the client POSTs its responses, the round is
//! answered through the engine exactly as a 2026-07-28 retry would answer it, and the
//! stream ends with the call's result. The pause lives in the store as any round does:
//! if the stream drops, the call stays paused, and the client's next identical call in
//! the same session is asked the open questions again and resumes it (its round is
//! noted in [`crate::ServerOptions::notes`]).
//!
//! What the client can answer comes from its session id ([`crate::session`]), which
//! `initialize` signs; a URL question waits until its page is done (polling the round)
//! and then sends `notifications/elicitation/complete`.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hitl_interrupt::{Agent, Binding, Reply};
use hitl_protocol::version::Era;
use hitl_protocol::{
    ClientRequest, ElicitRequestParams, ErrorObject, InputRequest, InputRequiredResult, InputResponses, RequestId,
    Response,
};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::dispatch::tool_call;
use crate::session::Session;
use crate::validate::Caller;
use crate::{Shared, sse};

/// How long a pushed round waits for the client's answers before the stream ends (the
/// call stays paused).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How often a URL question's round is looked at again while its page is not done.
const PAGE_POLL: Duration = Duration::from_millis(500);

/// Messages between the replicas that share a store, so a client's response reaches the
/// replica whose stream asked (on Redis: pub/sub).
#[async_trait::async_trait]
pub trait PushBus: Send + Sync + 'static {
    /// Delivers `message` to the replica named `to`: `Ok(false)` when no replica by that
    /// name listens.
    async fn send(&self, to: &str, message: Vec<u8>) -> Result<bool, String>;

    /// Hands every message sent to `me` to `deliver` from now on. Returns once listening.
    async fn listen(&self, me: &str, deliver: Arc<dyn Fn(Vec<u8>) + Send + Sync>) -> Result<(), String>;
}

/// The calls of this replica waiting for their clients' answers.
pub(crate) struct Pushes {
    /// This replica's name, in the ids of the requests it pushes.
    replica: String,
    /// By push id: where the client's responses go, and who may send them (the caller
    /// of the call that asked).
    waiting: Mutex<HashMap<String, Waiter>>,
    /// Where responses to other replicas' requests go.
    bus: std::sync::OnceLock<Arc<dyn PushBus>>,
}

impl Default for Pushes {
    fn default() -> Self {
        Self {
            replica: uuid::Uuid::new_v4().simple().to_string(),
            waiting: Mutex::default(),
            bus: std::sync::OnceLock::new(),
        }
    }
}

/// Where a pushed call's responses go, and the principal they must come from.
type Waiter = (mpsc::UnboundedSender<Answer>, Option<String>);

/// A client's response to pushed request `n` of a round.
struct Answer {
    /// The round of the call (1 for its first) the request was pushed in.
    round: u32,
    n: usize,
    outcome: Result<Value, ErrorObject>,
}

impl Pushes {
    /// Hands a client's response to the call that asked, here or (over the bus) on the
    /// replica whose stream asked; `false` when it answers no pushed request, or comes
    /// from another caller than the call's.
    pub(crate) fn deliver(&self, id: &RequestId, outcome: Result<Value, ErrorObject>, principal: Option<&str>) -> bool {
        let RequestId::String(full) = id else { return false };
        let Some((replica, push, round, n)) = parse_id(full) else { return false };
        if replica != self.replica {
            let Some(bus) = self.bus.get().cloned() else { return false };
            let mut message = match outcome {
                Ok(result) => json!({"id": full, "result": result}),
                Err(error) => json!({"id": full, "error": error}),
            };
            message["principal"] = json!(principal);
            let replica = replica.to_owned();
            tokio::spawn(async move {
                match bus.send(&replica, message.to_string().into_bytes()).await {
                    Ok(true) => {}
                    Ok(false) => tracing::debug!(%replica, "the replica a response is for is gone"),
                    Err(error) => tracing::warn!(%replica, %error, "cannot forward a response to its replica"),
                }
            });
            return true;
        }
        let waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        // A call is answered by its own caller only, as its rounds are.
        waiting
            .get(push)
            .filter(|(_, caller)| caller.as_deref() == principal)
            .is_some_and(|(to, _)| to.send(Answer { round, n, outcome }).is_ok())
    }

    /// Takes responses other replicas forward over `bus` from now on, and forwards the
    /// ones for other replicas' requests there.
    pub(crate) async fn listen(self: &Arc<Self>, bus: Arc<dyn PushBus>) -> Result<(), String> {
        let pushes = Arc::downgrade(self);
        let deliver = Arc::new(move |message: Vec<u8>| {
            let Some(pushes) = pushes.upgrade() else { return };
            let Ok(message) = serde_json::from_slice::<Value>(&message) else { return };
            let Some(id) = message["id"].as_str() else { return };
            let outcome = match message.get("error") {
                Some(error) => Err(serde_json::from_value(error.clone())
                    .unwrap_or_else(|_| ErrorObject::internal("the client answered with an error"))),
                None => Ok(message["result"].clone()),
            };
            pushes.deliver(&RequestId::String(id.to_owned()), outcome, message["principal"].as_str());
        });
        // Forwarding works even while listening is not up yet.
        let _ = self.bus.set(bus.clone());
        bus.listen(&self.replica, deliver).await
    }
}

/// `push:<replica>:<push id>:<round>:<n>` as its parts: ids are unique in a session,
/// and a late answer to an earlier round is told apart.
fn parse_id(id: &str) -> Option<(&str, &str, u32, usize)> {
    let mut parts = id.strip_prefix("push:")?.split(':');
    let (replica, push) = (parts.next()?, parts.next()?);
    let (round, n) = (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?);
    parts.next().is_none().then_some((replica, push, round, n))
}

/// Removes a call from [`Pushes::waiting`] when it ends, however it ends.
struct Waiting<'a>(&'a Pushes, String);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.1);
    }
}

/// A call that pushes its questions: what it runs and for whom.
pub(crate) struct Pushed {
    pub(crate) id: RequestId,
    pub(crate) request: ClientRequest,
    pub(crate) caller: Caller,
    pub(crate) session: Session,
    pub(crate) progress_token: Option<Value>,
}

impl Shared {
    /// The SSE response of a pushed call: its questions as requests, then its result.
    pub(crate) fn push(self: Arc<Self>, pushed: Pushed) -> http::Response<McpBody> {
        let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
        let cancel = Arc::new(AtomicBool::new(false));
        let progress = pushed.progress_token.clone().map(|token| sse::progress_fn(token, tx.clone()));
        let flag = cancel.clone();
        tokio::spawn(async move {
            let id = pushed.id.clone();
            let message = match self.push_run(pushed, &tx, flag, progress).await {
                Ok(message) => message,
                Err(error) => Response::Error { id: Some(id), error },
            };
            let _ = tx.send(sse::response_event(&message));
        });
        sse::stream_response(rx, cancel)
    }

    async fn push_run(
        &self,
        pushed: Pushed,
        tx: &mpsc::UnboundedSender<Bytes>,
        cancel: Arc<AtomicBool>,
        progress: Option<hitl_graph::ProgressFn>,
    ) -> Result<Response, ErrorObject> {
        let Pushed { id, request, caller, session, .. } = pushed;
        let may = |name: &str| {
            crate::validate::allowed(self.options.access.as_ref(), name, caller.principal.as_deref(), &caller.groups)
        };
        let tools = self.tools.snapshot();
        let (agent, arguments, prompt): (&Agent, Map<String, Value>, bool) = match &request {
            ClientRequest::CallTool(params) => match tools.get(&params.name).filter(|_| may(&params.name)) {
                Some(agent) => (agent, params.arguments.clone().unwrap_or_default(), false),
                None => return Err(ErrorObject::invalid_params(format!("Unknown tool: {}", params.name))),
            },
            ClientRequest::GetPrompt(params) => match self.prompts.get(&params.name).filter(|_| may(&params.name)) {
                Some(agent) => (agent, params.arguments.clone().unwrap_or_default(), true),
                None => return Err(ErrorObject::invalid_params(format!("Unknown prompt: {}", params.name))),
            },
            other => return Err(ErrorObject::method_not_found(other.method())),
        };
        // The note of this call in this session, in the store: any replica finds it.
        let binding = format!("{}\n{}\n{}\n{}", session.id, prompt, agent.name, Value::Object(arguments.clone()));
        let note = format!("push:{}", self.engine.secret().tag("push-call", &binding));
        let mut request_state = self.take_note(&note).await;
        let mut resumed = request_state.is_some();
        let push_id = uuid::Uuid::new_v4().simple().to_string();
        let (answers_tx, mut answers) = mpsc::unbounded_channel();
        let waiting = (answers_tx, caller.principal.clone());
        self.pushes.waiting.lock().unwrap_or_else(|p| p.into_inner()).insert(push_id.clone(), waiting);
        let _waiting = Waiting(&self.pushes, push_id.clone());
        let replica = self.pushes.replica.clone();
        let mut responses: Option<InputResponses> = None;
        // The URL questions asked and not yet done, by elicitation id.
        let mut pages: Vec<String> = Vec::new();
        let mut asked_state: Option<String> = None;
        // Rounds pushed so far (in the requests' ids), and since when a page is awaited.
        let mut pushed: u32 = 0;
        let mut page_wait: Option<tokio::time::Instant> = None;
        // The caller as its session declared itself: the session's capabilities, shared
        // by every round's call.
        let caller = Caller {
            capabilities: Arc::new(session.capabilities.clone()),
            session: Some(session.id.clone()),
            ..caller
        };
        let binding = if prompt { Binding::Prompt } else { Binding::Tool };
        loop {
            let sent = (Some(arguments.clone()), responses.clone(), request_state.clone(), None);
            let resumable = self.resumable(Era::Modern);
            let call = tool_call(caller.clone(), resumable, binding, sent, progress.clone(), Some(cancel.clone()));
            let answered = self.run(agent, call).await;
            let round = match answered {
                // A noted round that is gone (finished, expired): the call starts anew.
                Reply::Refused(error)
                    if resumed && responses.is_none() && error.code == hitl_protocol::ErrorCode::INVALID_PARAMS =>
                {
                    (request_state, resumed) = (None, false);
                    continue;
                }
                Reply::Refused(error) => {
                    // A refused answer leaves the round open: the next identical call
                    // asks again.
                    self.note(&note, request_state.as_ref()).await;
                    return Err(error);
                }
                Reply::Complete(result) => {
                    complete(tx, &pages);
                    let result = if prompt {
                        hitl_protocol::ServerResult::GetPrompt(crate::dispatch::prompt_result(agent, result)?)
                    } else {
                        hitl_protocol::ServerResult::CallTool(result)
                    };
                    return Ok(self.message(id, Era::Legacy, Ok(result)));
                }
                Reply::Paused { round, .. } => round,
            };
            resumed = false;
            // The same round asked again after its answers: a page is not done yet.
            if round.request_state.is_some() && round.request_state == asked_state && !pages.is_empty() {
                if page_wait.get_or_insert_with(tokio::time::Instant::now).elapsed() > ANSWER_TIMEOUT {
                    self.note(&note, round.request_state.as_ref()).await;
                    return Err(ErrorObject::internal("the page was not done in time; the call stays paused"));
                }
                tokio::select! {
                    () = tokio::time::sleep(PAGE_POLL) => continue,
                    () = tx.closed() => {
                        self.note(&note, round.request_state.as_ref()).await;
                        return Err(ErrorObject::internal("the client went away"));
                    }
                }
            }
            page_wait = None;
            complete(tx, &pages);
            request_state = round.request_state.clone();
            asked_state = round.request_state.clone();
            pushed += 1;
            let prefix = format!("{replica}:{push_id}:{pushed}");
            let (keys, pushed_pages) = ask(tx, &prefix, &round, &session.version)?;
            pages = pushed_pages;
            match gather(&mut answers, tx, &keys, &round, pushed).await {
                Some(got) => responses = Some(got),
                None => {
                    self.note(&note, request_state.as_ref()).await;
                    return Err(ErrorObject::internal("no answer came before the stream closed"));
                }
            }
        }
    }
}

use crate::McpBody;

/// How long the note of a dropped stream's round is kept (the round itself may live
/// shorter; a note of a round that is gone is ignored).
const NOTE_LIFETIME: Duration = Duration::from_secs(24 * 3600);

impl Shared {
    /// Notes the open round of a call whose stream ended, for the next identical call.
    async fn note(&self, note: &str, request_state: Option<&String>) {
        let (Some(state), Some(notes)) = (request_state, &self.notes) else { return };
        let until = now_ms().saturating_add(NOTE_LIFETIME.as_millis() as u64);
        if let Err(error) = notes.put_note(note, state, until).await {
            tracing::warn!(%error, "cannot note a dropped stream's round; the next call starts anew");
        }
    }

    /// The open round a dropped stream left for this call, if any.
    async fn take_note(&self, note: &str) -> Option<String> {
        let notes = self.notes.as_ref()?;
        notes.take_note(note).await.unwrap_or_else(|error| {
            tracing::warn!(%error, "cannot read a dropped stream's note; the call starts anew");
            None
        })
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Sends each question of `round` as a request; returns the keys in order and the
/// elicitation ids of its URL questions.
fn ask(
    tx: &mpsc::UnboundedSender<Bytes>,
    push_id: &str,
    round: &InputRequiredResult,
    version: &str,
) -> Result<(Vec<String>, Vec<String>), ErrorObject> {
    let mut keys = Vec::new();
    let mut pages = Vec::new();
    for (n, (key, question)) in round.input_requests.iter().flatten().enumerate() {
        let mut question = question.clone();
        if let InputRequest::Elicit(ElicitRequestParams::Url(url)) = &mut question {
            let elicitation_id = url.elicitation_id.get_or_insert_with(|| key.clone()).clone();
            pages.push(elicitation_id);
        }
        if let (InputRequest::Elicit(ElicitRequestParams::Form(form)), true) = (&mut question, version < "2025-11-25") {
            form.requested_schema = hitl_schema::downgrade_2025_06_18(&form.requested_schema).map_err(|e| {
                ErrorObject::internal(format!("question {key} cannot be asked of a {version} client: {}", e.reason))
            })?;
        }
        let mut request = serde_json::to_value(&question)
            .map_err(|e| ErrorObject::internal(format!("question {key} could not be encoded: {e}")))?;
        if version < "2025-11-25"
            && let Some(params) = request.get_mut("params").and_then(Value::as_object_mut)
        {
            // Modes came with 2025-11-25.
            params.remove("mode");
        }
        request["jsonrpc"] = json!("2.0");
        request["id"] = json!(format!("push:{push_id}:{n}"));
        let _ = tx.send(sse::event(&request));
        keys.push(key.clone());
    }
    Ok((keys, pages))
}

/// The client's answers to the requests of `keys`; `None` when the stream closed or no
/// answer came in time.
async fn gather(
    answers: &mut mpsc::UnboundedReceiver<Answer>,
    tx: &mpsc::UnboundedSender<Bytes>,
    keys: &[String],
    round: &InputRequiredResult,
    pushed: u32,
) -> Option<InputResponses> {
    let mut got = InputResponses::new();
    let deadline = tokio::time::sleep(ANSWER_TIMEOUT);
    tokio::pin!(deadline);
    while got.len() < keys.len() {
        tokio::select! {
            answer = answers.recv() => {
                let Answer { round: answered, n, outcome } = answer?;
                // A late answer to an earlier round, or to no request: not this round's.
                let Some(key) = keys.get(n).filter(|_| answered == pushed) else { continue };
                let value = match outcome {
                    Ok(result) => result,
                    // A client that cannot or will not answer: the question is cancelled
                    // (an elicitation) or answered with its error.
                    Err(error) => match round.input_requests.as_ref().and_then(|r| r.get(key)) {
                        Some(InputRequest::Elicit(_)) => json!({"action": "cancel"}),
                        _ => json!({"error": error}),
                    },
                };
                got.insert(key.clone(), value);
            }
            () = tx.closed() => return None,
            () = &mut deadline => return None,
        }
    }
    Some(got)
}

/// `notifications/elicitation/complete` for each URL question whose page is done.
fn complete(tx: &mpsc::UnboundedSender<Bytes>, pages: &[String]) {
    for elicitation_id in pages {
        let notification = json!({"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
                                  "params": {"elicitationId": elicitation_id}});
        let _ = tx.send(sse::event(&notification));
    }
}
