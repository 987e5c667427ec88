//! The configuration file, `hitl.toml`: every `hitl serve` option under `[server]`.
//! Command-line flags and environment variables override it. Unknown keys and bad
//! values are errors that name the file, line, column and key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Deserialize;

/// The whole file. Later sections (`[auth]`, `[[agent]]`, …) join these here.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConfigFile {
    #[serde(default)]
    pub(crate) server: ServerSection,
    /// `[[upstream]]`: the servers the gateway lists tools of.
    #[serde(default)]
    pub(crate) upstream: Vec<hitl_gateway::UpstreamSpec>,
    /// `[[policy]]`: allow, review or deny, by tool name.
    #[serde(default)]
    pub(crate) policy: Vec<hitl_gateway::Policy>,
    /// `[gateway]`.
    #[serde(default)]
    pub(crate) gateway: hitl_gateway::GatewaySection,
    /// `[auth]`: who may call.
    #[serde(default)]
    pub(crate) auth: AuthSection,
    /// `[[notify]]`: webhooks told of pending and decided approvals.
    #[serde(default)]
    pub(crate) notify: Vec<NotifySpec>,
    /// `[audit]`: where the audit trail is written besides the store.
    #[serde(default)]
    pub(crate) audit: AuditSection,
    /// `[approvals]`.
    #[serde(default)]
    pub(crate) approvals: ApprovalsSection,
    /// `[[agent]]`: agents declared here (tool-calling and workflows).
    #[serde(default)]
    pub(crate) agent: Vec<hitl_declared::AgentSpec>,
    /// `[admin]`: who administers threads.
    #[serde(default)]
    pub(crate) admin: AdminSection,
    /// `[receipts]`: the key that signs the receipts of approved calls.
    #[serde(default)]
    pub(crate) receipts: ReceiptsSection,
    /// `[slack]`: approvals posted to a channel, decided with its buttons.
    pub(crate) slack: Option<SlackSection>,
    /// Where each `[[policy]]` is written (`hitl.toml:12`), in file order.
    #[serde(skip)]
    pub(crate) policy_at: Vec<String>,
}

/// `[receipts]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReceiptsSection {
    /// An Ed25519 private key (PKCS#8 PEM) that signs the receipt each approved call is
    /// sent upstream with (none: no receipts).
    pub(crate) key_file: Option<PathBuf>,
}

/// `[slack]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SlackSection {
    /// The environment variable holding the signing secret that verifies Slack's
    /// callbacks.
    pub(crate) signing_secret_env: String,
    /// The environment variable holding the bot token (`xoxb-…`) that posts and updates
    /// the messages.
    pub(crate) bot_token_env: String,
    /// Slack's Web API (default `https://slack.com/api`).
    #[serde(default = "slack_api")]
    pub(crate) api_url: String,
    /// The channel the approvals are posted in (its id, `C0123456789`).
    pub(crate) channel: String,
    /// Slack user id → the principal who decides: `"user:bob"`, or
    /// `{ principal = "user:bob", groups = ["group:sre"] }`.
    #[serde(default)]
    pub(crate) users: std::collections::BTreeMap<String, toml::Value>,
}

fn slack_api() -> String {
    "https://slack.com/api".to_owned()
}

impl SlackSection {
    /// `users`, checked: Slack user ids to `user:` principals (and `group:` groups).
    pub(crate) fn users(&self) -> anyhow::Result<std::collections::BTreeMap<String, hitl_pages::slack::SlackUser>> {
        let mut users = std::collections::BTreeMap::new();
        for (id, spec) in &self.users {
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()) {
                anyhow::bail!("[slack] users: {id:?} is not a Slack user id (U0123ABCD)");
            }
            let (principal, groups) = slack_user(id, spec)?;
            if principal.strip_prefix("user:").is_none_or(str::is_empty) {
                anyhow::bail!(
                    "[slack] users.{id}: {principal:?} is not user:<id> (a Slack user decides as one person)"
                );
            }
            if let Some(group) = groups.iter().find(|g| g.strip_prefix("group:").is_none_or(str::is_empty)) {
                anyhow::bail!("[slack] users.{id}.groups: {group:?} is not group:<name>");
            }
            users.insert(id.clone(), hitl_pages::slack::SlackUser { principal, groups });
        }
        Ok(users)
    }

    /// The checked section, its secrets read from the environment now: a missing one is
    /// an error, never a Slack integration that can't verify or can't post.
    pub(crate) fn config(&self) -> anyhow::Result<hitl_pages::slack::SlackConfig> {
        let env = |key: &str, name: &str| match std::env::var(name) {
            Ok(value) if !value.trim().is_empty() => Ok(value.trim().to_owned()),
            _ => anyhow::bail!("[slack] {key}: the environment variable {name} is not set"),
        };
        let signing_secret = env("signing_secret_env", &self.signing_secret_env)?.into_bytes();
        let bot_token = env("bot_token_env", &self.bot_token_env)?;
        let api: http::Uri =
            self.api_url.parse().map_err(|e| anyhow::anyhow!("[slack] api_url {:?}: {e}", self.api_url))?;
        let local = matches!(api.host(), Some("localhost" | "127.0.0.1" | "[::1]" | "::1"));
        let authority = api.authority().map_or("", |a| a.as_str());
        if authority.contains('@') || api.query().is_some() || self.api_url.contains('#') {
            anyhow::bail!(
                "[slack] api_url {:?}: give the API's base URL alone (no user, password, query or fragment)",
                self.api_url
            );
        }
        match api.scheme_str() {
            Some("https") if api.host().is_some() => {}
            Some("http") if local => {}
            _ => anyhow::bail!(
                "[slack] api_url {:?}: give an https:// URL (http:// only on localhost): the bot token is sent to it",
                self.api_url
            ),
        }
        let channel = self.channel.trim();
        if channel.is_empty() || !channel.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()) {
            anyhow::bail!("[slack] channel {:?}: give the channel's id (C0123456789)", self.channel);
        }
        let users = self.users()?;
        if users.is_empty() {
            tracing::warn!("[slack] users maps no Slack user to a principal: no one can decide with the buttons");
        }
        Ok(hitl_pages::slack::SlackConfig {
            signing_secret,
            bot_token,
            api_url: self.api_url.trim_end_matches('/').to_owned(),
            channel: channel.to_owned(),
            users,
        })
    }
}

/// One `[slack] users` entry: `"user:bob"`, or `{ principal = "user:bob", groups =
/// ["group:sre"] }`.
fn slack_user(id: &str, spec: &toml::Value) -> anyhow::Result<(String, Vec<String>)> {
    let wrong =
        || anyhow::anyhow!("[slack] users.{id}: give \"user:<id>\" or {{ principal = \"user:<id>\", groups = [..] }}");
    match spec {
        toml::Value::String(principal) => Ok((principal.clone(), Vec::new())),
        toml::Value::Table(table) => {
            if let Some(key) = table.keys().find(|k| !matches!(k.as_str(), "principal" | "groups")) {
                anyhow::bail!("[slack] users.{id}: unknown key {key:?} (principal, groups)");
            }
            let principal = table.get("principal").and_then(toml::Value::as_str).ok_or_else(wrong)?;
            let groups = match table.get("groups") {
                None => Vec::new(),
                Some(toml::Value::Array(groups)) => {
                    groups.iter().map(|g| g.as_str().map(str::to_owned).ok_or_else(wrong)).collect::<Result<_, _>>()?
                }
                Some(_) => return Err(wrong()),
            };
            Ok((principal.to_owned(), groups))
        }
        _ => Err(wrong()),
    }
}

/// `[admin]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AdminSection {
    /// Who may list and cancel paused calls (`/api/threads`): `user:<id>`,
    /// `group:<name>`.
    #[serde(default)]
    pub(crate) principals: Vec<PrincipalEntry>,
}

/// A `user:<id>` or `group:<name>` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub(crate) struct PrincipalEntry(pub(crate) String);

impl TryFrom<String> for PrincipalEntry {
    type Error = String;

    fn try_from(entry: String) -> Result<Self, String> {
        match entry.strip_prefix("user:").or_else(|| entry.strip_prefix("group:")) {
            Some(name) if !name.is_empty() => Ok(Self(entry)),
            _ => Err(format!("{entry:?} is not user:<id> or group:<name>")),
        }
    }
}

/// One `[[notify]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NotifySpec {
    /// `webhook` (the default) or `email`.
    #[serde(default)]
    pub(crate) kind: NotifyKind,
    /// Where to POST (http or https): a webhook's.
    #[serde(default)]
    pub(crate) url: String,
    /// An email's recipients.
    #[serde(default)]
    pub(crate) to: Vec<String>,
    /// An email's SMTP server: `smtps://host:465`, or `smtp://host:25` (STARTTLS,
    /// required with a password; `smtp://user@host` names the user).
    pub(crate) smtp_url: Option<String>,
    /// An email's sender.
    pub(crate) from: Option<String>,
    /// The environment variable holding the SMTP password (sent only over TLS).
    pub(crate) smtp_password_env: Option<String>,
    /// The environment variable holding the HMAC key of `X-Hitl-Signature`.
    pub(crate) secret_env: Option<String>,
    /// `json` (default) or `slack`.
    #[serde(default)]
    pub(crate) format: hitl_pages::notify::Format,
    /// Signed single-use sign-in links in the body (default: false, plain links): only
    /// for a destination private to one approver.
    #[serde(default)]
    pub(crate) single_use_links: bool,
}

impl NotifySpec {
    /// The email target of `[[notify]]` number `i`, its password read from the
    /// environment now.
    fn mail_target(&self, i: usize) -> anyhow::Result<hitl_pages::notify::Target> {
        let (Some(smtp_url), Some(from)) = (&self.smtp_url, &self.from) else {
            anyhow::bail!("notify[{i}]: an email notification needs smtp_url and from");
        };
        let url: http::Uri = smtp_url.parse().map_err(|e| anyhow::anyhow!("notify[{i}].smtp_url {smtp_url:?}: {e}"))?;
        if !matches!(url.scheme_str(), Some("smtp" | "smtps")) || url.host().is_none() {
            anyhow::bail!("notify[{i}].smtp_url {smtp_url:?}: give an smtps:// or smtp:// URL");
        }
        let password = match &self.smtp_password_env {
            None => None,
            Some(name) => match std::env::var(name) {
                Ok(value) if !value.is_empty() => Some(value),
                _ => anyhow::bail!("notify[{i}].smtp_password_env: the environment variable {name} is not set"),
            },
        };
        if !self.url.is_empty() || self.secret_env.is_some() {
            anyhow::bail!("notify[{i}]: url and secret_env are a webhook's; an email has to, smtp_url and from");
        }
        let mail =
            hitl_pages::notify::Mail::new(&self.to, from, password).map_err(|e| anyhow::anyhow!("notify[{i}].{e}"))?;
        Ok(hitl_pages::notify::Target {
            url,
            mail: Some(mail),
            secret: None,
            format: self.format,
            single_use_links: false,
        })
    }
}

/// What a `[[notify]]` is.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum NotifyKind {
    /// A JSON POST (today's).
    #[default]
    Webhook,
    /// A mail per pending approval.
    Email,
}

/// `[audit]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditSection {
    /// A JSON-lines file appended to, or `-` for stdout.
    pub(crate) file: Option<String>,
    /// The size past which the file is renamed `<file>.1` and begun anew (default
    /// 100 MiB).
    pub(crate) max_bytes: Option<u64>,
    /// Chain each line to the one before it with an HMAC keyed by the server secret
    /// (default: false).
    #[serde(default)]
    pub(crate) chain: bool,
}

/// `[approvals]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalsSection {
    /// Refuse an approval by the person who made the call (default: true).
    pub(crate) two_person_rule: Option<bool>,
    /// Event streams (`GET /api/approvals/events`) one principal may hold open
    /// (default 4).
    pub(crate) max_event_streams_per_principal: Option<usize>,
    /// Event streams open in all (default: a quarter of `max_connections`).
    pub(crate) max_event_streams: Option<usize>,
    /// Seconds an ended approval stays listed (default 3600).
    pub(crate) keep_ended: Option<u64>,
    /// Ended approvals listed per caller, the oldest dropped first (default 200).
    pub(crate) max_ended_per_caller: Option<usize>,
    /// Bytes of one argument value shown in listings, notifications and the audit
    /// trail (default 16384).
    pub(crate) max_argument_bytes: Option<usize>,
    /// How long a page session lasts, in seconds (default: 28800, 8 hours).
    pub(crate) session_ttl: Option<u64>,
    /// Seconds a retry of a call waiting for an approver is held for the decision
    /// before it is asked the question again (default 25; 0: never held).
    pub(crate) hold: Option<u64>,
    /// Retries one caller may have held at once (default 8).
    pub(crate) max_held_per_caller: Option<usize>,
    /// List `hitl_pending_approvals` and `hitl_decide_approval` to approvers, who then
    /// decide from their own MCP client (default: false).
    #[serde(default)]
    pub(crate) mcp_decisions: bool,
}

/// The pages' part of the file.
#[derive(Debug, Default, Clone)]
pub(crate) struct PagesFile {
    pub(crate) admin: AdminSection,
    pub(crate) notify: Vec<NotifySpec>,
    pub(crate) audit: AuditSection,
    pub(crate) approvals: ApprovalsSection,
    pub(crate) slack: Option<SlackSection>,
}

impl PagesFile {
    /// The webhooks, their secrets read from the environment now: a missing one is an
    /// error, not an unsigned webhook.
    pub(crate) fn targets(&self) -> anyhow::Result<Vec<hitl_pages::notify::Target>> {
        self.notify
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                if spec.kind == NotifyKind::Email {
                    return spec.mail_target(i);
                }
                if spec.url.is_empty() {
                    anyhow::bail!("notify[{i}].url: give the webhook's http:// or https:// URL (or kind = \"email\")");
                }
                let url: http::Uri =
                    spec.url.parse().map_err(|e| anyhow::anyhow!("notify[{i}].url {:?}: {e}", spec.url))?;
                if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
                    anyhow::bail!("notify[{i}].url {:?}: give an http:// or https:// URL", spec.url);
                }
                let secret = match &spec.secret_env {
                    None => None,
                    Some(name) => match std::env::var(name) {
                        Ok(value) if !value.is_empty() => Some(value.into_bytes()),
                        _ => anyhow::bail!("notify[{i}].secret_env: the environment variable {name} is not set"),
                    },
                };
                Ok(hitl_pages::notify::Target {
                    url,
                    mail: None,
                    secret,
                    format: spec.format,
                    single_use_links: spec.single_use_links,
                })
            })
            .collect()
    }
}

/// `[auth]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuthSection {
    /// Bearer tokens: lines `user-id token` or `user-id sha256:<hex>`.
    pub(crate) tokens_file: Option<PathBuf>,
    /// The authorization servers the protected resource metadata names.
    #[serde(default)]
    pub(crate) authorization_servers: Vec<String>,
    /// `[auth.jwt]`: JWT bearer tokens.
    pub(crate) jwt: Option<hitl_auth::JwtConfig>,
}

/// The gateway's part of the file.
#[derive(Debug, Default, Clone)]
pub(crate) struct GatewayFile {
    pub(crate) upstream: Vec<hitl_gateway::UpstreamSpec>,
    pub(crate) policy: Vec<hitl_gateway::Policy>,
    pub(crate) gateway: hitl_gateway::GatewaySection,
    /// Where each policy is written.
    pub(crate) policy_at: Vec<String>,
}

impl GatewayFile {
    /// The gateway of these sections (`None` without upstreams), checked as far as it
    /// can be without connecting: policies, upstream names, specs, `env:` values.
    pub(crate) fn gateway(&self) -> anyhow::Result<Option<hitl_gateway::Gateway>> {
        let policies = self.policies()?;
        if self.upstream.is_empty() {
            return Ok(None);
        }
        let env = |name: &str| std::env::var(name).ok();
        let gateway = hitl_gateway::Gateway::new(&self.upstream, policies, env).map_err(anyhow::Error::msg)?;
        let hold = self.gateway.hold_timeout.map_or(hitl_gateway::HOLD_TIMEOUT, std::time::Duration::from_secs);
        Ok(Some(gateway.with_hold_timeout(hold)))
    }
}

impl GatewayFile {
    /// The `[[policy]]`s over `[gateway] default_action`, checked.
    pub(crate) fn policies(&self) -> anyhow::Result<hitl_gateway::Policies> {
        let policies = hitl_gateway::Policies::new(self.policy.clone(), self.gateway).map_err(anyhow::Error::msg)?;
        Ok(policies.with_locations(self.policy_at.clone()))
    }
}

/// `[server]`: the keys are the `hitl serve` flags with `_` for `-`; `examples` and
/// `threads` are the positive forms of `--no-examples` and `--no-threads`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerSection {
    pub(crate) listen: Option<SocketAddr>,
    pub(crate) metrics_listen: Option<SocketAddr>,
    pub(crate) log_format: Option<crate::telemetry::LogFormat>,
    pub(crate) otlp_endpoint: Option<String>,
    pub(crate) public_url: Option<String>,
    pub(crate) store: Option<String>,
    pub(crate) redis_ca_file: Option<PathBuf>,
    pub(crate) examples: Option<bool>,
    pub(crate) conformance_fixtures: Option<bool>,
    pub(crate) legacy_elicitation: Option<bool>,
    pub(crate) threads: Option<bool>,
    pub(crate) default_ttl: Option<u64>,
    pub(crate) secret_file: Option<PathBuf>,
    pub(crate) previous_secret_file: Option<PathBuf>,
    pub(crate) allowed_hosts: Option<Vec<String>>,
    pub(crate) principal_header: Option<String>,
    pub(crate) max_body_bytes: Option<usize>,
    pub(crate) header_read_timeout: Option<u64>,
    pub(crate) body_read_timeout: Option<u64>,
    pub(crate) max_connections: Option<usize>,
    pub(crate) max_concurrent_requests: Option<usize>,
    pub(crate) request_timeout: Option<u64>,
    pub(crate) max_paused_per_caller: Option<u64>,
    pub(crate) max_paused_calls: Option<u64>,
    pub(crate) max_record_bytes: Option<usize>,
    pub(crate) max_finished_calls: Option<u64>,
    pub(crate) max_finished_bytes: Option<u64>,
    pub(crate) stdio_principal: Option<String>,
    pub(crate) workers: Option<std::num::NonZeroUsize>,
}

/// Reads and parses `path`. Paths in the file are relative to the file's folder.
pub(crate) fn load(path: &Path) -> anyhow::Result<ConfigFile> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut config = parse(&text).map_err(|e| anyhow::anyhow!("{}:{e}", path.display()))?;
    config.policy_at = (0..config.policy.len())
        .map(|i| {
            let at = [hitl_declared::Segment::Key("policy".into()), hitl_declared::Segment::Index(i)];
            let offset = span_of(&text, &at).map_or(0, |s| s.start).min(text.len());
            format!("{}:{}", path.display(), text[..offset].matches('\n').count() + 1)
        })
        .collect();
    let folder = path.parent().unwrap_or(Path::new("."));
    let server_files = [
        &mut config.server.redis_ca_file,
        &mut config.server.secret_file,
        &mut config.server.previous_secret_file,
        &mut config.auth.tokens_file,
        &mut config.receipts.key_file,
    ];
    if let Some(file) = config.audit.file.as_mut().filter(|f| *f != "-" && Path::new(f.as_str()).is_relative()) {
        *file = folder.join(file.as_str()).display().to_string();
    }
    let jwks_file = config.auth.jwt.as_mut().and_then(|jwt| jwt.jwks_file.as_mut());
    let upstream_folders = config.upstream.iter_mut().flat_map(|u| [&mut u.cwd, &mut u.ca_file]);
    for file in server_files.into_iter().flatten().chain(jwks_file).chain(upstream_folders.flatten()) {
        if file.is_relative() {
            *file = folder.join(&*file);
        }
    }
    Ok(config)
}

/// Parses a file's text and checks its `[[agent]]`s; the error reads `line:column: key:
/// message` (the first problem of the agents, with how many more there are).
pub(crate) fn parse(text: &str) -> Result<ConfigFile, String> {
    let deserializer = toml::Deserializer::parse(text).map_err(|e| located(text, e.span(), "", e.message()))?;
    let config: ConfigFile = serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        located(text, inner.span(), &key, inner.message())
    })?;
    if let Some(error) = gateway_problem(text, &config) {
        return Err(error);
    }
    let prefixes = hitl_gateway::Gateway::prefixes(&config.upstream);
    let problems = hitl_declared::check(&config.agent, &prefixes);
    if let Some(first) = problems.first() {
        let key = first.to_string();
        let key = key.split_once(": ").map_or(key.as_str(), |(key, _)| key);
        let mut error = located(text, span_of(text, &first.at), key, &first.message);
        if problems.len() > 1 {
            let rest: Vec<String> =
                problems[1..].iter().map(|p| located(text, span_of(text, &p.at), "", &p.to_string())).collect();
            error.push_str(&format!("\n({} more: {})", rest.len(), rest.join("; ")));
        }
        return Err(error);
    }
    Ok(config)
}

/// The first problem of the `[[upstream]]`s and `[[policy]]`s that needs nothing but
/// the file to see (a bad name, not exactly one of `url` and `command`, a name used
/// twice, a caller or approver that is not `user:`/`group:`), at its line and column.
fn gateway_problem(text: &str, config: &ConfigFile) -> Option<String> {
    use hitl_declared::Segment::{Index, Key};
    let at = |table: &str, i: usize, key: &str| span_of(text, &[Key(table.into()), Index(i), Key(key.into())]);
    for (i, spec) in config.upstream.iter().enumerate() {
        if let Some((key, why)) = spec.shape_problem() {
            return Some(located(text, at("upstream", i, key), &format!("upstream[{i}].{key}"), &why));
        }
        if config.upstream[..i].iter().any(|earlier| earlier.name == spec.name) {
            let why = format!("upstream {:?} is configured twice", spec.name);
            return Some(located(text, at("upstream", i, "name"), &format!("upstream[{i}].name"), &why));
        }
    }
    // `policy[i].field: why`, as the policies' own check says it.
    let error = hitl_gateway::Policies::new(config.policy.clone(), config.gateway).err()?;
    let (place, why) = error.split_once(": ")?;
    let (index, field) = place.strip_prefix("policy[")?.split_once("].")?;
    let index: usize = index.parse().ok()?;
    // A key left out (a policy that names no tools) is found at its policy.
    let span = at("policy", index, field).or_else(|| span_of(text, &[Key("policy".into()), Index(index)]));
    Some(located(text, span, place, why))
}

/// Where the value at `path` is written in `text` (keys and indexes from the top): the
/// deepest part of the path the file spells out.
fn span_of(text: &str, path: &[hitl_declared::Segment]) -> Option<std::ops::Range<usize>> {
    use toml::de::{DeTable, DeValue};
    let table = DeTable::parse(text).ok()?;
    let mut span = table.span();
    let mut value = DeValue::Table(table.into_inner());
    for segment in path {
        let next = match (&value, segment) {
            (DeValue::Table(table), hitl_declared::Segment::Key(key)) => {
                table.iter().find(|(k, _)| k.get_ref() == key).map(|(_, v)| v.clone())
            }
            (DeValue::Array(items), hitl_declared::Segment::Index(i)) => items.get(*i).cloned(),
            _ => None,
        };
        let Some(next) = next else { break };
        span = next.span();
        value = next.into_inner();
    }
    Some(span)
}

fn located(text: &str, span: Option<std::ops::Range<usize>>, key: &str, message: &str) -> String {
    let at = span.map_or(0, |s| s.start).min(text.len());
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let column = before.rfind('\n').map_or(at, |newline| at - newline - 1) + 1;
    let key = if key.is_empty() || key == "." { String::new() } else { format!(" {key}:") };
    format!("{line}:{column}:{key} {}", message.trim_end())
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn errors_name_the_line_column_and_key() {
        let cases = [
            (
                "[[upstream]]\nname = \"db\"\n\n[[upstream]]\nname = \"fs\"\nurl = \"http://x/mcp\"\ncommand = [\"x\"]\n",
                "1:1: upstream[0].url: give exactly one of url and command",
            ),
            (
                "[[upstream]]\nname = \"a.b\"\nurl = \"http://x/mcp\"\n",
                "2:8: upstream[0].name: \"a.b\": use letters, digits, '_' and '-'",
            ),
            (
                "[[upstream]]\nname = \"db\"\nurl = \"http://x/mcp\"\n[[upstream]]\nname = \"db\"\nurl = \"http://y/mcp\"\n",
                "5:8: upstream[1].name: upstream \"db\" is configured twice",
            ),
            (
                "[[policy]]\ntools = [\"x\"]\naction = \"review\"\napprovers = [\"sre\"]\n",
                "4:13: policy[0].approvers: \"sre\" is not user:<id> or group:<name>",
            ),
            ("[server]\nlisten = \"127.0.0.1:8123\"\nlisen = 1\n", "3:1: server.lisen: unknown field `lisen`"),
            ("[server]\nmax_connections = \"many\"\n", "2:19: server.max_connections: invalid type: string \"many\""),
            ("[server]\nlisten = \"nowhere\"\n", "2:10: server.listen: invalid socket address syntax"),
            (
                "[admin]\nprincipals = [\"ops\"]\n",
                "2:14: admin.principals[0]: \"ops\" is not user:<id> or group:<name>",
            ),
            (
                "[sever]\n",
                "1:2: sever: unknown field `sever`, expected one of `server`, `upstream`, `policy`, `gateway`, `auth`",
            ),
            ("[server\n", "1:8:"),
        ];
        for (text, expected) in cases {
            let error = parse(text).unwrap_err();
            assert!(error.starts_with(expected), "{text:?}: {error}");
        }
        let gateway = [
            ("[[policy]]\ntools = [\"db.*\"]\naction = \"revew\"\n", "3:10: policy[0].action: unknown variant `revew`"),
            (
                "[[policy]]\ntools = [\"x\"]\naction = \"review\"\ndecisions = [\"aprove\"]\n",
                "4:14: policy[0].decisions[0]: unknown variant",
            ),
            ("[[upstream]]\nname = \"db\"\nurll = \"x\"\n", "3:1: upstream[0].urll: unknown field `urll`"),
            (
                "[[policy]]\nresources = [\"fs.*\"]\naction = \"review\"\n",
                "3:10: policy[0].action: a policy that names resources or prompts may only allow or deny",
            ),
            (
                "[[policy]]\ntools = [\"db.*\"]\nprompts = [\"ev.*\"]\naction = \"review\"\n",
                "4:10: policy[0].action: a policy that names resources or prompts",
            ),
            ("\n[[policy]]\naction = \"deny\"\n", "2:1: policy[0].tools: list at least one"),
            ("[[policy]]\nprompts = [\"ev.*\"]\nactoin = \"deny\"\n", "3:1: policy[0].actoin: unknown field"),
            ("[gateway]\ndefault_action = 3\n", "2:18: gateway.default_action: wanted string or table"),
        ];
        for (text, expected) in gateway {
            let error = parse(text).unwrap_err();
            assert!(error.starts_with(expected), "{text:?}: {error}");
        }
        let agents = "[[upstream]]\nname = \"deploy\"\nurl = \"http://127.0.0.1:1/mcp\"\n\n[[agent]]\nname = \"release\"\nkind = \"workflow\"\nsteps = [\n  { ask = { message = \"Go?\", schema = { type = \"object\", properties = { go = { type = \"array\" } } } } },\n  { call = \"deploy.release\", args = { when = \"{time}\" } },\n  { call = \"db.drop\" },\n]\n";
        let error = parse(agents).unwrap_err();
        let lines: Vec<&str> = error.lines().collect();
        assert!(
            lines[0].starts_with("9:78: agent[0].steps[0].ask.schema.properties.go: cannot be a form"),
            "the first problem, at its line and column: {error}"
        );
        assert!(error.contains("(2 more: 10:46: agent[0].steps[1].args.when: {time} names no argument"), "{error}");
        assert!(error.contains("11:12: agent[0].steps[2].call: no [[upstream]] lists \"db.drop\""), "{error}");
        let ok = parse("[server]\nlisten = \"0.0.0.0:80\"\nallowed_hosts = [\"hitl.example.com\"]\n").unwrap();
        assert_eq!(ok.server.allowed_hosts.unwrap(), ["hitl.example.com"]);
        assert!(parse("").unwrap().server.listen.is_none(), "an empty file is every default");
    }
}
