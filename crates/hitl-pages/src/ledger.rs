//! The [`Observer`] of the pages: what happens to rounds becomes the approvals listing
//! (pending, then decided), the audit trail (in the store and in `[audit] file`),
//! webhook notifications and the events of `GET /api/approvals/events`. The engine
//! calls it inline; the work happens in one task, in order, off the request's path.

use std::sync::Arc;
use std::time::Duration;

use hitl_interrupt::{Event, Observer, PageView};
use hitl_protocol::display;
use hitl_thread::{About, AuditLine, Notes, PageKind, Records, Thread};
use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{broadcast, mpsc};

use crate::audit::{AuditEvent, AuditKind, AuditPage};
use crate::entry::{ApprovalEntry, ApprovalStatus};
use crate::notify::Notifier;

/// How much of ended approvals the listing keeps, and how much of each argument value
/// listings, notifications and the audit trail show: a caller who pauses big calls and
/// withdraws them again and again must not grow the server without bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// How long an ended approval (decided, withdrawn, expired) stays listed.
    pub keep_ended: Duration,
    /// The most ended approvals listed per caller (the oldest dropped first).
    pub max_ended_per_caller: usize,
    /// The most bytes of one argument value shown outside the approval's own view; the
    /// rest is replaced by its size and SHA-256.
    pub max_argument_bytes: usize,
    /// The size past which `[audit] file` is renamed to `<file>.1` and begun anew.
    pub audit_max_bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            keep_ended: Duration::from_secs(3600),
            max_ended_per_caller: 200,
            max_argument_bytes: 16 * 1024,
            audit_max_bytes: 100 * 1024 * 1024,
        }
    }
}
/// How often the listing is read: approvals past their time are marked expired, and
/// changes made by other replicas reach this one's events stream.
const SWEEP: Duration = Duration::from_secs(1);

/// Where audit lines go besides the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditFile {
    /// Standard output.
    Stdout,
    /// A file, appended to.
    Path(std::path::PathBuf),
}

impl AuditFile {
    /// `"-"` is stdout, anything else a path.
    pub fn parse(value: &str) -> Self {
        if value == "-" { Self::Stdout } else { Self::Path(value.into()) }
    }
}

/// The thread of an event, as much of it as the trail needs (a thread's checkpoint is
/// never copied off the request's path).
pub(crate) struct CallRef {
    thread: Arc<str>,
    tool: Arc<str>,
    principal: Option<Arc<str>>,
    /// Known when the event has the thread.
    args_digest: Option<Arc<str>>,
}

impl CallRef {
    /// The names shared with the thread, not copied.
    fn of(thread: &Thread) -> Self {
        let tool = match tool_name(&thread.tool) {
            name if name.len() == thread.tool.len() => thread.tool.clone(),
            name => Arc::from(name),
        };
        Self {
            thread: thread.id.clone(),
            tool,
            principal: thread.principal.clone(),
            args_digest: Some(thread.args_digest.clone()),
        }
    }

    /// A call known by its thread id, tool and caller only.
    fn named(thread: &str, tool: &str, principal: Option<&str>) -> Self {
        Self {
            thread: Arc::from(thread),
            tool: Arc::from(tool_name(tool)),
            principal: principal.map(Arc::from),
            args_digest: None,
        }
    }

    /// An audit entry about this call (which has more to say).
    fn entry(&self, event: AuditKind) -> AuditEvent {
        Self {
            thread: self.thread.clone(),
            tool: self.tool.clone(),
            principal: self.principal.clone(),
            args_digest: self.args_digest.clone(),
        }
        .into_entry(event)
    }

    /// The last audit entry about this call: its names moved, not copied.
    fn into_entry(self, event: AuditKind) -> AuditEvent {
        AuditEvent {
            thread: Some(self.thread),
            tool: Some(self.tool),
            principal: self.principal,
            args_digest: self.args_digest,
            ..AuditEvent::new(event)
        }
    }
}

/// What the worker is told, owned.
pub(crate) enum Note {
    /// A round was asked: its number and keys, and its approvals.
    Asked {
        call: CallRef,
        round: u32,
        keys: Vec<String>,
        approvals: Vec<PageView>,
        expires_at_ms: u64,
    },
    /// A round was answered; `withdrawn` are its approvals no one decided.
    Answered {
        call: CallRef,
        round: u32,
        keys: Vec<String>,
        withdrawn: Vec<PageView>,
    },
    Page(Box<PageView>),
    Began {
        call: CallRef,
        step: String,
    },
    Finished {
        call: CallRef,
        is_error: bool,
    },
    /// An audit entry made by the pages themselves (a refused decision or link, a
    /// sign-in by link).
    Audit(Box<AuditEvent>),
}

/// How many notes may wait for the worker; past it new ones are dropped (the request
/// never waits for the trail), counted and logged by [`send`].
pub(crate) const QUEUE: usize = 65_536;

/// Hands events to the worker.
pub(crate) struct LedgerObserver(pub(crate) mpsc::Sender<Note>);

/// The approval questions of `thread`'s round (`unanswered`: only those no one
/// decided), as their pages show them.
fn approvals(thread: &Thread, unanswered: bool) -> Vec<PageView> {
    let asked = thread.round().map_or(0, |r| r.questions.len());
    (0..asked)
        .filter_map(|i| PageView::at(thread, i))
        .filter(|v| matches!(v.page.kind, PageKind::Approval { .. }) && !(unanswered && v.page.answer.is_some()))
        .collect()
}

impl Observer for LedgerObserver {
    fn observe(&self, event: &Event<'_>) {
        let keys = |round: &hitl_thread::Round| round.questions.iter().map(|q| q.key.clone()).collect();
        let note = match event {
            Event::Asked { thread } => match thread.round() {
                Some(round) => Note::Asked {
                    call: CallRef::of(thread),
                    round: round.n,
                    keys: keys(round),
                    approvals: approvals(thread, false),
                    expires_at_ms: thread.expires_at_ms,
                },
                None => return,
            },
            Event::Answered { thread, round } => Note::Answered {
                call: CallRef::of(thread),
                round: round.n,
                keys: keys(round),
                withdrawn: approvals(thread, true),
            },
            Event::PageAnswered { page } => Note::Page(Box::new((*page).clone())),
            Event::Refused { thread_id, tool, principal, reason } => {
                let mut entry = CallRef::named(thread_id, tool, *principal).entry(AuditKind::Refused);
                entry.reason = Some((*reason).to_owned());
                Note::Audit(Box::new(entry))
            }
            Event::Began { thread_id, tool, principal, step } => {
                Note::Began { call: CallRef::named(thread_id, tool, *principal), step: (*step).to_owned() }
            }
            Event::Recorded { thread_id, tool, principal, entry } => {
                let Some(mut recorded) = AuditEvent::from_value(entry) else {
                    tracing::warn!(%entry, "a step's audit entry is not one the trail knows; not written");
                    return;
                };
                recorded.thread.get_or_insert_with(|| Arc::from(*thread_id));
                recorded.tool.get_or_insert_with(|| Arc::from(tool_name(tool)));
                if recorded.principal.is_none() {
                    recorded.principal = principal.map(Arc::from);
                }
                Note::Audit(Box::new(recorded))
            }
            Event::Finished { thread_id, tool, principal, result } => Note::Finished {
                call: CallRef::named(thread_id, tool, *principal),
                is_error: result.is_error == Some(true),
            },
            _ => return,
        };
        send(&self.0, note);
    }
}

/// Hands `note` to the worker without waiting: the engine's events and the pages' own
/// audit entries all go through here. When the queue is full the note is dropped,
/// counted in `hitl_audit_dropped_total{reason="behind"}`, and logged (at the first
/// drop, then at every power of two), never lost silently.
pub(crate) fn send(notes: &mpsc::Sender<Note>, note: Note) {
    if let Err(mpsc::error::TrySendError::Full(_)) = notes.try_send(note) {
        static DROPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        metrics::counter!("hitl_audit_dropped_total", "reason" => "behind").increment(1);
        let dropped = DROPPED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if dropped.is_power_of_two() {
            tracing::error!(dropped, "the audit trail is behind: events were dropped");
        }
    }
}

/// The most audit entries kept for the store while it is out of reach; past it the
/// oldest are dropped (the `[audit] file` has them all), counted in
/// `hitl_audit_dropped_total{reason="store"}` and logged.
pub(crate) const UNSTORED: usize = 65_536;

/// The longest pause between two attempts to store the entries the store missed.
const MAX_RETRY: Duration = Duration::from_secs(5);

/// Audit entries the store has not taken yet (it was out of reach), oldest first, and
/// when to try again.
#[derive(Default)]
pub(crate) struct Unstored {
    entries: std::collections::VecDeque<AuditLine>,
    /// No attempt before then (backing off while the store is out of reach).
    next_try: Option<tokio::time::Instant>,
    backoff: Duration,
    /// Entries dropped since the store was last reached (logged once it is).
    dropped: u64,
}

impl Unstored {
    /// Queues `batch` behind the entries waiting already, dropping the oldest past
    /// [`UNSTORED`].
    fn push(&mut self, batch: Vec<AuditLine>) {
        self.entries.extend(batch);
        let over = self.entries.len().saturating_sub(UNSTORED);
        if over > 0 {
            self.entries.drain(..over);
            metrics::counter!("hitl_audit_dropped_total", "reason" => "store").increment(over as u64);
            if self.dropped == 0 {
                tracing::error!(
                    kept = UNSTORED,
                    "the store is still out of reach and too many audit entries wait for it: the oldest are dropped"
                );
            }
            self.dropped += over as u64;
        }
    }

    /// The store failed: wait longer before the next attempt.
    fn failed(&mut self) {
        self.backoff = (self.backoff * 2).clamp(Duration::from_millis(100), MAX_RETRY);
        self.next_try = Some(tokio::time::Instant::now() + self.backoff);
    }
}

/// The worker's state.
pub(crate) struct Worker {
    /// Audit entries of the notes taken, as their lines, written together.
    pub(crate) batch: Vec<AuditLine>,
    /// Where each entry is serialized before it is kept as its line.
    pub(crate) line_buffer: Vec<u8>,
    /// Entries the store missed, stored again when it is back.
    pub(crate) unstored: Unstored,
    /// The status of each listed approval as this replica's events stream last told
    /// it (`None` until the listing was first read).
    pub(crate) seen: Option<std::collections::HashMap<String, ApprovalStatus>>,
    pub(crate) records: Arc<dyn Records>,
    /// Where an approval's expiry is marked announced, once across replicas.
    pub(crate) marks: Arc<dyn Notes>,
    pub(crate) base_url: String,
    pub(crate) audit_file: Option<AuditFile>,
    /// This replica's chain over the audit file's lines (`[audit] chain = true`).
    pub(crate) audit_chain: Option<crate::chain::Chain>,
    pub(crate) notifier: Notifier,
    /// `[slack]`: a message per pending approval, updated once it is decided.
    pub(crate) slack: Option<crate::slack::Slack>,
    pub(crate) events: broadcast::Sender<Value>,
    pub(crate) retention: Retention,
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// What approval `view`'s page shows of the call besides its arguments.
fn about(view: &PageView) -> Option<&About> {
    match &view.page.kind {
        PageKind::Approval { about, .. } => about.as_deref(),
        _ => None,
    }
}

/// The tool as people know it (a prompt's binding without its prefix).
fn tool_name(binding: &str) -> &str {
    binding.strip_prefix("prompt:").unwrap_or(binding)
}

/// Argument names whose values never reach the audit trail.
const SENSITIVE: [&str; 9] =
    ["password", "passwd", "secret", "token", "apikey", "api_key", "authorization", "credential", "private_key"];

/// `value` with the values of sensitive-looking keys replaced by `"[redacted]"`, at any
/// depth.
pub fn redact(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let lower = k.to_ascii_lowercase();
                    let hidden = SENSITIVE.iter().any(|s| lower.contains(s));
                    (k.clone(), if hidden { json!("[redacted]") } else { redact(v) })
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        other => other.clone(),
    }
}

/// `value` in at most `max` bytes: whole when its JSON text fits, else a string of its
/// start (its text, or its JSON) and `… [<n> bytes, sha256:<hex>]` for the whole (so
/// the value can still be matched against what ran). A value made so is left as it is.
pub fn capped(value: &Value, max: usize) -> Value {
    let json;
    let text = match value {
        Value::String(s) if s.len() <= max => return value.clone(),
        Value::String(s) => s.as_str(),
        _ => {
            json = value.to_string();
            if json.len() <= max {
                return value.clone();
            }
            &json
        }
    };
    let digest = ring::digest::digest(&ring::digest::SHA256, value.to_string().as_bytes());
    let marker = format!("… [{} bytes, sha256:{}]", text.len(), hitl_thread::hex(digest.as_ref()));
    let mut cut = max.saturating_sub(marker.len()).min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    Value::String(format!("{}{marker}", &text[..cut]))
}

/// Arguments as listings, notifications and the audit trail show them: sensitive ones
/// redacted, each value [`capped`], and all of them together at most four values'
/// worth (many values just under the cap are one string of their start, size and
/// SHA-256).
pub fn shown_arguments(arguments: &Value, max: usize) -> Value {
    let shown = match redact(arguments) {
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, capped(&v, max))).collect()),
        other => other,
    };
    capped(&shown, max.saturating_mul(4))
}

/// What an edit changed: `{name: {from, to}}` for every argument that differs.
pub fn diff(before: &Map<String, Value>, after: &Map<String, Value>) -> Value {
    let mut changed = Map::new();
    for key in before.keys().chain(after.keys()) {
        let (from, to) = (before.get(key), after.get(key));
        if from != to && !changed.contains_key(key) {
            changed.insert(key.clone(), json!({ "from": from, "to": to }));
        }
    }
    redact(&Value::Object(changed))
}

/// The policy an approval was asked under, as audit entries name it: its globs
/// (`policy`), where it is written (`policy_at`) and a digest of its text
/// (`policy_digest`), so a reader can tell which version of the rules asked.
fn name_policy(entry: &mut AuditEvent, view: &PageView) {
    if let PageKind::Approval { policy, about, .. } = &view.page.kind {
        entry.policy = Some(policy.clone());
        let about = about.as_deref();
        entry.policy_at = about.and_then(|a| a.policy_at.clone());
        entry.policy_digest = about.and_then(|a| a.policy_digest.clone());
    }
}

/// Where the policy of approval `view` is written and the digest of its text, and what
/// an approval covers besides the call, as its listing entry keeps them (`policy_at`,
/// `policy_digest`, `covers`).
fn policy_written(view: &PageView) -> Map<String, Value> {
    let PageKind::Approval { about: Some(about), .. } = &view.page.kind else { return Map::new() };
    let fields = [("policy_at", &about.policy_at), ("policy_digest", &about.policy_digest), ("covers", &about.covers)];
    fields.into_iter().filter_map(|(key, value)| Some((key.to_owned(), Value::String(value.clone()?)))).collect()
}

/// The listing entry of an approval question, pending.
pub(crate) fn pending_entry(view: &PageView, base_url: &str) -> ApprovalEntry {
    let (policy, approvers) = match &view.page.kind {
        PageKind::Approval { policy, approvers, .. } => (policy.clone(), approvers.clone()),
        _ => (String::new(), Vec::new()),
    };
    let review = view.review.as_ref();
    ApprovalEntry {
        id: view.id.clone(),
        status: ApprovalStatus::Pending,
        tool: review.map_or_else(|| tool_name(&view.tool).to_owned(), |r| r.tool.clone()),
        arguments: review.map(|r| Value::Object(r.args.clone())),
        decisions: review.map(|r| json!(r.offered)),
        policy,
        approvers,
        caller: view.principal.clone(),
        thread: view.thread_id.clone(),
        requested_at_ms: view.page.asked_at_ms,
        expires_at_ms: view.expires_at_ms,
        link: format!("{base_url}/approvals/{}", view.id),
        decided_by: None,
        decided_at_ms: None,
        decision: None,
        // Where the policy is written and the digest of its text, kept for the entry
        // the listing writes when the approval expires.
        other: policy_written(view),
    }
}

/// Approval `view` as its page and `GET /api/approvals/<id>` show it, read from the
/// thread: its listing entry with every argument whole, what runs the call (the upstream,
/// the tool's description and annotations), the review text, and
/// [`with_display`]'s `display`.
pub(crate) fn detail(view: &PageView, base_url: &str) -> Value {
    let mut entry = match view.page.answer {
        Some(_) => decided_entry(view, base_url).0,
        None => pending_entry(view, base_url),
    };
    if let PageKind::Approval { about: Some(about), .. } = &view.page.kind {
        entry.other.insert("description".into(), json!(about.description));
        entry.other.insert("upstream".into(), json!(about.upstream));
        entry.other.insert("tool_description".into(), json!(about.tool_description));
        entry.other.insert("annotations".into(), json!(about.annotations));
    }
    with_display(entry.to_value())
}

/// `entry` with `display`: its text as a person must read it to know what runs, every
/// hidden character a visible escape ([`hitl_protocol::display`]): the tool, each
/// argument (a string as its text, another value as JSON), the review text and the
/// tool's description (their own line breaks kept), the upstream, the annotations,
/// what an approval covers, and the expiry as an RFC 3339 time.
pub(crate) fn with_display(mut entry: Value) -> Value {
    let text = |key: &str| entry[key].as_str().map(|s| display::escape(s).into_owned());
    let lines = |key: &str| entry[key].as_str().map(|s| display::escape_lines(s).into_owned());
    let values = |key: &str| {
        entry[key].as_object().map(|map| {
            map.iter().map(|(k, v)| (display::escape(k).into_owned(), Value::String(display::value(v)))).collect()
        })
    };
    let shown = json!({
        "tool": text("tool"),
        "arguments": values("arguments").map(Value::Object),
        "description": lines("description"),
        "upstream": text("upstream"),
        "tool_description": lines("tool_description"),
        "annotations": values("annotations").map(Value::Object),
        "expires_at": entry["expires_at_ms"].as_u64().map(rfc3339),
        "covers": text("covers"),
    });
    entry["display"] = shown;
    entry
}

/// The listing entry of an approval just decided, and its audit entry (the decision,
/// with an edit's argument diff; its arguments redacted and capped when
/// [`Worker::audit`] takes it).
pub(crate) fn decided_entry(view: &PageView, base_url: &str) -> (ApprovalEntry, AuditEvent) {
    let mut entry = pending_entry(view, base_url);
    let answer = view.page.answer.clone().unwrap_or_default();
    let status = ApprovalStatus::of_decision(&answer);
    let before = view.review.as_ref().map(|r| r.args.clone()).unwrap_or_default();
    let mut decision = answer.clone();
    let mut audit = AuditEvent {
        thread: Some(view.thread_id.as_str().into()),
        tool: Some(entry.tool.as_str().into()),
        principal: view.principal.as_deref().map(Arc::from),
        approver: view.page.answered_by.clone(),
        approval: Some(view.id.clone()),
        approvers: Some(view.approvers().to_vec()),
        args_digest: Some(view.args_digest.as_str().into()),
        arguments: Some(Value::Object(before.clone())),
        message: answer.get("message").cloned(),
        ..AuditEvent::new(AuditKind::of_decision(status))
    };
    if status == ApprovalStatus::Edited
        && let Some(Value::Object(after)) =
            answer.get("args").and_then(Value::as_str).and_then(|a| serde_json::from_str(a).ok())
    {
        audit.diff = Some(diff(&before, &after));
        decision["arguments"] = Value::Object(after);
    }
    name_policy(&mut audit, view);
    entry.status = status;
    entry.decided_by.clone_from(&view.page.answered_by);
    entry.decided_at_ms = Some(view.page.answered_at_ms.unwrap_or_else(now_ms));
    entry.decision = Some(decision);
    (entry, audit)
}

impl Worker {
    /// Takes notes as they come, many at a time, and writes their audit entries in one
    /// go; every second, reads the listing ([`Worker::sweep`]).
    pub(crate) async fn run(mut self, mut notes: mpsc::Receiver<Note>) {
        let mut sweep = tokio::time::interval(SWEEP);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut taken = Vec::new();
        loop {
            tokio::select! {
                n = notes.recv_many(&mut taken, 1_024) => {
                    if n == 0 {
                        return;
                    }
                    for note in taken.drain(..) {
                        self.take(note).await;
                    }
                }
                _ = sweep.tick() => self.sweep().await,
            }
            self.flush().await;
            if !self.unstored.entries.is_empty() {
                self.store_audit().await;
            }
        }
    }

    async fn take(&mut self, note: Note) {
        match note {
            Note::Asked { call, round, keys, approvals, expires_at_ms } => {
                let mut entry = call.into_entry(AuditKind::Asked);
                (entry.round, entry.keys) = (Some(round), Some(keys));
                if let Some(first) = approvals.first() {
                    // Redacted and capped by `audit`, as every entry's arguments are.
                    let arguments = first.review.as_ref().map(|r| r.args.clone()).unwrap_or_default();
                    entry.arguments = Some(Value::Object(arguments));
                    entry.approvals = Some(approvals.iter().map(|a| a.id.clone()).collect());
                    entry.approvers = Some(first.approvers().to_vec());
                    name_policy(&mut entry, first);
                }
                self.audit(entry);
                for view in approvals {
                    let entry = pending_entry(&view, &self.base_url);
                    self.publish("approval.pending", entry, expires_at_ms, about(&view)).await;
                }
            }
            Note::Answered { call, round, keys, withdrawn } => {
                let mut entry = call.entry(AuditKind::Answered);
                (entry.round, entry.keys) = (Some(round), Some(keys));
                self.audit(entry);
                for view in withdrawn {
                    let mut entry = pending_entry(&view, &self.base_url);
                    entry.status = ApprovalStatus::Withdrawn;
                    entry.decided_at_ms = Some(now_ms());
                    let mut audit = call.entry(AuditKind::Withdrawn);
                    (audit.approval, audit.approvers) = (Some(view.id.clone()), Some(view.approvers().to_vec()));
                    name_policy(&mut audit, &view);
                    self.audit(audit);
                    self.publish("approval.decided", entry, now_ms(), about(&view)).await;
                }
            }
            Note::Page(view) => self.page_answered(&view).await,
            Note::Began { call, step } => {
                let mut entry = call.into_entry(AuditKind::Executed);
                entry.step = Some(step);
                self.audit(entry);
            }
            Note::Finished { call, is_error } => {
                let mut entry = call.into_entry(AuditKind::Finished);
                entry.is_error = Some(is_error);
                self.audit(entry);
            }
            Note::Audit(entry) => self.audit(*entry),
        }
    }

    async fn page_answered(&mut self, view: &PageView) {
        if view.page.answer.is_none() {
            return;
        }
        let answered = |page| AuditEvent {
            approver: view.page.answered_by.clone(),
            key: Some(view.key.clone()),
            page: Some(page),
            ..CallRef::named(&view.thread_id, &view.tool, view.principal.as_deref()).into_entry(AuditKind::Answered)
        };
        match &view.page.kind {
            PageKind::Approval { .. } => {
                let (entry, audit) = decided_entry(view, &self.base_url);
                self.audit(audit);
                self.publish("approval.decided", entry, now_ms(), about(view)).await;
            }
            // What a secret or sign-in page took is never written down.
            PageKind::Secret { label } => self.audit(answered(AuditPage::Secret { label: label.clone() })),
            PageKind::SignIn => self.audit(answered(AuditPage::SignIn)),
        }
    }

    /// Lists `entry` (kept `keep_ended` past `from_ms`), notifies and streams it, its
    /// arguments as listings show them ([`shown_arguments`]); Slack's message also shows
    /// `about` the call.
    async fn publish(&mut self, event: &str, mut entry: ApprovalEntry, from_ms: u64, about: Option<&About>) {
        let max = self.retention.max_argument_bytes;
        // Slack cuts each value itself, with the size and digest of the whole.
        let whole = self.slack.as_ref().and(entry.arguments.as_ref()).map(redact);
        if let Some(arguments) = &mut entry.arguments {
            *arguments = shown_arguments(arguments, max);
        }
        if let Some(decision) = entry.decision.as_mut().and_then(Value::as_object_mut) {
            if let Some(arguments) = decision.get_mut("arguments") {
                *arguments = shown_arguments(arguments, max);
                // The edit's own text says the same, unredacted.
                decision.remove("args");
            } else if let Some(args) = decision.get_mut("args") {
                *args = capped(args, max);
            }
        }
        let id = entry.id.clone();
        if let Some(seen) = &mut self.seen {
            seen.insert(id.clone(), entry.status);
        }
        let entry = entry.to_value();
        let until = from_ms.max(now_ms()).saturating_add(self.retention.keep_ended.as_millis() as u64);
        if let Err(error) = self.records.put_approval(&id, entry.clone(), until).await {
            tracing::error!(%error, approval = %id, "the approval could not be listed");
        }
        self.notifier.send(event, &entry);
        if let Some(slack) = &self.slack {
            slack.send(event, &entry, whole.as_ref(), about);
        }
        let _ = self.events.send(json!({ "event": event, "approval": entry }));
    }

    /// Reads the listing: pending approvals past their time become expired (once, on
    /// whichever replica gets there first), and what other replicas listed since the
    /// last look goes to this replica's events stream.
    async fn sweep(&mut self) {
        let Ok(listed) = self.records.approvals().await else { return };
        // Entries hitl did not write are left as they are.
        let listed: Vec<ApprovalEntry> = listed.iter().filter_map(ApprovalEntry::from_value).collect();
        let now = now_ms();
        let first = self.seen.is_none();
        let mut seen = self.seen.take().unwrap_or_default();
        seen.retain(|id, _| listed.iter().any(|e| e.id == *id));
        let mut expired = Vec::new();
        // Each ended approval's caller, end and id.
        let mut listed_ended = Vec::new();
        for entry in listed {
            let (id, status) = (entry.id.clone(), entry.status);
            if !status.is_pending() {
                let caller = entry.caller.clone().unwrap_or_default();
                listed_ended.push((caller, entry.decided_at_ms.unwrap_or(0), id.clone()));
            }
            let lapsed = status.is_pending() && entry.expires_at_ms <= now;
            let until = now.saturating_add(self.retention.keep_ended.as_millis() as u64);
            if lapsed && self.marks.use_once(&format!("expired:{id}"), until).await.unwrap_or(false) {
                expired.push(entry);
                continue;
            }
            if !first && seen.get(&id) != Some(&status) {
                let event = if status.is_pending() { "approval.pending" } else { "approval.decided" };
                let _ = self.events.send(json!({ "event": event, "approval": entry.to_value() }));
            }
            seen.insert(id, status);
        }
        self.seen = Some(seen);
        self.drop_past_share(&listed_ended).await;
        for mut entry in expired {
            entry.status = ApprovalStatus::Expired;
            entry.decided_at_ms = Some(now);
            let written = |key: &str| entry.other.get(key).and_then(Value::as_str).map(str::to_owned);
            let audit = AuditEvent {
                thread: Some(entry.thread.as_str().into()),
                tool: Some(entry.tool.as_str().into()),
                principal: entry.caller.as_deref().map(Arc::from),
                approval: Some(entry.id.clone()),
                approvers: Some(entry.approvers.clone()),
                policy: Some(entry.policy.clone()),
                policy_at: written("policy_at"),
                policy_digest: written("policy_digest"),
                ..AuditEvent::new(AuditKind::Expired)
            };
            self.audit(audit);
            self.publish("approval.decided", entry, now, None).await;
        }
    }

    /// Takes out of the listing each caller's ended approvals past
    /// `max_ended_per_caller`, the oldest first.
    async fn drop_past_share(&mut self, ended: &[(String, u64, String)]) {
        let mut by_caller: std::collections::HashMap<&str, Vec<(u64, &str)>> = std::collections::HashMap::new();
        for (caller, at, id) in ended {
            by_caller.entry(caller).or_default().push((*at, id));
        }
        let mut dropped = Vec::new();
        for (_, mut mine) in by_caller {
            if mine.len() > self.retention.max_ended_per_caller {
                mine.sort_unstable_by(|a, b| b.cmp(a));
                dropped.extend(mine.drain(self.retention.max_ended_per_caller..).map(|(_, id)| id.to_owned()));
            }
        }
        if dropped.is_empty() {
            return;
        }
        if let Err(error) = self.records.remove_approvals(&dropped).await {
            tracing::error!(%error, "ended approvals past a caller's share could not be dropped");
        }
    }

    /// Adds `entry`, with its time, to the entries to write; its arguments and an
    /// edit's diff as listings show them.
    fn audit(&mut self, mut entry: AuditEvent) {
        let max = self.retention.max_argument_bytes;
        if let Some(arguments) = entry.arguments.as_mut().filter(|a| !a.is_null()) {
            *arguments = shown_arguments(arguments, max);
        }
        if let Some(Value::Object(diff)) = &mut entry.diff {
            for change in diff.values_mut() {
                *change = capped(change, max);
            }
        }
        entry.at_ms = now_ms();
        entry.at = rfc3339(entry.at_ms);
        // Serialized now, once for the store and the file: the batch holds lines, not
        // the entries (over a kilobyte each, copied at every move).
        self.batch.push(entry.to_line_in(&mut self.line_buffer));
    }

    /// Writes the entries taken so far to the store's trail and the audit file.
    async fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let mut batch = std::mem::take(&mut self.batch);
        // The file's lines, when there is a file, written before the store takes them.
        // Chained, the store's copy of each names its place in the chain (`chain`), so
        // a file whose last lines were removed can be told by the store.
        let chain = &mut self.audit_chain;
        let lines = self.audit_file.as_ref().map(|_| {
            let mut lines = String::new();
            for entry in &mut batch {
                match chain.as_mut() {
                    Some(chain) => {
                        lines.push_str(&chain.link(&entry.json));
                        entry.json = chain.place_in(&entry.json).into();
                    }
                    None => lines.push_str(&entry.json),
                }
                lines.push('\n');
            }
            lines
        });
        self.unstored.push(batch);
        self.store_audit().await;
        let (Some(file), Some(lines)) = (&self.audit_file, lines) else { return };
        let written = match file {
            AuditFile::Stdout => {
                let mut out = tokio::io::stdout();
                match out.write_all(lines.as_bytes()).await {
                    Ok(()) => out.flush().await,
                    Err(e) => Err(e),
                }
            }
            AuditFile::Path(path) => append_rotating(path, &lines, self.retention.audit_max_bytes).await,
        };
        if let Err(error) = written {
            tracing::error!(%error, "audit lines could not be written");
        }
    }
}

impl Worker {
    /// Writes the waiting audit entries to the store, oldest first, unless it failed
    /// moments ago: the worker calls this after each batch and every second, so
    /// entries written while the store is out of reach reach it once it is back.
    async fn store_audit(&mut self) {
        let unstored = &mut self.unstored;
        if unstored.next_try.is_some_and(|at| tokio::time::Instant::now() < at) {
            return;
        }
        let retried = unstored.next_try.is_some();
        while !unstored.entries.is_empty() {
            let n = unstored.entries.len().min(1_024);
            let chunk = &unstored.entries.make_contiguous()[..n];
            if let Err(error) = self.records.append_audit(chunk).await {
                if !retried {
                    tracing::error!(%error, waiting = unstored.entries.len(),
                        "audit entries could not be stored: kept, and stored when the store is back");
                }
                unstored.failed();
                return;
            }
            unstored.entries.drain(..n);
        }
        if retried {
            tracing::info!(dropped = unstored.dropped, "the audit entries the store missed are stored");
        }
        *unstored = Unstored::default();
    }
}

/// `chain` continued after the last line of it in the audit file (or, when the file
/// was just rotated and is empty, in `<file>.1`): a restart goes on where it stood.
pub(crate) fn resumed(chain: crate::chain::Chain, file: Option<&AuditFile>) -> crate::chain::Chain {
    let Some(AuditFile::Path(path)) = file else { return chain };
    let mut rotated = path.as_os_str().to_owned();
    rotated.push(".1");
    let older = std::fs::read_to_string(std::path::Path::new(&rotated)).unwrap_or_default();
    let newer = std::fs::read_to_string(path).unwrap_or_default();
    let chain = chain.resume(older.lines().chain(newer.lines()));
    tracing::info!(file = %path.display(), seq = chain.seq(), "the audit chain goes on from the file");
    chain
}

/// Appends `lines` to the audit file, rotating it before any line that would take it
/// past `max_bytes`: a batch is split at the bound, so no file holds more than
/// `max_bytes` however many lines a flush gathers (unless one line alone is larger).
async fn append_rotating(path: &std::path::Path, lines: &str, max_bytes: u64) -> std::io::Result<()> {
    let mut size = tokio::fs::metadata(path).await.map_or(0, |meta| meta.len());
    let mut rest = lines;
    while !rest.is_empty() {
        let room = max_bytes.saturating_sub(size);
        let mut cut = 0;
        for line in rest.split_inclusive('\n') {
            if (cut + line.len()) as u64 > room {
                break;
            }
            cut += line.len();
        }
        if cut == 0 && size > 0 {
            rotate(path).await;
            size = 0;
            continue;
        }
        // An empty file takes at least one line, even one larger than the bound.
        if cut == 0 {
            cut = rest.find('\n').map_or(rest.len(), |at| at + 1);
        }
        let mut file = tokio::fs::OpenOptions::new().create(true).append(true).open(path).await?;
        file.write_all(&rest.as_bytes()[..cut]).await?;
        // tokio writes a file on a blocking thread: wait for it before the size is
        // trusted or the file renamed.
        file.flush().await?;
        size += cut as u64;
        rest = &rest[cut..];
    }
    Ok(())
}

/// Renames the audit file to `<file>.1` (replacing an older one); the next write
/// begins it anew.
async fn rotate(path: &std::path::Path) {
    let mut rotated = path.as_os_str().to_owned();
    rotated.push(".1");
    match tokio::fs::rename(path, &rotated).await {
        Ok(()) => {
            tracing::info!(file = %path.display(), "the audit file reached [audit] max_bytes; the older lines are in <file>.1")
        }
        Err(error) => tracing::error!(%error, file = %path.display(), "the audit file could not be rotated"),
    }
}

/// `ms` since the epoch as an RFC 3339 UTC time (`2026-12-01T10:39:13.123Z`).
pub fn rfc3339(ms: u64) -> String {
    hitl_protocol::rfc3339(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The memory store's records, out of reach while `down` is set.
    struct Flaky {
        inner: hitl_thread::MemoryStore,
        down: std::sync::atomic::AtomicBool,
    }

    impl Flaky {
        fn check(&self) -> Result<(), hitl_thread::StoreError> {
            if self.down.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(hitl_thread::StoreError::Unavailable("broken pipe".into()));
            }
            Ok(())
        }
    }

    #[async_trait::async_trait]
    impl Records for Flaky {
        async fn put_approval(&self, id: &str, entry: Value, until_ms: u64) -> Result<(), hitl_thread::StoreError> {
            self.check()?;
            self.inner.put_approval(id, entry, until_ms).await
        }
        async fn approval(&self, id: &str) -> Result<Option<Value>, hitl_thread::StoreError> {
            self.check()?;
            self.inner.approval(id).await
        }
        async fn approvals(&self) -> Result<Vec<Value>, hitl_thread::StoreError> {
            self.check()?;
            self.inner.approvals().await
        }
        async fn remove_approvals(&self, ids: &[String]) -> Result<(), hitl_thread::StoreError> {
            self.check()?;
            self.inner.remove_approvals(ids).await
        }
        async fn append_audit(&self, entries: &[AuditLine]) -> Result<(), hitl_thread::StoreError> {
            self.check()?;
            self.inner.append_audit(entries).await
        }
        async fn audit_since(
            &self,
            since_ms: u64,
            after: Option<&str>,
            limit: usize,
        ) -> Result<Vec<Value>, hitl_thread::StoreError> {
            self.check()?;
            self.inner.audit_since(since_ms, after, limit).await
        }
    }

    #[async_trait::async_trait]
    impl Notes for Flaky {
        async fn put_note(&self, key: &str, value: &str, until_ms: u64) -> Result<(), hitl_thread::StoreError> {
            self.check()?;
            self.inner.put_note(key, value, until_ms).await
        }
        async fn take_note(&self, key: &str) -> Result<Option<String>, hitl_thread::StoreError> {
            self.check()?;
            self.inner.take_note(key).await
        }
        async fn use_once(&self, key: &str, until_ms: u64) -> Result<bool, hitl_thread::StoreError> {
            self.check()?;
            self.inner.use_once(key, until_ms).await
        }
        async fn used(&self, key: &str) -> Result<bool, hitl_thread::StoreError> {
            self.check()?;
            self.inner.used(key).await
        }
    }

    fn worker(records: Arc<Flaky>) -> Worker {
        let keys = crate::session::Keys::new([7; 32], false);
        Worker {
            batch: Vec::new(),
            line_buffer: Vec::new(),
            unstored: Unstored::default(),
            seen: None,
            records: records.clone(),
            marks: records,
            base_url: "http://127.0.0.1".into(),
            audit_file: None,
            audit_chain: None,
            notifier: Notifier::new(crate::Reload::new(crate::Reloaded::default()), keys, Default::default()),
            slack: None,
            events: broadcast::channel(4).0,
            retention: Retention::default(),
        }
    }

    async fn stored(records: &Flaky) -> Vec<String> {
        let all = records.inner.audit_since(0, None, 100).await.unwrap();
        all.iter().map(|e| e["event"].as_str().unwrap_or_default().to_owned()).collect()
    }

    /// Counts `hitl_audit_dropped_total{reason="behind"}`, and nothing else.
    struct Dropped(Arc<std::sync::atomic::AtomicU64>);

    impl metrics::Recorder for Dropped {
        fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
        fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
        fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
        fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
            let behind = key.labels().any(|l| l.key() == "reason" && l.value() == "behind");
            if key.name() == "hitl_audit_dropped_total" && behind {
                metrics::Counter::from_arc(self.0.clone())
            } else {
                metrics::Counter::noop()
            }
        }
        fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
            metrics::Gauge::noop()
        }
        fn register_histogram(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
            metrics::Histogram::noop()
        }
    }

    #[test]
    fn an_audit_entry_the_full_queue_cannot_take_is_counted_not_lost_silently() {
        let dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (notes, mut queued) = mpsc::channel(1);
        let entry = |n: u32| {
            let refused = AuditEvent { round: Some(n), ..AuditEvent::new(AuditKind::Refused) };
            Note::Audit(Box::new(refused))
        };
        metrics::with_local_recorder(&Dropped(dropped.clone()), || {
            send(&notes, entry(1));
            send(&notes, entry(2));
            send(&notes, entry(3));
        });
        assert_eq!(dropped.load(std::sync::atomic::Ordering::SeqCst), 2, "the two the queue had no room for");
        assert!(matches!(queued.try_recv(), Ok(Note::Audit(e)) if e.round == Some(1)), "the first is queued");
        assert!(queued.try_recv().is_err(), "and nothing else");
    }

    #[tokio::test]
    async fn audit_entries_the_store_missed_are_stored_in_order_once_it_is_back() {
        let records = Arc::new(Flaky { inner: Default::default(), down: true.into() });
        let mut worker = worker(records.clone());
        let about_t = |event| AuditEvent { thread: Some("t".into()), ..AuditEvent::new(event) };
        worker.audit(about_t(AuditKind::Executed));
        worker.flush().await;
        worker.audit(about_t(AuditKind::Finished));
        worker.flush().await;
        assert!(stored(&records).await.is_empty());
        assert_eq!(worker.unstored.entries.len(), 2, "kept for the store");

        records.down.store(false, std::sync::atomic::Ordering::SeqCst);
        // The worker tries again every second (and after each batch), backing off while
        // the store fails: the entries arrive once it is back.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !worker.unstored.entries.is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "the entries were never stored");
            tokio::time::sleep(Duration::from_millis(10)).await;
            worker.store_audit().await;
        }
        assert_eq!(stored(&records).await, ["executed", "finished"], "every entry, in order");
        assert!(worker.unstored.next_try.is_none(), "no backoff once the store took them");
    }

    #[tokio::test]
    async fn a_batch_of_audit_lines_is_split_at_max_bytes() {
        let dir = std::env::temp_dir().join(format!("hitl-rotate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        let line = format!("{}\n", "x".repeat(99));
        append_rotating(&path, &line.repeat(2), 250).await.unwrap();
        // One flush of five lines: the two-line file is rotated before the first, then
        // each file takes the two lines that fit: the last one is left with one.
        append_rotating(&path, &line.repeat(5), 250).await.unwrap();
        let rotated = std::fs::read_to_string(dir.join("audit.jsonl.1")).unwrap();
        let current = std::fs::read_to_string(&path).unwrap();
        assert_eq!((rotated.len(), current.len()), (200, 100), "each file within 250 bytes");
        // A line larger than the bound still goes into a file of its own.
        append_rotating(&path, &"y".repeat(300), 250).await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap().len(), 300);
        assert_eq!(std::fs::read_to_string(dir.join("audit.jsonl.1")).unwrap(), current);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn past_the_bound_the_oldest_waiting_entries_are_dropped() {
        let mut unstored = Unstored::default();
        unstored.push((0..UNSTORED + 5).map(|n| AuditLine::of(&json!({"n": n}))).collect());
        assert_eq!(unstored.entries.len(), UNSTORED);
        assert_eq!((&*unstored.entries[0].json, unstored.dropped), (r#"{"n":5}"#, 5), "the oldest five dropped");
    }

    #[test]
    fn times_are_rfc3339_and_sensitive_arguments_are_redacted() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_121_553_123), "2026-12-01T10:39:13.123Z");
        let args = json!({"service": "api", "db_password": "x", "nested": {"GitHubToken": "y", "n": 1}});
        assert_eq!(
            redact(&args),
            json!({"service": "api", "db_password": "[redacted]", "nested": {"GitHubToken": "[redacted]", "n": 1}})
        );
        let before = json!({"version": "1.2", "service": "api"});
        let after = json!({"version": "1.3", "service": "api", "api_key": "k"});
        assert_eq!(
            diff(before.as_object().unwrap(), after.as_object().unwrap()),
            json!({"version": {"from": "1.2", "to": "1.3"}, "api_key": "[redacted]"})
        );
    }

    #[test]
    fn values_past_the_limit_keep_their_start_size_and_digest_and_capping_twice_changes_nothing() {
        let long = "é".repeat(1_000);
        let shown = capped(&json!(long), 300);
        let text = shown.as_str().unwrap();
        assert!(text.len() <= 300 && text.starts_with("éé"), "{text}");
        let digest = ring::digest::digest(&ring::digest::SHA256, json!(long).to_string().as_bytes());
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert!(text.ends_with(&format!("… [2000 bytes, sha256:{hex}]")), "{text}");
        assert_eq!(capped(&shown, 300), shown, "a capped value stays as it is");
        let object = json!({"rows": (0..200).collect::<Vec<_>>()});
        let shown = capped(&object, 256);
        assert!(shown.as_str().unwrap().starts_with("{\"rows\":[0,1,"), "{shown}");
        assert_eq!(capped(&json!({"a": 1}), 256), json!({"a": 1}), "a small value is whole");
        let args = json!({"token": "t", "note": "x".repeat(500), "n": 3});
        let listed = shown_arguments(&args, 256);
        assert_eq!((&listed["token"], &listed["n"]), (&json!("[redacted]"), &json!(3)));
        assert!(listed["note"].as_str().unwrap().len() <= 256);
        // Many values just under the cap are capped together.
        let many: serde_json::Map<String, Value> = (0..20).map(|i| (format!("v{i}"), json!("y".repeat(250)))).collect();
        let together = shown_arguments(&Value::Object(many), 256);
        assert!(together.as_str().is_some_and(|t| t.len() <= 1024 && t.contains(" bytes, sha256:")), "{together}");
    }

    #[test]
    fn an_approval_is_displayed_with_every_hidden_character_escaped_and_every_value_whole() {
        let long = "z".repeat(20_000);
        let entry = json!({
            "tool": "db.drop\u{200b}_table",
            "arguments": {"table": "\u{202e}DORP\u{202c}_orders_test", "rows": [1, "a\u{a0}b"], "note": long},
            "description": "Drop it?\nSure\u{2066}",
            "upstream": "db",
            "tool_description": "Drops.\nFor good.",
            "annotations": {"destructiveHint": true, "title": "Drop\u{feff}"},
            "expires_at_ms": 1_796_121_553_123u64,
        });
        let shown = &with_display(entry)["display"];
        assert_eq!(shown["tool"], r"db.drop\u200b_table");
        assert_eq!(shown["arguments"]["table"], r"\u202eDORP\u202c_orders_test");
        assert_eq!(shown["arguments"]["rows"], r#"[1,"a\u00a0b"]"#);
        assert_eq!(shown["arguments"]["note"], long.as_str(), "whole");
        assert_eq!(shown["description"], "Drop it?\nSure\\u2066", "its own lines kept");
        assert_eq!(shown["tool_description"], "Drops.\nFor good.");
        assert_eq!(shown["annotations"], json!({"destructiveHint": "true", "title": r"Drop\ufeff"}));
        assert_eq!((&shown["upstream"], &shown["expires_at"]), (&json!("db"), &json!("2026-12-01T10:39:13.123Z")));
        let bare = with_display(json!({"tool": "t", "arguments": null}));
        assert_eq!(bare["display"]["description"], Value::Null, "nothing made up for what the entry lacks");
    }
}
