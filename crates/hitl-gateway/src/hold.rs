//! Holding a 2025-era upstream's call while the client answers what it asked.
//!
//! A server of 2025-11-25 or earlier asks in the middle of a call (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`) and waits for the answer on the same
//! connection. The gateway parks that call here (a *hold*, named in the thread's state
//! with the replica that holds it), pauses the client's call with the question as an
//! ordinary round, and when the answer comes hands it to the waiting upstream and
//! follows the call on. An answer that reaches another replica is forwarded to the
//! holder over a [`Bus`]; a hold nobody answers is dropped after `hold_timeout` (which
//! closes the upstream call).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use hitl_graph::payload::{ErrorReply, ToolResult};
use hitl_graph::{Progress, ProgressFn, StepContext};
use hitl_protocol::{ClientCapabilities, ErrorCode, ErrorObject};
use hitl_upstream::{Asked, Call, Event, Upstream, UpstreamError};
use serde_json::{Value, json};
use tokio::sync::oneshot;

// A call's outcome, as state keys written next to its arguments.
/// The tool result: the call is done.
pub(crate) const RESULT: &str = "hitl:result";
/// The upstream's open `input_required` round (2026-07-28), relayed next.
pub(crate) const ASKED: &str = "hitl:upstream";
/// The hold of a 2025-era upstream's call that asked mid-call.
pub(crate) const HELD: &str = "hitl:held";
/// The pages an upstream's `-32042` (URL elicitation required) sends the user to, asked
/// of a 2026-07-28 client as a round before the call is made again.
pub(crate) const PAGES: &str = "hitl:pages";

/// Messages between the replicas that share a store, so an answer reaches the replica
/// holding the upstream call it answers (on Redis: pub/sub).
#[async_trait::async_trait]
pub trait Bus: Send + Sync + 'static {
    /// Delivers `message` to the replica named `to`: `Ok(false)` when no replica by
    /// that name listens (it is gone).
    async fn send(&self, to: &str, message: Vec<u8>) -> Result<bool, String>;

    /// Hands every message sent to `me` to `deliver` from now on, for as long as the
    /// process runs (listening again after a lost connection). Returns once listening.
    async fn listen(&self, me: &str, deliver: Arc<dyn Fn(Vec<u8>) + Send + Sync>) -> Result<(), String>;
}

/// How long the holder may take, after the answer, to say what the call did next,
/// beyond the upstream's own time limit.
const REPLY_MARGIN: Duration = Duration::from_secs(10);

/// The upstream calls this replica holds, and the answers it forwarded that wait for
/// their holder's reply.
pub(crate) struct Holds {
    replica: String,
    held: Mutex<HashMap<String, Held>>,
    forwarded: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    bus: OnceLock<Arc<dyn Bus>>,
    /// The resource URIs upstream results returned, for `resources/read`.
    pub(crate) seen: Arc<crate::passthrough::Seen>,
}

/// A parked call.
struct Held {
    call: Call,
    asked: Asked,
    link: Link,
    expiry: tokio::task::JoinHandle<()>,
}

/// What a gateway tool calls through: its upstream, how long a hold lasts, and what
/// the calling client can answer.
#[derive(Clone)]
pub(crate) struct Link {
    pub(crate) upstream: Arc<Upstream>,
    pub(crate) hold_timeout: Duration,
    /// The client's capabilities (the run's `ClientCapabilities` extension).
    pub(crate) capabilities: ClientCapabilities,
    /// The client speaks a 2025-era revision (it answers no round).
    pub(crate) legacy_client: bool,
    /// The listed tool, for errors.
    pub(crate) tool: String,
    /// Where the upstream's progress goes (the client asked for it).
    pub(crate) report: Option<ProgressFn>,
}

impl Holds {
    pub(crate) fn new() -> Self {
        Self {
            replica: uuid::Uuid::new_v4().simple().to_string(),
            held: Mutex::default(),
            forwarded: Mutex::default(),
            bus: OnceLock::new(),
            seen: Arc::default(),
        }
    }

    /// Listens on `bus` for answers to this replica's holds and for replies to the
    /// answers it forwards.
    pub(crate) async fn listen(self: &Arc<Self>, bus: Arc<dyn Bus>) -> Result<(), String> {
        if self.bus.set(bus.clone()).is_err() {
            return Err("the gateway already listens on a bus".into());
        }
        let holds = Arc::downgrade(self);
        let deliver = Arc::new(move |message: Vec<u8>| {
            if let Some(holds) = holds.upgrade() {
                holds.delivered(&message);
            }
        });
        bus.listen(&self.replica, deliver).await
    }

    /// How many calls this replica holds for `upstream`.
    pub(crate) fn count(&self, upstream: &str) -> usize {
        self.lock().values().filter(|h| h.link.upstream.name() == upstream).count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follows `call` to its result (the state update [`outcome`] makes), or holds it
    /// at the first question the client can answer (the update names the hold).
    /// Questions the client cannot answer are refused for it.
    pub(crate) async fn follow(self: &Arc<Self>, mut call: Call, link: Link) -> Value {
        loop {
            match call.next().await {
                Event::Done(answered) => {
                    self.seen.note(link.upstream.name(), &answered);
                    return outcome(&link.upstream, answered, link.legacy_client);
                }
                Event::Progress(params) => {
                    let progress = params.get("progress").and_then(Value::as_f64);
                    if let (Some(report), Some(progress)) = (&link.report, progress) {
                        report(Progress {
                            progress,
                            total: params.get("total").and_then(Value::as_f64),
                            message: params.get("message").and_then(Value::as_str).map(str::to_owned),
                            from_step: true,
                        });
                    }
                }
                Event::Asked(asked) => match unanswerable(&asked, &link.capabilities) {
                    Some(error) => asked.refuse(error),
                    None => return self.hold(call, asked, link),
                },
            }
        }
    }

    fn hold(self: &Arc<Self>, call: Call, asked: Asked, link: Link) -> Value {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let named = json!({
            "replica": self.replica,
            "id": id,
            "method": asked.method,
            "params": asked.params,
            "timeout": link.upstream.timeout().as_secs(),
        });
        let holds = Arc::downgrade(self);
        let (lapsed, timeout) = (id.clone(), link.hold_timeout);
        let expiry = tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            if let Some(holds) = holds.upgrade()
                && let Some(held) = holds.lock().remove(&lapsed)
            {
                tracing::warn!(tool = %held.link.tool, secs = timeout.as_secs(),
                    "no answer within hold_timeout: the held upstream call is given up");
            }
        });
        tracing::info!(tool = %link.tool, method = %asked.method, "the upstream asks; its call is held");
        self.lock().insert(id, Held { call, asked, link, expiry });
        json!({ HELD: named, RESULT: null })
    }

    /// Hands `response` to the hold `held` names (here or on its replica) and returns
    /// what the call did next: its result, or its next question. The upstream's
    /// progress from here on goes to `report` (when the call is held here).
    pub(crate) async fn answer(
        self: &Arc<Self>,
        held: &Value,
        response: Value,
        tool: &str,
        report: Option<ProgressFn>,
    ) -> Value {
        let id = held["id"].as_str().unwrap_or_default();
        let replica = held["replica"].as_str().unwrap_or_default();
        if replica == self.replica {
            return self.answer_here(id, response, report).await;
        }
        let unknown = |why: &str| {
            let text = format!("{why}; the outcome of the call to {tool} is unknown");
            json!({ RESULT: ToolResult::error(text).to_value(), HELD: null })
        };
        let Some(bus) = self.bus.get() else {
            return unknown("the replica that held the upstream call is gone");
        };
        let correlation = uuid::Uuid::new_v4().simple().to_string();
        let (reply, replied) = oneshot::channel();
        self.forwarded.lock().unwrap_or_else(|p| p.into_inner()).insert(correlation.clone(), reply);
        let message = json!({"answer": id, "response": response, "from": self.replica, "correlation": correlation});
        let sent = bus.send(replica, serde_json::to_vec(&message).expect("JSON values serialize")).await;
        let next = match sent {
            Ok(true) => {
                let limit = held["timeout"].as_u64().map_or(Duration::from_secs(60), Duration::from_secs);
                match tokio::time::timeout(limit + REPLY_MARGIN, replied).await {
                    Ok(Ok(next)) => next,
                    _ => unknown("the replica that holds the upstream call did not say how it went"),
                }
            }
            Ok(false) => unknown("the replica that held the upstream call is gone"),
            Err(error) => {
                tracing::error!(%error, "could not forward an answer to the replica that holds its call");
                unknown(&format!("the answer could not be forwarded to the replica that holds the call ({error})"))
            }
        };
        self.forwarded.lock().unwrap_or_else(|p| p.into_inner()).remove(&correlation);
        next
    }

    async fn answer_here(self: &Arc<Self>, id: &str, response: Value, report: Option<ProgressFn>) -> Value {
        let Some(mut held) = self.lock().remove(id) else {
            let text = "the upstream call waited for this answer longer than hold_timeout and was given up";
            return json!({ RESULT: ToolResult::error(text).to_value(), HELD: null });
        };
        held.expiry.abort();
        held.link.report = report;
        held.asked.answer(response);
        self.follow(held.call, held.link).await
    }

    /// A message from the bus: an answer to a hold here (followed, and the result
    /// sent back), or the reply to an answer this replica forwarded.
    fn delivered(self: &Arc<Self>, message: &[u8]) {
        let Ok(message) = serde_json::from_slice::<Value>(message) else {
            tracing::warn!("a bus message that is not JSON is ignored");
            return;
        };
        let correlation = message["correlation"].as_str().unwrap_or_default().to_owned();
        if let Some(next) = message.get("next") {
            let waiting = self.forwarded.lock().unwrap_or_else(|p| p.into_inner()).remove(&correlation);
            if let Some(waiting) = waiting {
                let _ = waiting.send(next.clone());
            }
            return;
        }
        let (Some(id), Some(from)) = (message["answer"].as_str(), message["from"].as_str()) else { return };
        let (holds, id, from, response) = (self.clone(), id.to_owned(), from.to_owned(), message["response"].clone());
        tokio::spawn(async move {
            let next = holds.answer_here(&id, response, None).await;
            let reply = json!({"correlation": correlation, "next": next});
            if let Some(bus) = holds.bus.get()
                && let Err(error) = bus.send(&from, serde_json::to_vec(&reply).expect("JSON values serialize")).await
            {
                tracing::error!(%error, "could not send what a held call did to the replica that forwarded its answer");
            }
        });
    }
}

/// Why the client of a call cannot answer `asked`, given its capabilities.
fn unanswerable(asked: &Asked, capabilities: &ClientCapabilities) -> Option<ErrorObject> {
    let needs = match asked.method.as_str() {
        "elicitation/create" => {
            let url = asked.params.get("mode").and_then(Value::as_str) == Some("url");
            // Any elicitation takes a form (`{}` is form support alone).
            let ok = if url { capabilities.elicits_url() } else { capabilities.elicitation.is_some() };
            (!ok).then_some(if url { "URL-mode elicitation" } else { "elicitation" })
        }
        "sampling/createMessage" => (!capabilities.samples()).then_some("sampling"),
        "roots/list" => (!capabilities.lists_roots()).then_some("roots"),
        _ => Some(asked.method.as_str()),
    };
    let needs = needs?;
    Some(ErrorObject::new(ErrorCode::METHOD_NOT_FOUND, format!("the client of this call does not support {needs}")))
}

/// Where the upstream's progress goes: to the client of `ctx`, when it asked for it.
pub(crate) fn report(ctx: &StepContext) -> Option<hitl_graph::ProgressFn> {
    ctx.wants_progress().then(|| {
        let ctx = ctx.clone();
        std::sync::Arc::new(move |progress| ctx.report_progress(progress)) as hitl_graph::ProgressFn
    })
}

/// What the upstream's answer leads to: its result, or its questions (relayed next).
/// Its `-32042` (URL elicitation required, 2025-11-25) reaches a 2025-era client
/// (`legacy_client`) as that error, with its URLs and elicitation ids, and a 2026-07-28
/// client as a round of URL questions (which that revision asks instead).
pub(crate) fn outcome(upstream: &Upstream, answered: Result<Value, UpstreamError>, legacy_client: bool) -> Value {
    match answered {
        Ok(Value::Object(result)) if result.get("resultType").and_then(Value::as_str) == Some("input_required") => {
            json!({ ASKED: result, RESULT: null, HELD: null, PAGES: null })
        }
        Err(UpstreamError::Refused { error, .. }) if error.code == ErrorCode::URL_ELICITATION_REQUIRED => {
            let pages = error.data.as_ref().and_then(|d| d.get("elicitations")).and_then(Value::as_array);
            match pages {
                _ if legacy_client => {
                    let error = serde_json::to_value(&error).ok().and_then(|e| e.as_object().cloned());
                    let reply = ErrorReply(error.unwrap_or_default()).to_value();
                    json!({ RESULT: reply, HELD: null, PAGES: null })
                }
                Some(pages) if !pages.is_empty() => json!({ PAGES: pages, RESULT: null, HELD: null, ASKED: null }),
                _ => {
                    let text = format!("upstream {} needs the user to open a page and named none", upstream.name());
                    json!({ RESULT: ToolResult::error(text).to_value(), HELD: null, PAGES: null })
                }
            }
        }
        Ok(Value::Object(mut result)) => {
            // The gateway answers as itself; a `_meta` left empty is not sent on.
            if let Some(Value::Object(meta)) = result.get_mut("_meta") {
                meta.remove(hitl_protocol::meta_keys::SERVER_INFO);
                if meta.is_empty() {
                    result.remove("_meta");
                }
            }
            json!({ RESULT: ToolResult(result).to_value(), ASKED: null, HELD: null, PAGES: null })
        }
        Ok(other) => {
            let error = ToolResult::error(format!("upstream {} answered with {other}", upstream.name()));
            json!({ RESULT: error.to_value(), HELD: null, PAGES: null })
        }
        // An upstream failure: the error result names the upstream (and says when the
        // call surely did not run, so the caller knows it may make it again).
        Err(error @ UpstreamError::NotSent { .. }) => {
            let text = format!("{error}; the call was not sent, so it did not run");
            json!({ RESULT: ToolResult::error(text).to_value(), HELD: null, PAGES: null })
        }
        Err(error) => json!({ RESULT: ToolResult::error(error.to_string()).to_value(), HELD: null, PAGES: null }),
    }
}
