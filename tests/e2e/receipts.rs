//! `[receipts] key_file`: each call a person approved goes upstream with a signed
//! receipt (`_meta["io.hitl/approval"]`, EdDSA JWS), which the upstream (the Python SDK
//! server, checking with PyJWT against hitl's `/.well-known/hitl-receipts.jwks`)
//! requires: a call nobody approved, a receipt for other arguments, and a receipt used
//! twice are refused.

use serde_json::{Map, Value, json};

use crate::approvals::{Folder, people, signed_in, url_client};
use crate::harness::{Paused, Server, accept};
use crate::upstream::PythonUpstream;

/// A new Ed25519 key, PKCS#8 PEM, made by Python's `cryptography` (as an operator's
/// `openssl genpkey -algorithm ed25519` would).
pub(crate) fn new_key() -> String {
    let python = std::env::var("HITL_PYTHON").expect("HITL_PYTHON");
    let script = "from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey as K\n\
                  from cryptography.hazmat.primitives import serialization as s\n\
                  print(K.generate().private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption()).decode())";
    let out = std::process::Command::new(python).args(["-c", script]).output().expect("python runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

async fn call(server: &Server, token: &str, tool: &str, args: Value) -> crate::harness::Reply {
    let params = json!({"name": tool, "arguments": args});
    server.modern_as(Some(token), 1, "tools/call", params, url_client()).await
}

/// hitl on `rules` (its `[receipts]` key made here) in front of the Python SDK upstream
/// `db`, which requires a receipt checked against hitl's JWKS (published by hitl and
/// written where the upstream reads it); the upstream and the folder live as long.
struct Verifying {
    server: Server,
    upstream: PythonUpstream,
    _folder: Folder,
}

async fn verifying(rules: &str) -> Option<Verifying> {
    let folder = Folder::new("");
    let jwks = folder.0.join("hitl-jwks.json");
    let jwks_arg = jwks.to_str().unwrap().to_owned();
    let upstream = PythonUpstream::start(&["--receipt-jwks", &jwks_arg, "--receipt-audience", "db"])?;
    std::fs::write(folder.0.join("receipt-key.pem"), new_key()).unwrap();
    let config = format!("{rules}\n[receipts]\nkey_file = \"receipt-key.pem\"\n");
    std::fs::write(folder.0.join("hitl.toml"), signed_in(&upstream.url, &config)).unwrap();
    let server = folder.serve(&[]).await;
    let (_, _, body) = server.raw(http::Method::GET, "/.well-known/hitl-receipts.jwks", &[], Default::default()).await;
    std::fs::write(&jwks, &body).unwrap();
    Some(Verifying { server, upstream, _folder: folder })
}

#[tokio::test]
async fn approved_calls_carry_a_receipt_the_upstream_checks() {
    let policy = "[[policy]]\ntools = [\"db.verified_drop\"]\nwhen = 'args.database == \"prod\"'\naction = \"review\"\n\
                  approval_ttl = 600\napproval_scope = \"arguments\"\n";
    let Some(verified) = verifying(policy).await else { return };
    let (server, upstream) = (&verified.server, &verified.upstream);
    let p = people();

    // hitl publishes the key; the upstream reads it from there.
    let (status, headers, body) =
        server.raw(http::Method::GET, "/.well-known/hitl-receipts.jwks", &[], Default::default()).await;
    assert_eq!((status, headers["content-type"].to_str().unwrap()), (200, "application/json"), "{body}");
    let published: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((&published["keys"][0]["kty"], &published["keys"][0]["crv"]), (&json!("OKP"), &json!("Ed25519")));

    // Nobody approved a call on staging (allowed): no receipt, and the upstream refuses.
    let staging = call(server, &p.alice, "db.verified_drop", json!({"partition": "p1", "database": "staging"})).await;
    assert!(staging.is_error() && staging.text().contains("no approval receipt"), "{}", staging.body);

    // Approved in alice's client: the receipt goes with it, for these arguments.
    let prod = json!({"partition": "p1", "database": "prod"});
    let asked = call(server, &p.alice, "db.verified_drop", prod.clone()).await;
    let paused = Paused::of("db.verified_drop", prod.clone(), &asked).by(Some(&p.alice), url_client());
    let ran = paused.answer(server, accept(json!({"decision": "approve"}))).await;
    assert_eq!(ran.text(), "dropped p1 on prod, approved by user:alice", "{}", ran.body);
    let token = call(server, &p.alice, "db.receipt_seen", json!({})).await.text();
    let claims = claims_of(&token);
    assert_eq!(
        (&claims["aud"], &claims["tool"], &claims["sub"]),
        (&json!("db"), &json!("verified_drop"), &json!("user:alice"))
    );
    assert_eq!(claims["policy"], "tools = [\"db.verified_drop\"]");
    let (iat, exp) = (claims["iat"].as_u64().unwrap(), claims["exp"].as_u64().unwrap());
    assert!(exp > iat && exp - iat <= 300, "{claims}");
    assert!(claims["jti"].as_str().unwrap().len() > 36, "thread and nonce: {claims}");

    // The same call again, covered by the approval: its own receipt, naming the scope.
    let covered = call(server, &p.alice, "db.verified_drop", prod.clone()).await;
    assert_eq!(covered.text(), "dropped p1 on prod, approved by user:alice (covered: arguments)", "{}", covered.body);

    // Sent straight to the upstream, the receipt is refused for other arguments and
    // when it was used before.
    let direct = upstream.client("db", None);
    let with_receipt = |token: &str| {
        let mut extra = Map::new();
        extra.insert("_meta".into(), json!({ "io.hitl/approval": token }));
        extra
    };
    let other = direct
        .call_tool_for(None, "verified_drop", obj(json!({"partition": "p2", "database": "prod"})), with_receipt(&token))
        .await
        .unwrap();
    assert!(text_of(&other).contains("the receipt is for another call"), "{other}");
    let again = direct.call_tool_for(None, "verified_drop", obj(prod), with_receipt(&token)).await.unwrap();
    assert!(text_of(&again).contains("the receipt was used before"), "{again}");
}

fn obj(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

/// A JWS's claims, unverified (the upstream verified them).
pub(crate) fn claims_of(token: &str) -> Value {
    use base64::Engine as _;
    let part = token.split('.').nth(1).expect("a compact JWS");
    serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
}

#[tokio::test]
async fn a_declared_workflows_approved_call_carries_its_receipt_too() {
    let rules = r#"[[policy]]
tools = ["db.verified_drop"]
when = 'args.database == "prod"'
action = "review"

[[agent]]
name = "cleanup"
kind = "workflow"
input_schema = { type = "object", properties = { partition = { type = "string" }, database = { type = "string" } }, required = ["partition", "database"] }
steps = [
  { call = "db.verified_drop", args = { partition = "{partition}", database = "{database}" } },
]
"#;
    let Some(verified) = verifying(rules).await else { return };
    let server = &verified.server;
    let p = people();

    // Allowed (staging): no one approved, so no receipt, and the upstream refuses.
    let staging = call(server, &p.alice, "cleanup", json!({"partition": "p1", "database": "staging"})).await;
    assert!(staging.is_error() && staging.text().contains("no approval receipt"), "{}", staging.body);

    // Reviewed (prod), approved in alice's client: the workflow's call carries the receipt.
    let prod = json!({"partition": "p1", "database": "prod"});
    let asked = call(server, &p.alice, "cleanup", prod.clone()).await;
    let paused = Paused::of("cleanup", prod.clone(), &asked).by(Some(&p.alice), url_client());
    let ran = paused.answer(server, accept(json!({"decision": "approve"}))).await;
    assert_eq!(ran.text(), "dropped p1 on prod, approved by user:alice", "{}", ran.body);
    let claims = claims_of(&call(server, &p.alice, "db.receipt_seen", json!({})).await.text());
    assert_eq!(
        (&claims["aud"], &claims["tool"], &claims["sub"]),
        (&json!("db"), &json!("verified_drop"), &json!("user:alice"))
    );
}
