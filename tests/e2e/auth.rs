//! Bearer tokens and per-tool callers, over HTTP against the hitl program: the 401
//! challenge and the protected resource metadata MCP clients follow, paused calls bound
//! to their caller, tools listed and callable only by the callers a policy names, the
//! tokens file read again when it changes, and the official Python SDK as a client.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::harness::{Reply, Server};

/// A folder with a tokens file (alice plain, bob hashed) and a config, removed when
/// dropped.
pub(crate) struct Setup {
    pub(crate) folder: std::path::PathBuf,
}

impl Setup {
    pub(crate) fn new(config: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let folder = std::env::temp_dir().join(format!("hitl-e2e-auth-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&folder).unwrap();
        // bob's token is "tok-bob": only its SHA-256 is written.
        let hashed = sha256_hex("tok-bob");
        std::fs::write(folder.join("tokens.txt"), format!("# who may call\nalice tok-alice\nbob sha256:{hashed}\n"))
            .unwrap();
        std::fs::write(folder.join("hitl.toml"), config).unwrap();
        Self { folder }
    }

    pub(crate) async fn serve(&self) -> Server {
        Server::start(&["--config", self.folder.join("hitl.toml").to_str().unwrap()]).await
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.folder);
    }
}

pub(crate) fn sha256_hex(text: &str) -> String {
    let output = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(text.as_bytes())?;
            child.wait_with_output()
        })
        .expect("sha256sum runs");
    String::from_utf8(output.stdout).unwrap().split_whitespace().next().unwrap().to_owned()
}

/// A modern MCP request with `token` (none: no Authorization header).
pub(crate) async fn request(server: &Server, token: Option<&str>, id: u64, method: &str, params: Value) -> Reply {
    request_as(server, token, json!({"elicitation": {}}), id, method, params).await
}

/// [`request`] from a client with `capabilities`.
pub(crate) async fn request_as(
    server: &Server,
    token: Option<&str>,
    capabilities: Value,
    id: u64,
    method: &str,
    params: Value,
) -> Reply {
    server.modern_as(token, id, method, params, capabilities).await
}

const CONFIG: &str = "[auth]\ntokens_file = \"tokens.txt\"\nauthorization_servers = [\"https://idp.example\"]\n";

#[tokio::test]
async fn requests_need_a_token_and_the_challenge_leads_to_the_metadata() {
    let setup = Setup::new(CONFIG);
    let server = setup.serve().await;
    let reply = request(&server, None, 1, "tools/list", json!({})).await;
    assert_eq!(reply.status, 401, "{}", reply.body);
    let headers = reply.headers;
    let metadata = format!("http://{}/.well-known/oauth-protected-resource", server.addr);
    assert_eq!(headers["www-authenticate"], format!("Bearer resource_metadata=\"{metadata}\""));

    let invalid = request(&server, Some("tok-mallory"), 2, "tools/list", json!({})).await;
    assert_eq!(invalid.status, 401);
    let challenge = invalid.headers["www-authenticate"].to_str().unwrap();
    assert!(challenge.starts_with("Bearer error=\"invalid_token\""), "{challenge}");
    assert!(challenge.contains(&format!("resource_metadata=\"{metadata}\"")), "{challenge}");

    let (status, _, document) =
        server.raw(http::Method::GET, "/.well-known/oauth-protected-resource", &[], Bytes::new()).await;
    assert_eq!(status, 200, "{document}");
    let document: Value = serde_json::from_str(&document).unwrap();
    assert_eq!(document["resource"], format!("http://{}/mcp", server.addr));
    assert_eq!(document["authorization_servers"], json!(["https://idp.example"]));
    let (status, _, _) =
        server.raw(http::Method::GET, "/.well-known/oauth-protected-resource/mcp", &[], Bytes::new()).await;
    assert_eq!(status, 200);

    let (status, _, health) = server.raw(http::Method::GET, "/healthz", &[], Bytes::new()).await;
    assert_eq!(status, 200, "/healthz needs no token: {health}");

    for token in ["tok-alice", "tok-bob"] {
        let reply = request(&server, Some(token), 3, "tools/list", json!({})).await;
        assert_eq!(reply.status, 200, "{token}: {}", reply.body);
        assert!(reply.body["result"]["tools"].as_array().unwrap().len() > 5);
    }
}

#[tokio::test]
async fn a_paused_call_is_bound_to_its_caller() {
    let setup = Setup::new("");
    // The flag alone, without a config file.
    let server = Server::start(&["--tokens-file", setup.folder.join("tokens.txt").to_str().unwrap()]).await;
    let call = json!({"name": "greeter", "arguments": {}});
    let asked = request(&server, Some("tok-alice"), 1, "tools/call", call).await;
    let result = &asked.body["result"];
    assert_eq!(result["resultType"], "input_required", "{}", asked.body);
    let answer = json!({"name": "greeter", "arguments": {}, "requestState": result["requestState"],
                        "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Ada"}}}});
    let stolen = request(&server, Some("tok-bob"), 2, "tools/call", answer.clone()).await;
    assert_eq!(stolen.body["error"]["code"], -32602, "{}", stolen.body);
    assert_eq!(stolen.body["error"]["message"], "Invalid or expired requestState");
    let status = request(&server, None, 3, "tools/call", answer.clone()).await.status;
    assert_eq!(status, 401, "no credentials, no answer");
    let done = request(&server, Some("tok-alice"), 4, "tools/call", answer).await;
    assert_eq!(done.body["result"]["structuredContent"]["greeting"], "Hello, Ada!", "{}", done.body);
}

#[tokio::test]
async fn callers_named_by_a_policy_alone_see_and_call_its_tools() {
    let config = format!(
        "[server]\nconformance_fixtures = true\n\n{CONFIG}\n[[policy]]\ntools = [\"deploy_*\", \"test_simple_prompt\"]\n\
         action = \"allow\"\ncallers = [\"user:alice\"]\n"
    );
    let setup = Setup::new(&config);
    let server = setup.serve().await;
    let names = |reply: &Reply| -> Vec<String> {
        reply.body["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let alice = request(&server, Some("tok-alice"), 1, "tools/list", json!({})).await;
    assert!(names(&alice).contains(&"deploy_production_release".to_owned()));
    let bob = request(&server, Some("tok-bob"), 2, "tools/list", json!({})).await;
    assert!(!names(&bob).contains(&"deploy_production_release".to_owned()), "{:?}", names(&bob));
    assert!(names(&bob).contains(&"greeter".to_owned()), "other tools stay open");

    let call = json!({"name": "deploy_production_release", "arguments": {"service": "api", "version": "1"}});
    let refused = request(&server, Some("tok-bob"), 3, "tools/call", call.clone()).await;
    assert_eq!(refused.body["error"]["code"], -32602, "{}", refused.body);
    assert_eq!(refused.body["error"]["message"], "Unknown tool: deploy_production_release", "as if it did not exist");
    let allowed = request(&server, Some("tok-alice"), 4, "tools/call", call).await;
    assert_eq!(allowed.body["result"]["resultType"], "input_required", "{}", allowed.body);

    // Prompts too.
    let prompts = |reply: &Reply| -> Vec<String> {
        let listed = reply.body["result"]["prompts"].as_array().unwrap_or_else(|| panic!("{}", reply.body));
        listed.iter().map(|p| p["name"].as_str().unwrap().to_owned()).collect()
    };
    let alice = request(&server, Some("tok-alice"), 5, "prompts/list", json!({})).await;
    assert!(prompts(&alice).contains(&"test_simple_prompt".to_owned()), "{:?}", prompts(&alice));
    let bob = request(&server, Some("tok-bob"), 6, "prompts/list", json!({})).await;
    assert!(!prompts(&bob).contains(&"test_simple_prompt".to_owned()), "{:?}", prompts(&bob));
    let get = json!({"name": "test_simple_prompt", "arguments": {}});
    let refused = request(&server, Some("tok-bob"), 7, "prompts/get", get).await;
    assert_eq!(refused.body["error"]["message"], "Unknown prompt: test_simple_prompt", "{}", refused.body);
}

#[tokio::test]
async fn the_tokens_file_is_read_again_when_it_changes() {
    let setup = Setup::new(CONFIG);
    let server = setup.serve().await;
    let status = request(&server, Some("tok-carol"), 1, "tools/list", json!({})).await.status;
    assert_eq!(status, 401);
    std::fs::write(setup.folder.join("tokens.txt"), "alice tok-alice\ncarol tok-carol\n").unwrap();
    for polls in 0.. {
        let status = request(&server, Some("tok-carol"), 2, "tools/list", json!({})).await.status;
        if status == 200 {
            break;
        }
        assert!(polls < 200, "the new token was never accepted");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let status = request(&server, Some("tok-bob"), 3, "tools/list", json!({})).await.status;
    assert_eq!(status, 401, "bob's line is gone");
}

#[tokio::test]
async fn the_python_sdk_completes_a_paused_call_with_its_token() {
    let Ok(python) = std::env::var("HITL_PYTHON") else {
        crate::harness::cannot_run("auth", "HITL_PYTHON is not set");
        return;
    };
    let setup = Setup::new(CONFIG);
    let server = setup.serve().await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/sdk_auth.py");
    let url = format!("http://{}/mcp", server.addr);
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python).arg(script).arg(url).arg("tok-alice").output()
    })
    .await
    .unwrap()
    .expect("the Python interpreter runs");
    let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && log.contains("OK"), "{log}");
}

/// The JWT test keys (`tests/fixtures/jwt`).
pub(crate) fn jwt_fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/jwt").join(name)
}

/// A token signed with test key `kid`, carrying `claims` over valid defaults
/// (issuer `https://idp.example`, audience `hitl`, ten minutes left).
pub(crate) fn token(kid: &str, claims: Value) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let read = |name: &str| std::fs::read(jwt_fixture(name)).unwrap();
    let (alg, key) = match kid {
        "rsa-1" | "rsa-2" => (Algorithm::RS256, EncodingKey::from_rsa_pem(&read(&format!("{kid}.pem"))).unwrap()),
        "ec-1" => (Algorithm::ES256, EncodingKey::from_ec_pem(&read("ec-1.pem")).unwrap()),
        "ed-1" => (Algorithm::EdDSA, EncodingKey::from_ed_pem(&read("ed-1.pem")).unwrap()),
        "hs-1" => (Algorithm::HS256, EncodingKey::from_secret(&read("hs-1.secret"))),
        other => panic!("no test key {other}"),
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let mut all = json!({"iss": "https://idp.example", "aud": "hitl", "exp": now + 600, "nbf": now - 5});
    all.as_object_mut().unwrap().extend(claims.as_object().cloned().unwrap_or_default());
    let mut header = Header::new(alg);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, &all, &key).unwrap()
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

const JWT_CONFIG: &str = "[auth.jwt]\nissuer = \"https://idp.example\"\naudience = \"hitl\"\njwks_file = \"jwks.json\"\n\n\
                          [[policy]]\ntools = [\"deploy_*\"]\naction = \"allow\"\ncallers = [\"group:ops\"]\n";

fn tool_names(reply: &Reply) -> Vec<String> {
    let tools = reply.body["result"]["tools"].as_array().unwrap_or_else(|| panic!("{}", reply.body));
    tools.iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn jwts_name_the_caller_and_its_groups_and_bad_ones_are_refused() {
    let setup = Setup::new(JWT_CONFIG);
    std::fs::copy(jwt_fixture("jwks.json"), setup.folder.join("jwks.json")).unwrap();
    let server = setup.serve().await;
    for kid in ["rsa-1", "ec-1", "ed-1", "hs-1"] {
        let ops = token(kid, json!({"sub": "alice", "groups": ["ops"]}));
        let reply = request(&server, Some(&ops), 1, "tools/list", json!({})).await;
        assert_eq!(reply.status, 200, "{kid}: {}", reply.body);
        assert!(tool_names(&reply).contains(&"deploy_production_release".to_owned()), "{kid}: group:ops may deploy");
        let outsider = token(kid, json!({"sub": "bob"}));
        let reply = request(&server, Some(&outsider), 2, "tools/list", json!({})).await;
        assert!(!tool_names(&reply).contains(&"deploy_production_release".to_owned()), "{kid}: bob may not");
    }

    let refused = [
        (json!({"sub": "alice", "exp": now() - 3600}), "ExpiredSignature"),
        (json!({"sub": "alice", "nbf": now() + 3600}), "ImmatureSignature"),
        (json!({"sub": "alice", "aud": "someone-else"}), "InvalidAudience"),
        (json!({"sub": "alice", "iss": "https://evil.example"}), "InvalidIssuer"),
        (json!({"name": "alice"}), "no sub claim"),
    ];
    for (claims, why) in refused {
        let bad = token("ec-1", claims.clone());
        let reply = request(&server, Some(&bad), 3, "tools/list", json!({})).await;
        assert_eq!(reply.status, 401, "{claims}");
        let challenge = reply.headers["www-authenticate"].to_str().unwrap();
        assert!(challenge.contains("error=\"invalid_token\"") && challenge.contains(why), "{claims}: {challenge}");
    }
    let forged = format!("{}x", token("rsa-1", json!({"sub": "alice"})));
    assert_eq!(request(&server, Some(&forged), 4, "tools/list", json!({})).await.status, 401, "a bad signature");
    let unknown = token("rsa-2", json!({"sub": "alice"}));
    assert_eq!(request(&server, Some(&unknown), 5, "tools/list", json!({})).await.status, 401, "an unknown kid");

    // A paused call is alice's: bob's token cannot answer it.
    let (alice, bob) = (token("rsa-1", json!({"sub": "alice"})), token("ec-1", json!({"sub": "bob"})));
    let asked = request(&server, Some(&alice), 6, "tools/call", json!({"name": "greeter", "arguments": {}})).await;
    let answer = json!({"name": "greeter", "arguments": {}, "requestState": asked.body["result"]["requestState"],
                        "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Ada"}}}});
    let stolen = request(&server, Some(&bob), 7, "tools/call", answer.clone()).await;
    assert_eq!(stolen.body["error"]["message"], "Invalid or expired requestState", "{}", stolen.body);
    let done = request(&server, Some(&alice), 8, "tools/call", answer).await;
    assert_eq!(done.body["result"]["structuredContent"]["greeting"], "Hello, Ada!", "{}", done.body);
}

/// Polls until `token` is accepted (`true`) or refused (`false`).
async fn until_status(server: &Server, token: &str, accepted: bool) {
    for polls in 0.. {
        let status = request(server, Some(token), 9, "tools/list", json!({})).await.status;
        if (status == 200) == accepted {
            return;
        }
        assert!(polls < 150, "the token was never {}", if accepted { "accepted" } else { "refused" });
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_rotated_jwks_file_is_read_again() {
    let setup = Setup::new(JWT_CONFIG);
    std::fs::copy(jwt_fixture("jwks.json"), setup.folder.join("jwks.json")).unwrap();
    let server = setup.serve().await;
    let (old, new) = (token("rsa-1", json!({"sub": "alice"})), token("rsa-2", json!({"sub": "alice"})));
    until_status(&server, &old, true).await;
    std::fs::copy(jwt_fixture("jwks-rotated.json"), setup.folder.join("jwks.json")).unwrap();
    until_status(&server, &new, true).await;
    until_status(&server, &old, false).await;
}

#[tokio::test]
async fn a_jwks_url_is_fetched_and_fetched_again_for_an_unknown_key() {
    let served = std::sync::Arc::new(std::sync::Mutex::new(std::fs::read_to_string(jwt_fixture("jwks.json")).unwrap()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    let jwks = served.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut head = [0u8; 4096];
            let _ = socket.read(&mut head).await;
            let body = jwks.lock().unwrap().clone();
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
        }
    });
    let config = format!("[auth.jwt]\nissuer = \"https://idp.example\"\naudience = \"hitl\"\njwks_url = \"{url}\"\n");
    let setup = Setup::new(&config);
    let server = setup.serve().await;
    until_status(&server, &token("ec-1", json!({"sub": "alice"})), true).await;
    *served.lock().unwrap() = std::fs::read_to_string(jwt_fixture("jwks-rotated.json")).unwrap();
    // rsa-2 is unknown until the set is fetched again, which its first use asks for.
    until_status(&server, &token("rsa-2", json!({"sub": "alice"})), true).await;
}

#[tokio::test]
async fn the_public_url_is_the_base_of_the_challenge_and_the_metadata() {
    let setup = Setup::new(&format!("[server]\npublic_url = \"https://hitl.example.com\"\n\n{CONFIG}"));
    let server = setup.serve().await;
    let reply = request(&server, None, 1, "tools/list", json!({})).await;
    let expected = "Bearer resource_metadata=\"https://hitl.example.com/.well-known/oauth-protected-resource\"";
    assert_eq!(reply.headers["www-authenticate"], expected);
    let (_, _, document) =
        server.raw(http::Method::GET, "/.well-known/oauth-protected-resource", &[], Bytes::new()).await;
    let document: Value = serde_json::from_str(&document).unwrap();
    assert_eq!(document["resource"], "https://hitl.example.com/mcp");
}

#[tokio::test]
async fn sighup_reads_the_tokens_file_again() {
    let setup = Setup::new(CONFIG);
    let server = setup.serve().await;
    let file = setup.folder.join("tokens.txt");
    let before = std::fs::metadata(&file).unwrap().modified().unwrap();
    // New content with the same modification time, moved in at once: only the signal
    // can make hitl read it.
    let next = setup.folder.join("tokens.next");
    std::fs::write(&next, "dave tok-dave\n").unwrap();
    std::fs::File::options().write(true).open(&next).unwrap().set_modified(before).unwrap();
    std::fs::rename(&next, &file).unwrap();
    let status = request(&server, Some("tok-dave"), 1, "tools/list", json!({})).await.status;
    assert_eq!(status, 401, "not read again without a change it can see");
    let hup = std::process::Command::new("kill").args(["-HUP", &server.pid().to_string()]).status().unwrap();
    assert!(hup.success());
    until_status(&server, "tok-dave", true).await;
}
