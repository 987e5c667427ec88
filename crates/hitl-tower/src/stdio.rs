//! MCP over standard input and output (one JSON-RPC message per line), for desktop
//! hosts that start a server as a command.
//!
//! Each line read becomes the `POST /mcp` an HTTP client would send, served by the same
//! [`Endpoint`]: its era comes from its `_meta` (a 2026-07-28 message names its version
//! there; the headers HTTP adds are not asked for), the caller is the one
//! [`StdioOptions::principal`], and a 2025-era client's `initialize` opens the one
//! session of the connection, which every later message carries. Every response body
//! goes out as lines: a JSON body as one line, an SSE body (progress, pushed
//! `elicitation/create` requests, the result) one line per event, and the session's
//! stream of list changes as they come. Requests run concurrently (a call held for an
//! answer blocks nothing); one writer writes each line whole. A line that is not JSON,
//! or longer than [`StdioOptions::max_message_bytes`], is answered with `-32700` and
//! the loop goes on. The loop ends when the input ends.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use hitl_protocol::{ErrorObject, Response};
use http::{HeaderValue, Method, header};
use http_body_util::BodyExt as _;
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tower::ServiceExt as _;

use crate::{Endpoint, McpBody, Principal};

/// How a stdio connection is served.
#[derive(Debug, Clone)]
pub struct StdioOptions {
    /// The caller of every request (policies' `callers`, quotas, the two-person rule).
    pub principal: Principal,
    /// Ask a 2025-era client the questions of a paused call by push (it answers on its
    /// input), whatever [`crate::ServerOptions::legacy_elicitation`] says for HTTP.
    pub push: bool,
    /// The longest line read (one message); a longer one is answered with `-32700`.
    pub max_message_bytes: usize,
}

/// Marks a request that came over stdio: no HTTP headers to check, and push
/// elicitation as [`StdioOptions::push`] says.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FromStdio {
    pub(crate) push: bool,
}

/// The requests in flight, by the JSON text of their id, for `notifications/cancelled`.
type InFlight = Arc<Mutex<HashMap<String, AbortHandle>>>;

/// Serves the connection of `input` and `output` through `endpoint` until `input` ends
/// (or `output` fails). Requests still running then are dropped (a paused call stays
/// paused, as when an HTTP client goes away).
pub async fn serve_stdio<R, W>(endpoint: Endpoint, options: StdioOptions, input: R, output: W) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let writer = tokio::spawn(write_lines(rx, output));
    let mut connection = Connection { endpoint, options, tx, session: Arc::default(), in_flight: Arc::default() };
    let read = connection.read_all(input).await;
    // What is still running has nobody to answer once the input is gone.
    for (_, task) in connection.in_flight.lock().unwrap_or_else(|p| p.into_inner()).drain() {
        task.abort();
    }
    if let Some(listen) = connection.session.lock().unwrap_or_else(|p| p.into_inner()).listen.take() {
        listen.abort();
    }
    drop(connection);
    let written = writer.await.unwrap_or(Ok(()));
    read.and(written)
}

/// The one session of the connection.
#[derive(Default)]
struct SessionState {
    /// The `Mcp-Session-Id` of a 2025-era client's `initialize`.
    id: Option<String>,
    /// The task forwarding the session's list changes.
    listen: Option<AbortHandle>,
}

struct Connection {
    endpoint: Endpoint,
    options: StdioOptions,
    tx: mpsc::UnboundedSender<Bytes>,
    session: Arc<Mutex<SessionState>>,
    in_flight: InFlight,
}

/// A line of input as read.
enum Line {
    Whole(Vec<u8>),
    TooLong,
    End,
}

impl Connection {
    async fn read_all<R: AsyncBufRead + Unpin>(&mut self, mut input: R) -> std::io::Result<()> {
        let mut line = Vec::new();
        loop {
            match read_line(&mut input, &mut line, self.options.max_message_bytes).await? {
                Line::End => return Ok(()),
                Line::TooLong => {
                    let why = format!("the message exceeds {} bytes", self.options.max_message_bytes);
                    let refusal = Response::Error { id: None, error: ErrorObject::parse_error(why) };
                    let _ = self.tx.send(Bytes::from(refusal.to_bytes()));
                }
                Line::Whole(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => {}
                Line::Whole(bytes) => {
                    if self.tx.is_closed() {
                        return Ok(());
                    }
                    self.message(bytes).await;
                }
            }
        }
    }

    /// Serves one message: `initialize` before the next line is read (its session is
    /// what later messages carry), anything else in a task of its own.
    async fn message(&mut self, bytes: Vec<u8>) {
        // Only what routes the line is read here (no JSON tree): the endpoint parses it.
        let peek: Peek = serde_json::from_slice(&bytes).unwrap_or_default();
        let method = peek.method;
        let id = peek.id.filter(|id| !id.is_null()).map(|id| id.to_string());
        let params = peek.params.unwrap_or_default();
        if method.as_deref() == Some("notifications/cancelled") {
            let cancelled = params.request_id.map(|id| id.to_string());
            if let Some(task) =
                cancelled.and_then(|id| self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).remove(&id))
            {
                task.abort();
            }
        }
        let version = params.meta.and_then(|meta| meta.version);
        let request = self.request(Method::POST, version.as_deref(), Bytes::from(bytes));
        let (endpoint, tx) = (self.endpoint.clone(), self.tx.clone());
        if method.as_deref() == Some("initialize") {
            let response = call(endpoint, request).await;
            let session = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
            forward(response.into_body(), &tx).await;
            if let Some(session) = session {
                self.open_session(session);
            }
            return;
        }
        let in_flight = self.in_flight.clone();
        let key = id.filter(|_| method.is_some());
        let finished = key.clone();
        let task = tokio::spawn(async move {
            let response = call(endpoint, request).await;
            forward(response.into_body(), &tx).await;
            if let Some(key) = finished {
                in_flight.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
            }
        });
        if let Some(key) = key
            && !task.is_finished()
        {
            self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).insert(key, task.abort_handle());
        }
    }

    /// Keeps `session` for later messages, and forwards its list changes from now on.
    fn open_session(&self, session: String) {
        let mut state = self.session.lock().unwrap_or_else(|p| p.into_inner());
        state.id = Some(session);
        if let Some(previous) = state.listen.take() {
            previous.abort();
        }
        drop(state);
        let request = self.request(Method::GET, None, Bytes::new());
        let (endpoint, tx) = (self.endpoint.clone(), self.tx.clone());
        let listen = tokio::spawn(async move {
            let response = call(endpoint, request).await;
            if response.status().is_success() {
                forward(response.into_body(), &tx).await;
            }
        });
        self.session.lock().unwrap_or_else(|p| p.into_inner()).listen = Some(listen.abort_handle());
    }

    /// The HTTP request an HTTP client would send with `body`.
    fn request(&self, method: Method, version: Option<&str>, body: Bytes) -> http::Request<Bytes> {
        let mut request = http::Request::new(body);
        *request.method_mut() = method;
        *request.uri_mut() = http::Uri::from_static("/mcp");
        let headers = request.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        if let Some(value) = version.and_then(|v| HeaderValue::from_str(&hitl_protocol::headers::encode_value(v)).ok())
        {
            headers.insert(hitl_protocol::headers::PROTOCOL_VERSION, value);
        }
        let session = self.session.lock().unwrap_or_else(|p| p.into_inner()).id.clone();
        if let Some(value) = session.and_then(|id| HeaderValue::from_str(&id).ok()) {
            headers.insert("mcp-session-id", value);
        }
        request.extensions_mut().insert(self.options.principal.clone());
        request.extensions_mut().insert(FromStdio { push: self.options.push });
        request
    }
}

/// What the stdio loop reads of a message to route it; the rest is skipped.
#[derive(Default, serde::Deserialize)]
struct Peek {
    method: Option<String>,
    id: Option<Value>,
    params: Option<PeekParams>,
}

#[derive(Default, serde::Deserialize)]
struct PeekParams {
    #[serde(rename = "_meta")]
    meta: Option<PeekMeta>,
    /// A cancellation's request.
    #[serde(rename = "requestId")]
    request_id: Option<Value>,
}

#[derive(serde::Deserialize)]
struct PeekMeta {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
    version: Option<String>,
}

async fn call(endpoint: Endpoint, request: http::Request<Bytes>) -> http::Response<McpBody> {
    match endpoint.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// Sends each message of `body` as a line: a JSON body whole, an SSE body one `data`
/// per event as it comes. Nothing else reaches the output.
async fn forward(mut body: McpBody, tx: &mpsc::UnboundedSender<Bytes>) {
    let mut buffer: Vec<u8> = Vec::new();
    let mut sse = None;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame.map_err(|never: Infallible| never);
        let Ok(data) = frame.into_data() else { continue };
        buffer.extend_from_slice(&data);
        // An SSE body starts with `event:`, `data:` or a `:` comment; JSON with `{`.
        let is_sse = *sse.get_or_insert_with(|| buffer.first().is_some_and(|b| *b != b'{' && *b != b'['));
        if !is_sse {
            continue;
        }
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buffer.drain(..end + 2).collect();
            if let Some(message) = event_data(&event)
                && tx.send(message).is_err()
            {
                return;
            }
        }
    }
    if sse != Some(true) && !buffer.is_empty() {
        match serde_json::from_slice::<Value>(&buffer) {
            Ok(message) => {
                let _ = tx.send(Bytes::from(message.to_string()));
            }
            Err(error) => tracing::warn!(%error, "a response body that is not JSON was not written"),
        }
    }
}

/// The JSON message of one SSE event (its `data` lines), on one line.
fn event_data(event: &[u8]) -> Option<Bytes> {
    let text = std::str::from_utf8(event).ok()?;
    let data: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| data.strip_prefix(' ').unwrap_or(data))
        .collect();
    if data.is_empty() {
        return None;
    }
    let message: Value = serde_json::from_str(&data.join("\n")).ok()?;
    Some(Bytes::from(message.to_string()))
}

/// Writes each line, whole, with its end, as it comes.
async fn write_lines<W: AsyncWrite + Unpin>(
    mut rx: mpsc::UnboundedReceiver<Bytes>,
    mut output: W,
) -> std::io::Result<()> {
    while let Some(line) = rx.recv().await {
        let mut whole = Vec::with_capacity(line.len() + 1);
        whole.extend_from_slice(&line);
        whole.push(b'\n');
        output.write_all(&whole).await?;
        output.flush().await?;
    }
    Ok(())
}

/// Reads the next line of `input`, keeping at most `max` bytes: a longer one is read
/// through to its end and dropped, so memory stays bounded whatever the client sends.
async fn read_line<R: AsyncBufRead + Unpin>(input: &mut R, line: &mut Vec<u8>, max: usize) -> std::io::Result<Line> {
    line.clear();
    let mut too_long = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Line::TooLong,
                (false, true) => Line::End,
                (false, false) => Line::Whole(std::mem::take(line)),
            });
        }
        let (taken, ended) = match available.iter().position(|b| *b == b'\n') {
            Some(end) => (end + 1, true),
            None => (available.len(), false),
        };
        let content = &available[..if ended { taken - 1 } else { taken }];
        if !too_long && line.len() + content.len() <= max {
            line.extend_from_slice(content);
        } else {
            too_long = true;
            line.clear();
        }
        input.consume(taken);
        if ended {
            if too_long {
                return Ok(Line::TooLong);
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Line::Whole(std::mem::take(line)));
        }
    }
}

#[cfg(test)]
mod tests;
