//! JWT bearer tokens: RS256, ES256, EdDSA and HS256 (jsonwebtoken, on ring), checked for
//! `iss`, `aud`, `exp` and `nbf` with a minute of leeway, against the key of their
//! `kid` in a JWKS: a file (read again when it changes or on SIGHUP) or a URL (fetched
//! every five minutes, and at once when a token names a key it does not hold, so keys
//! rotate without a restart).

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::sync::Notify;

use crate::watched::{self, Watched};
use crate::{Identity, Verify};

/// Seconds of clock difference tolerated on `exp` and `nbf`.
const LEEWAY: u64 = 60;
/// How often a JWKS URL is fetched again.
const REFRESH: Duration = Duration::from_secs(300);

/// `[auth.jwt]`: whom tokens must come from and be for, and where their keys are.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// The `iss` tokens must carry.
    pub issuer: String,
    /// The `aud` tokens must carry.
    pub audience: String,
    /// A JWKS file.
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    /// A JWKS URL (`https://`, or `http://` for a local one).
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// The claim that names the user (default `sub`): the principal is `user:<value>`.
    #[serde(default)]
    pub principal_claim: Option<String>,
    /// The claim that lists the user's groups (default `groups`): `group:<name>` each.
    #[serde(default)]
    pub groups_claim: Option<String>,
}

/// Verifies JWTs against a JWKS.
#[derive(Debug)]
pub struct Jwt {
    config: JwtConfig,
    keys: RwLock<Arc<JwkSet>>,
    /// The JWKS file, when the keys come from one.
    file: Option<Watched>,
    /// Asks the URL watcher to fetch now (a token named an unknown key).
    fetch: Notify,
}

impl Jwt {
    /// Checks `config` and reads its JWKS file now; a JWKS URL is fetched by
    /// [`Jwt::watch`] (until then no token is valid).
    pub fn new(config: JwtConfig) -> Result<Arc<Self>, String> {
        match (&config.jwks_file, &config.jwks_url) {
            (Some(_), None) | (None, Some(_)) => {}
            _ => return Err("[auth.jwt]: give exactly one of jwks_file and jwks_url".into()),
        }
        if let Some(url) = &config.jwks_url {
            let uri: http::Uri = url.parse().map_err(|e| format!("[auth.jwt] jwks_url: {e}"))?;
            if !matches!(uri.scheme_str(), Some("http" | "https")) {
                return Err(format!("[auth.jwt] jwks_url: {url:?} is not an http:// or https:// URL"));
            }
        }
        let jwt = Self {
            keys: RwLock::new(Arc::new(JwkSet { keys: Vec::new() })),
            file: config.jwks_file.as_deref().map(Watched::new),
            fetch: Notify::new(),
            config,
        };
        jwt.read_file()?;
        Ok(Arc::new(jwt))
    }

    /// Keeps the keys fresh for as long as the returned task runs: the file read again
    /// when it changes or on SIGHUP; the URL fetched now, every five minutes, and when a
    /// token names an unknown key (at most every five seconds).
    pub fn watch(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let Some(url) = self.config.jwks_url.clone() else {
            return watched::watch(
                self,
                |jwt| jwt.file.as_ref(),
                |jwt| {
                    if let Err(error) = jwt.read_file() {
                        tracing::error!(%error, "the JWKS file is not read again; the keys before stay");
                    }
                },
            );
        };
        let jwt = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut last_fetch: Option<tokio::time::Instant> = None;
            loop {
                let Some(this) = jwt.upgrade() else { return };
                let due = last_fetch.is_none_or(|at| at.elapsed() >= Duration::from_secs(5));
                if due {
                    last_fetch = Some(tokio::time::Instant::now());
                    match fetch(&url).await.and_then(|text| parse(&text)) {
                        Ok(keys) => this.set(keys),
                        Err(error) => {
                            tracing::error!(%url, %error, "the JWKS could not be fetched; the keys before stay")
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(REFRESH) => {}
                    _ = this.fetch.notified() => {}
                }
            }
        })
    }

    fn set(&self, keys: JwkSet) {
        tracing::info!(keys = keys.keys.len(), "JWKS keys read");
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
    }

    /// Reads the JWKS file (when the keys come from one) again.
    fn read_file(&self) -> Result<(), String> {
        let Some(file) = &self.file else { return Ok(()) };
        let shown = file.path().display();
        let keys = file.read(|text| parse(text).map_err(|e| format!("{shown}: {e}")))?;
        self.set(keys);
        Ok(())
    }
}

fn parse(text: &str) -> Result<JwkSet, String> {
    serde_json::from_str(text).map_err(|e| format!("not a JWKS: {e}"))
}

impl Verify for Jwt {
    fn verify(&self, token: &str) -> Result<Identity, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("the token is not a JWT: {e}"))?;
        if !matches!(header.alg, Algorithm::RS256 | Algorithm::ES256 | Algorithm::EdDSA | Algorithm::HS256) {
            return Err(format!("the token's algorithm {:?} is not accepted", header.alg));
        }
        let keys = self.keys.read().unwrap_or_else(|p| p.into_inner()).clone();
        let jwk = match &header.kid {
            Some(kid) => keys.find(kid),
            None if keys.keys.len() == 1 => keys.keys.first(),
            None => None,
        };
        let Some(jwk) = jwk else {
            // A rotated key: fetch the set again (the client's retry may pass).
            self.fetch.notify_one();
            return Err(format!("the token's key {:?} is not known", header.kid.unwrap_or_default()));
        };
        if jwk.common.key_algorithm.is_some_and(|alg| format!("{alg:?}") != format!("{:?}", header.alg)) {
            return Err("the token's algorithm is not its key's".into());
        }
        let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("the token's key cannot be used: {e}"))?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = LEEWAY;
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(|e| format!("the token is not valid: {e}"))?
            .claims;
        let principal_claim = self.config.principal_claim.as_deref().unwrap_or("sub");
        let user = match claims.get(principal_claim) {
            Some(Value::String(user)) if !user.is_empty() => user.clone(),
            _ => return Err(format!("the token has no {principal_claim} claim")),
        };
        let groups_claim = self.config.groups_claim.as_deref().unwrap_or("groups");
        let groups = claims
            .get(groups_claim)
            .and_then(Value::as_array)
            .map(|groups| groups.iter().filter_map(Value::as_str).map(|g| format!("group:{g}")).collect())
            .unwrap_or_default();
        let expires = claims.get("exp").and_then(Value::as_f64).map_or(0, |exp| exp as u64);
        Ok(Identity { principal: format!("user:{user}"), groups, credential: crate::Credential::Until(expires) })
    }
}

/// The body of `url`, fetched with the system's roots for `https://`.
async fn fetch(url: &str) -> Result<String, String> {
    use http_body_util::BodyExt as _;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, http_body_util::Empty<bytes::Bytes>>(hitl_tls::system());
    let uri: http::Uri = url.parse().map_err(|e| format!("{e}"))?;
    let response = tokio::time::timeout(Duration::from_secs(10), client.get(uri))
        .await
        .map_err(|_| "no answer within 10 s".to_owned())?
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    String::from_utf8(body.to_vec()).map_err(|e| e.to_string())
}
