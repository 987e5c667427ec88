//! A stdio upstream: a child process that reads JSON-RPC messages on stdin and writes
//! them on stdout, one per line. Started on first use, started again (after a pause
//! that doubles up to 30 s) when it exits; its stderr goes to the log.

use std::collections::{BTreeMap, HashMap};
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
        };
        Self::with_transport(name, protocol, timeout, changed, Arc::new(transport))
    }
}

type Pending = Arc<SyncMutex<HashMap<i64, oneshot::Sender<Result<Value, ErrorObject>>>>>;

#[derive(Debug)]
struct StdioTransport {
    config: StdioConfig,
    changed: Changed,
    process: Mutex<Option<Process>>,
    generation: AtomicU64,
    restart: SyncMutex<Restart>,
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
            return Err(self.unreachable(format!("it exited; starting it again in {secs} s")));
        }
        match self.start() {
            Ok(started) => {
                *process = Some(started);
                Ok(self.generation.fetch_add(1, Ordering::SeqCst) + 1)
            }
            Err(e) => {
                self.back_off();
                Err(self.unreachable(format!("it could not be started: {e}")))
            }
        }
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
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
                return Err(self.unreachable("it is not running"));
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
            return Err(self.unreachable(format!("writing to it failed: {e}")));
        }
        let Some((id, receive)) = answer else { return Ok(Exchanged { response: None, session: None }) };
        if asking.is_some() {
            // The caller times the call, between the process's questions.
            return match receive.await {
                Ok(response) => Ok(Exchanged { response: Some(response), session: None }),
                Err(_) => Err(self.unreachable("it exited before it answered")),
            };
        }
        match tokio::time::timeout(self.config.timeout, receive).await {
            Ok(Ok(response)) => Ok(Exchanged { response: Some(response), session: None }),
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
        };
        tokio::spawn(reader.run(stdout, alive.clone()));
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(upstream = %name, "{line}");
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
}

/// What reads the process's stdout.
struct Reader {
    name: String,
    stdin: Arc<Mutex<ChildStdin>>,
    pending: Pending,
    askers: Arc<Askers>,
    changed: Changed,
    exited: Arc<tokio::sync::Notify>,
}

impl Reader {
    /// Routes responses to their requests and requests from the process to the call
    /// in flight that takes them; at the end, fails every pending request.
    async fn run(self, stdout: tokio::process::ChildStdout, alive: Arc<AtomicBool>) {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            match jsonrpc::parse(line.as_bytes()) {
                Ok(Message::Response { id: RequestId::Number(id), result }) => deliver(&self.pending, id, Ok(result)),
                Ok(Message::Error { id: Some(RequestId::Number(id)), error }) => deliver(&self.pending, id, Err(error)),
                Ok(Message::Request(request)) => self.answer(request),
                Ok(message) => notified(&message, &self.askers, &self.changed),
                Err(_) => tracing::debug!(upstream = %self.name, %line, "not a JSON-RPC message on stdout"),
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
        let _ = waiting.send(response);
    }
}
