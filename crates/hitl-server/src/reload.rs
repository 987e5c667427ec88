//! The configuration reloaded while serving: on `SIGHUP`, or when the file changes.
//! The change is seen through the file's folder, so an editor's write-and-rename and a
//! Kubernetes ConfigMap's swap of its `..data` symlink are seen as well as a write.
//!
//! A reload replaces `[[policy]]`, `[[upstream]]` and `[[agent]]` whole (one
//! [`Rules`]), or nothing: a file that `hitl check` would refuse leaves the rules in
//! force, logs why with file:line and counts `hitl_config_reloads_total{result="error"}`.
//! Paused calls live in the store and are not touched; a paused review is judged by
//! the rules in force when its answer comes. The sections a running server cannot
//! change (`[server]`, `[gateway]`, `[approvals]`, `[audit]`, `[admin]`, `[slack]` but its `users`) keep their
//! values and are logged as needing a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use clap::{ArgMatches, FromArgMatches as _};
use hitl_interrupt::Agent;
use hitl_tower::{ListKind, Notifier, Sets, Tools};
use serde_json::{Map, Value};
use tokio::task::AbortHandle;

use crate::cli::{Rules, ServeArgs};

/// The sections a reload leaves as they were (a restart applies them).
const FIXED_SECTIONS: [&str; 6] = ["server", "gateway", "approvals", "audit", "admin", "slack"];

/// One loaded configuration: its rules and what `/healthz` says of the file.
pub(crate) struct Loaded {
    pub(crate) rules: Rules,
    /// Hex SHA-256 of the file (none: serving without one).
    pub(crate) digest: Option<String>,
    /// When it was loaded (RFC 3339).
    pub(crate) loaded_at: String,
    /// The file's sections that a reload cannot change, and `[auth]`, as they were
    /// applied.
    fixed: toml::Table,
    /// Whether callers sign in with bearer tokens (a reload cannot change it).
    authenticates: bool,
}

/// The configuration in force, shared by what reads it at each request (access,
/// `/healthz`, the gateway's resources and prompts, bearer tokens) and replaced whole
/// by a reload.
#[derive(Clone)]
pub(crate) struct Live {
    loaded: Arc<RwLock<Arc<Loaded>>>,
    /// The token checkers of `[auth]` in force.
    pub(crate) verifiers: LiveVerifiers,
}

impl Live {
    /// `rules`, loaded from `file` (its bytes) or from no file.
    pub(crate) fn new(rules: Rules, file: Option<&[u8]>, authenticates: bool) -> Self {
        let loaded = Arc::new(Loaded::new(rules, file, authenticates));
        Self { loaded: Arc::new(RwLock::new(loaded)), verifiers: LiveVerifiers::default() }
    }

    /// The configuration in force now.
    pub(crate) fn now(&self) -> Arc<Loaded> {
        self.loaded.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, loaded: Loaded) {
        *self.loaded.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(loaded);
    }

    /// The token checkers for the endpoint and the pages: the ones in force, or none
    /// when callers do not sign in.
    pub(crate) fn verifiers_if(&self, authenticates: bool) -> Vec<Arc<dyn hitl_auth::Verify>> {
        match authenticates {
            true => vec![Arc::new(self.verifiers.clone())],
            false => Vec::new(),
        }
    }

    /// Who decides a paused call on the pages under the rules in force (none: not
    /// people named by a policy now, so those named when it paused still do). A policy
    /// with `when` is judged on the call's arguments and caller (its groups are not
    /// known here: they count as none).
    pub(crate) fn approvers(&self, view: &hitl_interrupt::PageView) -> Option<Vec<String>> {
        let loaded = self.now();
        let rules = &loaded.rules;
        let tool = view.tool.as_str();
        let decided = match rules.policies.conditional(tool) {
            false => rules.policies.decide(tool),
            true => {
                let args = view.review.as_ref().map(|r| r.args.clone()).unwrap_or_default();
                let caller =
                    hitl_gateway::when::Caller { principal: view.principal.clone(), groups: Vec::new(), peer: None };
                let upstream = crate::explain::upstream_of(&rules.upstreams, tool);
                rules.policies.decide_call(&hitl_gateway::when::CallFacts::new(tool, upstream, &args, Some(&caller)))
            }
        };
        match decided.action {
            hitl_gateway::Action::Review => decided.policy.and_then(|p| p.approvers.clone()),
            _ => None,
        }
    }

    /// `/healthz`'s fields: the upstreams (or the policies judged on the agents alone),
    /// and the loaded file's digest and load time.
    pub(crate) fn health(&self) -> Map<String, Value> {
        let loaded = self.now();
        let mut health = match &loaded.rules.gateway {
            Some(gateway) => gateway.health(),
            None => {
                let count = loaded.rules.unmatched().unmatched_policies();
                Map::from_iter([("unmatched_policies".to_owned(), count.into())])
            }
        };
        if let Some(digest) = &loaded.digest {
            health.insert("config_digest".into(), digest.clone().into());
            health.insert("config_loaded_at".into(), loaded.loaded_at.clone().into());
        }
        health
    }
}

impl Loaded {
    fn new(rules: Rules, file: Option<&[u8]>, authenticates: bool) -> Self {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let fixed = file.map(fixed_sections).unwrap_or_default();
        Self {
            rules,
            digest: file.map(digest),
            loaded_at: hitl_protocol::rfc3339(u64::try_from(now.as_millis()).unwrap_or(u64::MAX)),
            fixed,
            authenticates,
        }
    }
}

/// Hex SHA-256 of `bytes`.
fn digest(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The sections of the file a reload leaves alone, and `[auth]` (empty when it does not
/// parse: the reload's own check says why).
fn fixed_sections(file: &[u8]) -> toml::Table {
    let text = String::from_utf8_lossy(file);
    let Ok(mut table) = text.parse::<toml::Table>() else { return toml::Table::new() };
    table.retain(|key, _| FIXED_SECTIONS.contains(&key) || key == "auth");
    // `[slack] users` is reloaded (who may press the buttons); the rest of `[slack]` is not.
    if let Some(toml::Value::Table(slack)) = table.get_mut("slack") {
        slack.remove("users");
    }
    table
}

/// The token checkers of `[auth]` in force, one [`hitl_auth::Verify`] for the MCP
/// endpoint and the pages: a token is accepted when one of them accepts it.
#[derive(Clone, Default, Debug)]
pub(crate) struct LiveVerifiers(Arc<RwLock<Vec<Arc<dyn hitl_auth::Verify>>>>);

impl LiveVerifiers {
    pub(crate) fn set(&self, verifiers: Vec<Arc<dyn hitl_auth::Verify>>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = verifiers;
    }

    fn now(&self) -> Vec<Arc<dyn hitl_auth::Verify>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl hitl_auth::Verify for LiveVerifiers {
    fn verify(&self, token: &str) -> Result<hitl_auth::Identity, String> {
        let mut why = String::from("the token is not valid");
        for verifier in self.now() {
            match verifier.verify(token) {
                Ok(identity) => return Ok(identity),
                Err(reason) => why = reason,
            }
        }
        Err(why)
    }

    fn lists(&self, principal: &str, matches: &dyn Fn(&[u8; 32]) -> bool) -> bool {
        self.now().iter().any(|v| v.lists(principal, matches))
    }
}

/// What a reload needs to make and put in place new rules.
pub(crate) struct Reloader {
    pub(crate) path: PathBuf,
    /// The `serve` command line, read again with the file's new values under it.
    pub(crate) matches: ArgMatches,
    /// hitl's own agents, not gated yet.
    pub(crate) own: Vec<Agent>,
    pub(crate) notifier: Notifier,
    pub(crate) tools: Tools,
    pub(crate) live: Live,
    /// The listener's address, for the checks that name it.
    pub(crate) local: std::net::SocketAddr,
    /// The task that keeps the gateway in force's tools fresh.
    pub(crate) fresh: Option<AbortHandle>,
    /// The pages' part of the configuration (none without pages).
    pub(crate) pages: Option<hitl_pages::Reload>,
    /// The digest of the file last tried (applied or refused), or why it could not be
    /// read.
    pub(crate) attempted: Option<String>,
}

/// Why the file is read again; a hangup weighs more than a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Cause {
    /// Something changed in its folder.
    Changed,
    /// `SIGHUP`.
    Hangup,
}

impl Reloader {
    /// Reloads on `SIGHUP` and on changes in the file's folder until the task is dropped.
    pub(crate) async fn run(mut self) {
        let (changed, mut seen) = tokio::sync::mpsc::channel::<Cause>(4);
        watch_folder(&self.path, changed.clone());
        hangups(changed);
        while let Some(mut cause) = seen.recv().await {
            // A burst of changes (a ConfigMap swap is several renames) is one reload.
            while let Ok(Some(more)) = tokio::time::timeout(Duration::from_millis(100), seen.recv()).await {
                cause = cause.max(more);
            }
            self.reload(cause).await;
        }
    }

    /// Loads the file again; applies it when it changed and checks. A change in the
    /// folder does not try again a file already refused (the folder may hold the log
    /// that says so); `SIGHUP` does.
    pub(crate) async fn reload(&mut self, cause: Cause) {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(error) => {
                // Between a ConfigMap's renames, or deleted: the rules in force stay.
                let seen = format!("unreadable: {error}");
                if cause == Cause::Hangup || self.attempted.as_deref() != Some(seen.as_str()) {
                    tracing::error!(file = %self.path.display(), %error, "cannot read the configuration; the rules in force stay");
                    metrics::counter!("hitl_config_reloads_total", "result" => "error").increment(1);
                }
                self.attempted = Some(seen);
                return;
            }
        };
        let tried = digest(&bytes);
        if cause == Cause::Changed && self.attempted.as_deref() == Some(tried.as_str()) {
            return;
        }
        self.attempted = Some(tried);
        let previous = self.live.now();
        if previous.digest.as_deref() == Some(digest(&bytes).as_str()) {
            return;
        }
        match self.apply(&bytes, &previous).await {
            Ok(loaded) => {
                let digest = loaded.digest.clone().unwrap_or_default();
                self.live.set(loaded);
                metrics::counter!("hitl_config_reloads_total", "result" => "success").increment(1);
                for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources] {
                    self.notifier.notify(kind);
                }
                tracing::info!(file = %self.path.display(), config_digest = %digest, "configuration reloaded");
            }
            Err(error) => {
                metrics::counter!("hitl_config_reloads_total", "result" => "error").increment(1);
                tracing::error!("configuration not reloaded; the rules in force stay: {error:#}");
            }
        }
    }

    /// Checks `bytes` as `hitl check` would, starts its gateway and puts its tools in
    /// place; on any error nothing has changed.
    async fn apply(&mut self, bytes: &[u8], previous: &Loaded) -> anyhow::Result<Loaded> {
        let read =
            || -> anyhow::Result<ServeArgs> { ServeArgs::from_arg_matches(&self.matches)?.with_file(&self.matches) };
        let rules = read()?.checked_rules(&self.own, &self.notifier, &previous.rules, self.local)?;
        // Made for real (their files watched) only once the file checked.
        let args = read()?;
        let fixed = fixed_sections(bytes);
        for section in FIXED_SECTIONS {
            if fixed.get(section) != previous.fixed.get(section) {
                tracing::warn!(
                    file = %self.path.display(),
                    "[{section}] changed: it cannot be applied while serving, and keeps its values until a restart"
                );
            }
        }
        let verifiers = match fixed.get("auth") == previous.fixed.get("auth") {
            true => None,
            false => self.auth(&args, previous, &fixed)?,
        };
        let notify = args.notify_targets()?;
        let slack_users = args.slack_users()?;
        // The new upstreams are listed into a set of their own, put in place with the
        // agents at once below.
        let staged: Arc<Mutex<Sets>> = Arc::default();
        let stage = staged.clone();
        let publish: hitl_gateway::Publish = Arc::new(move |source, agents| {
            stage.lock().unwrap_or_else(|p| p.into_inner()).insert(source.to_owned(), agents);
            Ok(())
        });
        if let Some(gateway) = &rules.gateway {
            gateway.start(&publish).await.map_err(anyhow::Error::msg)?;
        }
        let staged = std::mem::take(&mut *staged.lock().unwrap_or_else(|p| p.into_inner()));
        // The old gateway's listings stop before the swap, so none lands after it.
        if let Some(fresh) = self.fresh.take() {
            fresh.abort();
        }
        if let Err(error) = self.tools.replace_all(rules.agents.clone(), staged) {
            self.fresh = keep_fresh(previous.rules.gateway.as_ref(), &self.tools);
            return Err(anyhow::anyhow!("{}: {error}", self.path.display()));
        }
        self.fresh = keep_fresh(rules.gateway.as_ref(), &self.tools);
        let mut loaded = Loaded::new(rules, Some(bytes), previous.authenticates);
        // What was not applied stays as it was, so that a later reload compares with it.
        loaded.fixed = previous.fixed.clone();
        if let Some(verifiers) = verifiers {
            self.live.verifiers.set(verifiers);
            match fixed.get("auth") {
                Some(auth) => loaded.fixed.insert("auth".into(), auth.clone()),
                None => loaded.fixed.remove("auth"),
            };
        }
        if let Some(pages) = &self.pages {
            let live = self.live.clone();
            let approvers: hitl_pages::ApproversFn = Arc::new(move |view| live.approvers(view));
            let auditors = loaded.rules.policies.approvers();
            pages.set(hitl_pages::Reloaded { notify, auditors, approvers: Some(approvers), slack_users });
        }
        Ok(loaded)
    }

    /// The token checkers of a changed `[auth]`, or none when the change needs a
    /// restart (authentication turned on or off, other authorization servers).
    fn auth(
        &self,
        args: &ServeArgs,
        previous: &Loaded,
        fixed: &toml::Table,
    ) -> anyhow::Result<Option<Vec<Arc<dyn hitl_auth::Verify>>>> {
        let servers = |fixed: &toml::Table| fixed.get("auth").and_then(|a| a.get("authorization_servers")).cloned();
        if args.authenticates() != previous.authenticates || servers(fixed) != servers(&previous.fixed) {
            tracing::warn!(
                file = %self.path.display(),
                "[auth] changed in a way that cannot be applied while serving (authentication turned on or off, or \
                 authorization_servers): it keeps its values until a restart"
            );
            return Ok(None);
        }
        Ok(Some(args.verifiers()?))
    }
}

/// Keeps `gateway`'s tools fresh in `tools` (its upstreams listed again when they
/// change) until aborted.
pub(crate) fn keep_fresh(gateway: Option<&Arc<hitl_gateway::Gateway>>, tools: &Tools) -> Option<AbortHandle> {
    let gateway = gateway?.clone();
    let tools = tools.clone();
    let publish: hitl_gateway::Publish = Arc::new(move |source, agents| tools.replace_listed(source, agents));
    Some(tokio::spawn(gateway.keep_fresh(publish)).abort_handle())
}

/// Tells `changed` of every change in `file`'s folder (Linux: inotify); elsewhere, or
/// when the folder cannot be watched, of a look every 2 s (a reload with the same
/// digest does nothing).
fn watch_folder(file: &Path, changed: tokio::sync::mpsc::Sender<Cause>) {
    let folder = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    #[cfg(target_os = "linux")]
    match inotify_stream(&folder) {
        Ok(mut events) => {
            tokio::spawn(async move {
                use futures_util::StreamExt as _;
                while let Some(event) = events.next().await {
                    if event.is_err() || changed.try_send(Cause::Changed).is_err() && changed.is_closed() {
                        break;
                    }
                }
            });
            return;
        }
        Err(error) => {
            tracing::warn!(folder = %folder.display(), %error, "cannot watch the configuration's folder; looking every 2 s");
        }
    }
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(2));
        loop {
            every.tick().await;
            if changed.try_send(Cause::Changed).is_err() && changed.is_closed() {
                break;
            }
        }
    });
}

#[cfg(target_os = "linux")]
fn inotify_stream(folder: &Path) -> anyhow::Result<inotify::EventStream<Vec<u8>>> {
    use inotify::{Inotify, WatchMask};
    let inotify = Inotify::init().context("inotify")?;
    let mask = WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_TO
        | WatchMask::MOVED_FROM
        | WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MODIFY
        | WatchMask::ATTRIB;
    inotify.watches().add(folder, mask).with_context(|| format!("watching {}", folder.display()))?;
    Ok(inotify.into_event_stream(vec![0; 4096])?)
}

/// Tells `changed` of each `SIGHUP`.
fn hangups(changed: tokio::sync::mpsc::Sender<Cause>) {
    #[cfg(unix)]
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangup) = signal(SignalKind::hangup()) else { return };
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the configuration");
            if changed.send(Cause::Hangup).await.is_err() {
                break;
            }
        }
    });
    #[cfg(not(unix))]
    drop(changed);
}
