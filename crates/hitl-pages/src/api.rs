//! The approvals API, for bots and UIs, with bearer tokens: the listing, one approval,
//! a decision (the seed's review answer as JSON), the events as SSE, and the audit
//! trail. Errors are JSON `{"error": "…"}` with the status that says what went wrong.

use std::convert::Infallible;

use bytes::Bytes;
use futures_util::StreamExt as _;
use hitl_http::Body;
use hitl_interrupt::Engine;
use http::{HeaderValue, Method, StatusCode, header};
use http_body::Frame;
use http_body_util::{BodyExt as _, StreamBody};
use serde_json::{Map, Value, json};

use crate::audit::AuditEvent;
use crate::entry::ApprovalStatus;
use crate::respond::{error, reply};
use crate::session::Session;
use crate::{Refusal, Shared, form};

/// The most entries one page of `GET /api/approvals` or `GET /api/audit` holds.
const PAGE: usize = 500;

/// May `who` see `entry`: are they among its approvers? (Admins see every entry:
/// [`Shared::sees`].)
pub(crate) fn may_see(who: &Session, entry: &Value) -> bool {
    let approvers: Vec<String> = entry["approvers"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    who.is(&approvers)
}

/// Is listing `entry` an approval still waiting for an approver?
fn pending(entry: &Value) -> bool {
    ApprovalStatus::of_entry(entry).is_some_and(ApprovalStatus::is_pending)
}

pub(crate) async fn handle(
    shared: &Shared,
    engine: &Engine,
    parts: &http::request::Parts,
    body: &Bytes,
) -> http::Response<Body> {
    let who = match bearer(shared, &parts.headers) {
        Ok(who) => who,
        Err(why) => {
            let mut response = error(StatusCode::UNAUTHORIZED, &why);
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return response;
        }
    };
    let query = form(parts.uri.query().unwrap_or_default().as_bytes());
    let segments: Vec<&str> = parts.uri.path().trim_start_matches("/api").trim_matches('/').split('/').collect();
    match (&parts.method, segments.as_slice()) {
        (&Method::GET, ["approvals"]) => {
            let status = query.get("status").map_or("all", String::as_str);
            if !matches!(status, "all" | "pending" | "decided") {
                return error(StatusCode::BAD_REQUEST, "status must be pending, decided or all");
            }
            let (limit, after) = match page(&query) {
                Ok(page) => page,
                Err(why) => return error(StatusCode::BAD_REQUEST, &why),
            };
            match shared.approvals(engine).await {
                Ok(mut listed) => {
                    // Oldest first by when they were asked (then id), the order the cursor
                    // counts in; a page starts after the cursor's entry.
                    listed.sort_by(|a, b| position(a).cmp(&position(b)));
                    let mut shown = listed
                        .into_iter()
                        .filter(|e| shared.sees(&who, e))
                        .filter(|e| match status {
                            "pending" => pending(e),
                            "decided" => !pending(e),
                            _ => true,
                        })
                        .filter(|e| after.as_ref().is_none_or(|(ms, id)| position(e) > (*ms, id.as_str())));
                    let approvals: Vec<Value> = shown.by_ref().take(limit).collect();
                    let mut body = json!({ "approvals": approvals });
                    if shown.next().is_some()
                        && let Some(last) = approvals.last()
                    {
                        let (ms, id) = position(last);
                        body["next_cursor"] = cursor(ms, id).into();
                    }
                    reply(StatusCode::OK, &body)
                }
                Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &format!("the store is unavailable: {e}")),
            }
        }
        (_, ["threads", rest @ ..]) => {
            crate::threads::handle(&shared.config.admins, engine, &who, &parts.method, rest, &query).await
        }
        (&Method::GET, ["approvals", "events"]) => events(shared, who).await,
        (&Method::GET, ["approvals", id]) => match shared.approval(engine, id).await {
            Ok(Some(entry)) if may_see(&who, &entry) => reply(StatusCode::OK, &entry),
            // An admin who is no approver of it sees it as listings show it.
            Ok(Some(mut entry)) if shared.sees(&who, &entry) => {
                let max = shared.config.retention.max_argument_bytes;
                entry["arguments"] = crate::shown_arguments(&entry["arguments"], max);
                reply(StatusCode::OK, &crate::ledger::with_display(entry))
            }
            Ok(_) => error(StatusCode::NOT_FOUND, "no approval you may see has this id"),
            Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &format!("the store is unavailable: {e}")),
        },
        (&Method::POST, ["approvals", id, "decision"]) => {
            let content = match decision(body) {
                Ok(content) => content,
                Err(why) => return error(StatusCode::BAD_REQUEST, &why),
            };
            match shared.decide(engine, id, &who, content).await {
                Ok(entry) => reply(StatusCode::OK, &entry),
                Err(Refusal(status, why)) => error(status, &why),
            }
        }
        (&Method::GET, ["audit"]) => {
            let admin = who.is(&shared.config.admins);
            if !admin && !who.is(&shared.reload.now().auditors) {
                return error(StatusCode::FORBIDDEN, "only approvers and admins may read the audit trail");
            }
            let (limit, after) = match page(&query) {
                Ok(page) => page,
                Err(why) => return error(StatusCode::BAD_REQUEST, &why),
            };
            // A cursor names `since` and the last entry read, by the store's own `seq`.
            let (since, after) = match (&after, query.get("since").map(|s| s.parse::<u64>())) {
                (Some((since, seq)), _) => (*since, Some(seq.as_str())),
                (None, None) => (0, None),
                (None, Some(Ok(since))) => (since, None),
                (None, Some(Err(_))) => {
                    return error(StatusCode::BAD_REQUEST, "since must be a time in ms since the epoch");
                }
            };
            match shared.records.audit_since(since, after, limit + 1).await {
                Ok(mut read) => {
                    let more = read.len() > limit;
                    read.truncate(limit);
                    let seq = |e: &Value| e["seq"].as_str().map_or_else(|| e["seq"].to_string(), str::to_owned);
                    let next = if more { read.last().map(|last| cursor(since, &seq(last))) } else { None };
                    let events = if admin {
                        read
                    } else {
                        // The threads of the approvals listed for them, besides those the
                        // page's own entries name them for.
                        let listed = shared.approvals(engine).await.unwrap_or_default();
                        let threads = listed.iter().filter(|e| may_see(&who, e)).filter_map(|e| e["thread"].as_str());
                        decidable(&who, read, threads.map(str::to_owned).collect())
                    };
                    let mut body = json!({ "events": events });
                    if let Some(next) = next {
                        body["next_cursor"] = next.into();
                    }
                    reply(StatusCode::OK, &body)
                }
                Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &format!("the store is unavailable: {e}")),
            }
        }
        (_, ["approvals"] | ["approvals", _] | ["approvals", _, "decision"] | ["audit"]) => {
            error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here")
        }
        _ => error(StatusCode::NOT_FOUND, "no such API route"),
    }
}

/// `limit` (default and at most 500: a larger one is taken as 500) and `cursor` (from a
/// page's `next_cursor`) of a listing request.
fn page(query: &std::collections::HashMap<String, String>) -> Result<(usize, Option<(u64, String)>), String> {
    let limit = match query.get("limit").map(|l| l.parse::<usize>()) {
        None => PAGE,
        Some(Ok(limit)) if limit >= 1 => limit.min(PAGE),
        Some(_) => return Err(format!("limit must be a number from 1 to {PAGE}")),
    };
    let after = match query.get("cursor") {
        None => None,
        Some(cursor) => Some(read_cursor(cursor).ok_or("cursor is not one this server handed out")?),
    };
    Ok((limit, after))
}

/// Where a listed approval stands in the listing's order: when it was asked, its id.
fn position(entry: &Value) -> (u64, &str) {
    (entry["requested_at_ms"].as_u64().unwrap_or(0), entry["id"].as_str().unwrap_or_default())
}

/// An opaque cursor of `(ms, rest)`.
fn cursor(ms: u64, rest: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{ms}.{rest}"))
}

fn read_cursor(cursor: &str) -> Option<(u64, String)> {
    use base64::Engine as _;
    let text = String::from_utf8(base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    let (ms, rest) = text.split_once('.')?;
    Some((ms.parse().ok()?, rest.to_owned()))
}

/// The audit entries of calls `who` may decide: those naming them among the approvers,
/// and the other entries of those calls' threads (and of `threads`). An entry hitl did
/// not write is shown to admins only.
fn decidable(who: &Session, entries: Vec<Value>, mut threads: std::collections::HashSet<String>) -> Vec<Value> {
    let read: Vec<(Value, Option<AuditEvent>)> = entries
        .into_iter()
        .map(|entry| {
            let typed = AuditEvent::from_value(&entry);
            (entry, typed)
        })
        .collect();
    let approver = |e: &AuditEvent| e.approvers.as_deref().is_some_and(|a| who.is(a));
    let theirs = read.iter().filter_map(|(_, e)| e.as_ref()).filter(|e| approver(e));
    threads.extend(theirs.filter_map(|e| e.thread.as_deref().map(str::to_owned)));
    // An entry about one approval (it names its approvers) only to them: a thread may
    // hold approvals for different people.
    read.into_iter()
        .filter(|(_, typed)| match typed {
            Some(e) if e.about_approval() => approver(e),
            Some(e) => e.thread.as_deref().is_some_and(|t| threads.contains(t)),
            None => false,
        })
        .map(|(entry, _)| entry)
        .collect()
}

/// The caller of an API request, from `Authorization: Bearer`.
fn bearer(shared: &Shared, headers: &http::HeaderMap) -> Result<Session, String> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .ok_or("this API needs Authorization: Bearer <token>")?;
    let identity = shared.identify(token.trim())?;
    Ok(Session {
        id: String::new(),
        principal: identity.principal,
        groups: identity.groups,
        expires: u64::MAX,
        scope: None,
        credential: None,
        approver: false,
    })
}

/// A decision's JSON, as the seed's review answer: the form's content
/// `{"decision": "approve" | "edit" | "reject" | "respond", "message"?, "args"?}` (`args`
/// as the JSON text the form takes, or an object), or the whole elicitation answer
/// `{"action": "accept", "content": {…}}` (`decline` rejects), or the middleware's
/// decision `{"type": "edit", "edited_action": {"args": {…}}}`.
fn decision(body: &[u8]) -> Result<Map<String, Value>, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let Value::Object(mut given) = value else { return Err("the body must be a JSON object".into()) };
    let mut content = match given.get("action").and_then(Value::as_str) {
        Some("accept") => match given.remove("content") {
            Some(Value::Object(content)) => content,
            _ => return Err("an accept answer carries its content, an object".into()),
        },
        Some("decline" | "cancel") => Map::from_iter([("decision".to_owned(), Value::from("reject"))]),
        Some(other) => return Err(format!("unknown action {other:?}: accept, decline or cancel")),
        None => given,
    };
    if !content.contains_key("decision")
        && let Some(Value::String(kind)) = content.remove("type")
    {
        let edited = content.remove("edited_action").or_else(|| content.remove("editedAction"));
        if let Some(args) = edited.as_ref().and_then(|e| e.get("args")) {
            content.insert("args".into(), args.clone());
        }
        content.insert("decision".into(), Value::String(kind));
    }
    match content.get("decision") {
        Some(Value::String(_)) => {}
        _ => return Err("decision must be approve, edit, reject or respond".into()),
    }
    if let Some(args) = content.get_mut("args")
        && args.is_object()
    {
        *args = Value::String(args.to_string());
    }
    Ok(content)
}

/// `GET /api/approvals/events`: the pending approvals `who` may see, then every
/// pending and decided one as it happens, as SSE (`event: approval.pending` or
/// `approval.decided`, `data:` the entry), with a comment every 15 s to keep it open.
///
/// Only approvers and admins may open one (a stream holds a connection for as long as
/// it runs), within `max_event_streams_per_principal` each and `max_event_streams` in
/// all; past either, 429.
async fn events(shared: &Shared, who: Session) -> http::Response<Body> {
    if !(who.is(&shared.reload.now().auditors) || who.is(&shared.config.admins)) {
        return error(StatusCode::FORBIDDEN, "only approvers and admins may follow the approvals");
    }
    let place = match shared.streams.open(&who.principal) {
        Ok(place) => place,
        Err(why) => {
            let mut response = error(StatusCode::TOO_MANY_REQUESTS, &why);
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("30"));
            return response;
        }
    };
    let receiver = shared.events.subscribe();
    let pending: Vec<Value> = shared
        .records
        .approvals()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|e| pending(e) && shared.sees(&who, e))
        .collect();
    let frame = |event: &str, entry: &Value| Bytes::from(format!("event: {event}\ndata: {entry}\n\n"));
    let first: Vec<Bytes> = std::iter::once(Bytes::from_static(b": hitl approvals\n\n"))
        .chain(pending.iter().map(|e| frame("approval.pending", e)))
        .collect();
    // The stream keeps its place until it is dropped.
    let admin = who.is(&shared.config.admins);
    let live = futures_util::stream::unfold((receiver, who, place), move |(mut receiver, who, place)| async move {
        loop {
            let next = tokio::time::timeout(std::time::Duration::from_secs(15), receiver.recv()).await;
            match next {
                Err(_) => return Some((Bytes::from_static(b": keep-alive\n\n"), (receiver, who, place))),
                Ok(Ok(event)) if admin || may_see(&who, &event["approval"]) => {
                    let name = event["event"].as_str().unwrap_or("approval.decided").to_owned();
                    return Some((frame(&name, &event["approval"]), (receiver, who, place)));
                }
                Ok(Ok(_)) | Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
                Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => return None,
            }
        }
    });
    let frames = futures_util::stream::iter(first).chain(live).map(|bytes| Ok::<_, Infallible>(Frame::data(bytes)));
    let mut response = http::Response::new(StreamBody::new(frames).boxed_unsync());
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn an_approver_reads_a_threads_entries_but_not_another_approvers_approval_in_it() {
        let who = crate::session::Session {
            id: "s".into(),
            principal: "user:dev".into(),
            groups: vec!["group:dev".into()],
            expires: u64::MAX,
            scope: None,
            credential: None,
            approver: true,
        };
        let entries = vec![
            json!({"event": "asked", "thread": "t", "approvers": ["group:dev"], "arguments": {"path": "a"}}),
            json!({"event": "asked", "thread": "t", "approvers": ["group:dba"], "arguments": {"table": "orders"}}),
            json!({"event": "executed", "thread": "t"}),
            json!({"event": "executed", "thread": "u"}),
            json!({"event": "finished", "thread": "v"}),
        ];
        let seen = super::decidable(&who, entries, std::iter::once("v".to_owned()).collect());
        let shown: Vec<String> = seen.iter().map(|e| format!("{}:{}", e["event"], e["thread"])).collect();
        assert_eq!(shown, [r#""asked":"t""#, r#""executed":"t""#, r#""finished":"v""#], "{seen:?}");
    }

    #[test]
    fn decisions_come_as_form_content_elicitation_answers_or_middleware_decisions() {
        let read = |v: serde_json::Value| super::decision(v.to_string().as_bytes()).map(serde_json::Value::Object);
        let edit = json!({"decision": "edit", "args": "{\"a\":1}"});
        assert_eq!(read(json!({"decision": "edit", "args": {"a": 1}})), Ok(edit.clone()));
        assert_eq!(
            read(json!({"action": "accept", "content": {"decision": "edit", "args": {"a": 1}}})),
            Ok(edit.clone())
        );
        assert_eq!(read(json!({"type": "edit", "edited_action": {"name": "t", "args": {"a": 1}}})), Ok(edit));
        assert_eq!(read(json!({"action": "decline"})), Ok(json!({"decision": "reject"})));
        assert_eq!(
            read(json!({"type": "reject", "message": "no"})),
            Ok(json!({"message": "no", "decision": "reject"}))
        );
        assert!(
            read(json!({"decision": 3})).is_err() && read(json!([1])).is_err() && read(json!({"action": "x"})).is_err()
        );
        assert!(super::decision(b"{").unwrap_err().starts_with("the body is not JSON"));
    }
}
