//! `/metrics` over HTTP: each round outcome, the people's answer time, agent run time,
//! store operations and HTTP statuses move as they should; `--metrics-listen` serves
//! them on a port of their own; `hitl_runtime_workers` shows `--workers`.

use serde_json::{Value, json};

use crate::harness::{Client, Server};

/// The value of the sample `series` (`name{labels}` as exposed), 0 when absent.
pub(crate) fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

pub(crate) async fn scrape(client: &Client) -> String {
    let (status, headers, text) = client.raw(http::Method::GET, "/metrics", &[], bytes::Bytes::new()).await;
    assert_eq!(status, 200, "{text}");
    assert!(headers["content-type"].to_str().unwrap().starts_with("text/plain"), "{headers:?}");
    text
}

fn rounds(text: &str, tool: &str, outcome: &str) -> f64 {
    sample(text, &format!("hitl_rounds_total{{tool=\"{tool}\",outcome=\"{outcome}\"}}"))
}

async fn greeter(server: &Server, id: u64, answers: Option<(&str, &str)>) -> Value {
    let mut params = json!({"name": "greeter", "arguments": {}});
    if let Some((state, name)) = answers {
        params["requestState"] = json!(state);
        params["inputResponses"] = json!({"user_name": {"action": "accept", "content": {"name": name}}});
    }
    server.call_tool(id, params).await.body
}

#[tokio::test]
async fn each_round_outcome_moves_its_counter() {
    // The memory store: the paused-calls gauge counts this server's calls only.
    let server = Server::start(&["--default-ttl", "1", "--store", "memory"]).await;
    let before = scrape(&server).await;
    assert!(before.contains("# HELP hitl_rounds_total") || !before.contains("hitl_rounds_total{"), "{before}");

    // Paused, then answered: paused, resumed, the people's time, the agent's runs.
    let paused = greeter(&server, 1, None).await;
    let state = paused["result"]["requestState"].as_str().unwrap().to_owned();
    let after_pause = scrape(&server).await;
    assert_eq!(rounds(&after_pause, "greeter", "paused") - rounds(&before, "greeter", "paused"), 1.0);
    let paused_now = |text: &str| sample(text, "hitl_paused_calls{tool=\"greeter\"}");
    assert_eq!(paused_now(&after_pause), 1.0, "the gauge, read from the store: {after_pause}");
    let wrong = server
        .call_tool(
            2,
            json!({"name": "greeter", "arguments": {}, "requestState": state,
                             "inputResponses": {"user_name": {"action": "accept", "content": {"name": 7}}}}),
        )
        .await;
    assert_eq!(wrong.body["error"]["code"], -32602, "{}", wrong.body);
    let done = greeter(&server, 3, Some((&state, "Ada"))).await;
    assert_eq!(done["result"]["structuredContent"]["greeting"], "Hello, Ada!", "{done}");
    let replayed = greeter(&server, 4, Some((&state, "Ada"))).await;
    assert_eq!(replayed["result"], done["result"]);
    let mut tampered = state.clone();
    tampered.replace_range(tampered.len() - 2.., "xx");
    assert_eq!(greeter(&server, 5, Some((&tampered, "Ada"))).await["error"]["code"], -32602);

    // A URL question for a client that only declared forms: refused for the capability.
    let refused = server.call_tool(6, json!({"name": "connect_calendar", "arguments": {}})).await;
    assert_eq!(refused.body["error"]["code"], -32021, "{}", refused.body);

    let after = scrape(&server).await;
    assert_eq!(paused_now(&after), 0.0, "answered: no longer paused");
    let moved = |outcome: &str, tool: &str| rounds(&after, tool, outcome) - rounds(&before, tool, outcome);
    assert_eq!(moved("paused", "greeter"), 1.0, "{after}");
    assert_eq!(moved("invalid_answer", "greeter"), 1.0);
    assert_eq!(moved("resumed", "greeter"), 1.0);
    assert_eq!(moved("replayed", "greeter"), 1.0);
    assert_eq!(moved("invalid_state", "greeter"), 1.0);
    assert_eq!(moved("refused_capability", "connect_calendar"), 1.0);
    assert_eq!(moved("expired", "greeter"), 0.0);
    let answered = |text: &str| sample(text, "hitl_answer_seconds_count{tool=\"greeter\"}");
    assert_eq!(answered(&after) - answered(&before), 1.0, "the people's time of the one answered round");
    let runs = |text: &str| sample(text, "hitl_agent_run_seconds_count{tool=\"greeter\"}");
    assert_eq!(runs(&after) - runs(&before), 2.0, "the first run and the resumed one");
    // An answer loads its thread claiming its round (`load_claiming`), then again with
    // a plain `load` when it claimed a round it does not resume.
    let loads = |text: &str| sample(text, "hitl_store_operation_seconds_count{operation=\"load_claiming\"}");
    assert!(loads(&after) - loads(&before) >= 4.0, "each answer loads its thread");
    assert_eq!(sample(&after, "hitl_store_errors_total{operation=\"load_claiming\"}"), 0.0);
    // Scrapes and results are 200; the three JSON-RPC errors are 400 on this wire.
    let status = |text: &str, code: &str| sample(text, &format!("hitl_http_responses_total{{status=\"{code}\"}}"));
    assert_eq!(status(&after, "200") - status(&before, "200"), 5.0, "{after}");
    assert_eq!(status(&after, "400") - status(&before, "400"), 3.0, "{after}");

    // A call whose thread expired (the deployment's one-second TTL): expired.
    let old = greeter(&server, 7, None).await["result"]["requestState"].as_str().unwrap().to_owned();
    let mut gone = false;
    for _ in 0..100 {
        let resend = server.call_tool(8, json!({"name": "greeter", "arguments": {}, "requestState": old})).await;
        if resend.body["error"]["code"] == -32602 {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(gone, "the paused call expired within 10 s");
    let expired = scrape(&server).await;
    assert_eq!(rounds(&expired, "greeter", "expired") - rounds(&after, "greeter", "expired"), 1.0, "{expired}");
    let (status, _, _) = server.raw(http::Method::GET, "/nowhere", &[], bytes::Bytes::new()).await;
    assert_eq!(status, 404);
    assert_eq!(sample(&scrape(&server).await, "hitl_http_responses_total{status=\"404\"}"), 1.0);
}

#[tokio::test]
async fn metrics_listen_serves_them_on_a_port_of_their_own() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let server = Server::start(&["--metrics-listen", &addr]).await;
    let (status, _, _) = server.raw(http::Method::GET, "/metrics", &[], bytes::Bytes::new()).await;
    assert_eq!(status, 404, "not on the MCP listener");
    greeter(&server, 1, None).await;
    let apart = Client { addr: addr.parse().unwrap() };
    let mut text = String::new();
    for _ in 0..100 {
        if let Ok(stream) = tokio::net::TcpStream::connect(apart.addr).await {
            drop(stream);
            text = scrape(&apart).await;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(rounds(&text, "greeter", "paused"), 1.0, "{text}");
    let (status, _, _) = apart.raw(http::Method::GET, "/other", &[], bytes::Bytes::new()).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn the_paused_gauge_reads_a_redis_store() {
    let Some(redis) = crate::harness::redis_url("the paused gauge on Redis") else { return };
    // A database of its own, so other tests' paused calls do not move the gauge.
    let store = match redis.rsplit_once('/') {
        Some((host, db)) if !host.ends_with('/') && db.bytes().all(|b| b.is_ascii_digit()) => format!("{host}/9"),
        _ => format!("{redis}/9"),
    };
    let server = Server::start(&["--store", &store]).await;
    let before = sample(&scrape(&server).await, "hitl_paused_calls{tool=\"greeter\"}");
    let state = greeter(&server, 1, None).await["result"]["requestState"].as_str().unwrap().to_owned();
    let paused = sample(&scrape(&server).await, "hitl_paused_calls{tool=\"greeter\"}");
    assert_eq!(paused - before, 1.0);
    greeter(&server, 2, Some((&state, "Ada"))).await;
    assert_eq!(sample(&scrape(&server).await, "hitl_paused_calls{tool=\"greeter\"}"), before);
}

/// `--workers` (`HITL_WORKERS`, `[server] workers`) sets the threads that serve
/// requests, shown in `hitl_runtime_workers`; without it, one per core (or
/// `TOKIO_WORKER_THREADS`), less one left to a Redis store on this machine; none is
/// refused, in every form.
#[tokio::test]
async fn the_workers_are_as_many_as_asked() {
    let workers = async |server: &Server| sample(&scrape(server).await, "hitl_runtime_workers");
    assert_eq!(workers(&Server::start(&["--workers", "1"]).await).await, 1.0, "the flag");
    let cores = match std::env::var("TOKIO_WORKER_THREADS") {
        Ok(n) => n.parse().unwrap(),
        Err(_) => std::thread::available_parallelism().unwrap().get(),
    };
    assert_eq!(workers(&Server::start(&["--store", "memory"]).await).await, cores as f64, "the default");
    let mut command = std::process::Command::new(Server::program());
    command.args(["serve", "--listen", "127.0.0.1:0"]).env("HITL_WORKERS", "3");
    let from_env = Server::spawn_command(command);
    from_env.wait_healthy().await;
    assert_eq!(workers(&from_env).await, 3.0, "the environment");

    let dir = std::env::temp_dir().join(format!("hitl-e2e-workers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("hitl.toml");
    std::fs::write(&file, "[server]\nworkers = 2\n").unwrap();
    let path = file.to_str().unwrap();
    assert_eq!(workers(&Server::start(&["--config", path]).await).await, 2.0, "the file");
    assert_eq!(workers(&Server::start(&["--config", path, "--workers", "1"]).await).await, 1.0, "the flag over it");

    std::fs::write(&file, "[server]\nworkers = 0\n").unwrap();
    let (ok, text) = crate::trust::check(&["--config", path]);
    assert!(!ok && text.contains("server.workers") && text.contains("nonzero"), "{text}");
    std::fs::write(&file, "[server]\nworkers = 5000\n").unwrap();
    let (ok, text) = crate::trust::check(&["--config", path]);
    assert!(!ok && text.contains("--workers must be at most 1024 (each is a thread), not 5000"), "{text}");
    let stderr = crate::edge::failed_start(&["--workers", "5000"], &[]);
    assert!(stderr.contains("--workers must be at most 1024 (each is a thread), not 5000"), "{stderr}");
    let stderr = crate::edge::failed_start(&["--workers", "0"], &[]);
    assert!(stderr.contains("invalid value '0' for '--workers <N>'"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without `--workers`, a Redis store on this machine is left a core of its own (one
/// worker fewer, at least one); a count asked for is the count, and
/// `TOKIO_WORKER_THREADS` keeps tokio's. (On one core, one worker either way.)
#[tokio::test]
async fn a_redis_on_this_machine_is_left_a_core() {
    let Some(redis) = crate::harness::redis_url("workers beside Redis") else { return };
    let cores = std::thread::available_parallelism().unwrap().get();
    // The suite's Redis is local in CI; a remote one is not left a core, nor is one
    // beside a process whose CPU quota leaves it fewer cores than it may run on.
    let local = ["127.", "localhost", "[::1]", "redis+unix:"].iter().any(|l| redis.contains(l));
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let allowed = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|list| {
        list.trim()
            .split(',')
            .map(|range| {
                let (first, last) = range.split_once('-').unwrap_or((range, range));
                last.parse::<usize>().unwrap() - first.parse::<usize>().unwrap() + 1
            })
            .sum::<usize>()
    });
    let local = local && allowed.is_none_or(|allowed| cores >= allowed);
    let serve = |args: &[&str], tokio: Option<&str>| {
        let mut command = std::process::Command::new(Server::program());
        command.args(["serve", "--listen", "127.0.0.1:0", "--store", &redis]).args(args);
        command.env_remove("HITL_WORKERS").env_remove("TOKIO_WORKER_THREADS");
        if let Some(n) = tokio {
            command.env("TOKIO_WORKER_THREADS", n);
        }
        Server::spawn_command(command)
    };
    let workers = async |server: Server| {
        server.wait_healthy().await;
        sample(&scrape(&server).await, "hitl_runtime_workers")
    };
    let beside = if local { (cores - 1).max(1) } else { cores };
    assert_eq!(workers(serve(&[], None)).await, beside as f64, "beside Redis");
    let asked = (cores + 1).to_string();
    assert_eq!(workers(serve(&["--workers", &asked], None)).await, (cores + 1) as f64, "as asked");
    assert_eq!(workers(serve(&[], Some("3"))).await, 3.0, "TOKIO_WORKER_THREADS");
}
