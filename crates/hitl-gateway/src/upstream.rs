//! `[[upstream]]`: the MCP servers whose tools the gateway lists.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use hitl_upstream::{HttpConfig, StdioConfig, Upstream};
use serde::Deserialize;

/// One `[[upstream]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSpec {
    /// The upstream's name; its tools are listed as `<name>.<tool>` unless
    /// `tool_prefix` says otherwise.
    pub name: String,
    /// Its Streamable HTTP endpoint.
    #[serde(default)]
    pub url: Option<String>,
    /// A stdio server to start instead: the program and its arguments.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// The stdio server's working folder.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Variables added to the stdio server's environment; `env:VARIABLE` takes the
    /// value from hitl's own environment.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// The revision to speak (default: the newest it supports).
    #[serde(default)]
    pub protocol: Option<String>,
    /// The prefix of its tools' listed names (default `<name>.`).
    #[serde(default)]
    pub tool_prefix: Option<String>,
    /// Headers sent with every request, each `env:VARIABLE` (values are never written
    /// in the file).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// For an `https://` upstream: a PEM file of the CA certificates to trust instead
    /// of the system's.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Seconds one upstream request may take (default 60).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// Seconds a call that asks mid-call (a 2025-era server's `elicitation/create`) is
    /// held open for the client's answer (default: `[gateway] hold_timeout`).
    #[serde(default)]
    pub hold_timeout: Option<u64>,
    /// Seconds between light probes of whether it answers (`ping`, or
    /// `server/discover`), for `/healthz` (default 10).
    #[serde(default)]
    pub health_interval: Option<u64>,
    /// The largest message read from it, in bytes (default 16 MiB): a larger answer
    /// fails the call with an error result naming the upstream, read no further.
    #[serde(default)]
    pub max_response_bytes: Option<usize>,
    /// Seconds a caller's session with a 2025-era upstream lives without calls before
    /// it is closed (default 300).
    #[serde(default)]
    pub session_idle: Option<u64>,
}

impl UpstreamSpec {
    /// The listed name of the upstream's tool `tool`.
    pub fn listed_name(&self, tool: &str) -> String {
        match &self.tool_prefix {
            Some(prefix) => format!("{prefix}{tool}"),
            None => format!("{}.{tool}", self.name),
        }
    }

    /// What is wrong with the spec's shape, whatever the environment: the key, and
    /// why (a name that is not letters, digits, `_` and `-`; an unknown protocol; not
    /// exactly one of `url` and `command`; an empty command). For the file's check,
    /// which names the line.
    pub fn shape_problem(&self) -> Option<(&'static str, String)> {
        let valid_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if self.name.is_empty() || !self.name.chars().all(valid_name) {
            return Some(("name", format!("{:?}: use letters, digits, '_' and '-'", self.name)));
        }
        if let Some(protocol) = &self.protocol
            && !hitl_protocol::version::SUPPORTED.contains(&protocol.as_str())
        {
            let known = hitl_protocol::version::SUPPORTED.join(", ");
            return Some(("protocol", format!("{protocol:?} is not one of {known}")));
        }
        if self.session_idle == Some(0) {
            return Some(("session_idle", "give at least 1 second".into()));
        }
        if self.health_interval == Some(0) {
            return Some(("health_interval", "give at least 1 second".into()));
        }
        match (&self.url, &self.command) {
            (Some(_), None) => None,
            (None, Some(command)) if command.first().is_none_or(String::is_empty) => {
                Some(("command", "name the program to start".into()))
            }
            (None, Some(_)) => None,
            _ => Some(("url", "give exactly one of url and command".into())),
        }
    }

    /// Checks the spec and builds the upstream (nothing is sent or started yet);
    /// `env` resolves `env:` values. Errors name the key.
    pub fn upstream(&self, env: impl Fn(&str) -> Option<String>) -> Result<Upstream, String> {
        if let Some((key, why)) = self.shape_problem() {
            return Err(match key {
                "name" => format!("upstream name {why}"),
                key => format!("{}: {why}", self.at(key)),
            });
        }
        let upstream = match (&self.url, &self.command) {
            (Some(url), None) => Upstream::http(self.http_config(url, env)?).map_err(|e| e.to_string()),
            (None, Some(command)) => self.stdio_config(command, env).map(Upstream::stdio),
            _ => Err(format!("{}: give exactly one of url and command", self.at("url"))),
        }?;
        let idle = self.session_idle.map_or(hitl_upstream::SESSION_IDLE, Duration::from_secs);
        Ok(upstream.with_sessions(idle, hitl_upstream::MAX_SESSIONS))
    }

    fn at(&self, key: &str) -> String {
        format!("upstream {:?}: {key}", self.name)
    }

    /// How often it is probed for `/healthz` (default 10 s).
    pub(crate) fn health_interval(&self) -> Duration {
        Duration::from_secs(self.health_interval.unwrap_or(10).max(1))
    }

    /// Seconds one upstream request may take (default 60).
    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout.unwrap_or(60).max(1))
    }

    fn stdio_config(&self, command: &[String], env: impl Fn(&str) -> Option<String>) -> Result<StdioConfig, String> {
        let Some(program) = command.first().filter(|p| !p.is_empty()) else {
            return Err(format!("{}: name the program to start", self.at("command")));
        };
        if !runnable(program, self.cwd.as_deref(), env("PATH").as_deref()) {
            let where_ = if program.contains('/') { "there is no such file" } else { "it is not found on PATH" };
            return Err(format!("{}: {program:?}: {where_}", self.at("command")));
        }
        let mut variables = BTreeMap::new();
        for (name, value) in self.env.iter().flatten() {
            let value = match value.strip_prefix("env:") {
                Some(variable) => env(variable).ok_or_else(|| {
                    format!("{}: the environment variable {variable} is not set", self.at(&format!("env.{name}")))
                })?,
                None => value.clone(),
            };
            variables.insert(name.clone(), value);
        }
        Ok(StdioConfig {
            name: self.name.clone(),
            command: command.to_vec(),
            cwd: self.cwd.clone(),
            env: variables,
            protocol: self.protocol.clone(),
            timeout: self.timeout(),
            max_response_bytes: self.max_response_bytes(),
        })
    }

    fn max_response_bytes(&self) -> usize {
        self.max_response_bytes.unwrap_or(hitl_upstream::MAX_RESPONSE_BYTES).max(1)
    }

    fn http_config(&self, url: &str, env: impl Fn(&str) -> Option<String>) -> Result<HttpConfig, String> {
        let at = |key: &str| self.at(key);
        let uri: http::Uri = url.parse().map_err(|e| format!("{}: {e}", at("url")))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(format!("{}: {url:?} is not an http:// or https:// URL", at("url")));
        }
        let ca_pem = match &self.ca_file {
            Some(file) => Some(std::fs::read(file).map_err(|e| format!("{}: {}: {e}", at("ca_file"), file.display()))?),
            None => None,
        };
        let mut headers = http::HeaderMap::new();
        for (name, source) in &self.headers {
            let key = at(&format!("headers.{name}"));
            let header = http::HeaderName::try_from(name.as_str()).map_err(|e| format!("{key}: {e}"))?;
            let Some(variable) = source.strip_prefix("env:") else {
                return Err(format!("{key}: write env:VARIABLE; header values are never written in the file"));
            };
            let value =
                env(variable).ok_or_else(|| format!("{key}: the environment variable {variable} is not set"))?;
            let value = http::HeaderValue::try_from(value).map_err(|e| format!("{key}: {e}"))?;
            headers.insert(header, value);
        }
        Ok(HttpConfig {
            name: self.name.clone(),
            url: uri,
            ca_pem,
            headers,
            protocol: self.protocol.clone(),
            timeout: self.timeout(),
            max_response_bytes: self.max_response_bytes(),
        })
    }
}

/// Can `program` be started: a path (relative to `cwd` when given) to a file, or a
/// name found in a folder of `path` (the `PATH` hitl starts it with)?
fn runnable(program: &str, cwd: Option<&std::path::Path>, path: Option<&str>) -> bool {
    if program.contains('/') {
        let file = std::path::Path::new(program);
        let file = match cwd {
            Some(cwd) if file.is_relative() => cwd.join(file),
            _ => file.to_path_buf(),
        };
        return file.is_file();
    }
    path.is_some_and(|path| std::env::split_paths(path).any(|folder| folder.join(program).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(toml_like: impl FnOnce(&mut UpstreamSpec)) -> UpstreamSpec {
        let mut spec = UpstreamSpec {
            name: "db".into(),
            url: Some("http://127.0.0.1:9000/mcp".into()),
            command: None,
            cwd: None,
            env: None,
            protocol: None,
            tool_prefix: None,
            headers: BTreeMap::new(),
            timeout: None,
            ca_file: None,
            hold_timeout: None,
            health_interval: None,
            max_response_bytes: None,
            session_idle: None,
        };
        toml_like(&mut spec);
        spec
    }

    #[test]
    fn headers_come_from_the_environment_only() {
        let env = |name: &str| match name {
            "DB_TOKEN" => Some("Bearer s3cret".to_owned()),
            "PATH" => std::env::var("PATH").ok(),
            _ => None,
        };
        let ok = spec(|s| s.headers = BTreeMap::from([("Authorization".into(), "env:DB_TOKEN".into())]));
        let url = ok.url.clone().unwrap();
        assert_eq!(ok.http_config(&url, env).unwrap().headers["authorization"], "Bearer s3cret");
        let literal = spec(|s| s.headers = BTreeMap::from([("Authorization".into(), "Bearer x".into())]));
        assert!(literal.upstream(env).unwrap_err().contains("headers.Authorization: write env:VARIABLE"));
        let unset = spec(|s| s.headers = BTreeMap::from([("X-Key".into(), "env:NOPE".into())]));
        assert!(unset.upstream(env).unwrap_err().contains("NOPE is not set"));
        let stdio = spec(|s| {
            (s.url, s.command) = (None, Some(vec!["sh".into()]));
            s.env = Some(BTreeMap::from([("TOKEN".into(), "env:DB_TOKEN".into()), ("LEVEL".into(), "debug".into())]));
        });
        let config = stdio.stdio_config(&["sh".into()], env).unwrap();
        assert_eq!(config.env["TOKEN"], "Bearer s3cret");
        assert_eq!(config.env["LEVEL"], "debug", "other values are taken as written");
    }

    #[test]
    fn bad_specs_name_their_key() {
        let env = |_: &str| None;
        let cases: Vec<(UpstreamSpec, &str)> = vec![
            (spec(|s| s.name = "d b".into()), "upstream name \"d b\""),
            (spec(|s| s.url = None), "url: give exactly one of url and command"),
            (spec(|s| s.command = Some(vec!["python3".into()])), "url: give exactly one"),
            (spec(|s| (s.url, s.command) = (None, Some(vec![]))), "command: name the program to start"),
            (
                spec(|s| (s.url, s.command) = (None, Some(vec!["hitl-no-such-program".into()]))),
                r#"command: "hitl-no-such-program": it is not found on PATH"#,
            ),
            (
                spec(|s| (s.url, s.command) = (None, Some(vec!["/nonexistent/server".into()]))),
                r#"command: "/nonexistent/server": there is no such file"#,
            ),
            (spec(|s| s.url = Some("ftp://x/mcp".into())), "is not an http:// or https:// URL"),
            (spec(|s| s.ca_file = Some("/nonexistent/ca.pem".into())), "ca_file: /nonexistent/ca.pem"),
            (spec(|s| s.protocol = Some("2024-11-05".into())), "protocol: \"2024-11-05\" is not one of"),
            (spec(|s| s.session_idle = Some(0)), "session_idle: give at least 1 second"),
        ];
        for (spec, expected) in cases {
            let error = spec.upstream(env).unwrap_err();
            assert!(error.contains(expected), "{error}");
        }
        assert_eq!(spec(|_| {}).listed_name("drop"), "db.drop");
        assert_eq!(spec(|s| s.tool_prefix = Some("pg_".into())).listed_name("drop"), "pg_drop");
    }
}
