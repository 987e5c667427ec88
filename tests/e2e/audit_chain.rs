//! `[audit] chain = true`: the audit file as a hash chain keyed by the server secret,
//! and `hitl audit verify` on an intact chain, an edited line, a deleted line, a
//! removed tail (against the kept seq, and the store's copy on Redis), across a restart.

use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::approvals::{Folder, people, signed_in, url_client};
use crate::harness::{Paused, Server, TEST_SECRET, accept};
use crate::upstream::PythonUpstream;

/// The hitl program on `folder`'s config as replica `replica`.
async fn serve(folder: &Folder, replica: &str) -> Server {
    let mut command = Command::new(Server::program());
    command.args(["serve", "--listen", "127.0.0.1:0", "--config", &folder.config()]);
    if let Ok(store) = std::env::var("HITL_E2E_STORE") {
        command.args(["--store", &store]);
    }
    command.stderr(Stdio::inherit());
    let server = Server::spawn_command_with_env(command, &[("HITL_SECRET", TEST_SECRET), ("HITL_REPLICA", replica)]);
    server.wait_healthy().await;
    server
}

/// `hitl audit verify` with `args`, under `secret`.
fn verify(args: &[&str], secret: &str) -> Output {
    Command::new(Server::program())
        .args(["audit", "verify"])
        .args(args)
        .env("HITL_SECRET", secret)
        .env_remove("HITL_SECRET_FILE")
        .output()
        .expect("hitl audit verify runs")
}

fn said(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A drop by alice, reviewed in her client and approved.
async fn approved_drop(server: &Server, partition: &str) {
    let p = people();
    let args = json!({"partition": partition, "database": "orders"});
    let params = json!({"name": "db.drop_partition", "arguments": args});
    let asked = server.modern_as(Some(&p.alice), 1, "tools/call", params, url_client()).await;
    let paused = Paused::of("db.drop_partition", args, &asked).by(Some(&p.alice), url_client());
    let ran = paused.answer(server, accept(json!({"decision": "approve"}))).await;
    assert_eq!(ran.text(), format!("dropped {partition} on orders"), "{}", ran.body);
}

/// Waits until the audit file holds the `finished` lines of `calls` calls.
async fn written(folder: &Folder, calls: usize) -> Vec<Value> {
    let probe = || async {
        let lines = folder.audit();
        (lines.iter().filter(|e| e["event"] == "finished").count() >= calls).then_some(lines)
    };
    crate::approvals::eventually(|| format!("{calls} finished calls in the audit file"), probe).await
}

#[tokio::test]
async fn a_chained_audit_file_verifies_and_names_a_changed_deleted_or_missing_line() {
    let Some(upstream) = PythonUpstream::start(&[]) else { return };
    let folder = Folder::new(&signed_in(
        &upstream.url,
        "[[policy]]\ntools = [\"db.drop_*\"]\naction = \"review\"\n\n[audit]\nfile = \"audit.jsonl\"\nchain = true\n",
    ));
    let replica = format!("e2e-{}-{}", std::process::id(), crate::approvals::now_ms());
    let file = folder.0.join("audit.jsonl");
    let path = file.to_str().unwrap().to_owned();

    let mut server = serve(&folder, &replica).await;
    approved_drop(&server, "p1").await;
    let first = written(&folder, 1).await;
    server.kill();
    drop(server);
    for (n, line) in first.iter().enumerate() {
        assert_eq!(line["replica"], replica.as_str(), "{line}");
        assert_eq!(line["seq"], n as u64 + 1, "{line}");
        assert_eq!(line["hash"].as_str().map(str::len), Some(64), "{line}");
    }
    assert_eq!(first[0]["prev"], "");
    assert_eq!(first[1]["prev"], first[0]["hash"]);
    let out = verify(&[&path], TEST_SECRET);
    assert!(out.status.success(), "{}", said(&out));
    assert!(said(&out).contains(&format!("{replica} seq {}", first.len())), "{}", said(&out));

    // A restart goes on with the chain, from the file's last line.
    let server = serve(&folder, &replica).await;
    approved_drop(&server, "p2").await;
    let all = written(&folder, 2).await;
    let next = &all[first.len()];
    assert_eq!((&next["seq"], &next["prev"]), (&json!(first.len() + 1), &first.last().unwrap()["hash"]), "{next}");
    let out = verify(&[&path], TEST_SECRET);
    assert!(out.status.success(), "{}", said(&out));
    assert!(said(&out).contains(&format!("{replica} seq {}", all.len())), "{}", said(&out));
    let last = all.len() as u64;

    // Another secret verifies nothing.
    let out = verify(&[&path], "another-secret-0123456789abcdef-0123456789");
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));

    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let check = |lines: Vec<&str>, extra: &[&str]| {
        let broken = folder.0.join("broken.jsonl");
        std::fs::write(&broken, lines.join("\n") + "\n").unwrap();
        let mut args = vec![broken.to_str().unwrap().to_owned()];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        verify(&args, TEST_SECRET)
    };
    // An edited line: the first changed one is named.
    let mut edited = lines.clone();
    let changed = edited[2].replace("\"event\":\"", "\"event\":\"x");
    edited[2] = &changed;
    let out = check(edited, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(said(&out).contains("line 3:") && said(&out).contains("changed"), "{}", said(&out));
    // A deleted line: the line after the gap is named.
    let mut deleted = lines.clone();
    deleted.remove(3);
    let out = check(deleted, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(said(&out).contains("line 4:") && said(&out).contains("removed"), "{}", said(&out));
    // A removed tail: against the seq an operator kept, and the store's copy.
    let mut cut = lines.clone();
    cut.pop();
    let out = check(cut.clone(), &[]);
    assert!(out.status.success(), "a cut tail alone still chains: {}", said(&out));
    let kept = format!("{replica}={last}");
    let out = check(cut.clone(), &["--last-seq", &kept]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(said(&out).contains("last lines were removed"), "{}", said(&out));
    if let Ok(store) = std::env::var("HITL_E2E_STORE") {
        let out = check(lines.clone(), &["--store", &store]);
        assert!(out.status.success(), "the whole file against the store: {}", said(&out));
        let out = check(cut, &["--store", &store]);
        assert_eq!(out.status.code(), Some(1), "{}", said(&out));
        assert!(said(&out).contains(&format!("the store has seq {last} of {replica}")), "{}", said(&out));
    }
    drop(server);
}

#[tokio::test]
async fn a_chain_needs_a_lasting_secret_and_an_audit_file() {
    let check = |config: &str, secret: Option<&str>| {
        let folder = Folder::new(config);
        let mut command = Command::new(Server::program());
        command.args(["check", "--config", &folder.config()]).env_remove("HITL_SECRET").env_remove("HITL_SECRET_FILE");
        if let Some(secret) = secret {
            command.env("HITL_SECRET", secret);
        }
        let out = command.output().expect("hitl check runs");
        (out.status.code(), said(&out))
    };
    let (code, err) = check("[audit]\nfile = \"audit.jsonl\"\nchain = true\n", None);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("set HITL_SECRET or --secret-file"), "{err}");
    let (code, err) = check("[audit]\nchain = true\n", Some(TEST_SECRET));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("set [audit] file too"), "{err}");
    let (code, err) = check("[audit]\nfile = \"audit.jsonl\"\nchain = true\n", Some(TEST_SECRET));
    assert_eq!(code, Some(0), "{err}");
}
