//! `hitl-bench echo --redis URL`: the floor of a durable round on Redis, what the
//! Redis row of `cargo xtask bench --peers` is read against besides the echo.
//!
//! A bare hyper server that answers the `round` scenario with canned replies and asks
//! of Redis only what a round that survives restarts and is resumed exactly once must:
//! three scripts, through the client and connection hitl uses. The pause writes the
//! paused call's record (`CREATE`: a new thread only); the answer claims the open round
//! if the token's proof and the call's binding are the record's (`CLAIM`, the record
//! read back), then saves the finished call over the claimed version (`FINISH`). Records
//! of about the size of hitl's for `choose_region`; no paused-call ledger, no audit
//! trail, no JSON parsed, no schema, no HMAC: nothing a server does beside Redis.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;
use bytes::Bytes;
use redis::aio::ConnectionManager;
use tokio::net::TcpListener;

/// The sizes of hitl's records for a `choose_region` round (paused, then finished),
/// as it writes them to Redis today.
const PAUSED_RECORD_BYTES: usize = 768;
const FINISHED_RECORD_BYTES: usize = 512;

/// A new paused thread (KEYS: the thread; ARGV: version, record, expiry, round, proof,
/// binding): 1, or 0 when it exists.
const CREATE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'd', ARGV[2], 'c', '', 'r', ARGV[4], 't', ARGV[5], 'b', ARGV[6])
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
return 1
";

/// The thread loaded, its open round claimed when the proof and binding are its own and
/// no live claim holds it (a claim that lapsed, its server gone, is taken over) (KEYS:
/// the thread; ARGV: proof, now, until, binding): nil when missing, else the version,
/// record and claim as they were, and 1 when claimed.
const CLAIM: &str = r"
local f = redis.call('HMGET', KEYS[1], 'v', 'd', 'c', 'r', 't', 'b')
if not f[2] then return false end
local claimed = 0
if f[4] ~= '' and f[5] == ARGV[1] and f[6] == ARGV[4] then
  local until_ms = tonumber(string.match(f[3], ':(%d+)$'))
  if not until_ms or until_ms <= tonumber(ARGV[2]) then
    redis.call('HSET', KEYS[1], 'v', tostring(tonumber(f[1]) + 1), 'c', f[4] .. ':' .. ARGV[3])
    claimed = 1
  end
end
return {f[1], f[2], f[3], claimed}
";

/// The finished thread saved over the expected version (KEYS: the thread; ARGV:
/// expected, version, record, expiry): 1, or 0 on a conflict.
const FINISH: &str = r"
if redis.call('HGET', KEYS[1], 'v') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'd', ARGV[3], 'c', '', 'r', '', 't', '', 'b', '')
redis.call('PEXPIREAT', KEYS[1], ARGV[4])
return 1
";

/// A token's proof and a call's binding digest, as long as hitl's (SHA-1 and SHA-256 in
/// hex).
const PROOF: &str = "5f1d7f2b0a7c4e0e9a3b8c6d2e1f0a9b8c7d6e5f";
const BINDING: &str = "0d4f8a2c6e1b3d5f7a9c0e2b4d6f8a1c3e5b7d9f0a2c4e6b8d1f3a5c7e9b0d2f";

/// The pause's reply: one question, the thread's number as its `requestState`.
const PAUSED: (&str, &str) = (
    r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"region":{"method":"elicitation/create","params":{"mode":"form","message":"Which region?","requestedSchema":{"type":"object","properties":{"response":{"type":"string"}},"required":["response"]}}}},"requestState":""#,
    r#""}}"#,
);

/// The answer's reply: the call ended with the region.
const ANSWERED: &str = r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"{\"region\":\"eu-west-1\"}"}],"structuredContent":{"region":"eu-west-1"}}}"#;

/// How long a call is kept (ms), as hitl keeps a paused one.
const KEPT_MS: u64 = 24 * 3_600_000;

struct Floor {
    redis: ConnectionManager,
    create: redis::Script,
    claim: redis::Script,
    finish: redis::Script,
    /// Makes thread keys unique across runs on one Redis.
    run: u128,
    next: AtomicU64,
    paused_record: Vec<u8>,
    finished_record: Vec<u8>,
}

/// Serves the floor on `listener`, its calls kept in the Redis at `url`.
pub(crate) async fn serve(listener: TcpListener, url: &str) -> anyhow::Result<()> {
    Arc::new(Floor::connect(url).await?).serve(listener).await
}

impl Floor {
    async fn connect(url: &str) -> anyhow::Result<Self> {
        let config = hitl_store_redis::connection_config();
        let redis = redis::Client::open(url)?.get_connection_manager_with_config(config).await.context("Redis")?;
        Ok(Self {
            redis,
            create: redis::Script::new(CREATE),
            claim: redis::Script::new(CLAIM),
            finish: redis::Script::new(FINISH),
            run: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos(),
            next: AtomicU64::new(0),
            paused_record: vec![b'p'; PAUSED_RECORD_BYTES],
            finished_record: vec![b'f'; FINISHED_RECORD_BYTES],
        })
    }

    async fn serve(self: Arc<Self>, listener: TcpListener) -> anyhow::Result<()> {
        crate::serve_json(listener, move |body| {
            let floor = self.clone();
            async move { floor.round(&body).await }
        })
        .await
    }

    fn key(&self, n: u64) -> String {
        format!("hitl:{{floor-{}-{n}}}:thread", self.run)
    }

    /// A pause when `body` has no `requestState`, else its answer.
    async fn round(&self, body: &[u8]) -> anyhow::Result<Bytes> {
        match state_of(body)? {
            None => self.pause().await,
            Some(n) => self.answer(n).await,
        }
    }

    async fn pause(&self) -> anyhow::Result<Bytes> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let created: i64 = self
            .create
            .key(self.key(n))
            .arg(1)
            .arg(&self.paused_record)
            .arg(now_ms() + KEPT_MS)
            .arg(1)
            .arg(PROOF)
            .arg(BINDING)
            .invoke_async(&mut self.redis.clone())
            .await?;
        anyhow::ensure!(created == 1, "thread {n} exists");
        Ok(Bytes::from(format!("{}{n}{}", PAUSED.0, PAUSED.1)))
    }

    /// The claim script run on `key` at `now` with `proof` and `binding`, its claim
    /// held a minute: nil when missing, else the version, record and claim as they
    /// were, and 1 when claimed.
    async fn claim_at(
        &self,
        key: &str,
        proof: &str,
        binding: &str,
        now: u64,
    ) -> redis::RedisResult<Option<(String, Vec<u8>, String, i64)>> {
        let until = now + 60_000;
        self.claim.key(key).arg(proof).arg(now).arg(until).arg(binding).invoke_async(&mut self.redis.clone()).await
    }

    async fn answer(&self, n: u64) -> anyhow::Result<Bytes> {
        let key = self.key(n);
        let mut redis = self.redis.clone();
        let loaded = self.claim_at(&key, PROOF, BINDING, now_ms()).await?;
        let (version, _record, _claim, claimed) = loaded.with_context(|| format!("no thread {n}"))?;
        anyhow::ensure!(claimed == 1, "thread {n} was not claimed");
        let claimed_version = version.parse::<u64>()? + 1;
        let finished: i64 = self
            .finish
            .key(&key)
            .arg(claimed_version)
            .arg(claimed_version + 1)
            .arg(&self.finished_record)
            .arg(now_ms() + 600_000)
            .invoke_async(&mut redis)
            .await?;
        anyhow::ensure!(finished == 1, "thread {n} changed under its claim");
        Ok(Bytes::from_static(ANSWERED.as_bytes()))
    }
}

/// The thread number an answer's `requestState` carries (the floor's states are
/// digits), found without parsing the request (the floor parses nothing): none for a
/// pause, an error for a state the floor never gave.
fn state_of(body: &[u8]) -> anyhow::Result<Option<u64>> {
    const FIELD: &[u8] = br#""requestState":""#;
    let Some(at) = body.windows(FIELD.len()).position(|w| w == FIELD) else { return Ok(None) };
    let rest = &body[at + FIELD.len()..];
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let n = std::str::from_utf8(&rest[..digits]).ok().and_then(|d| d.parse().ok());
    match (n, rest.get(digits)) {
        (Some(n), Some(b'"')) => Ok(Some(n)),
        _ => anyhow::bail!("not a requestState of the floor's"),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_carries_the_thread_it_answers() {
        let answer = crate::answer_body("region", Some("42"));
        assert_eq!(state_of(&answer).unwrap(), Some(42));
        assert_eq!(state_of(&crate::pause_body()).unwrap(), None, "a pause has no requestState");
        for made_elsewhere in ["t.mac", "42x", "", "99999999999999999999999"] {
            let answer = crate::answer_body("region", Some(made_elsewhere));
            assert!(state_of(&answer).is_err(), "{made_elsewhere:?} is refused, not taken for a pause");
        }
    }

    #[test]
    fn the_replies_are_what_the_round_scenario_reads() {
        let paused = format!("{}{}{}", PAUSED.0, 7, PAUSED.1);
        assert_eq!(crate::question_of(paused.as_bytes()).unwrap(), ("region".to_owned(), Some("7".to_owned())));
        crate::ended_with_the_region(ANSWERED.as_bytes()).unwrap();
    }

    /// What the claim script answers for `thread` at `now`: 1 when it claimed.
    async fn claimed(floor: &Floor, thread: &str, proof: &str, binding: &str, now: u64) -> i64 {
        floor.claim_at(thread, proof, binding, now).await.unwrap().expect("the thread").3
    }

    /// On a real Redis: rounds of the load generator's `round` scenario pass, each call
    /// is resumed once (its answer sent again is refused), and a state it never gave is
    /// refused; the claim script claims only with the call's proof and binding, never
    /// under a live claim, and takes a lapsed one over.
    #[tokio::test]
    async fn the_floor_resumes_each_call_once_on_redis() {
        let Ok(url) = std::env::var("REDIS_URL") else {
            assert!(std::env::var_os("CI").is_none(), "REDIS_URL is not set, and CI needs every suite to run");
            return;
        };
        let floor = Arc::new(Floor::connect(&url).await.expect("Redis answers"));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(floor.clone().serve(listener));
        let target = crate::Target { tool: "choose_region".into(), arguments: serde_json::json!({}) };
        let url = format!("http://{address}/mcp");
        let mut connection = crate::Connection::open(&url, &target.tool).await.unwrap();
        let mut pending = None;
        for _ in 0..6 {
            crate::step("round", &target, &mut connection, &mut pending).await.unwrap();
        }
        let paused = connection.post(crate::pause_body()).await.unwrap();
        let (key, state) = crate::question_of(&paused).unwrap();
        let answer = crate::answer_body(&key, state.as_deref());
        crate::ended_with_the_region(&connection.post(answer.clone()).await.unwrap()).unwrap();
        let again = connection.post(answer).await.unwrap_err().to_string();
        assert!(again.contains("500"), "an answer sent again resumes nothing: {again}");
        for state in ["999999999", "t.mac"] {
            let mut connection = crate::Connection::open(&url, &target.tool).await.unwrap();
            let never = connection.post(crate::answer_body(&key, Some(state))).await.unwrap_err().to_string();
            assert!(never.contains("500"), "{state}: {never}");
        }
        server.abort();

        // The claim script alone, on a call paused by the floor.
        let n = floor.next.load(Ordering::Relaxed);
        floor.pause().await.unwrap();
        let thread = floor.key(n);
        let now = now_ms();
        assert_eq!(
            claimed(&floor, &thread, PROOF, &BINDING[1..], now).await,
            0,
            "another call's binding claims nothing"
        );
        assert_eq!(
            claimed(&floor, &thread, &PROOF[1..], BINDING, now).await,
            0,
            "another token's proof claims nothing"
        );
        assert_eq!(claimed(&floor, &thread, PROOF, BINDING, now).await, 1, "the call's own token and binding claim it");
        assert_eq!(claimed(&floor, &thread, PROOF, BINDING, now + 1).await, 0, "not while the claim holds");
        assert_eq!(claimed(&floor, &thread, PROOF, BINDING, now + 60_000).await, 1, "a lapsed claim is taken over");

        // The calls are this run's: none is left for the tests that share this Redis.
        let pattern = format!("hitl:{{floor-{}-*", floor.run);
        let mut redis = floor.redis.clone();
        let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query_async(&mut redis).await.unwrap();
        assert_eq!(keys.len(), 5, "four rounds' calls and the one claimed: {keys:?}");
        let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut redis).await.unwrap();
    }
}
