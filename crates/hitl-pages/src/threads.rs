//! The thread administration API, for operators with bearer tokens who are among the
//! `[admin] principals`: `GET /api/threads` (the paused calls, paged), `GET
//! /api/threads/<id>`, `DELETE /api/threads/<id>` (cancel: the call's next resend gets
//! `Invalid or expired requestState`). What is shown is [`hitl_interrupt::PausedCall`]:
//! never a `requestState`, a secret, or what a question asks.

use hitl_http::Body;
use hitl_interrupt::Engine;
use http::{Method, StatusCode};
use serde_json::json;

use crate::respond::{error, reply};
use crate::session::Session;

/// The most paused calls one `GET /api/threads` returns.
const PAGE: usize = 1_000;
/// How many it returns without `limit`.
const DEFAULT_PAGE: usize = 100;

/// Serves `/api/threads…` (`rest`: the path segments after `threads`).
pub(crate) async fn handle(
    admins: &[String],
    engine: &Engine,
    who: &Session,
    method: &Method,
    rest: &[&str],
    query: &std::collections::HashMap<String, String>,
) -> http::Response<Body> {
    if !who.is(admins) {
        let why = if admins.is_empty() {
            "thread administration is off: name its principals in [admin] principals"
        } else {
            "only the [admin] principals may administer threads"
        };
        return error(StatusCode::FORBIDDEN, why);
    }
    let unavailable = |e: hitl_interrupt::EngineError| {
        error(StatusCode::SERVICE_UNAVAILABLE, &format!("the store is unavailable: {e}"))
    };
    match (method, rest) {
        (&Method::GET, []) => {
            let number = |key: &str, default: usize| match query.get(key) {
                None => Ok(default),
                Some(text) => text.parse::<usize>().map_err(|_| format!("{key} must be a whole number")),
            };
            let (offset, limit) = match (number("offset", 0), number("limit", DEFAULT_PAGE)) {
                (Ok(offset), Ok(limit)) => (offset, limit.min(PAGE)),
                (Err(why), _) | (_, Err(why)) => return error(StatusCode::BAD_REQUEST, &why),
            };
            match engine.admin().paused_calls(offset, limit).await {
                Ok(page) => {
                    let mut listed = json!(page);
                    listed["offset"] = json!(offset);
                    reply(StatusCode::OK, &listed)
                }
                Err(e) => unavailable(e),
            }
        }
        (&Method::GET, [id]) => match engine.admin().paused_call(id).await {
            Ok(Some(call)) => reply(StatusCode::OK, &json!(call)),
            Ok(None) => error(StatusCode::NOT_FOUND, "no paused call has this id"),
            Err(e) => unavailable(e),
        },
        (&Method::DELETE, [id]) => match engine.admin().cancel(id).await {
            Ok(true) => {
                tracing::info!(thread = %id, admin = %who.principal, "paused call cancelled");
                reply(StatusCode::OK, &json!({ "cancelled": id }))
            }
            Ok(false) => error(StatusCode::NOT_FOUND, "no paused call has this id"),
            Err(e) => unavailable(e),
        },
        (_, [] | [_]) => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here"),
        _ => error(StatusCode::NOT_FOUND, "no such API route"),
    }
}
