//! A client for the MCP servers hitl puts a human gate in front of.
//!
//! An [`Upstream`] speaks to a server of any revision from 2025-03-26 to 2026-07-28,
//! over Streamable HTTP ([`Upstream::http`]) or as a stdio child process
//! ([`Upstream::stdio`], started again when it exits): it asks `server/discover` first
//! and speaks 2026-07-28 statelessly when the server supports it, and otherwise opens a
//! session with the `initialize` handshake (or speaks the revision it is told to).
//! HTTP responses are read as JSON or as an SSE stream. Tools and results pass through
//! as the upstream sent them.
//!
//! ```no_run
//! # async fn run() -> Result<(), hitl_upstream::UpstreamError> {
//! use hitl_upstream::{HttpConfig, Upstream};
//!
//! let db = Upstream::http(HttpConfig {
//!     name: "db".into(),
//!     url: "http://127.0.0.1:9000/mcp".parse().unwrap(),
//!     ca_pem: None,
//!     headers: Default::default(),
//!     protocol: None,
//!     timeout: std::time::Duration::from_secs(30),
//!     max_response_bytes: hitl_upstream::MAX_RESPONSE_BYTES,
//! })?;
//! for tool in db.list_tools().await? {
//!     println!("{}", tool["name"]);
//! }
//! let result = db.call_tool("echo", serde_json::Map::from_iter([("text".into(), "hi".into())])).await?;
//! # Ok(()) }
//! ```

mod client;
mod http;
mod sessions;
mod sse;
mod stdio;
mod subscribed;
mod subscriptions;

pub use client::{Asked, Call, Event, Upstream};
pub use http::{HttpConfig, RequestHeaders, add_request_headers};
pub use sessions::{MAX_SESSIONS, SESSION_IDLE};
pub use stdio::StdioConfig;
pub use subscriptions::Updated;

use hitl_protocol::ErrorObject;

/// The revision spoken with an upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Era {
    /// 2026-07-28: stateless requests, each with its `_meta`.
    Modern,
    /// 2025-03-26 to 2025-11-25: a session opened with `initialize`.
    Legacy {
        /// The revision the upstream answered `initialize` with.
        version: String,
        /// Its `Mcp-Session-Id`, when it gave one.
        session: Option<String>,
    },
}

/// Why a request to an upstream failed. Each names the upstream.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// No connection, or it broke before the response was read: the request may or
    /// may not have been served.
    #[error("upstream {upstream} is unreachable: {detail}")]
    Unreachable {
        /// The upstream.
        upstream: String,
        /// What failed.
        detail: String,
    },
    /// No connection, and the request was not sent (the process is down and not yet
    /// started again, or could not be written to; the HTTP connection was refused):
    /// it was not served, so it may be sent once the upstream is back.
    #[error("upstream {upstream} is unreachable: {detail}")]
    NotSent {
        /// The upstream.
        upstream: String,
        /// What failed.
        detail: String,
    },
    /// The response did not come in time: the request may or may not have been served.
    #[error("upstream {upstream} did not answer within {secs} s")]
    Timeout {
        /// The upstream.
        upstream: String,
        /// The time allowed.
        secs: u64,
    },
    /// An HTTP error status without a JSON-RPC error.
    #[error("upstream {upstream} answered HTTP {status}: {detail}")]
    Status {
        /// The upstream.
        upstream: String,
        /// The status code.
        status: u16,
        /// The start of the body.
        detail: String,
    },
    /// A JSON-RPC error response.
    #[error("upstream {upstream} refused the request: {error}")]
    Refused {
        /// The upstream.
        upstream: String,
        /// Its error.
        error: Box<ErrorObject>,
    },
    /// The upstream's configuration cannot be used (say, its CA certificates).
    #[error("upstream {upstream} is misconfigured: {detail}")]
    Config {
        /// The upstream.
        upstream: String,
        /// What is wrong.
        detail: String,
    },
    /// The upstream does not speak MCP as this client does.
    #[error("upstream {upstream} does not speak MCP as expected: {detail}")]
    Protocol {
        /// The upstream.
        upstream: String,
        /// What was wrong.
        detail: String,
    },
    /// The upstream refused the request for its session (HTTP 404, or 400 naming the
    /// session, while one was sent): it restarted or forgot the session. The request
    /// was not served, so it may be sent again in a new session.
    #[error("upstream {upstream} no longer knows the session (HTTP {status}): {detail}")]
    SessionGone {
        /// The upstream.
        upstream: String,
        /// The status code.
        status: u16,
        /// The start of the body.
        detail: String,
    },
    /// A message of the upstream's was larger than its `max_response_bytes`: the
    /// request was served, and its answer dropped unread.
    #[error("upstream {upstream} answered with a message larger than {limit} bytes (max_response_bytes)")]
    TooLarge {
        /// The upstream.
        upstream: String,
        /// The limit it passed.
        limit: usize,
    },
}

/// The largest message read from an upstream by default: 16 MiB.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
