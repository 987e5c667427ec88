//! The store ports of `hitl-thread` on Redis ([`ThreadStore`], [`PausedLedger`],
//! [`hitl_thread::Notes`] and [`hitl_thread::Records`]), so that paused calls survive
//! restarts and any replica behind a load balancer can answer any round.
//!
//! Each thread is one hash, `hitl:{<thread id>}:thread`, with its version (`v`) and its
//! record (`d`), packed by [`hitl_thread::pack`]: the builds before wrote JSON, which
//! this one reads, and cannot read a packed record, so they refuse it and never resume
//! it. The braces are a Redis Cluster hash tag: every key of a thread lands in one slot,
//! so the store works on a cluster too (`redis+cluster://…`). `rediss://` connects over
//! TLS (rustls), trusting the system's roots or a CA given to
//! [`RedisStore::with_tls_roots`]. Saves are a compare-and-set on the version in a Lua
//! script, and the record's expiry is set on the key itself (`PEXPIREAT`), so Redis
//! drops abandoned calls without a sweeper.
//!
//! A paused call's round is claimed in the step that loads it
//! ([`ThreadStore::load_claiming`]): its claim lives beside the record (`c`, with the
//! open round `r`, the proof of its token `t` and the digest of what binds the call to
//! it `b`; each empty when there is none), so a script sets it without rewriting the
//! record. Such records are written as [`CLAIM_BESIDE_FORMAT`], which replicas of builds
//! that look for the claim inside refuse rather than resume twice. An answer that
//! reaches the replica which paused its call is claimed without the record read back:
//! the store keeps the last [`RECENT_PAUSED`] it wrote, used while Redis holds them at
//! the version kept.
//!
//! ```no_run
//! # async fn demo() -> Result<(), hitl_thread::StoreError> {
//! use hitl_thread::ThreadStore;
//! let store = hitl_store_redis::RedisStore::connect("redis://127.0.0.1:6379/0").await?;
//! assert!(store.load("01a22c5e-5403-766d-9808-1b6b86b6c2c2").await?.is_none());
//! # Ok(()) }
//! ```

mod channels;
mod notes;
mod recent;
mod records;
mod tools;

pub use recent::RECENT_PAUSED;
pub use records::{AUDIT_LINES_PER_ENTRY, AUDIT_TRIM_EVERY};

use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use channels::{Channels, Deliver};

use async_trait::async_trait;
use hitl_thread::{
    CLAIM_BESIDE_FORMAT, Claim, ClaimAttempt, LimitReached, Loaded, PausedLedger, PausedLimits, SaveError, StoreError,
    Thread, ThreadStore,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// A hasher for the maps this store keeps in memory, keyed by what the server made
/// (thread ids; tool names, which its configuration and upstreams give): fast and
/// seeded per process, as the memory store's. A request's id is only looked up, and a
/// call of an unknown tool is refused before it pauses, so flooding is not a concern.
type Fast = foldhash::fast::RandomState;

/// How long one Redis command may take before the store reports it unavailable.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// How every connection manager of this crate connects: [`COMMAND_TIMEOUT`] to connect
/// and for each reply, one retry. Public so that a program measured beside hitl (the
/// bench's Redis floor) talks to Redis as hitl does.
pub fn connection_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(COMMAND_TIMEOUT))
        .set_response_timeout(Some(COMMAND_TIMEOUT))
        .set_number_of_retries(1)
}

/// Room made for a script's command beside its keys: arguments (`EVALSHA`, the hash, the
/// count of keys, and up to 13 more, as many as a script here takes) and bytes (those
/// with a record of about 800 bytes, a paused call's; a larger one grows the buffer once).
const SCRIPT_ARGS: usize = 16;
const SCRIPT_BYTES: usize = 1_280;

/// A Lua function that writes a thread's fields: version, record, claim, claimable
/// round, its proof and the call's binding digest, and its expiry. A field with nothing
/// in it is written empty rather than deleted: one `HSET` (readers take `''` as none,
/// and so did the builds before, which deleted them).
macro_rules! put_function {
    () => {
        r"
local function put(key, v, d, c, r, t, b, expiry)
  redis.call('HSET', key, 'v', v, 'd', d, 'c', c, 'r', r, 't', t, 'b', b)
  redis.call('PEXPIREAT', key, expiry)
end
"
    };
}

/// A thread saved compare-and-set on its version (KEYS: the thread; ARGV: expected,
/// version, record, expiry, claim, round, proof, binding): 1, or 0 on a conflict.
const SAVE: &str = concat!(
    put_function!(),
    r"
local current = redis.call('HGET', KEYS[1], 'v')
if (current or '') ~= ARGV[1] then return 0 end
put(KEYS[1], ARGV[2], ARGV[3], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[4])
return 1
"
);

/// A thread loaded, its open round claimed when the token proves it, the request is
/// for the thread's call and no live claim holds it (KEYS: the thread; ARGV: the
/// token's proof, now, until, the request's binding digest): nil when missing, else the
/// version, record and claim as they were, and 1 when claimed. The caller makes the
/// proof (what `redis.sha1hex` of the token would give): SHA-1 in the script cost Redis
/// more than the rest of the check. Only a record of the format this build writes
/// beside its claim (its first field; packed, a map of fewer than 16 fields,
/// `0x80`–`0x8f`, then `PACKED`, or JSON as the builds before wrote it, `JSON`) that
/// [`Thread::claimable`] marked (`r`, `t`, `b`) is claimed: any other is loaded, and
/// left to the engine. The two starts are written into the text by
/// [`load_claiming_script`] rather than sent with every call: each argument costs Redis
/// about 1,200 instructions (docs/performance.md, stop 51).
const LOAD_CLAIMING: &str = r"
local f = redis.call('HMGET', KEYS[1], 'v', 'd', 'c', 'r', 't', 'b')
if not f[2] then return false end
local claimed = 0
local version = tonumber(f[1])
local head = string.byte(f[2], 1) or 0
local ours = (head >= 128 and head < 144 and string.sub(f[2], 2, 1 + string.len(PACKED)) == PACKED)
  or string.sub(f[2], 1, string.len(JSON)) == JSON
local proven = f[5] == ARGV[1] and f[6] == ARGV[4]
if version and ours and f[4] and f[4] ~= '' and proven then
  local until_ms = f[3] and tonumber(string.match(f[3], ':(%d+)$'))
  if not until_ms or until_ms <= tonumber(ARGV[2]) then
    redis.call('HSET', KEYS[1], 'v', tostring(version + 1), 'c', f[4] .. ':' .. ARGV[3])
    claimed = 1
  end
end
return {f[1] or '', f[2], f[3] or '', claimed}
";

/// The open round of a thread this store wrote claimed without reading its record back
/// ([`recent`]), when Redis holds it at the version kept and no live claim holds it
/// (KEYS: the thread; ARGV: the version kept, now, until, the round): nil when the
/// thread is missing or at another version, else its claim as it was and 1 when
/// claimed. The caller has checked the token's proof and the call's binding against the
/// thread kept: at that version they are the fields beside the record.
const CLAIM_KNOWN: &str = r"
local f = redis.call('HMGET', KEYS[1], 'v', 'c')
if f[1] ~= ARGV[1] then return false end
local until_ms = f[2] and tonumber(string.match(f[2], ':(%d+)$'))
if until_ms and until_ms > tonumber(ARGV[2]) then return {f[2], 0} end
redis.call('HSET', KEYS[1], 'v', tostring(tonumber(ARGV[1]) + 1), 'c', ARGV[4] .. ':' .. ARGV[3])
return {f[2] or '', 1}
";

/// [`LOAD_CLAIMING`] with how a claimable record starts, packed and as JSON, written in
/// as Lua string constants (`PACKED`, `JSON`).
fn load_claiming_script() -> String {
    format!(
        "local PACKED = {}\nlocal JSON = {}\n{LOAD_CLAIMING}",
        lua_string(&hitl_thread::packed_start(CLAIM_BESIDE_FORMAT)),
        lua_string(claimable_json_start().as_bytes())
    )
}

/// `bytes` as a Lua string literal, each byte as a decimal escape.
fn lua_string(bytes: &[u8]) -> String {
    let mut literal = String::from("\"");
    for b in bytes {
        literal.push_str(&format!("\\{b:03}"));
    }
    literal.push('"');
    literal
}

/// A claim made by `LOAD_CLAIMING` given back, if the version is still the claimed
/// one (KEYS: the thread; ARGV: claimed version, next version): 1, or 0.
const RELEASE: &str = r"
if redis.call('HGET', KEYS[1], 'v') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[2])
redis.call('HDEL', KEYS[1], 'c')
return 1
";

/// A Lua function that counts paused call `id` in the owner's set, the set of all and
/// its tool's set (scored by its expiry; the tool joins the set of tools unless given
/// empty, as the store gives a tool it added lately: [`tools`]), unless a new one would
/// pass a limit: 1, or -1/-2 for the limit.
///
/// Expired calls leave a set when they would make a limit refuse a new call, and from
/// all three sets at about one call in sixteen (an id ending in `0`, by its last
/// byte), so they never pile up: whatever reads the sets counts by score
/// (`ZCOUNT … (now +inf`), and one still in the owner's set past its time counts as
/// new. Every `redis.call` in a script costs Redis 3,000–7,000 instructions
/// (docs/performance.md, stop 50), so the three sweeps are not run on every pause, a
/// `fresh` id (a new thread's) is not looked up, and the owner's set lives as long as
/// its last call in one command where it can: a new set takes the call's expiry, an
/// existing one takes it only if later (`PEXPIREAT … GT`, Redis 7 and later, which
/// have `redis.REDIS_VERSION_NUM`; on Redis 6.2, when no call in it expires later:
/// `ZREVRANK` 0). The set always has an expiry once a script made it, so `GT`, which
/// takes a key without one as never expiring, always sees one.
macro_rules! count_function {
    () => {
        r"
local GT = redis.REDIS_VERSION_NUM ~= nil
local function within(set, now, limit)
  local n = redis.call('ZCARD', set)
  if n < limit then return n end
  if redis.call('ZREMRANGEBYSCORE', set, '-inf', now) == 0 then return false end
  n = redis.call('ZCARD', set)
  return n < limit and n
end
local function count(owner, all, toolset, tools, now, id, expiry, per_owner, total, tool, fresh)
  if (string.byte(id, -1) or 0) % 16 == 0 then
    redis.call('ZREMRANGEBYSCORE', owner, '-inf', now)
    redis.call('ZREMRANGEBYSCORE', all, '-inf', now)
    redis.call('ZREMRANGEBYSCORE', toolset, '-inf', now)
  end
  local counted = not fresh and redis.call('ZSCORE', owner, id)
  local held
  if not counted or tonumber(counted) <= tonumber(now) then
    held = within(owner, now, tonumber(per_owner))
    if not held then return -1 end
    if not within(all, now, tonumber(total)) then return -2 end
  end
  redis.call('ZADD', owner, expiry, id)
  redis.call('ZADD', all, expiry, id)
  redis.call('ZADD', toolset, expiry, id)
  if tool ~= '' then redis.call('SADD', tools, tool) end
  if held == 0 then
    redis.call('PEXPIREAT', owner, expiry)
  elseif GT then
    redis.call('PEXPIREAT', owner, expiry, 'GT')
  elseif redis.call('ZREVRANK', owner, id) == 0 then
    redis.call('PEXPIREAT', owner, expiry)
  end
  return 1
end
"
    };
}

/// One call counted in a rate limit's sliding window (KEYS: the sorted set of the
/// admitted calls' times; ARGV: now, the window, the limit, a unique member): -1 when
/// counted, else the ms until the oldest call leaves the window (nothing counted).
const WINDOW: &str = r"
local now, window, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= limit then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return math.max(1, tonumber(oldest[2]) + window - now)
end
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('PEXPIRE', KEYS[1], window)
return -1
";

/// Counts a paused call (KEYS: the owner's set, the set of all, the tool's set, the set
/// of tools; ARGV: now, id, expiry, per-owner limit, total limit, tool or empty).
const COUNT: &str = concat!(
    count_function!(),
    "return count(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])"
);

/// A new paused thread, counted, in one step (KEYS: the thread, the owner's set, the set
/// of all, the tool's set, the set of tools; ARGV: version, record, expiry, now, id,
/// per-owner limit, total limit, tool or empty, round, proof, binding): 1, 0 when the thread
/// exists, or -1/-2 for the limit. A new thread has no claim (written empty).
const CREATE: &str = concat!(
    count_function!(),
    put_function!(),
    r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local counted = count(KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[4], ARGV[5], ARGV[3], ARGV[6], ARGV[7], ARGV[8], true)
if counted ~= 1 then return counted end
put(KEYS[1], ARGV[1], ARGV[2], '', ARGV[9], ARGV[10], ARGV[11], ARGV[3])
return 1
"
);

/// A finished thread saved (compare-and-set) and no longer counted, in one step (KEYS:
/// the thread, the owner's set, the set of all, the tool's set; ARGV: expected, version,
/// record, expiry, id): 1, or 0 on a conflict. A finished thread has no claim and no
/// open round, so its fields beside the record are written empty without being sent.
const FINISH: &str = concat!(
    put_function!(),
    r"
local current = redis.call('HGET', KEYS[1], 'v')
if (current or '') ~= ARGV[1] then return 0 end
put(KEYS[1], ARGV[2], ARGV[3], '', '', '', '', ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[5])
redis.call('ZREM', KEYS[3], ARGV[5])
redis.call('ZREM', KEYS[4], ARGV[5])
return 1
"
);

/// Threads in Redis, or in a Redis Cluster.
#[derive(Clone)]
pub struct RedisStore {
    client: Client,
    connection: Arc<Mutex<Option<Connection>>>,
    save: redis::Script,
    load_claiming: redis::Script,
    claim_known: redis::Script,
    release: redis::Script,
    count: redis::Script,
    create: redis::Script,
    finish: redis::Script,
    window: redis::Script,
    /// Audit stream entries this store appended since it last trimmed the trail
    /// ([`AUDIT_TRIM_EVERY`]).
    untrimmed: Arc<std::sync::atomic::AtomicUsize>,
    /// Paused calls this store wrote lately, claimed without reading them back.
    recent: Arc<recent::Recent>,
    /// Tools this store put in the set of tools lately: not added again ([`tools`]).
    joined: Arc<tools::Joined>,
}

#[derive(Clone)]
#[allow(clippy::large_enum_variant, reason = "one per store, made once")]
enum Client {
    Single(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

/// One shared connection: a reconnecting manager for a single Redis, or a cluster
/// connection that follows slots and reconnects to nodes.
#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").finish_non_exhaustive()
    }
}

/// A thread as its hash fields: the record (packed), and beside it the claim and the
/// claimable round with its proof (empty when none).
struct Encoded {
    record: Vec<u8>,
    claim: String,
    round: String,
    proof: String,
    binding: String,
}

impl Encoded {
    /// `command` with the fields beside the record, a script's last four arguments:
    /// claim, round, proof, binding.
    fn beside<'c>(&self, command: &'c mut redis::Cmd) -> &'c mut redis::Cmd {
        self.claimable(command.arg(&self.claim))
    }

    /// `command` with the open round a load may claim: round, proof, binding.
    fn claimable<'c>(&self, command: &'c mut redis::Cmd) -> &'c mut redis::Cmd {
        command.arg(&self.round).arg(&self.proof).arg(&self.binding)
    }
}

/// `thread`'s fields. A record with a claim, or one that a load may claim, keeps its
/// claim beside it ([`CLAIM_BESIDE_FORMAT`]); the thread keeps everything but its claim.
fn encode(thread: &mut Thread) -> Result<Encoded, StoreError> {
    let claimable = thread.claimable().map(|(n, proof)| (n.to_string(), proof.to_owned(), thread.binding_digest()));
    let (round, proof, binding) = claimable.unwrap_or_default();
    let beside = !round.is_empty() || thread.claim().is_some() || thread.format >= CLAIM_BESIDE_FORMAT;
    let claim = if beside {
        thread.format = CLAIM_BESIDE_FORMAT;
        thread.take_claim().map(|c| format!("{}:{}", c.round, c.until_ms)).unwrap_or_default()
    } else {
        String::new()
    };
    Ok(Encoded { record: hitl_thread::pack(thread)?, claim, round, proof, binding })
}

/// How the JSON of a record written beside its claim by the builds before, which wrote
/// JSON, starts (`format` was the first field serialized).
fn claimable_json_start() -> String {
    format!("{{\"format\":{CLAIM_BESIDE_FORMAT},")
}

/// The thread in fields `v`, `d` and `c`. One read: a newer record is refused whether
/// or not it parses as this build's.
fn decode(id: &str, version: &str, record: &[u8], claim: &str) -> Result<Thread, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt { id: id.to_owned(), reason };
    let mut thread = hitl_thread::unpack(id, record)?;
    if thread.format == CLAIM_BESIDE_FORMAT {
        // The fields beside the record are what counts.
        thread.version = version.parse().map_err(|_| corrupt(format!("bad version {version:?}")))?;
        thread.set_claim(claim_beside(id, claim)?);
    }
    Ok(thread)
}

/// The claim kept beside a record (`round:until_ms`, empty for none).
fn claim_beside(id: &str, claim: &str) -> Result<Option<Claim>, StoreError> {
    if claim.is_empty() {
        return Ok(None);
    }
    let (round, until) = claim.split_once(':').unwrap_or_default();
    let parsed = round.parse().ok().zip(until.parse().ok());
    let (round, until_ms) =
        parsed.ok_or_else(|| StoreError::Corrupt { id: id.to_owned(), reason: format!("bad claim {claim:?}") })?;
    Ok(Some(Claim { round, until_ms }))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// A client of one Redis, trusting `ca_pem` for `rediss://` when given.
fn single_client(url: &str, ca_pem: Option<Vec<u8>>) -> redis::RedisResult<redis::Client> {
    if url.starts_with("rediss://") {
        // TLS through rustls on ring (already used for requestState HMACs); a
        // provider installed earlier by the embedding program stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    match ca_pem {
        Some(root_cert) => {
            redis::Client::build_with_tls(url, redis::TlsCertificates { client_tls: None, root_cert: Some(root_cert) })
        }
        None => redis::Client::open(url),
    }
}

/// The key of a thread's record.
pub fn thread_key(id: &str) -> String {
    format!("hitl:{{{id}}}:thread")
}

/// The sorted set of an owner's paused calls (thread ids scored by expiry). Every
/// ledger key shares the `{paused}` hash tag, so one script updates an owner's set and
/// the set of all on a cluster too.
fn owner_key(owner: &str) -> String {
    format!("hitl:{{paused}}:owner:{owner}")
}

const ALL_PAUSED_KEY: &str = "hitl:{paused}:all";

/// The sorted set of a tool's paused calls (ids scored by expiry), for the gauge.
fn tool_key(tool: &str) -> String {
    format!("hitl:{{paused}}:tool:{tool}")
}

/// The lowest score of a paused call that still counts: counted calls past their time
/// stay in the sets until a count sweeps them, so reads skip them (`(now`: expiring
/// after now).
fn still_counted() -> String {
    format!("({}", now_ms())
}

/// The set of every tool counted (so a tool with none paused shows 0).
const TOOLS_KEY: &str = "hitl:{paused}:tools";

/// `url` with its password (and a user name alone, which Redis 6 ACLs may treat as a
/// password) replaced by `***`, for logs and error messages.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    // The user info ends at the last '@' before the path.
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        None => url.to_owned(),
        Some(at) => {
            let user = rest[..at].split_once(':').map_or("", |(user, _)| user);
            let shown = if user.is_empty() { "***".to_owned() } else { format!("{user}:***") };
            format!("{scheme}://{shown}{}", &rest[at..])
        }
    }
}

/// Whether the Redis that `url` (as [`RedisStore::new`] takes it) names runs on this
/// machine, so that it and hitl share its cores: a Unix socket, `localhost`, or a
/// loopback address (`127.0.0.0/8`, `::1`); on a cluster, any seed node so named.
/// Another name or address (this machine's own among them), or a URL redis-rs does not
/// parse, is taken as elsewhere. The server leaves such a Redis a core when no worker
/// count is asked for (docs/configuration.md, `workers`).
pub fn on_this_machine(url: &str) -> bool {
    use redis::{ConnectionAddr, IntoConnectionInfo as _};
    let local = |url: &str| match url.into_connection_info().map(|info| info.addr().clone()) {
        Ok(ConnectionAddr::Unix(_)) => true,
        Ok(ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. }) => loopback(&host),
        // An address of a kind this build does not know, or no URL at all.
        _ => false,
    };
    match url.strip_prefix("redis+cluster://") {
        Some(nodes) => nodes.trim_end_matches('/').split(',').any(|node| local(&format!("redis://{node}"))),
        None => local(url),
    }
}

/// `localhost` (any case, with or without the root's dot) or a loopback address.
fn loopback(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

impl RedisStore {
    /// A store for `url` that connects on first use, so the server starts while Redis
    /// is down and serves once it is back. `redis://host:port/db` names one Redis;
    /// `redis+cluster://host:port,host:port` names seed nodes of a Redis Cluster. Fails
    /// only on a malformed URL.
    pub fn new(url: &str) -> Result<Self, StoreError> {
        Self::with_tls_roots(url, None)
    }

    /// [`RedisStore::new`], trusting the CA certificates in `ca_pem` (PEM) for
    /// `rediss://` instead of the system's roots.
    pub fn with_tls_roots(url: &str, ca_pem: Option<Vec<u8>>) -> Result<Self, StoreError> {
        let bad = |e: redis::RedisError| StoreError::Unavailable(format!("bad Redis URL {}: {e}", redact_url(url)));
        let client = match url.strip_prefix("redis+cluster://") {
            Some(nodes) => {
                let nodes: Vec<String> = nodes
                    .trim_end_matches('/')
                    .split(',')
                    .filter(|n| !n.is_empty())
                    .map(|n| format!("redis://{n}"))
                    .collect();
                let cluster = redis::cluster::ClusterClient::builder(nodes)
                    .connection_timeout(COMMAND_TIMEOUT)
                    .response_timeout(COMMAND_TIMEOUT)
                    .retries(2)
                    .build()
                    .map_err(bad)?;
                Client::Cluster(cluster)
            }
            None => Client::Single(single_client(url, ca_pem).map_err(bad)?),
        };
        Ok(Self {
            client,
            connection: Arc::new(Mutex::new(None)),
            save: redis::Script::new(SAVE),
            load_claiming: redis::Script::new(&load_claiming_script()),
            claim_known: redis::Script::new(CLAIM_KNOWN),
            release: redis::Script::new(RELEASE),
            count: redis::Script::new(COUNT),
            create: redis::Script::new(CREATE),
            finish: redis::Script::new(FINISH),
            window: redis::Script::new(WINDOW),
            // The first append trims: a replica that appends fewer than
            // `AUDIT_TRIM_EVERY` entries in its life still keeps the cap.
            untrimmed: Arc::new(std::sync::atomic::AtomicUsize::new(AUDIT_TRIM_EVERY)),
            recent: Arc::default(),
            joined: Arc::default(),
        })
    }

    /// Counts one call under `key` at `now_ms`, unless `limit` calls were counted under
    /// it in the `window_ms` before (then nothing is counted): `None` when counted,
    /// else how long until the oldest of them leaves the window (ms). One script over
    /// a sorted set of the calls' times, so replicas sharing this Redis share the count.
    pub async fn count_in_window(
        &self,
        key: &str,
        limit: u64,
        window_ms: u64,
        now_ms: u64,
    ) -> Result<Option<u64>, StoreError> {
        let wait: i64 = self
            .invoke(&self.window, &[&format!("hitl:rate:{key}")], |c| {
                c.arg(now_ms).arg(window_ms.max(1)).arg(limit).arg(uuid::Uuid::now_v7().to_string())
            })
            .await?;
        Ok(u64::try_from(wait).ok().map(|wait| wait.max(1)))
    }

    /// Keeps `value` under `key` until `until_ms` (Redis drops it then): the approvals
    /// that cover later calls, which every replica reads. Nothing is kept when that
    /// time is past at `now_ms`.
    pub async fn keep_until(&self, key: &str, value: &str, until_ms: u64, now_ms: u64) -> Result<(), StoreError> {
        let Some(ttl_ms) = until_ms.checked_sub(now_ms).filter(|ms| *ms > 0) else { return Ok(()) };
        self.query(redis::cmd("SET").arg(format!("hitl:grant:{key}")).arg(value).arg("PX").arg(ttl_ms)).await
    }

    /// What [`RedisStore::keep_until`] keeps under `key`, while it lasts.
    pub async fn kept(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.query(redis::cmd("GET").arg(format!("hitl:grant:{key}"))).await
    }

    /// `command`'s reply as a `T`. The connection manager's own method, not its
    /// `ConnectionLike` one, which boxes a future for every command.
    async fn query<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> Result<T, StoreError> {
        let value = self.reply(command).await?.map_err(unavailable)?;
        redis::from_redis_value(value).map_err(unavailable)
    }

    /// What Redis answered `command` (its error too, for [`RedisStore::invoke`] to
    /// read), on the shared connection.
    async fn reply(&self, command: &redis::Cmd) -> Result<redis::RedisResult<redis::Value>, StoreError> {
        let reply = match self.connection().await? {
            Connection::Single(mut c) => c.send_packed_command(command).await,
            Connection::Cluster(mut c) => redis::aio::ConnectionLike::req_packed_command(&mut c, command).await,
        };
        Ok(reply.and_then(redis::Value::extract_error))
    }

    /// `script` run over `keys` with the arguments `args` adds: its reply as a `T`, the
    /// script loaded first when Redis does not have it (after a restart, or `SCRIPT
    /// FLUSH`). One `EVALSHA` built once (a script invocation keeps each key and
    /// argument apart, then copies them into its command), in buffers sized for a
    /// round's scripts: grown an argument at a time, they took ~45 allocations a round.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        keys: &[&str],
        args: impl FnOnce(&mut redis::Cmd) -> &mut redis::Cmd,
    ) -> Result<T, StoreError> {
        let keyed: usize = keys.iter().map(|k| k.len()).sum();
        let mut command = redis::Cmd::with_capacity(SCRIPT_ARGS + keys.len(), SCRIPT_BYTES + keyed);
        args(command.arg("EVALSHA").arg(script.get_hash()).arg(keys.len()).arg(keys));
        let value = match self.reply(&command).await? {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                let mut connection = self.connection().await?;
                script.load_async(&mut connection).await.map_err(unavailable)?;
                self.reply(&command).await?
            }
            reply => reply,
        };
        redis::from_redis_value(value.map_err(unavailable)?).map_err(unavailable)
    }

    /// Keeps `thread`, just written over version `expected`, when its open round can
    /// be claimed ([`recent`]); else drops what was kept of it. Only a write that moved
    /// the version on is kept: that version then names this record.
    fn remember(&self, thread: Thread, expected: Option<u64>) {
        if thread.claimable().is_some() && expected.is_none_or(|expected| thread.version > expected) {
            self.recent.keep(thread);
        } else {
            self.recent.forget(&thread.id);
        }
    }

    /// [`ThreadStore::load_claiming`] of `known`, a paused call this store wrote, when
    /// the request's token (its `proof`) and call are its open round's: the claim made
    /// by `CLAIM_KNOWN` if Redis holds the thread at the version written. `None` when
    /// it does not, or the request is not the round's: the caller reads the record.
    async fn claim_known(
        &self,
        mut known: Thread,
        proof: &str,
        attempt: ClaimAttempt<'_>,
    ) -> Result<Option<Loaded>, StoreError> {
        let Some((round, _)) = known.claimable().filter(|(_, kept)| *kept == proof) else { return Ok(None) };
        if !attempt.binding.binds(&known) {
            return Ok(None);
        }
        let key = thread_key(&known.id);
        let claimed: Option<(String, i64)> = self
            .invoke(&self.claim_known, &[&key], |c| {
                c.arg(known.version).arg(attempt.now_ms).arg(attempt.until_ms).arg(round)
            })
            .await?;
        let Some((claim, claimed)) = claimed else {
            // Written again elsewhere, or gone: what is kept is not the record.
            self.recent.forget(&known.id);
            return Ok(None);
        };
        known.set_claim(claim_beside(&known.id, &claim)?);
        if claimed == 1 {
            // The claim's run writes the thread next.
            self.recent.forget(&known.id);
        }
        Ok(Some(Loaded { thread: Some(known), claimed: claimed == 1 }))
    }

    /// A store for `url`, connected now: fails when Redis cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let store = Self::new(url)?;
        store.ping().await?;
        Ok(store)
    }

    /// The shared connection, made on first use. The connection manager reconnects by
    /// itself after Redis restarts.
    async fn connection(&self) -> Result<Connection, StoreError> {
        if let Some(c) = self.connection.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            return Ok(c.clone());
        }
        let connection = match &self.client {
            Client::Single(client) => Connection::Single(
                client.get_connection_manager_with_config(connection_config()).await.map_err(unavailable)?,
            ),
            Client::Cluster(client) => Connection::Cluster(client.get_async_connection().await.map_err(unavailable)?),
        };
        let mut slot = self.connection.lock().unwrap_or_else(|p| p.into_inner());
        Ok(slot.get_or_insert(connection).clone())
    }
}

#[async_trait]
impl ThreadStore for RedisStore {
    async fn ping(&self) -> Result<(), StoreError> {
        let _: String = self.query(&redis::cmd("PING")).await?;
        Ok(())
    }

    async fn load(&self, id: &str) -> Result<Option<Thread>, StoreError> {
        let (version, record, claim): (Option<String>, Option<Vec<u8>>, Option<String>) =
            self.query(redis::cmd("HMGET").arg(thread_key(id)).arg(&["v", "d", "c"])).await?;
        let Some(record) = record else { return Ok(None) };
        decode(id, version.as_deref().unwrap_or(""), &record, claim.as_deref().unwrap_or("")).map(Some)
    }

    /// One script: the load, and the claim when the token's proof is the open round's.
    /// A paused call this store wrote is claimed without its record read back, when
    /// Redis still holds it at the version written ([`RECENT_PAUSED`]).
    async fn load_claiming(&self, id: &str, attempt: ClaimAttempt<'_>) -> Result<Loaded, StoreError> {
        let proof = hitl_thread::proof(attempt.token);
        if let Some(known) = self.recent.get(id)
            && let Some(loaded) = self.claim_known(known, &proof, attempt).await?
        {
            return Ok(loaded);
        }
        let loaded: Option<(String, Vec<u8>, String, i64)> = self
            .invoke(&self.load_claiming, &[&thread_key(id)], |c| {
                c.arg(&proof).arg(attempt.now_ms).arg(attempt.until_ms).arg(attempt.binding.digest())
            })
            .await?;
        let Some((version, record, claim, claimed)) = loaded else {
            return Ok(Loaded { thread: None, claimed: false });
        };
        Ok(Loaded { thread: Some(decode(id, &version, &record, &claim)?), claimed: claimed == 1 })
    }

    async fn release_claim(&self, id: &str, claimed_version: u64) -> Result<bool, StoreError> {
        let released: i64 =
            self.invoke(&self.release, &[&thread_key(id)], |c| c.arg(claimed_version).arg(claimed_version + 1)).await?;
        Ok(released == 1)
    }

    async fn save(&self, mut thread: Thread, expected: Option<u64>) -> Result<(), SaveError> {
        let fields = encode(&mut thread)?;
        let saved: i64 = self
            .invoke(&self.save, &[&thread_key(&thread.id)], |c| {
                fields.beside(
                    c.arg(expected.map(|v| v.to_string()).unwrap_or_default())
                        .arg(thread.version)
                        .arg(&fields.record)
                        .arg(thread.expires_at_ms),
                )
            })
            .await?;
        if saved != 1 {
            return Err(SaveError::Conflict(thread.id.to_string()));
        }
        self.remember(thread, expected);
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<(), StoreError> {
        self.recent.forget(id);
        let _: i64 = self.query(redis::cmd("DEL").arg(thread_key(id))).await?;
        Ok(())
    }
}

#[async_trait]
impl PausedLedger for RedisStore {
    async fn count_paused(
        &self,
        owner: &str,
        id: &str,
        tool: &str,
        until_ms: u64,
        limits: PausedLimits,
    ) -> Result<Result<(), LimitReached>, StoreError> {
        let keys = [&*owner_key(owner), ALL_PAUSED_KEY, &tool_key(tool), TOOLS_KEY];
        let now = std::time::Instant::now();
        let joining = self.joined.to_add(tool, now);
        let counted: i64 = self
            .invoke(&self.count, &keys, |c| {
                c.arg(now_ms()).arg(id).arg(until_ms).arg(limits.per_owner).arg(limits.total).arg(joining)
            })
            .await?;
        if counted == 1 {
            self.joined.added(joining, now);
        }
        Ok(match counted {
            -1 => Err(LimitReached::PerOwner),
            -2 => Err(LimitReached::Total),
            _ => Ok(()),
        })
    }

    /// One script on a single Redis; on a cluster the thread and the counts live in
    /// different slots, so it takes two steps.
    async fn create_paused(
        &self,
        thread: Thread,
        owner: &str,
        limits: PausedLimits,
    ) -> Result<Result<(), LimitReached>, SaveError> {
        // The script writes no claim: a thread made with one (none is) takes the steps.
        if matches!(self.client, Client::Cluster(_)) || thread.claim().is_some() {
            return hitl_thread::create_paused_in_steps(self, thread, owner, limits).await;
        }
        let mut thread = thread;
        let fields = encode(&mut thread)?;
        let keys = [&*thread_key(&thread.id), &owner_key(owner), ALL_PAUSED_KEY, &tool_key(&thread.tool), TOOLS_KEY];
        let now = std::time::Instant::now();
        let joining = self.joined.to_add(&thread.tool, now);
        let created: i64 = self
            .invoke(&self.create, &keys, |c| {
                fields.claimable(
                    c.arg(thread.version)
                        .arg(&fields.record)
                        .arg(thread.expires_at_ms)
                        .arg(now_ms())
                        .arg(&*thread.id)
                        .arg(limits.per_owner)
                        .arg(limits.total)
                        .arg(joining),
                )
            })
            .await?;
        match created {
            1 => {
                self.joined.added(joining, now);
                self.remember(thread, None);
                Ok(Ok(()))
            }
            0 => Err(SaveError::Conflict(thread.id.to_string())),
            -1 => Ok(Err(LimitReached::PerOwner)),
            _ => Ok(Err(LimitReached::Total)),
        }
    }

    /// One script on a single Redis, two steps on a cluster (see `create_paused`).
    async fn save_finished(&self, thread: Thread, expected: u64, owner: Option<&str>) -> Result<(), SaveError> {
        // The script writes no claim and no open round: a thread with either takes the
        // steps (a finished one has neither).
        let single =
            matches!(self.client, Client::Single(_)) && thread.claim().is_none() && thread.claimable().is_none();
        self.recent.forget(&thread.id);
        let Some(owner) = owner.filter(|_| single) else {
            return hitl_thread::save_finished_in_steps(self, thread, expected, owner).await;
        };
        let mut thread = thread;
        let fields = encode(&mut thread)?;
        let keys = [&*thread_key(&thread.id), &owner_key(owner), ALL_PAUSED_KEY, &tool_key(&thread.tool)];
        let saved: i64 = self
            .invoke(&self.finish, &keys, |c| {
                c.arg(expected).arg(thread.version).arg(&fields.record).arg(thread.expires_at_ms).arg(&*thread.id)
            })
            .await?;
        if saved == 1 { Ok(()) } else { Err(SaveError::Conflict(thread.id.to_string())) }
    }

    async fn uncount_paused(&self, owner: &str, id: &str, tool: &str) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        let _: () = redis::pipe()
            .cmd("ZREM")
            .arg(owner_key(owner))
            .arg(id)
            .ignore()
            .cmd("ZREM")
            .arg(ALL_PAUSED_KEY)
            .arg(id)
            .ignore()
            .cmd("ZREM")
            .arg(tool_key(tool))
            .arg(id)
            .ignore()
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn paused_by_tool(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let mut connection = self.connection().await?;
        let mut tools: Vec<String> =
            redis::cmd("SMEMBERS").arg(TOOLS_KEY).query_async(&mut connection).await.map_err(unavailable)?;
        if tools.is_empty() {
            // Nothing paused yet: an empty pipeline is an error to Redis.
            return Ok(Vec::new());
        }
        tools.sort_unstable();
        let after_now = still_counted();
        let mut counts = redis::pipe();
        for tool in &tools {
            counts.cmd("ZCOUNT").arg(tool_key(tool)).arg(&after_now).arg("+inf");
        }
        let counts: Vec<u64> = counts.query_async(&mut connection).await.map_err(unavailable)?;
        Ok(tools.into_iter().zip(counts).collect())
    }

    async fn paused(&self, offset: usize, limit: usize) -> Result<(Vec<String>, u64), StoreError> {
        let mut connection = self.connection().await?;
        let after_now = still_counted();
        let (ids, total): (Vec<String>, u64) = redis::pipe()
            .atomic()
            .cmd("ZRANGEBYSCORE")
            .arg(ALL_PAUSED_KEY)
            .arg(&after_now)
            .arg("+inf")
            .arg("LIMIT")
            .arg(offset)
            .arg(limit)
            .cmd("ZCOUNT")
            .arg(ALL_PAUSED_KEY)
            .arg(&after_now)
            .arg("+inf")
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok((ids, total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ZREVRANK` calls Redis has run, server-wide (`INFO commandstats`).
    async fn zrevranks(raw: &mut redis::aio::MultiplexedConnection) -> u64 {
        let info: String = redis::cmd("INFO").arg("commandstats").query_async(raw).await.unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_zrevrank:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    }

    /// An owner's counting set lives as long as its last call both ways the script can
    /// keep it so: with `PEXPIREAT … GT` (Redis 7, no `ZREVRANK` run) and as on Redis
    /// 6.2, which has no `redis.REDIS_VERSION_NUM` (the same script with `GT` off).
    #[tokio::test]
    async fn an_owners_set_lives_as_long_as_its_last_call_with_gt_and_without() {
        let Ok(url) = std::env::var("REDIS_URL") else {
            assert!(std::env::var_os("CI").is_none(), "REDIS_URL is not set, and CI needs every suite to run");
            return;
        };
        let base = url.rsplit_once('/').map_or(url.as_str(), |(base, _)| base);
        let client = redis::Client::open(format!("{base}/12")).unwrap();
        let mut raw = client.get_multiplexed_async_connection().await.expect("Redis answers");
        let now = now_ms();
        let minute = 60_000;
        let gt_line = "local GT = redis.REDIS_VERSION_NUM ~= nil";
        assert!(COUNT.contains(gt_line));
        for (gt, text) in [(true, COUNT.to_owned()), (false, COUNT.replace(gt_line, "local GT = false"))] {
            let script = redis::Script::new(&text);
            let owner = owner_key(&uuid::Uuid::now_v7().to_string());
            let before = zrevranks(&mut raw).await;
            for (n, (lives_ms, at_least_ms)) in
                [(10 * minute, 9 * minute), (minute, 9 * minute), (20 * minute, 19 * minute)].into_iter().enumerate()
            {
                let counted: i64 = script
                    .key(&owner)
                    .key(ALL_PAUSED_KEY)
                    .key(tool_key("tool"))
                    .key(TOOLS_KEY)
                    .arg(now)
                    .arg(format!("{owner}-{n}1"))
                    .arg(now + lives_ms)
                    .arg(10)
                    .arg(u64::MAX)
                    .arg("tool")
                    .invoke_async(&mut raw)
                    .await
                    .unwrap();
                assert_eq!(counted, 1);
                let left: i64 = redis::cmd("PTTL").arg(&owner).query_async(&mut raw).await.unwrap();
                assert!(left >= at_least_ms as i64, "GT {gt}: after a call living {lives_ms} ms, {left} ms left");
            }
            let ranked = zrevranks(&mut raw).await - before;
            if gt {
                assert_eq!(ranked, 0, "with GT the set's expiry takes one command");
            } else {
                assert!(ranked >= 2, "without GT an existing set is ranked: {ranked}");
            }
            let _: () = redis::cmd("DEL").arg(&owner).query_async(&mut raw).await.unwrap();
        }
    }

    #[test]
    fn the_claiming_script_has_the_starts_of_claimable_records_as_lua_strings() {
        assert_eq!(lua_string(b"\xa6f{\""), r#""\166\102\123\034""#);
        let script = load_claiming_script();
        let packed = lua_string(&hitl_thread::packed_start(CLAIM_BESIDE_FORMAT));
        assert!(script.starts_with(&format!("local PACKED = {packed}\nlocal JSON = ")), "{script}");
        assert!(script.ends_with(LOAD_CLAIMING));
    }

    #[test]
    fn a_record_kept_beside_its_claim_starts_as_the_claiming_script_expects() {
        let json = r#"{"format":1,"id":"t","version":7,"tool":"x","args_digest":"d","claim":{"round":1,"until_ms":9},"task":{"created_at_ms":1,"updated_at_ms":1},"expires_at_ms":1}"#;
        let mut thread: Thread = serde_json::from_str(json).unwrap();
        assert!(matches!(thread.state, hitl_thread::ThreadState::Working { .. }), "a task's first run");
        let fields = encode(&mut thread).unwrap();
        let head = fields.record[0];
        assert!((0x80..0x90).contains(&head), "a map with one byte of header: {head:#x}");
        assert!(fields.record[1..].starts_with(&hitl_thread::packed_start(CLAIM_BESIDE_FORMAT)));
        assert_eq!((fields.claim.as_str(), fields.round.as_str()), ("1:9", ""), "the claim beside, no open round");
        let loaded = decode("t", "8", &fields.record, &fields.claim).unwrap();
        assert_eq!(
            (loaded.version, loaded.claim()),
            (8, Some(&Claim { round: 1, until_ms: 9 })),
            "`v` and `c` are read"
        );
        assert!(matches!(decode("t", "8", &fields.record, "1:x"), Err(StoreError::Corrupt { .. })), "a bad claim");
        // The JSON the builds before wrote beside its claim: read, its fields beside too.
        let before = serde_json::to_string(&thread).unwrap();
        assert!(before.starts_with(&claimable_json_start()), "{before}");
        assert_eq!(decode("t", "8", before.as_bytes(), &fields.claim).unwrap().claim(), loaded.claim());
    }

    #[test]
    fn a_redis_on_this_machine_is_told_by_its_url() {
        for here in [
            "redis://127.0.0.1:6379/0",
            "redis://127.9.8.7",
            "redis://localhost",
            "redis://LOCALHOST.:6379",
            "redis://user:secret@localhost:6379/2",
            "redis://[::1]:6379",
            "redis://[::ffff:127.0.0.1]:6379",
            "rediss://localhost:6380",
            "redis+unix:///run/redis.sock",
            "redis+cluster://10.0.0.1:7000,127.0.0.1:7001",
            "redis+cluster://localhost:7000/",
        ] {
            assert!(on_this_machine(here), "{here}");
        }
        for elsewhere in [
            "redis://10.0.0.5:6379/0",
            "redis://redis.internal:6379",
            "redis://localhost.example.com",
            "redis://[::2]:6379",
            "rediss://cache.example.com",
            "redis+cluster://10.0.0.1:7000,10.0.0.2:7001",
            "memory",
            "http://127.0.0.1:6379",
            "redis://bad host",
            "",
        ] {
            assert!(!on_this_machine(elsewhere), "{elsewhere}");
        }
    }
}
