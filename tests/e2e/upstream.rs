//! `hitl-upstream` against a real upstream: the official Python SDK's `MCPServer`
//! (`tests/python/upstream_server.py`), in each revision and response mode it speaks.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hitl_upstream::{Era, HttpConfig, StdioConfig, Upstream, UpstreamError};
use serde_json::{Map, Value, json};

/// A script of `tests/python`, run by the Python of `HITL_PYTHON`, stopped when
/// dropped; `first_line` is what it printed first (where it listens).
pub(crate) struct PythonScript {
    child: Child,
    pub(crate) first_line: String,
}

impl PythonScript {
    pub(crate) fn start<A: AsRef<std::ffi::OsStr>>(
        python: &str,
        script: &str,
        args: impl IntoIterator<Item = A>,
    ) -> Self {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python").join(script);
        let mut child = Command::new(python)
            .arg(&script)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", script.display()));
        let mut first_line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("piped")).read_line(&mut first_line).unwrap();
        Self { child, first_line }
    }
}

impl Drop for PythonScript {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Python upstream, stopped when dropped.
pub(crate) struct PythonUpstream {
    _script: PythonScript,
    pub(crate) url: String,
}

impl PythonUpstream {
    /// Starts it, or `None` (after `cannot_run`) without the Python SDK.
    pub(crate) fn start(args: &[&str]) -> Option<Self> {
        let Ok(python) = std::env::var("HITL_PYTHON") else {
            crate::harness::cannot_run("upstream", "HITL_PYTHON is not set");
            return None;
        };
        let script = PythonScript::start(&python, "upstream_server.py", args);
        let line = &script.first_line;
        assert!(line.starts_with("http://") || line.starts_with("https://"), "the upstream printed {line:?}");
        let url = line.trim().to_owned();
        Some(Self { _script: script, url })
    }

    pub(crate) fn client(&self, name: &str, protocol: Option<&str>) -> Upstream {
        Upstream::http(HttpConfig {
            name: name.into(),
            url: self.url.parse().unwrap(),
            ca_pem: None,
            headers: Default::default(),
            protocol: protocol.map(str::to_owned),
            timeout: Duration::from_secs(30),
            max_response_bytes: hitl_upstream::MAX_RESPONSE_BYTES,
        })
        .unwrap()
    }
}

fn args(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// Lists, calls, counts and fails over one client.
async fn exercise(upstream: &Upstream, expected: fn(&Era) -> bool) {
    let tools = upstream.list_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for tool in ["echo", "drop_partition", "executions", "fail"] {
        assert!(names.contains(&tool), "{tool} in {names:?}");
    }
    let drop = tools.iter().find(|t| t["name"] == "drop_partition").unwrap();
    assert_eq!(drop["inputSchema"]["required"], json!(["partition", "database"]), "schemas pass through");
    let era = upstream.era().await.unwrap();
    assert!(expected(&era), "negotiated {era:?}");

    let echoed = upstream.call_tool("echo", args(&[("text", json!("héllo"))])).await.unwrap();
    assert_eq!(text(&echoed), "héllo");
    let before = upstream.call_tool("executions", args(&[("tool", json!("drop_partition"))])).await.unwrap();
    let dropped = upstream
        .call_tool("drop_partition", args(&[("partition", json!("p1")), ("database", json!("orders"))]))
        .await
        .unwrap();
    assert_eq!(text(&dropped), "dropped p1 on orders");
    let after = upstream.call_tool("executions", args(&[("tool", json!("drop_partition"))])).await.unwrap();
    let count = |r: &Value| text(r).parse::<u64>().unwrap();
    assert_eq!(count(&after), count(&before) + 1, "one call, one execution");

    let failed = upstream.call_tool("fail", args(&[("reason", json!("disk full"))])).await.unwrap();
    assert_eq!(failed["isError"], true, "{failed}");
    assert!(text(&failed).contains("disk full"), "{failed}");
}

#[tokio::test]
async fn a_2026_07_28_upstream_is_spoken_to_statelessly() {
    let Some(server) = PythonUpstream::start(&[]) else { return };
    exercise(&server.client("py", None), |era| *era == Era::Modern).await;
}

#[tokio::test]
async fn a_forced_2025_11_25_upstream_gets_a_session() {
    let Some(server) = PythonUpstream::start(&[]) else { return };
    let legacy = |era: &Era| matches!(era, Era::Legacy { version, session: Some(_) } if version == "2025-11-25");
    exercise(&server.client("py", Some("2025-11-25")), legacy).await;
}

#[tokio::test]
async fn json_responses_and_older_revisions_are_read_too() {
    let Some(server) = PythonUpstream::start(&["--json"]) else { return };
    exercise(&server.client("py", None), |era| *era == Era::Modern).await;
    let old = |era: &Era| matches!(era, Era::Legacy { version, .. } if version == "2025-03-26");
    exercise(&server.client("py", Some("2025-03-26")), old).await;
}

#[tokio::test]
async fn failures_name_the_upstream() {
    let Some(server) = PythonUpstream::start(&[]) else { return };
    let upstream = server.client("db", None);
    match upstream.call_tool("no_such_tool", Map::new()).await {
        Ok(result) => assert_eq!(result["isError"], true, "{result}"),
        Err(e) => assert!(e.to_string().starts_with("upstream db "), "{e}"),
    }
    drop(server);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = format!("http://{}/mcp", listener.local_addr().unwrap());
    drop(listener);
    let gone = Upstream::http(HttpConfig {
        name: "gone".into(),
        url: closed.parse().unwrap(),
        ca_pem: None,
        headers: Default::default(),
        protocol: None,
        timeout: Duration::from_secs(5),
        max_response_bytes: hitl_upstream::MAX_RESPONSE_BYTES,
    })
    .unwrap();
    let error = gone.list_tools().await.unwrap_err();
    // Nothing listened: the request was never sent.
    assert!(matches!(error, UpstreamError::NotSent { .. }), "{error:?}");
    assert!(error.to_string().starts_with("upstream gone is unreachable"), "{error}");
}

/// The Python upstream as a stdio child process, or `None` without the Python SDK.
fn stdio(protocol: Option<&str>) -> Option<Upstream> {
    let Ok(python) = std::env::var("HITL_PYTHON") else {
        crate::harness::cannot_run("upstream", "HITL_PYTHON is not set");
        return None;
    };
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/upstream_server.py");
    Some(Upstream::stdio(StdioConfig {
        name: "local".into(),
        command: vec![python, script.to_string_lossy().into_owned(), "--stdio".into()],
        cwd: None,
        env: Default::default(),
        protocol: protocol.map(str::to_owned),
        timeout: Duration::from_secs(30),
        max_response_bytes: hitl_upstream::MAX_RESPONSE_BYTES,
    }))
}

#[tokio::test]
async fn a_stdio_upstream_is_started_and_spoken_to() {
    let Some(upstream) = stdio(None) else { return };
    exercise(&upstream, |_| true).await;
    let Some(legacy) = stdio(Some("2025-11-25")) else { return };
    let old = |era: &Era| matches!(era, Era::Legacy { version, session: None } if version == "2025-11-25");
    exercise(&legacy, old).await;
}

#[tokio::test]
async fn a_stdio_upstream_that_exits_is_started_again() {
    let Some(upstream) = stdio(None) else { return };
    let echo = || upstream.call_tool("echo", args(&[("text", json!("again"))]));
    assert_eq!(text(&echo().await.unwrap()), "again");
    let crashed = upstream.call_tool("crash", Map::new()).await.unwrap_err();
    assert!(matches!(crashed, UpstreamError::Unreachable { .. }), "{crashed:?}");
    assert!(crashed.to_string().starts_with("upstream local is unreachable"), "{crashed}");
    // Started again after a short pause (it died young): poll until it answers.
    for attempt in 0.. {
        match echo().await {
            Ok(result) => {
                assert_eq!(text(&result), "again");
                break;
            }
            Err(UpstreamError::Unreachable { detail, .. }) if attempt < 100 => {
                assert!(detail.contains("starting it again") || detail.contains("exited"), "{detail}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(other) => panic!("{other}"),
        }
    }
}

/// A 2025-era upstream's mid-call question, seen through [`hitl_upstream::Call`]:
/// answered, the call goes on; refused, the tool does not run.
async fn truncate_asks(upstream: Upstream) {
    use hitl_upstream::Event;
    let upstream = std::sync::Arc::new(upstream);
    let mut call = upstream.start_call("truncate", args(&[("table", json!("orders"))]), Map::new(), false);
    let Event::Asked(asked) = call.next().await else { panic!("the upstream asks first") };
    assert_eq!(asked.method, "elicitation/create");
    assert_eq!(asked.params["message"], "Really truncate orders?", "{}", asked.params);
    asked.answer(json!({"action": "accept", "content": {"confirm": true}}));
    let Event::Done(result) = call.next().await else { panic!("then it answers") };
    assert_eq!(text(&result.unwrap()), "truncated orders");

    let mut refused = upstream.start_call("truncate", args(&[("table", json!("users"))]), Map::new(), false);
    let Event::Asked(asked) = refused.next().await else { panic!("the upstream asks first") };
    drop(asked);
    let Event::Done(result) = refused.next().await else { panic!("then it answers") };
    match result {
        Ok(result) => assert_eq!(result["isError"], true, "an unanswered question fails the tool: {result}"),
        Err(error) => assert!(matches!(error, UpstreamError::Refused { .. }), "{error:?}"),
    }

    let count = upstream.call_tool("executions", args(&[("tool", json!("truncate"))])).await.unwrap();
    assert_eq!(text(&count), "1", "truncated once");
}

#[tokio::test]
async fn a_2025_upstream_question_mid_call_is_handed_to_the_caller() {
    let Some(server) = PythonUpstream::start(&[]) else { return };
    truncate_asks(server.client("py", Some("2025-11-25"))).await;
    let Some(local) = stdio(Some("2025-11-25")) else { return };
    truncate_asks(local).await;
}
