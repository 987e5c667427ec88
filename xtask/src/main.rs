//! `cargo xtask`: the workspace's automation, in Rust.
//!
//! - `cargo xtask test`: every test of the workspace, then the end-to-end suite again
//!   with the server on Redis. When `REDIS_URL` is unset and `redis-server` is on PATH,
//!   starts one on a free loopback port for the run; provides the official MCP Python
//!   SDK in a virtualenv under `target/`. Ends with the list of suites that could not
//!   run, and why.
//! - `cargo xtask ci`: `cargo fmt --check`, clippy with `-D warnings` on all targets,
//!   then `test`, then `cargo deny check bans licenses sources` when cargo-deny is
//!   installed.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    std::env::set_current_dir(&root)?;
    match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("ci") => ci(),
        _ => {
            eprintln!(
                "usage: cargo xtask <test|ci>\n  test  run every test (starts Redis when it can)\n  ci    fmt, clippy, test, deny"
            );
            bail!("unknown or missing command")
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask sits in the workspace root").to_path_buf()
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn run(mut command: Command) -> anyhow::Result<()> {
    eprintln!("$ {command:?}");
    let status = command.status().with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed with {status}");
    }
    Ok(())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

fn ci() -> anyhow::Result<()> {
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run(fmt)?;
    let mut clippy = cargo();
    clippy.args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]);
    run(clippy)?;
    test(&[])?;
    if on_path("cargo-deny") {
        let mut deny = cargo();
        // The advisories database cannot be fetched from the build machines.
        deny.args(["deny", "check", "bans", "licenses", "sources"]);
        run(deny)?;
    } else {
        eprintln!("cargo-deny is not installed: `cargo deny check` skipped");
    }
    Ok(())
}

/// A Redis started for the test run, stopped on drop.
struct Redis {
    child: Child,
    dir: PathBuf,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_redis() -> anyhow::Result<(Redis, String)> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let dir = std::env::temp_dir().join(format!("hitl-xtask-redis-{port}"));
    std::fs::create_dir_all(&dir)?;
    let child = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .spawn()
        .context("starting redis-server")?;
    let redis = Redis { child, dir };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pong(port) {
        if Instant::now() > deadline {
            bail!("redis-server did not answer PING on port {port} within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((redis, format!("redis://127.0.0.1:{port}/0")))
}

fn pong(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").is_ok() && stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}

fn test(extra: &[String]) -> anyhow::Result<()> {
    let mut skipped: Vec<String> = Vec::new();
    let mut _redis = None;
    let redis_url = match std::env::var("REDIS_URL") {
        Ok(url) => Some(url),
        Err(_) if on_path("redis-server") => {
            let (redis, url) = start_redis()?;
            eprintln!("started redis-server for this run at {url}");
            _redis = Some(redis);
            Some(url)
        }
        Err(_) => {
            skipped.push(
                "Redis suites (store conformance, replicas, faults): REDIS_URL is unset and redis-server is not on PATH"
                    .into(),
            );
            None
        }
    };
    let python = match python_sdk() {
        Ok(python) => Some(python),
        Err(why) => {
            skipped.push(format!("Python SDK suite (tests/python): {why}"));
            None
        }
    };
    let mut command = cargo();
    command.args(["test", "--workspace"]).args(extra);
    if let Some(url) = &redis_url {
        command.env("REDIS_URL", url);
    }
    if let Some(python) = &python {
        command.env("HITL_PYTHON", python);
    }
    let mut result = run(command);
    if result.is_ok()
        && let Some(url) = &redis_url
    {
        // The whole end-to-end suite once more, with the server keeping its threads in Redis.
        let mut again = cargo();
        again.args(["test", "-p", "hitl-e2e", "--test", "e2e"]).env("REDIS_URL", url).env("HITL_E2E_STORE", url);
        if let Some(python) = &python {
            again.env("HITL_PYTHON", python);
        }
        result = run(again);
    } else if redis_url.is_none() {
        skipped.push("the e2e suite on --store redis: no Redis".into());
    }
    eprintln!();
    if skipped.is_empty() {
        eprintln!("every suite ran");
    } else {
        eprintln!("suites that could not run:");
        for s in &skipped {
            eprintln!("  - {s}");
        }
    }
    result
}

/// The pinned official MCP Python SDK, for the suite that drives hitl with it.
const PYTHON_SDK: &str = "mcp==2.3.0";

/// A virtualenv under `target/` with the Python SDK; returns its interpreter.
fn python_sdk() -> Result<PathBuf, String> {
    let venv = workspace_root().join("target/python-sdk");
    let python = venv.join("bin/python");
    let has_sdk = |python: &Path| {
        Command::new(python)
            .args(["-c", "import mcp, importlib.metadata as m; assert m.version('mcp') == '2.3.0'"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if has_sdk(&python) {
        return Ok(python);
    }
    let status = Command::new("python3").arg("-m").arg("venv").arg(&venv).status();
    if !status.is_ok_and(|s| s.success()) {
        return Err("python3 -m venv failed (is python3 with venv installed?)".into());
    }
    eprintln!("installing {PYTHON_SDK} into {}", venv.display());
    let status = Command::new(&python).args(["-m", "pip", "install", "-q", PYTHON_SDK]).status();
    if !status.is_ok_and(|s| s.success()) || !has_sdk(&python) {
        return Err(format!("pip install {PYTHON_SDK} failed (no access to PyPI?)"));
    }
    Ok(python)
}
