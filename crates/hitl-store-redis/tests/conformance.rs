//! The store conformance suite against a real Redis (`REDIS_URL`). Without it, the
//! suite cannot run here; `cargo xtask test` starts a Redis and reports when it could
//! not.

use std::time::{SystemTime, UNIX_EPOCH};

use hitl_store_redis::RedisStore;

/// Says why a suite cannot run; in CI (`CI` set) that fails the test instead.
fn cannot_run(why: &str) {
    assert!(std::env::var_os("CI").is_none(), "hitl-store-redis: {why}, and CI needs every suite to run");
    eprintln!("hitl-store-redis: {why}; the suite did not run");
}

#[tokio::test]
async fn redis_store_conforms() {
    let Ok(url) = std::env::var("REDIS_URL") else {
        cannot_run("REDIS_URL is not set");
        return;
    };
    let store = RedisStore::connect(&url).await.expect("Redis at REDIS_URL answers");
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let prefix = uuid::Uuid::now_v7().to_string();
    hitl_thread::conformance::run(&store, &prefix, now).await;
    hitl_thread::conformance::records(&store, &prefix, now).await;
    let claimed = hitl_thread::conformance::claims(&store, &format!("{prefix}-again"), now).await;
    assert!(claimed, "the Redis store claims a round in the step that loads it");
    let replica = RedisStore::connect(&url).await.expect("Redis at REDIS_URL answers");
    let claimed = hitl_thread::conformance::replicas(&store, &replica, &prefix, now).await;
    assert!(claimed, "a replica claims a round in the step that loads it, its own or another's");
}

/// Database `n` of the Redis at `REDIS_URL`, emptied first, for a test whose counts the
/// suite's other tests (which share database 0) must not move: a store on it and a raw
/// connection to it. `None` (said by [`cannot_run`]) without `REDIS_URL`.
async fn own_database(n: u8) -> Option<(RedisStore, redis::aio::MultiplexedConnection)> {
    let Ok(url) = std::env::var("REDIS_URL") else {
        cannot_run("REDIS_URL is not set");
        return None;
    };
    let base = url.rsplit_once('/').map_or(url.as_str(), |(base, _)| base);
    let own = format!("{base}/{n}");
    let client = redis::Client::open(own.as_str()).unwrap();
    let mut raw = client.get_multiplexed_async_connection().await.expect("Redis answers");
    let () = redis::cmd("FLUSHDB").query_async(&mut raw).await.unwrap();
    Some((RedisStore::connect(&own).await.expect("Redis answers"), raw))
}

/// On a Redis where nothing was ever paused, the count per tool is empty, not an error
/// (`/metrics` reads it at every scrape).
#[tokio::test]
async fn an_empty_redis_counts_no_paused_calls() {
    let Some((store, _)) = own_database(13).await else { return };
    use hitl_thread::PausedLedger as _;
    assert_eq!(store.paused_by_tool().await.expect("no error on an empty store"), Vec::<(String, u64)>::new());
}

#[tokio::test]
async fn unreachable_redis_is_a_clear_error() {
    let err = RedisStore::connect("redis://127.0.0.1:1/0").await.unwrap_err();
    assert!(err.to_string().starts_with("thread store unavailable"), "{err}");
}

/// Three `redis-server` nodes in cluster mode on loopback, stopped on drop.
struct Cluster {
    nodes: Vec<std::process::Child>,
    ports: Vec<u16>,
    dir: std::path::PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            let _ = node.kill();
            let _ = node.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

fn start_cluster() -> Option<Cluster> {
    use std::process::{Command, Stdio};
    if !on_path("redis-server") || !on_path("redis-cli") {
        return None;
    }
    let ports: Vec<u16> =
        (0..3).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()).collect();
    let dir = std::env::temp_dir().join(format!("hitl-cluster-{}", ports[0]));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cluster = Cluster { nodes: Vec::new(), ports: ports.clone(), dir: dir.clone() };
    for port in &ports {
        let node = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--cluster-enabled", "yes"])
            .args(["--cluster-config-file", &format!("nodes-{port}.conf"), "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .spawn()
            .ok()?;
        cluster.nodes.push(node);
    }
    let ping = |port: u16| {
        Command::new("redis-cli")
            .args(["-p", &port.to_string(), "ping"])
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"PONG"))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !ports.iter().all(|p| ping(*p)) {
        assert!(std::time::Instant::now() < deadline, "cluster nodes did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let created = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addresses)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdout(Stdio::null())
        .status()
        .ok()?;
    assert!(created.success(), "redis-cli --cluster create failed");
    let ready = |port: u16| {
        Command::new("redis-cli")
            .args(["-p", &port.to_string(), "cluster", "info"])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("cluster_state:ok"))
    };
    while !ports.iter().all(|p| ready(*p)) {
        assert!(std::time::Instant::now() < deadline + std::time::Duration::from_secs(10), "cluster not ready");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Some(cluster)
}

#[tokio::test]
async fn redis_cluster_store_conforms() {
    let Some(cluster) = start_cluster() else {
        cannot_run("redis-server/redis-cli are not on PATH");
        return;
    };
    let url = format!(
        "redis+cluster://{}",
        cluster.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",")
    );
    let store = RedisStore::connect(&url).await.expect("the cluster answers");
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    // Enough threads that their keys spread over every node's slots.
    for i in 0..12 {
        let prefix = format!("{}-{i}", uuid::Uuid::now_v7());
        hitl_thread::conformance::run(&store, &prefix, now).await;
    }
    let replica = RedisStore::connect(&url).await.expect("the cluster answers");
    let prefix = uuid::Uuid::now_v7().to_string();
    assert!(hitl_thread::conformance::replicas(&store, &replica, &prefix, now).await, "replicas claim on a cluster");
}

/// What is kept until a time (the approvals that cover later calls) is read until then,
/// by any replica, replaced by a later value, and never kept past its time.
#[tokio::test]
async fn a_value_kept_until_a_time_is_read_until_then() {
    let Ok(url) = std::env::var("REDIS_URL") else {
        cannot_run("REDIS_URL is not set");
        return;
    };
    let (one, other) = (RedisStore::connect(&url).await.unwrap(), RedisStore::connect(&url).await.unwrap());
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let key = format!("{}-kept", uuid::Uuid::now_v7());
    assert_eq!(one.kept(&key).await.unwrap(), None, "nothing kept yet");
    one.keep_until(&key, "a1", now + 60_000, now).await.unwrap();
    assert_eq!(other.kept(&key).await.unwrap().as_deref(), Some("a1"), "another replica reads it");
    one.keep_until(&key, "a2", now + 60_000, now).await.unwrap();
    assert_eq!(other.kept(&key).await.unwrap().as_deref(), Some("a2"), "a later value replaces it");
    let past = format!("{key}-past");
    one.keep_until(&past, "b1", now, now).await.unwrap();
    assert_eq!(one.kept(&past).await.unwrap(), None, "a time already past keeps nothing");
    one.keep_until(&past, "b2", now + 50, now).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while one.kept(&past).await.unwrap().is_some() {
        assert!(std::time::Instant::now() < deadline, "the value outlived its time");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Calls past their time are not swept from the counting sets on every pause (each
/// sweep is a command in the script), but they never pile up: the first pause whose id
/// ends in `0` sweeps all three sets, and one that would pass a limit sweeps its set
/// first, so a lapsed call never takes a live one's place.
#[tokio::test]
async fn lapsed_calls_leave_the_counting_sets() {
    use hitl_thread::{LimitReached, PausedLedger as _, PausedLimits};
    // The suite's other tests sweep database 0's shared set of all paused calls at
    // their limits.
    let Some((store, mut raw)) = own_database(12).await else { return };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let prefix = uuid::Uuid::now_v7().to_string();
    let (owner, tool) = (format!("{prefix}-owner"), format!("{prefix}-tool"));
    let sets = [
        format!("hitl:{{paused}}:owner:{owner}"),
        "hitl:{paused}:all".to_owned(),
        format!("hitl:{{paused}}:tool:{tool}"),
    ];
    let limits = PausedLimits { per_owner: 3, total: u64::MAX };
    let held = |set: &str, id: &str| {
        let (set, id) = (set.to_owned(), id.to_owned());
        let mut raw = raw.clone();
        async move { redis::cmd("ZSCORE").arg(set).arg(id).query_async::<Option<f64>>(&mut raw).await.unwrap().is_some() }
    };
    // A live call first, so the owner's set lives as long as it does.
    let live = format!("{prefix}-b1");
    assert_eq!(store.count_paused(&owner, &live, &tool, now + 60_000, limits).await.unwrap(), Ok(()));
    let lapsed = [format!("{prefix}-a1"), format!("{prefix}-a2")];
    for id in &lapsed {
        assert_eq!(store.count_paused(&owner, id, &tool, now.saturating_sub(1), limits).await.unwrap(), Ok(()));
    }
    for set in &sets {
        assert!(held(set, &lapsed[0]).await, "not swept at a pause whose id does not end in 0 ({set})");
    }
    // At the owner's limit of 3 (two lapsed, one live): the lapsed ones make way.
    let next = format!("{prefix}-b2");
    assert_eq!(store.count_paused(&owner, &next, &tool, now + 60_000, limits).await.unwrap(), Ok(()));
    assert!(!held(&sets[0], &lapsed[0]).await, "swept from the owner's set at its limit");
    let last = format!("{prefix}-b3");
    assert_eq!(store.count_paused(&owner, &last, &tool, now + 60_000, limits).await.unwrap(), Ok(()));
    assert_eq!(
        store.count_paused(&owner, &format!("{prefix}-b4"), &tool, now + 60_000, limits).await.unwrap(),
        Err(LimitReached::PerOwner),
        "live calls still fill the limit"
    );
    for (set, id) in [(&sets[1], &lapsed[1]), (&sets[2], &lapsed[1])] {
        assert!(held(set, id).await, "still held before a sweep ({set})");
    }
    let sweeping = format!("{prefix}-c0");
    let other = format!("{prefix}-other");
    assert_eq!(store.count_paused(&other, &sweeping, &tool, now + 60_000, limits).await.unwrap(), Ok(()));
    for set in &sets[1..] {
        for id in &lapsed {
            assert!(!held(set, id).await, "{id} swept from {set} by a pause whose id ends in 0");
        }
        assert!(held(set, &live).await, "a live call stays in {set}");
    }
    // A call still in the owner's set past its time counts as new when counted again:
    // at the owner's limit, it is refused (as the memory store does).
    let full = format!("{prefix}-full");
    let tight = PausedLimits { per_owner: 1, total: u64::MAX };
    let stale = format!("{prefix}-d1");
    assert_eq!(store.count_paused(&full, &format!("{prefix}-d2"), &tool, now + 60_000, tight).await.unwrap(), Ok(()));
    let () = redis::cmd("ZADD")
        .arg(format!("hitl:{{paused}}:owner:{full}"))
        .arg(now.saturating_sub(1))
        .arg(&stale)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        store.count_paused(&full, &stale, &tool, now + 60_000, tight).await.unwrap(),
        Err(LimitReached::PerOwner),
        "a lapsed call counted again is checked against the limit"
    );
}

/// An owner's counting set lives as long as the last of its calls: a call that ends
/// sooner than one counted before does not shorten it (a caller could otherwise drop
/// its own counts early with a short-lived call), and one that ends later lengthens it.
#[tokio::test]
async fn an_owners_set_lives_as_long_as_its_last_call() {
    use hitl_thread::{PausedLedger as _, PausedLimits};
    let Some((store, mut raw)) = own_database(11).await else { return };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let prefix = uuid::Uuid::now_v7().to_string();
    let owner = format!("{prefix}-owner");
    let set = format!("hitl:{{paused}}:owner:{owner}");
    let limits = PausedLimits { per_owner: 10, total: u64::MAX };
    let mut pttl = async || redis::cmd("PTTL").arg(&set).query_async::<i64>(&mut raw).await.unwrap();
    let minute = 60_000;
    for (n, (lives_ms, at_least_ms)) in
        [(10 * minute, 9 * minute), (minute, 9 * minute), (20 * minute, 19 * minute)].into_iter().enumerate()
    {
        let id = format!("{prefix}-{n}1");
        assert_eq!(store.count_paused(&owner, &id, "tool", now + lives_ms, limits).await.unwrap(), Ok(()));
        let left = pttl().await;
        assert!(left >= at_least_ms as i64, "after a call living {lives_ms} ms, the set has {left} ms left");
    }
}

/// A Redis that lost its scripts (restarted, or `SCRIPT FLUSH`) has them loaded again
/// by the next command that runs one.
#[tokio::test]
async fn scripts_redis_forgot_are_loaded_again() {
    use hitl_thread::{PausedLedger as _, PausedLimits};
    let Some((store, mut raw)) = own_database(10).await else { return };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let prefix = uuid::Uuid::now_v7().to_string();
    let limits = PausedLimits { per_owner: 10, total: u64::MAX };
    for n in 1..=2 {
        let () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut raw).await.unwrap();
        let id = format!("{prefix}-{n}");
        assert_eq!(store.count_paused("owner", &id, "tool", now + 60_000, limits).await.unwrap(), Ok(()), "{id}");
        let counted: u64 = redis::cmd("ZCARD").arg("hitl:{paused}:owner:owner").query_async(&mut raw).await.unwrap();
        assert_eq!(counted, n, "counted after a flush");
    }
}

/// The audit trail stays near its cap though its entries are added without one: a store
/// trims it at its first append, whatever the trail held before, and every
/// `AUDIT_TRIM_EVERY` stream entries after; the newest entries stay. A batch is written
/// as entries of `AUDIT_LINES_PER_ENTRY` lines (the last fewer), so the trail never
/// holds fewer lines than the cap.
#[tokio::test]
async fn the_audit_trail_is_trimmed_near_its_cap() {
    use hitl_store_redis::{AUDIT_LINES_PER_ENTRY, AUDIT_TRIM_EVERY};
    use hitl_thread::{AUDIT_KEPT, AuditLine, Records as _};
    let Some((store, mut raw)) = own_database(8).await else { return };
    // Over the cap by 5,000 entries of a line each, as builds before wrote them (a trim
    // with `~` removes up to 10,000 at a time).
    let mut filled = 0;
    while filled < AUDIT_KEPT + 5_000 {
        let mut pipe = redis::pipe();
        for _ in 0..10_000.min(AUDIT_KEPT + 5_000 - filled) {
            pipe.cmd("XADD").arg("hitl:audit").arg("*").arg("e").arg(r#"{"at_ms":0}"#).ignore();
            filled += 1;
        }
        let () = pipe.query_async(&mut raw).await.unwrap();
    }
    // Whole stream nodes (100 entries) are trimmed, so a trimmed trail holds fewer than
    // 100 entries over the cap.
    let slack = 100;
    let line = |n: usize| AuditLine { at_ms: 1, json: format!(r#"{{"at_ms":1,"n":{n}}}"#).into() };
    store.append_audit(&[line(0)]).await.unwrap();
    let entries = |mut raw: redis::aio::MultiplexedConnection| async move {
        redis::cmd("XLEN").arg("hitl:audit").query_async::<usize>(&mut raw).await.unwrap()
    };
    let held = entries(raw.clone()).await;
    assert!((AUDIT_KEPT..AUDIT_KEPT + slack).contains(&held), "the first append trims: {held} held");
    // Batches as the ledger sends them under load: never past the cap by more than a
    // trim's worth of entries, never under it (so never under it in lines).
    let batch: usize = 37;
    let per_batch = batch.div_ceil(AUDIT_LINES_PER_ENTRY);
    let mut n = 1;
    while n < 1 + 3 * AUDIT_TRIM_EVERY * AUDIT_LINES_PER_ENTRY {
        let lines: Vec<AuditLine> = (n..n + batch).map(line).collect();
        store.append_audit(&lines).await.unwrap();
        n += lines.len();
        let held = entries(raw.clone()).await;
        assert!(
            held >= AUDIT_KEPT && held < AUDIT_KEPT + AUDIT_TRIM_EVERY + per_batch + slack,
            "{held} held after {n}"
        );
    }
    let newest: Vec<(String, Vec<(String, String)>)> = redis::cmd("XREVRANGE")
        .arg("hitl:audit")
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(per_batch)
        .query_async(&mut raw)
        .await
        .unwrap();
    let sizes: Vec<usize> = newest.iter().rev().map(|(_, fields)| fields.len()).collect();
    let mut expected = vec![AUDIT_LINES_PER_ENTRY; batch / AUDIT_LINES_PER_ENTRY];
    expected.push(batch % AUDIT_LINES_PER_ENTRY);
    assert_eq!(sizes, expected, "a batch in entries of {AUDIT_LINES_PER_ENTRY} lines, the last fewer");
    assert_eq!(newest[0].1.last().unwrap().1, *line(n - 1).json, "the newest line stays");
    let () = redis::cmd("FLUSHDB").query_async(&mut raw).await.unwrap();
}

/// A batch is written as few stream entries, yet a reader pages through them a line at
/// a time: each line has a seq of its own, the first of an entry the entry's id (as
/// every line's was when an entry held one), and reading on from any of them gives the
/// rest, in order, once.
#[tokio::test]
async fn an_audit_batch_is_read_on_from_any_of_its_lines() {
    use hitl_store_redis::AUDIT_LINES_PER_ENTRY;
    use hitl_thread::{AuditLine, Records as _};
    let Some((store, mut raw)) = own_database(7).await else { return };
    let lines: Vec<AuditLine> =
        (0..40).map(|n| AuditLine { at_ms: 5, json: format!(r#"{{"at_ms":5,"n":{n}}}"#).into() }).collect();
    store.append_audit(&lines).await.unwrap();
    let held: usize = redis::cmd("XLEN").arg("hitl:audit").query_async(&mut raw).await.unwrap();
    assert_eq!(held, 40_usize.div_ceil(AUDIT_LINES_PER_ENTRY), "an entry for each {AUDIT_LINES_PER_ENTRY} lines");
    let all = store.audit_since(0, None, 100).await.unwrap();
    let seqs: Vec<&str> = all.iter().map(|e| e["seq"].as_str().unwrap()).collect();
    assert_eq!(seqs.len(), 40);
    assert!(seqs[0].matches('-').count() == 1 && seqs[1] == format!("{}-1", seqs[0]), "{:?}", &seqs[..2]);
    assert_eq!(seqs.iter().collect::<std::collections::HashSet<_>>().len(), 40, "no two lines share a seq");
    let numbers = |read: &[serde_json::Value]| read.iter().map(|e| e["n"].as_u64().unwrap()).collect::<Vec<_>>();
    for page in [1, 3, 4, 7, 17] {
        let mut read = Vec::new();
        let mut after: Option<String> = None;
        // As many pages as the lines take, and one more to find none left.
        for _ in 0..=40_usize.div_ceil(page) {
            let got = store.audit_since(0, after.as_deref(), page).await.unwrap();
            read.extend(numbers(&got));
            match got.last() {
                Some(last) if got.len() == page => after = Some(last["seq"].as_str().unwrap().to_owned()),
                _ => break,
            }
        }
        assert_eq!(read, (0..40).collect::<Vec<u64>>(), "pages of {page}");
    }
    // From the last line of the first entry: the entries after it, whole.
    let last_of_first = format!("{}-{}", seqs[0], AUDIT_LINES_PER_ENTRY - 1);
    let rest = store.audit_since(0, Some(&last_of_first), 100).await.unwrap();
    assert_eq!(numbers(&rest), (AUDIT_LINES_PER_ENTRY as u64..40).collect::<Vec<_>>(), "{last_of_first}");
    // From an entry no longer in the trail (trimmed, or older than any): all after it.
    assert_eq!(store.audit_since(0, Some("1-0"), 100).await.unwrap().len(), 40, "a cursor older than the trail");
    // Seqs this store never gives read nothing: a line past an entry's, a line 0, a
    // leading zero.
    for never in [format!("{}-{}", seqs[0], AUDIT_LINES_PER_ENTRY), format!("{}-0", seqs[0]), format!("0{}", seqs[0])] {
        assert!(store.audit_since(0, Some(&never), 10).await.unwrap().is_empty(), "{never}");
    }
    let () = redis::cmd("FLUSHDB").query_async(&mut raw).await.unwrap();
}
