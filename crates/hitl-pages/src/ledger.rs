//! The [`Observer`] of the pages: what happens to rounds becomes the approvals listing
//! (pending, then decided), the audit trail (in the store and in `[audit] file`),
//! webhook notifications and the events of `GET /api/approvals/events`. The engine
//! calls it inline; the work happens in one task, in order, off the request's path.

use std::sync::Arc;
use std::time::Duration;

use hitl_interrupt::{Event, Observer, PageKind, PageView, Records, Thread};
use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{broadcast, mpsc};

use crate::notify::Notifier;

/// How long a decided (or expired) approval stays listed.
const KEPT_AFTER: Duration = Duration::from_secs(24 * 3600);
/// How often pending approvals past their time are marked expired.
const SWEEP: Duration = Duration::from_secs(5);

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

/// What the worker is told, owned.
pub(crate) enum Note {
    Asked(Box<Thread>),
    Answered {
        thread: Box<Thread>,
        round: u32,
        keys: Vec<String>,
    },
    Page(Box<PageView>),
    Began {
        thread: String,
        tool: String,
        principal: Option<String>,
        step: String,
    },
    Finished {
        thread: String,
        tool: String,
        principal: Option<String>,
        is_error: bool,
    },
    /// An audit entry made by the pages themselves (a refused decision).
    Audit(Value),
}

/// Hands events to the worker.
pub(crate) struct Ears(pub(crate) mpsc::UnboundedSender<Note>);

impl Observer for Ears {
    fn observe(&self, event: &Event<'_>) {
        let note = match event {
            Event::Asked { thread } => Note::Asked(Box::new((*thread).clone())),
            Event::Answered { thread, round } => Note::Answered {
                thread: Box::new((*thread).clone()),
                round: round.n,
                keys: round.questions.iter().map(|q| q.key.clone()).collect(),
            },
            Event::PageAnswered { page } => Note::Page(Box::new((*page).clone())),
            Event::Began { thread_id, tool, principal, step } => Note::Began {
                thread: (*thread_id).to_owned(),
                tool: (*tool).to_owned(),
                principal: principal.map(str::to_owned),
                step: (*step).to_owned(),
            },
            Event::Finished { thread_id, tool, principal, result } => Note::Finished {
                thread: (*thread_id).to_owned(),
                tool: (*tool).to_owned(),
                principal: principal.map(str::to_owned),
                is_error: result.is_error == Some(true),
            },
            _ => return,
        };
        // The worker lives as long as the pages; a send fails only at shutdown.
        let _ = self.0.send(note);
    }
}

/// The worker's state.
pub(crate) struct Worker {
    pub(crate) records: Arc<dyn Records>,
    pub(crate) base_url: String,
    pub(crate) audit_file: Option<AuditFile>,
    pub(crate) notifier: Notifier,
    pub(crate) events: broadcast::Sender<Value>,
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
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

/// The listing entry of an approval question, pending.
pub(crate) fn pending_entry(view: &PageView, base_url: &str) -> Value {
    let (policy, approvers) = match &view.page.kind {
        PageKind::Approval { policy, approvers, .. } => (policy.clone(), approvers.clone()),
        _ => (String::new(), Vec::new()),
    };
    let review = view.review.as_ref();
    json!({
        "id": view.id,
        "status": "pending",
        "tool": review.map_or_else(|| tool_name(&view.tool).to_owned(), |r| r.tool.clone()),
        "arguments": review.map(|r| Value::Object(r.args.clone())),
        "decisions": review.map(|r| r.offered.clone()),
        "policy": policy,
        "approvers": approvers,
        "caller": view.principal,
        "thread": view.thread_id,
        "requested_at_ms": view.page.asked_at_ms,
        "expires_at_ms": view.expires_at_ms,
        "link": format!("{base_url}/approvals/{}", view.id),
        "decided_by": null,
        "decided_at_ms": null,
        "decision": null,
    })
}

/// The listing entry of an approval just decided, and its audit entry (the decision,
/// with an edit's argument diff).
pub(crate) fn decided_entry(view: &PageView, base_url: &str) -> (Value, Value) {
    let mut entry = pending_entry(view, base_url);
    let answer = view.page.answer.clone().unwrap_or_default();
    let status = status_of(&answer);
    let before = view.review.as_ref().map(|r| r.args.clone()).unwrap_or_default();
    let mut decision = answer.clone();
    let mut audit = json!({
        "event": status,
        "thread": view.thread_id, "tool": entry["tool"], "principal": view.principal,
        "approver": view.page.answered_by, "approval": view.id,
        "args_digest": view.args_digest, "arguments": redact(&Value::Object(before.clone())),
    });
    if status == "edited"
        && let Some(Value::Object(after)) =
            answer.get("args").and_then(Value::as_str).and_then(|a| serde_json::from_str(a).ok())
    {
        audit["diff"] = diff(&before, &after);
        decision["arguments"] = Value::Object(after);
    }
    if let Some(message) = answer.get("message") {
        audit["message"] = message.clone();
    }
    entry["status"] = status.into();
    entry["decided_by"] = json!(view.page.answered_by);
    entry["decided_at_ms"] = now_ms().into();
    entry["decision"] = decision;
    (entry, audit)
}

/// The status a decision gives its approval.
fn status_of(decision: &Value) -> &'static str {
    match decision.get("decision").and_then(Value::as_str) {
        Some("approve") => "approved",
        Some("edit") => "edited",
        Some("reject") => "rejected",
        Some("respond") => "responded",
        _ => "decided",
    }
}

impl Worker {
    pub(crate) async fn run(self, mut notes: mpsc::UnboundedReceiver<Note>) {
        let mut sweep = tokio::time::interval(SWEEP);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                note = notes.recv() => match note {
                    Some(note) => self.take(note).await,
                    None => return,
                },
                _ = sweep.tick() => self.expire().await,
            }
        }
    }

    async fn take(&self, note: Note) {
        match note {
            Note::Asked(thread) => self.asked(&thread).await,
            Note::Answered { thread, round, keys } => {
                self.audit(json!({
                    "event": "answered", "thread": thread.id, "tool": tool_name(&thread.tool),
                    "principal": thread.principal, "round": round, "keys": keys, "args_digest": thread.args_digest,
                }))
                .await;
                self.withdrawn(&thread).await;
            }
            Note::Page(view) => self.page_answered(&view).await,
            Note::Began { thread, tool, principal, step } => {
                let tool = tool_name(&tool);
                self.audit(
                    json!({"event": "executed", "thread": thread, "tool": tool, "principal": principal, "step": step}),
                )
                .await;
            }
            Note::Finished { thread, tool, principal, is_error } => {
                let tool = tool_name(&tool);
                self.audit(json!({"event": "finished", "thread": thread, "tool": tool, "principal": principal, "is_error": is_error}))
                    .await;
            }
            Note::Audit(entry) => self.audit(entry).await,
        }
    }

    async fn asked(&self, thread: &Thread) {
        let Some(round) = &thread.round else { return };
        let mut approvals = Vec::new();
        for (index, question) in round.questions.iter().enumerate() {
            let Some(page) = &question.page else { continue };
            if !matches!(page.kind, PageKind::Approval { .. }) {
                continue;
            }
            if let Some(view) = view_of(thread, index) {
                approvals.push(pending_entry(&view, &self.base_url));
            }
        }
        let args = approvals.first().map(|a| redact(&a["arguments"]));
        self.audit(json!({
            "event": "asked", "thread": thread.id, "tool": tool_name(&thread.tool), "principal": thread.principal,
            "round": round.n, "keys": round.questions.iter().map(|q| q.key.clone()).collect::<Vec<_>>(),
            "args_digest": thread.args_digest, "arguments": args,
            "approvals": approvals.iter().map(|a| a["id"].clone()).collect::<Vec<_>>(),
        }))
        .await;
        for entry in approvals {
            self.publish("approval.pending", entry, thread.expires_at_ms).await;
        }
    }

    /// Approvals of a resumed round that no one decided: the caller withdrew them.
    async fn withdrawn(&self, thread: &Thread) {
        let Some(round) = &thread.round else { return };
        for (index, question) in round.questions.iter().enumerate() {
            let Some(page) = question.page.as_ref().filter(|p| p.answer.is_none()) else { continue };
            if !matches!(page.kind, PageKind::Approval { .. }) {
                continue;
            }
            let Some(view) = view_of(thread, index) else { continue };
            let mut entry = self.entry(&view).await;
            entry["status"] = "withdrawn".into();
            entry["decided_at_ms"] = now_ms().into();
            self.audit(json!({"event": "withdrawn", "thread": thread.id, "tool": entry["tool"], "principal": thread.principal, "approval": view.id}))
                .await;
            self.publish("approval.decided", entry, now_ms()).await;
        }
    }

    async fn page_answered(&self, view: &PageView) {
        let base = json!({
            "thread": view.thread_id, "tool": tool_name(&view.tool), "principal": view.principal,
            "approver": view.page.answered_by, "key": view.key,
        });
        if view.page.answer.is_none() {
            return;
        }
        match &view.page.kind {
            PageKind::Approval { .. } => {
                let (entry, audit) = decided_entry(view, &self.base_url);
                self.audit(audit).await;
                self.publish("approval.decided", entry, now_ms()).await;
            }
            // What a secret or sign-in page took is never written down.
            PageKind::Secret { label } => {
                let mut audit = base;
                audit["event"] = "answered".into();
                audit["page"] = json!({"type": "secret", "label": label});
                self.audit(audit).await;
            }
            PageKind::SignIn => {
                let mut audit = base;
                audit["event"] = "answered".into();
                audit["page"] = json!({"type": "sign_in"});
                self.audit(audit).await;
            }
        }
    }

    /// The listed entry of `view`'s approval, or a new one.
    async fn entry(&self, view: &PageView) -> Value {
        match self.records.approval(&view.id).await {
            Ok(Some(entry)) => entry,
            _ => pending_entry(view, &self.base_url),
        }
    }

    /// Lists `entry` (kept a day past `from_ms`), notifies and streams it.
    async fn publish(&self, event: &str, entry: Value, from_ms: u64) {
        let id = entry["id"].as_str().unwrap_or_default().to_owned();
        let until = from_ms.max(now_ms()).saturating_add(KEPT_AFTER.as_millis() as u64);
        if let Err(error) = self.records.put_approval(&id, entry.clone(), until).await {
            tracing::error!(%error, approval = %id, "the approval could not be listed");
        }
        self.notifier.send(event, &entry);
        let _ = self.events.send(json!({ "event": event, "approval": entry }));
    }

    /// Pending approvals past their time become expired.
    async fn expire(&self) {
        let Ok(listed) = self.records.approvals().await else { return };
        let now = now_ms();
        for mut entry in listed {
            let expired = entry["status"] == "pending" && entry["expires_at_ms"].as_u64().is_some_and(|at| at <= now);
            if !expired {
                continue;
            }
            entry["status"] = "expired".into();
            entry["decided_at_ms"] = now.into();
            self.audit(json!({
                "event": "expired", "thread": entry["thread"], "tool": entry["tool"], "principal": entry["caller"],
                "approval": entry["id"],
            }))
            .await;
            self.publish("approval.decided", entry, now).await;
        }
    }

    /// Adds `entry` (with its time) to the store's trail and the audit file.
    pub(crate) async fn audit(&self, mut entry: Value) {
        let at = now_ms();
        entry["at_ms"] = at.into();
        entry["at"] = rfc3339(at).into();
        if let Err(error) = self.records.append_audit(entry.clone()).await {
            tracing::error!(%error, "an audit entry could not be stored");
        }
        let Some(file) = &self.audit_file else { return };
        let mut line = entry.to_string();
        line.push('\n');
        let written = match file {
            AuditFile::Stdout => {
                let mut out = tokio::io::stdout();
                match out.write_all(line.as_bytes()).await {
                    Ok(()) => out.flush().await,
                    Err(e) => Err(e),
                }
            }
            AuditFile::Path(path) => match tokio::fs::OpenOptions::new().create(true).append(true).open(path).await {
                Ok(mut f) => f.write_all(line.as_bytes()).await,
                Err(e) => Err(e),
            },
        };
        if let Err(error) = written {
            tracing::error!(%error, "an audit line could not be written");
        }
    }
}

fn view_of(thread: &Thread, index: usize) -> Option<PageView> {
    let round = thread.round.as_ref()?;
    let question = round.questions.get(index)?;
    let page = question.page.clone()?;
    Some(PageView {
        id: page.id.clone(),
        thread_id: thread.id.clone(),
        round: round.n,
        key: question.key.clone(),
        tool: thread.tool.clone(),
        principal: thread.principal.clone(),
        args_digest: thread.args_digest.clone(),
        message: String::new(),
        review: match &question.kind {
            hitl_interrupt::QuestionKind::Review(r) => Some(r.clone()),
            _ => None,
        },
        page,
        open: true,
        expires_at_ms: thread.expires_at_ms,
    })
}

/// `ms` since the epoch as an RFC 3339 UTC time (`2026-12-01T10:39:13.123Z`).
pub fn rfc3339(ms: u64) -> String {
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
