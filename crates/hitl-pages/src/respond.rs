//! Answers of the pages and the API: a body with its content type, and JSON (an
//! error is `{"error": "…"}`).

use bytes::Bytes;
use hitl_http::Body;
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

/// A response's parts before its security headers.
pub(crate) fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> http::Response<Body> {
    let mut response = http::Response::new(hitl_http::body(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A JSON answer.
pub(crate) fn reply(status: StatusCode, body: &Value) -> http::Response<Body> {
    respond(status, "application/json", body.to_string())
}

/// A JSON error: `{"error": why}`.
pub(crate) fn error(status: StatusCode, why: &str) -> http::Response<Body> {
    reply(status, &json!({ "error": why }))
}
