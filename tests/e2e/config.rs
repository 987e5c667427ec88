//! `hitl.toml`: `hitl check` on good and bad files, and `hitl serve --config` with flags
//! that override the file.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::harness::Server;

fn write(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("hitl-e2e-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

/// `hitl check --config path`: exit status and stdout plus stderr.
fn check(path: &Path) -> (bool, String) {
    let output = Command::new(Server::program())
        .args(["check", "--config"])
        .arg(path)
        .env_remove("HITL_SECRET")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

#[test]
fn the_example_configuration_checks() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/hitl.example.toml");
    let (ok, text) = check(&example);
    assert!(ok, "{text}");
    assert!(text.contains("hitl.example.toml: ok"), "{text}");
}

#[test]
fn a_typo_or_a_bad_value_names_the_file_line_column_and_key() {
    let typo = write("typo", "[server]\nlisten = \"127.0.0.1:0\"\nmax_conections = 5\n");
    let (ok, text) = check(&typo);
    assert!(!ok);
    assert!(text.contains(&format!("{}:3:1: server.max_conections: unknown field", typo.display())), "{text}");
    let bad = write("bad", "[server]\nrequest_timeout = \"soon\"\n");
    let (ok, text) = check(&bad);
    assert!(!ok);
    assert!(text.contains(":2:19: server.request_timeout: invalid type"), "{text}");
    // A value of the right type that the server refuses: a shared store without a secret.
    let shared = write("shared", "[server]\nstore = \"redis://127.0.0.1:1/0\"\n");
    let (ok, text) = check(&shared);
    assert!(!ok);
    assert!(text.contains("HITL_SECRET or --secret-file"), "{text}");
    for path in [typo, bad, shared] {
        let _ = std::fs::remove_file(path);
    }
}

#[test]
fn bad_auth_sections_are_refused_with_the_reason() {
    let cases = [
        ("auth-missing", "[auth]\ntokens_file = \"no-such-tokens.txt\"\n", "no-such-tokens.txt: No such file"),
        (
            "auth-callers",
            "[[policy]]\ntools = [\"deploy_*\"]\naction = \"allow\"\ncallers = [\"group:ops\"]\n",
            "a [[policy]] names callers, but callers are not known",
        ),
        (
            "auth-caller-form",
            "[[policy]]\ntools = [\"x\"]\naction = \"allow\"\ncallers = [\"ops\"]\n",
            "policy[0].callers: \"ops\" is not user:<id> or group:<name>",
        ),
        (
            "auth-jwks",
            "[auth.jwt]\nissuer = \"i\"\naudience = \"a\"\n",
            "[auth.jwt]: give exactly one of jwks_file and jwks_url",
        ),
        ("auth-jwt-key", "[auth.jwt]\nissuer = \"i\"\n", "auth.jwt: missing field `audience`"),
        (
            "auth-public-url",
            "[server]\npublic_url = \"ftp://x\"\n",
            "--public-url \"ftp://x\": give an http:// or https:// URL",
        ),
    ];
    for (name, text, expected) in cases {
        let path = write(name, text);
        let (ok, said) = check(&path);
        assert!(!ok && said.contains(expected), "{name}: {said}");
        let _ = std::fs::remove_file(path);
    }
}

#[tokio::test]
async fn serve_reads_the_file_and_flags_override_it() {
    let file = write("serve", "[server]\nmax_paused_per_caller = 1\nexamples = true\n");
    let path = file.to_str().unwrap();
    // On the memory store: in the suite's Redis, every test's paused calls count
    // against 127.0.0.1.
    let from_file = Server::start(&["--config", path, "--store", "memory"]).await;
    let first = from_file.call_tool(1, json!({"name": "choose_region", "arguments": {}})).await;
    assert_eq!(first.body["result"]["resultType"], "input_required", "{:?}", first.body);
    let second = from_file.call_tool(2, json!({"name": "choose_region", "arguments": {}})).await;
    let message = second.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("the limit is 1 (--max-paused-per-caller)"), "the file's limit: {:?}", second.body);

    let overridden = Server::start(&["--config", path, "--store", "memory", "--max-paused-per-caller", "5"]).await;
    for id in 0..2 {
        let reply = overridden.call_tool(id, json!({"name": "choose_region", "arguments": {}})).await;
        assert_eq!(reply.body["result"]["resultType"], "input_required", "the flag's limit: {:?}", reply.body);
    }
    let _ = std::fs::remove_file(file);
}

/// A stdio upstream whose program is missing is named by `hitl check` (a `PATH` lookup,
/// or the file for a path), without starting anything.
#[test]
fn a_missing_stdio_program_is_named_by_check() {
    let cases = [
        ("stdio-missing", "hitl-no-such-program", "command: \"hitl-no-such-program\": it is not found on PATH"),
        ("stdio-no-file", "/nonexistent/bin/server", "command: \"/nonexistent/bin/server\": there is no such file"),
    ];
    for (name, program, expected) in cases {
        let path = write(name, &format!("[[upstream]]\nname = \"fs\"\ncommand = [\"{program}\", \"--stdio\"]\n"));
        let (ok, said) = check(&path);
        assert!(!ok && said.contains(&format!("upstream \"fs\": {expected}")), "{name}: {said}");
        let _ = std::fs::remove_file(path);
    }
    let present = write("stdio-present", "[[upstream]]\nname = \"fs\"\ncommand = [\"sh\", \"-c\", \"exit 0\"]\n");
    let (ok, said) = check(&present);
    assert!(ok, "a program on PATH checks: {said}");
    let _ = std::fs::remove_file(present);
}
