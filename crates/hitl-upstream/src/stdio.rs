//! A stdio upstream: a child process that reads JSON-RPC messages on stdin and writes
//! them on stdout, one per line. Started on first use, started again (after a pause
//! that doubles up to 30 s) when it exits; its stderr goes to the log.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::{Duration, Instant};

use hitl_protocol::jsonrpc::{self, Message};
use hitl_protocol::{ErrorObject, RequestId};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{Mutex, oneshot};

use crate::client::{Askers, Changed, Exchanged, Listened, Outgoing, Transport, notified, reply_to};
use crate::{Era, Upstream, UpstreamError};

/// How to start a stdio upstream.
#[derive(Debug, Clone)]
pub struct StdioConfig {
    /// The name the upstream goes by (in errors and logs).
    pub name: String,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Its working folder (default: hitl's).
    pub cwd: Option<PathBuf>,
    /// Variables added to its environment.
    pub env: BTreeMap<String, String>,
    /// The protocol revision to speak (`None`: the newest it supports).
    pub protocol: Option<String>,
    /// How long one request may take.
    pub timeout: Duration,
    /// The longest line read from it (one message); a longer one is dropped unread
    /// and fails the requests waiting for an answer with [`UpstreamError::TooLarge`].
    pub max_response_bytes: usize,
}

impl Upstream {
    /// An upstream run as a child process; it starts with the first request.
    pub fn stdio(config: StdioConfig) -> Self {
        let (name, protocol, timeout) = (config.name.clone(), config.protocol.clone(), config.timeout);
        let changed = Changed::default();
        let transport = StdioTransport {
            changed: changed.clone(),
            config,
            process: Mutex::new(None),
            generation: AtomicU64::new(0),
            restart: SyncMutex::new(Restart::default()),
            last: SyncMutex::new(None),
        };
        Self::with_transport(name, protocol, timeout, changed, Arc::new(transport))
    }
}

/// What a request waiting on the process gets: its response, or why none can be read.
type Answer = Result<Result<Value, ErrorObject>, UpstreamError>;
type Pending = Arc<SyncMutex<HashMap<i64, oneshot::Sender<Answer>>>>;

#[derive(Debug)]
struct StdioTransport {
    config: StdioConfig,
    changed: Changed,
    process: Mutex<Option<Process>>,
    generation: AtomicU64,
    restart: SyncMutex<Restart>,
    /// The alive flag of the process started last (none before the first start).
    last: SyncMutex<Option<Arc<AtomicBool>>>,
}

/// When the process may be started again.
#[derive(Debug, Default)]
struct Restart {
    not_before: Option<Instant>,
    pause: Option<Duration>,
}

#[derive(Debug)]
struct Process {
    stdin: Arc<Mutex<ChildStdin>>,
    pending: Pending,
    askers: Arc<Askers>,
    alive: Arc<AtomicBool>,
    /// Told when the process's output ends.
    exited: Arc<tokio::sync::Notify>,
    started: Instant,
    _child: Child,
}

#[async_trait::async_trait]
impl Transport for StdioTransport {
    async fn connect(&self) -> Result<u64, UpstreamError> {
        let mut process = self.process.lock().await;
        match process.as_ref() {
            Some(p) if p.alive.load(Ordering::SeqCst) => return Ok(self.generation.load(Ordering::SeqCst)),
            // One that dies soon after it starts is started again later each time.
            Some(p) if p.started.elapsed() < Duration::from_secs(10) => self.back_off(),
            _ => {}
        }
        *process = None;
        if let Some(at) = self.restart.lock().unwrap_or_else(|p| p.into_inner()).not_before
            && Instant::now() < at
        {
            let secs = at.saturating_duration_since(Instant::now()).as_secs() + 1;
            return Err(self.not_sent(format!("it exited; starting it again in {secs} s")));
        }
        match self.start() {
            Ok(started) => {
                *process = Some(started);
                Ok(self.generation.fetch_add(1, Ordering::SeqCst) + 1)
            }
            Err(e) => {
                self.back_off();
                let program = self.config.command.first().map_or("", String::as_str);
                Err(self.not_sent(format!("it could not be started: {program}: {e}")))
            }
        }
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// A process that exited is down until one started again answers.
    fn down(&self) -> Option<String> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.as_ref().filter(|alive| !alive.load(Ordering::SeqCst)).map(|_| "its process exited".to_owned())
    }

    /// A 2025-era process writes its notifications on its output anyway; a 2026-07-28
    /// one is sent `subscriptions/listen` once per start (its answers come as
    /// notifications), until it exits.
    async fn listen(&self, era: &Era, subscribe: Outgoing<'_>) -> Result<Listened, UpstreamError> {
        if *era != Era::Modern {
            return Ok(Listened::Unsupported);
        }
        let (stdin, alive, exited) = {
            let process = self.process.lock().await;
            let Some(process) = process.as_ref().filter(|p| p.alive.load(Ordering::SeqCst)) else {
                return Err(self.unreachable("it is not running"));
            };
            (process.stdin.clone(), process.alive.clone(), process.exited.clone())
        };
        let ended = exited.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        let mut line = subscribe.body;
        line.push(b'\n');
        let mut input = stdin.lock().await;
        input.write_all(&line).await.map_err(|e| self.unreachable(format!("writing to it failed: {e}")))?;
        input.flush().await.map_err(|e| self.unreachable(format!("writing to it failed: {e}")))?;
        drop(input);
        if alive.load(Ordering::SeqCst) {
            ended.await;
        }
        Ok(Listened::Ended)
    }

    async fn exchange(&self, _era: &Era, message: Outgoing<'_>) -> Result<Exchanged, UpstreamError> {
        let (stdin, pending, askers) = {
            let process = self.process.lock().await;
            let Some(process) = process.as_ref().filter(|p| p.alive.load(Ordering::SeqCst)) else {
                return Err(self.not_sent("it is not running"));
            };
            (process.stdin.clone(), process.pending.clone(), process.askers.clone())
        };
        let answer = message.id.map(|id| {
            let (send, receive) = oneshot::channel();
            pending.lock().unwrap_or_else(|p| p.into_inner()).insert(id, send);
            (id, receive)
        });
        let asking = match (message.id, message.asks) {
            (Some(id), Some(asks)) => Some(askers.register(id, None, asks)),
            _ => None,
        };
        let mut line = message.body;
        line.push(b'\n');
        let written = async {
            let mut stdin = stdin.lock().await;
            stdin.write_all(&line).await?;
            stdin.flush().await
        };
        if let Err(e) = written.await {
            // No whole line reached it: nothing was served.
            if let Some(id) = message.id {
                pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            }
            return Err(self.not_sent(format!("writing to it failed: {e}")));
        }
        let Some((id, receive)) = answer else { return Ok(Exchanged { response: None, session: None }) };
        if asking.is_some() {
            // The caller times the call, between the process's questions.
            return match receive.await {
                Ok(response) => Ok(Exchanged { response: Some(response?), session: None }),
                Err(_) => Err(self.unreachable("it exited before it answered")),
            };
        }
        match tokio::time::timeout(self.config.timeout, receive).await {
            Ok(Ok(response)) => Ok(Exchanged { response: Some(response?), session: None }),
            Ok(Err(_)) => Err(self.unreachable("it exited before it answered")),
            Err(_) => {
                pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                Err(UpstreamError::Timeout { upstream: self.config.name.clone(), secs: self.config.timeout.as_secs() })
            }
        }
    }
}

impl StdioTransport {
    fn start(&self) -> std::io::Result<Process> {
        let (program, args) = self
            .config
            .command
            .split_first()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "the command is empty"))?;
        let mut command = Command::new(program);
        command.args(args).envs(&self.config.env).kill_on_drop(true);
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        if let Some(cwd) = &self.config.cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn()?;
        let stdin = Arc::new(Mutex::new(child.stdin.take().expect("piped")));
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let pending: Pending = Arc::default();
        let askers: Arc<Askers> = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(alive.clone());
        let name = self.config.name.clone();
        tracing::info!(upstream = %name, pid = child.id(), "started");
        let exited = Arc::new(tokio::sync::Notify::new());
        let reader = Reader {
            name: name.clone(),
            stdin: stdin.clone(),
            pending: pending.clone(),
            askers: askers.clone(),
            changed: self.changed.clone(),
            exited: exited.clone(),
            max_line: self.config.max_response_bytes,
        };
        tokio::spawn(reader.run(stdout, alive.clone()));
        tokio::spawn(async move {
            // Its log, a line at a time; an endless line is not kept whole.
            let (mut errors, mut line) = (BufReader::new(stderr), Vec::new());
            loop {
                match read_line(&mut errors, &mut line, 64 * 1024).await {
                    Ok(Line::Whole) => tracing::info!(upstream = %name, "{}", String::from_utf8_lossy(&line)),
                    Ok(Line::TooLong { .. }) => {
                        tracing::info!(upstream = %name, "(a line longer than 64 KiB, dropped)")
                    }
                    Ok(Line::End) | Err(_) => break,
                }
            }
        });
        Ok(Process { stdin, pending, askers, alive, exited, started: Instant::now(), _child: child })
    }

    /// Waits longer (from 0.5 s, doubling to 30 s) before the next start.
    fn back_off(&self) {
        let mut restart = self.restart.lock().unwrap_or_else(|p| p.into_inner());
        let pause = restart.pause.map_or(Duration::from_millis(500), |p| (p * 2).min(Duration::from_secs(30)));
        *restart = Restart { not_before: Some(Instant::now() + pause), pause: Some(pause) };
    }

    fn unreachable(&self, detail: impl Into<String>) -> UpstreamError {
        UpstreamError::Unreachable { upstream: self.config.name.clone(), detail: detail.into() }
    }

    fn not_sent(&self, detail: impl Into<String>) -> UpstreamError {
        UpstreamError::NotSent { upstream: self.config.name.clone(), detail: detail.into() }
    }
}

/// What reads the process's stdout.
struct Reader {
    name: String,
    stdin: Arc<Mutex<ChildStdin>>,
    pending: Pending,
    askers: Arc<Askers>,
    changed: Changed,
    exited: Arc<tokio::sync::Notify>,
    /// `max_response_bytes`: the longest line kept.
    max_line: usize,
}

impl Reader {
    /// Routes responses to their requests and requests from the process to the call
    /// in flight that takes them; at the end, fails every pending request.
    async fn run(self, stdout: tokio::process::ChildStdout, alive: Arc<AtomicBool>) {
        let mut output = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            match read_line(&mut output, &mut line, self.max_line).await {
                Ok(Line::End) | Err(_) => break,
                Ok(Line::TooLong { id }) => {
                    tracing::warn!(upstream = %self.name, limit = self.max_line, ?id, "a message longer than max_response_bytes; dropped");
                    // The request it answered fails; when its id can't be read at either
                    // end of the line, every waiting one does.
                    let waiting: Vec<_> = {
                        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                        match id {
                            Some(id) => pending.remove(&id).into_iter().collect(),
                            None => pending.drain().map(|(_, waiting)| waiting).collect(),
                        }
                    };
                    for waiting in waiting {
                        let too_large = UpstreamError::TooLarge { upstream: self.name.clone(), limit: self.max_line };
                        let _ = waiting.send(Err(too_large));
                    }
                }
                Ok(Line::Whole) => match jsonrpc::parse(&line) {
                    Ok(Message::Response { id: RequestId::Number(id), result }) => {
                        deliver(&self.pending, id, Ok(result))
                    }
                    Ok(Message::Error { id: Some(RequestId::Number(id)), error }) => {
                        deliver(&self.pending, id, Err(error))
                    }
                    Ok(Message::Request(request)) => self.answer(request),
                    Ok(message) => notified(&message, &self.askers, &self.changed, None),
                    Err(_) => {
                        let line = String::from_utf8_lossy(&line[..line.len().min(200)]);
                        tracing::debug!(upstream = %self.name, %line, "not a JSON-RPC message on stdout");
                    }
                },
            }
        }
        alive.store(false, Ordering::SeqCst);
        self.exited.notify_waiters();
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).clear();
        tracing::warn!(upstream = %self.name, "exited; it is started again on the next call");
    }

    /// Answers a request from the process in a task of its own (the reader goes on).
    /// Over stdio nothing ties a request to a call: it goes to the call in flight that
    /// takes requests when there is exactly one, and is refused when there are several.
    fn answer(&self, request: jsonrpc::Request) {
        let asks = self.askers.sole(&self.name, &request.method, None);
        let stdin = self.stdin.clone();
        tokio::spawn(async move {
            let mut reply = reply_to(asks.as_ref(), request).await;
            reply.push(b'\n');
            let mut stdin = stdin.lock().await;
            let _ = stdin.write_all(&reply).await;
            let _ = stdin.flush().await;
        });
    }
}

fn deliver(pending: &Pending, id: i64, response: Result<Value, ErrorObject>) {
    if let Some(waiting) = pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id) {
        let _ = waiting.send(Ok(response));
    }
}

/// What [`read_line`] read.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// A line (without its end) is in the buffer.
    Whole,
    /// A line longer than the limit was read through and dropped; the id of the
    /// response it was, when one end of it says (`{"jsonrpc":"2.0","id":7,…` or
    /// `…,"id":7}`).
    TooLong {
        /// The response's id.
        id: Option<i64>,
    },
    /// The output ended.
    End,
}

/// Reads the next line of `input` into `line` (cleared first), holding at most `max`
/// bytes of it: a longer line is read to its end and dropped, so memory stays bounded
/// whatever the process writes.
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    input: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    line.clear();
    let mut too_long = false;
    // A dropped line's last bytes (its first stay in `line`), for its id.
    let mut tail: VecDeque<u8> = VecDeque::new();
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Line::TooLong { id: dropped_id(line, tail.make_contiguous()) },
                (false, true) => Line::End,
                (false, false) => Line::Whole,
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
            if !too_long {
                too_long = true;
                tail.extend(line.iter().skip(line.len().saturating_sub(EDGE)));
                line.truncate(EDGE);
            }
            tail.extend(&content[content.len().saturating_sub(EDGE)..]);
            let over = tail.len().saturating_sub(EDGE);
            tail.drain(..over);
        }
        input.consume(taken);
        if ended {
            if too_long {
                return Ok(Line::TooLong { id: dropped_id(line, tail.make_contiguous()) });
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Line::Whole);
        }
    }
}

/// How many bytes at each end of a dropped line are kept to find its id.
const EDGE: usize = 256;

/// The id of the response a dropped line was: `"id":<n>` right after `"jsonrpc":"2.0",`
/// at its start (as the Python SDK writes), or as the last member at its end (as the
/// TypeScript SDK writes); `None` when neither end says.
fn dropped_id(head: &[u8], tail: &[u8]) -> Option<i64> {
    let number = |text: &str| text.trim().parse::<i64>().ok();
    let head = String::from_utf8_lossy(head);
    let compact: String = head.chars().filter(|c| !c.is_whitespace()).collect();
    if let Some(rest) = compact.strip_prefix(r#"{"jsonrpc":"2.0","id":"#) {
        let end = rest.find(|c: char| !c.is_ascii_digit() && c != '-').unwrap_or(rest.len());
        if let Some(id) = number(&rest[..end]) {
            return Some(id);
        }
    }
    let tail = String::from_utf8_lossy(tail);
    let compact: String = tail.chars().filter(|c| !c.is_whitespace()).collect();
    let body = compact.strip_suffix('}')?;
    let at = body.rfind(r#","id":"#)?;
    number(&body[at + 6..])
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<(Line, String)> {
        // A one-byte buffer: every line arrives in pieces.
        let mut reader = BufReader::with_capacity(1, input);
        let (mut line, mut read) = (Vec::new(), Vec::new());
        loop {
            let what = read_line(&mut reader, &mut line, max).await.unwrap();
            if what == Line::End {
                return read;
            }
            read.push((what, String::from_utf8(line.clone()).unwrap()));
        }
    }

    #[tokio::test]
    async fn a_line_longer_than_the_limit_is_dropped_and_reading_goes_on() {
        let read = lines(b"{\"a\":1}\r\n0123456789abcdef\nok\nlast", 8).await;
        assert_eq!(
            read,
            [
                (Line::Whole, "{\"a\":1}".to_owned()),
                (Line::TooLong { id: None }, "01234567".to_owned()),
                (Line::Whole, "ok".to_owned()),
                (Line::Whole, "last".to_owned()),
            ]
        );
        assert_eq!(lines(b"0123456789", 4).await, [(Line::TooLong { id: None }, "0123".to_owned())]);
        let python = format!("{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"{}\"}}\n", "x".repeat(2000));
        assert_eq!(lines(python.as_bytes(), 64).await[0].0, Line::TooLong { id: Some(7) }, "the id at the start");
        let ts =
            format!("{{\"result\":{{\"id\":1,\"text\":\"{}\"}},\"jsonrpc\":\"2.0\",\"id\":12}}\n", "x".repeat(2000));
        assert_eq!(lines(ts.as_bytes(), 64).await[0].0, Line::TooLong { id: Some(12) }, "the id at the end");
        let neither = format!("{{\"result\":\"{}\"}}\n", "x".repeat(2000));
        assert_eq!(lines(neither.as_bytes(), 64).await[0].0, Line::TooLong { id: None });
        assert_eq!(lines(b"", 4).await, []);
    }
}
