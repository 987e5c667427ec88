//! Progress over Server-Sent Events: when a `tools/call` or `prompts/get` carries a
//! `progressToken` and the client accepts `text/event-stream`, the response is a stream
//! of `notifications/progress` (one per finished superstep, after a first `0`, and
//! those steps report, such as a gateway's upstream's, moved past hitl's own values
//! when they would not be larger: the values strictly increase) ending with the
//! JSON-RPC response. One JSON message per `data:` line. Closing the stream
//! cancels the run: it stops before its next superstep and the round stays open.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use futures_util::stream;
use hitl_protocol::Response;
use http::{HeaderValue, StatusCode, header};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::McpBody;

/// One SSE event carrying one JSON message on one line.
pub(crate) fn event(message: &Value) -> Bytes {
    frame(&serde_json::to_vec(message).unwrap_or_default())
}

/// [`event`] of a response, written once.
pub(crate) fn response_event(response: &hitl_protocol::Response) -> Bytes {
    frame(&response.to_bytes())
}

/// The event around `json`, a message already written on one line.
fn frame(json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + 24);
    out.extend_from_slice(b"event: message\ndata: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// `n` as JSON: a whole number without a fraction (`1`, not `1.0`).
fn number(n: f64) -> Value {
    if n.fract() == 0.0 && (0.0..9_007_199_254_740_992.0).contains(&n) { json!(n as u64) } else { json!(n) }
}

/// Sets the flag when the response body is dropped: the client went away (or the
/// stream ended, when the flag no longer matters).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A stream of progress notifications for `token`, ending with the message `run`
/// produces. `run` gets the progress callback of its run and the flag that closing the
/// stream sets.
pub(crate) fn respond<F, Fut>(token: Value, run: F) -> http::Response<McpBody>
where
    F: FnOnce(hitl_graph::ProgressFn, Arc<AtomicBool>) -> Fut,
    Fut: std::future::Future<Output = Response> + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let cancel = Arc::new(AtomicBool::new(false));
    let progress = progress_fn(token, tx.clone());
    let finished = run(progress, cancel.clone());
    tokio::spawn(async move {
        let _ = tx.send(response_event(&finished.await));
    });
    stream_response(rx, cancel)
}

/// The values sent on one token so far: the last, and the offset of the values steps
/// report (a gateway's upstream's, on a scale of their own).
#[derive(Debug, Default)]
pub(crate) struct Sent {
    last: Option<f64>,
    offset: f64,
}

impl Sent {
    /// The value and total to send for `report`, or `None` when it is not sent. The
    /// values on a token must strictly increase (MCP): the run's own count of supersteps
    /// that would not is dropped; a value a step reports never is, but moves past the
    /// last value sent, with its total, when it would not be larger (the offset then
    /// holds for the step's next values).
    pub(crate) fn next(&mut self, report: &hitl_graph::Progress) -> Option<(f64, Option<f64>)> {
        let (mut value, mut total) = (report.progress, report.total);
        if report.from_step {
            if self.last.is_some_and(|last| value + self.offset <= last) {
                self.offset = self.last.unwrap_or_default() + 1.0 - value;
            }
            value += self.offset;
            total = total.map(|t| t + self.offset);
        }
        if !value.is_finite() || self.last.is_some_and(|last| value <= last) {
            return None;
        }
        self.last = Some(value);
        Some((value, total))
    }
}

/// The progress callback of a run whose stream is `tx`: `notifications/progress` for
/// `token`, strictly increasing ([`Sent::next`]), starting with `0` at once.
pub(crate) fn progress_fn(token: Value, tx: mpsc::UnboundedSender<Bytes>) -> hitl_graph::ProgressFn {
    let sent = std::sync::Mutex::new(Sent::default());
    let progress: hitl_graph::ProgressFn = Arc::new(move |report: hitl_graph::Progress| {
        let Some((value, total)) = sent.lock().unwrap_or_else(|p| p.into_inner()).next(&report) else { return };
        let mut params = json!({"progressToken": token, "progress": number(value)});
        if let Some(total) = total {
            params["total"] = number(total);
        }
        if let Some(message) = report.message {
            params["message"] = json!(message);
        }
        let message = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params});
        let _ = tx.send(event(&message));
    });
    // Progress 0 before the first superstep, so the client hears from the run at once.
    progress(hitl_graph::Progress::at(0.0));
    progress
}

/// The SSE response of the events sent to `rx`'s sender; dropping it (the client went
/// away) sets `cancel`.
pub(crate) fn stream_response(rx: mpsc::UnboundedReceiver<Bytes>, cancel: Arc<AtomicBool>) -> http::Response<McpBody> {
    let guard = CancelOnDrop(cancel);
    let frames = stream::unfold((rx, guard), |(mut rx, guard)| async move {
        rx.recv().await.map(|bytes| (Ok::<_, std::convert::Infallible>(Frame::data(bytes)), (rx, guard)))
    });
    let mut response = http::Response::new(StreamBody::new(frames).boxed_unsync());
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
