//! `hitl-bench`: what `cargo xtask bench` runs.
//!
//! - `hitl-bench echo --listen ADDR`: a bare hyper server that answers every POST with
//!   its body as JSON, the baseline hitl's throughput is compared with. With `--redis
//!   URL`, the floor of a durable round on Redis instead ([`floor`]): canned replies to
//!   the `round` scenario, and the three scripts a round needs.
//! - `hitl-bench load --url URL --scenario S`: closed-loop load over keep-alive HTTP/1.1
//!   connections (or paced at `--rate`), printing one JSON line of throughput and
//!   latency percentiles. Scenarios: `echo` (post a `tools/call` body), `pause` (call
//!   `choose_region`: each request pauses a new call), `round` (each connection pauses a
//!   call, then answers it: every request is one round), `fill` (pause `--count` calls
//!   and exit), `call` (call `--tool` with `--arguments`; an error result counts as an
//!   error: for a gateway against its upstream).
//! - `hitl-bench allocs --url URL --counts ADDR`: against `hitl-counted` (the `hitl`
//!   program with a counting allocator, its counts at ADDR), one connection: heap
//!   allocations and bytes per round (a pause and its answer), and heap bytes held per
//!   paused call, and heap bytes held per finished call (kept for resends); one JSON
//!   line.
//! - `hitl-bench rounds --url URL --count N`: exactly N rounds (a pause and its answer)
//!   on one connection, untimed: what `cargo xtask bench --peers` counts instructions
//!   over under callgrind.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

mod floor;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A bare hyper JSON echo server.
    Echo {
        /// Where to listen (port 0: a free port, printed on stdout).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Serve the floor of a durable round on the Redis at this URL instead.
        #[arg(long)]
        redis: Option<String>,
    },
    /// Closed-loop (or paced) load against a URL.
    Load {
        /// The endpoint (`http://127.0.0.1:PORT/mcp`).
        #[arg(long)]
        url: String,
        /// `echo`, `pause`, `round` or `fill`.
        #[arg(long)]
        scenario: String,
        /// Connections, each with one request in flight.
        #[arg(long, default_value_t = 32)]
        connections: usize,
        /// How long to measure, after a one-second warm-up.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Requests per second over all connections (open loop); 0: as fast as possible.
        #[arg(long, default_value_t = 0.0)]
        rate: f64,
        /// For `fill`: how many calls to pause.
        #[arg(long, default_value_t = 100_000)]
        count: usize,
        /// For `call`: the tool.
        #[arg(long, default_value = "choose_region")]
        tool: String,
        /// For `call`: its arguments, as JSON.
        #[arg(long, default_value = "{}")]
        arguments: String,
    },
    /// Heap allocations per round and heap held per paused call, of `hitl-counted`.
    Allocs {
        /// The endpoint (`http://127.0.0.1:PORT/mcp`).
        #[arg(long)]
        url: String,
        /// Where `hitl-counted` answers its counts (its `HITL_COUNTS_LISTEN`).
        #[arg(long)]
        counts: String,
        /// Rounds counted, after 4,000 to warm up.
        #[arg(long, default_value_t = 10_000)]
        rounds: usize,
        /// Calls paused to measure the heap each holds.
        #[arg(long, default_value_t = 10_000)]
        paused: usize,
    },
    /// Exactly `count` rounds on one connection, untimed.
    Rounds {
        /// The endpoint (`http://127.0.0.1:PORT/mcp`).
        #[arg(long)]
        url: String,
        /// Rounds (a pause and its answer).
        #[arg(long)]
        count: usize,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        match cli.command {
            Command::Echo { listen, redis: None } => echo(listen).await,
            Command::Echo { listen, redis: Some(url) } => floor::serve(TcpListener::bind(listen).await?, &url).await,
            Command::Load { url, scenario, connections, seconds, rate, count, tool, arguments } => {
                let arguments: Value = serde_json::from_str(&arguments).context("--arguments is not JSON")?;
                let target = Target { tool, arguments };
                load(&url, &scenario, &target, connections, Duration::from_secs_f64(seconds), rate, count).await
            }
            Command::Allocs { url, counts, rounds, paused } => allocs(&url, &counts, rounds, paused).await,
            Command::Rounds { url, count } => {
                let target = Target { tool: "choose_region".into(), arguments: json!({}) };
                let mut connection = Connection::open(&url, &target.tool).await?;
                let mut pending = None;
                for _ in 0..2 * count {
                    step("round", &target, &mut connection, &mut pending).await?;
                }
                println!("{}", json!({"rounds": count}));
                Ok(())
            }
        }
    })
}

async fn echo(listen: SocketAddr) -> anyhow::Result<()> {
    serve_json(TcpListener::bind(listen).await?, |body| async move { Ok(body) }).await
}

/// Serves `listener` (HTTP/1.1 and 2), each request's body answered by `answer` as JSON:
/// the echo's loop, and the Redis floor's. An error is a 500 with its text.
async fn serve_json<A, F>(listener: TcpListener, answer: A) -> anyhow::Result<()>
where
    A: Fn(Bytes) -> F + Clone + Send + 'static,
    F: std::future::Future<Output = anyhow::Result<Bytes>> + Send + 'static,
{
    println!("echo listening on http://{}/mcp", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let answer = answer.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let answer = answer.clone();
                async move {
                    let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                    let (status, body) = match answer(body).await {
                        Ok(body) => (http::StatusCode::OK, body),
                        Err(e) => (http::StatusCode::INTERNAL_SERVER_ERROR, Bytes::from(format!("{e:#}"))),
                    };
                    let mut response = http::Response::new(Full::new(body));
                    *response.status_mut() = status;
                    response
                        .headers_mut()
                        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The tool a `call` scenario calls.
#[derive(Clone)]
struct Target {
    tool: String,
    arguments: Value,
}

impl Target {
    fn body(&self) -> Bytes {
        Bytes::from(
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                   "params": {"name": self.tool, "arguments": self.arguments, "_meta": meta()}})
            .to_string(),
        )
    }
}

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
           "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}})
}

fn pause_body() -> Bytes {
    Bytes::from(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "choose_region", "arguments": {}, "_meta": meta()}})
        .to_string(),
    )
}

/// The retry that answers a round: the `requestState` echoed only when the server gave
/// one (servers that keep no state give none). Written as text around the two strings
/// that change, each JSON-escaped: what a round asks of the load generator beyond the
/// echo's request is only what it must send.
fn answer_body(key: &str, state: Option<&str>) -> Bytes {
    let mut body = Vec::with_capacity(512);
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"choose_region","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}},"inputResponses":{"#);
    let escaped = |body: &mut Vec<u8>, text: &str| serde_json::to_writer(body, text).expect("a string is written");
    escaped(&mut body, key);
    body.extend_from_slice(br#":{"action":"accept","content":{"response":"eu-west-1"}}}"#);
    if let Some(state) = state {
        body.extend_from_slice(br#","requestState":"#);
        escaped(&mut body, state);
    }
    body.extend_from_slice(b"}}");
    Bytes::from(body)
}

/// What the load generator reads of a reply: only the fields it checks, typed (a
/// generator that built every reply as a JSON tree would spend on itself the CPU it
/// shares with the server it measures). A round asks one question, so any key of
/// `inputRequests` is its key.
#[derive(Deserialize)]
struct Reply {
    result: Option<RoundResult>,
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RoundResult {
    /// The pause: its questions by key.
    #[serde(default)]
    input_requests: Option<BTreeMap<String, IgnoredAny>>,
    #[serde(default)]
    request_state: Option<String>,
    /// The answer: the region, structured or as text.
    #[serde(default)]
    structured_content: Option<Region>,
    #[serde(default)]
    content: Vec<Text>,
    #[serde(default)]
    is_error: Option<bool>,
}

#[derive(Deserialize)]
struct Region {
    #[serde(default)]
    region: Option<String>,
}

#[derive(Deserialize)]
struct Text {
    #[serde(default)]
    text: Option<String>,
}

/// The reply's result, or what was wrong with it.
fn result_of(body: &[u8]) -> anyhow::Result<RoundResult> {
    let shown = || String::from_utf8_lossy(body).into_owned();
    match serde_json::from_slice::<Reply>(body) {
        Ok(Reply { result: Some(result), error: None }) => Ok(result),
        Ok(_) => bail!("the call failed: {}", shown()),
        Err(e) => bail!("the reply is not a JSON-RPC result ({e}): {}", shown()),
    }
}

/// What answers a pause: its question's key, and its `requestState` if it has one.
fn question_of(body: &[u8]) -> anyhow::Result<(String, Option<String>)> {
    let result = result_of(body)?;
    let key = result.input_requests.and_then(|m| m.into_keys().next()).context("no question")?;
    Ok((key, result.request_state))
}

/// An answered round must end the call with the region: a server that fails it is not
/// counted.
fn ended_with_the_region(body: &[u8]) -> anyhow::Result<()> {
    let result = result_of(body)?;
    let said = result.structured_content.and_then(|c| c.region).is_some_and(|r| r == "eu-west-1")
        || result.content.first().and_then(|c| c.text.as_deref()).is_some_and(|t| t.contains("eu-west-1"));
    if !said || result.is_error == Some(true) {
        bail!("the answered round did not end with the region: {}", String::from_utf8_lossy(body));
    }
    Ok(())
}

/// One keep-alive HTTP/1.1 connection.
struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    authority: String,
    path: String,
    /// The `Mcp-Name` of its calls.
    tool: String,
}

impl Connection {
    async fn open(url: &str, tool: &str) -> anyhow::Result<Self> {
        let uri: http::Uri = url.parse()?;
        let authority = uri.authority().context("the URL names no host")?.to_string();
        let stream = TcpStream::connect(&authority).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(Self { sender, authority, path: uri.path().to_owned(), tool: tool.to_owned() })
    }

    async fn post(&mut self, body: Bytes) -> anyhow::Result<Bytes> {
        self.sender.ready().await?;
        let request = http::Request::post(&self.path)
            .header("host", &self.authority)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", &self.tool)
            .body(Full::new(body))?;
        let response = self.sender.send_request(request).await?;
        if !response.status().is_success() {
            bail!("HTTP {}", response.status());
        }
        Ok(response.into_body().collect().await?.to_bytes())
    }
}

/// What a worker sends next.
async fn step(
    scenario: &str,
    target: &Target,
    connection: &mut Connection,
    pending: &mut Option<(String, Option<String>)>,
) -> anyhow::Result<()> {
    match (scenario, pending.take()) {
        ("call", _) => {
            let reply: Value = serde_json::from_slice(&connection.post(target.body()).await?)?;
            if reply.get("error").is_some() || reply["result"]["isError"] == true {
                bail!("the call failed: {reply}");
            }
        }
        ("echo" | "pause" | "fill", _) => {
            connection.post(pause_body()).await?;
        }
        ("round", None) => *pending = Some(question_of(&connection.post(pause_body()).await?)?),
        ("round", Some((key, state))) => {
            ended_with_the_region(&connection.post(answer_body(&key, state.as_deref())).await?)?;
        }
        (other, _) => bail!("unknown scenario {other}"),
    }
    Ok(())
}

/// `hitl-counted`'s counts now: allocations, bytes allocated, bytes live.
async fn counts(addr: &str) -> anyhow::Result<[i64; 3]> {
    let mut line = String::new();
    let mut stream = TcpStream::connect(addr).await.with_context(|| format!("connecting to the counts at {addr}"))?;
    tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut line).await?;
    let numbers: Vec<i64> = line.split_whitespace().map(str::parse).collect::<Result<_, _>>()?;
    numbers.try_into().map_err(|_| anyhow::anyhow!("the counts line {line:?} is not three numbers"))
}

async fn allocs(url: &str, counts_at: &str, rounds: usize, paused: usize) -> anyhow::Result<()> {
    let target = Target { tool: "choose_region".into(), arguments: json!({}) };
    let mut connection = Connection::open(url, &target.tool).await?;
    let mut pending = None;
    // A round is two requests: the pause, then its answer. Warm past the memory
    // store's audit bound (10,000 entries, three a round), so that the trail's growth
    // is not counted as the finished calls'.
    for _ in 0..2 * 4_000 {
        step("round", &target, &mut connection, &mut pending).await?;
    }
    let before = counts(counts_at).await?;
    for _ in 0..2 * rounds {
        step("round", &target, &mut connection, &mut pending).await?;
    }
    let after = counts(counts_at).await?;
    for _ in 0..paused {
        connection.post(pause_body()).await?;
    }
    let held = counts(counts_at).await?;
    let per_round = |i: usize| (after[i] - before[i]) as f64 / rounds as f64;
    // Each measured round left one finished call behind, kept for resends: the live
    // heap they grew by.
    println!(
        "{}",
        json!({"rounds": rounds, "allocations_per_round": per_round(0), "bytes_allocated_per_round": per_round(1),
               "bytes_per_finished_call": per_round(2),
               "paused": paused, "heap_bytes_per_paused_call": (held[2] - after[2]) as f64 / paused as f64})
    );
    Ok(())
}

async fn load(
    url: &str,
    scenario: &str,
    target: &Target,
    connections: usize,
    measure: Duration,
    rate: f64,
    count: usize,
) -> anyhow::Result<()> {
    if scenario == "fill" {
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..connections {
            let (url, done, tool) = (url.to_owned(), done.clone(), target.tool.clone());
            tasks.push(tokio::spawn(async move {
                let mut connection = Connection::open(&url, &tool).await?;
                while done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < count {
                    connection.post(pause_body()).await?;
                }
                anyhow::Ok(())
            }));
        }
        for task in tasks {
            task.await??;
        }
        println!("{}", json!({"scenario": "fill", "paused": count}));
        return Ok(());
    }
    let warmup = Duration::from_secs(1);
    let start = Instant::now() + warmup;
    let end = start + measure;
    let interval = (rate > 0.0).then(|| Duration::from_secs_f64(connections as f64 / rate));
    let mut tasks = Vec::new();
    for i in 0..connections {
        let (url, scenario, target) = (url.to_owned(), scenario.to_owned(), target.clone());
        tasks.push(tokio::spawn(async move {
            let mut connection = Connection::open(&url, &target.tool).await?;
            let mut pending = None;
            let mut latencies: Vec<u32> = Vec::new();
            let mut errors = 0u64;
            // Spread paced workers over one interval.
            let mut next =
                Instant::now() + interval.map_or(Duration::ZERO, |d| d.mul_f64(i as f64 / connections as f64));
            loop {
                if let Some(interval) = interval {
                    tokio::time::sleep_until(next.into()).await;
                    next += interval;
                }
                let sent = Instant::now();
                if sent >= end {
                    break;
                }
                match step(&scenario, &target, &mut connection, &mut pending).await {
                    Ok(()) if sent >= start => latencies.push(sent.elapsed().as_micros() as u32),
                    Ok(()) => {}
                    Err(_) => {
                        errors += 1;
                        pending = None;
                        connection = Connection::open(&url, &target.tool).await?;
                    }
                }
            }
            anyhow::Ok((latencies, errors))
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    for task in tasks {
        let (l, e) = task.await??;
        latencies.extend(l);
        errors += e;
    }
    latencies.sort_unstable();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{}",
        json!({
            "scenario": scenario, "connections": connections, "rate": rate,
            "requests": latencies.len(), "errors": errors,
            "throughput": latencies.len() as f64 / measure.as_secs_f64(),
            "p50_us": pct(0.50), "p99_us": pct(0.99), "max_us": latencies.last().copied().unwrap_or(0)
        })
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_the_request_it_stands_for() {
        for (key, state) in [("answer-1", Some("t.mac")), ("k\"\\\u{1}", None)] {
            let mut params = json!({
                "name": "choose_region", "arguments": {}, "_meta": meta(),
                "inputResponses": { key: {"action": "accept", "content": {"response": "eu-west-1"}} }});
            if let Some(state) = state {
                params["requestState"] = state.into();
            }
            let expected = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params});
            let sent: Value = serde_json::from_slice(&answer_body(key, state)).expect("JSON");
            assert_eq!(sent, expected, "{key:?}");
        }
    }

    #[test]
    fn a_pause_gives_its_question_and_state() {
        let paused = br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"answer-1":{"method":"elicitation/create","params":{}}},"requestState":"t.mac","_meta":{}}}"#;
        assert_eq!(question_of(paused).unwrap(), ("answer-1".to_owned(), Some("t.mac".to_owned())));
        let stateless = br#"{"jsonrpc":"2.0","id":1,"result":{"inputRequests":{"k\u0031":{}}}}"#;
        assert_eq!(question_of(stateless).unwrap(), ("k1".to_owned(), None), "an escaped key, no state");
        let none = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
        assert!(question_of(none).is_err(), "a pause without a question");
    }

    #[test]
    fn only_an_answer_that_ends_with_the_region_counts() {
        let structured = br#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"{}"}],"structuredContent":{"region":"eu-west-1"}}}"#;
        assert!(ended_with_the_region(structured).is_ok());
        let text = br#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"deployed to eu-west-1"}],"isError":null}}"#;
        assert!(ended_with_the_region(text).is_ok(), "the region as text");
        for (body, why) in [
            (&br#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"eu-west-1"}],"isError":true}}"#[..], "an error result"),
            (br#"{"jsonrpc":"2.0","id":2,"result":{"structuredContent":{"region":"us-east-1"}}}"#, "another region"),
            (br#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"Invalid or expired requestState"}}"#, "an error"),
            (br#"{"jsonrpc":"2.0","id":2,"result":{"content":[]},"error":{"code":1,"message":"x"}}"#, "a result beside an error"),
            (b"<html>", "not JSON"),
        ] {
            assert!(ended_with_the_region(body).is_err(), "{why}");
        }
    }
}
