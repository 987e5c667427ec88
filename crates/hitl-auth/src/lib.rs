//! Who may call hitl. [`BearerAuthLayer`] reads `Authorization: Bearer <token>`, asks
//! its [`Verify`]s who the token names, and inserts the caller's
//! [`hitl_http::Principal`] (`user:<id>`) and [`hitl_http::Groups`] (`group:<g>`)
//! into the request, so paused calls are bound to their caller and per-tool rules see
//! it. It follows MCP's authorization conventions: a request without valid credentials
//! gets `401` with `WWW-Authenticate: Bearer resource_metadata="<base>/.well-known/oauth-protected-resource"`
//! (with `error="invalid_token"` when a token was given), and [`metadata_route`] serves
//! that document (RFC 9728), naming the authorization servers.
//!
//! ```no_run
//! # fn demo() -> Result<(), String> {
//! use hitl_auth::{BearerAuthLayer, Resource, TokenFile};
//!
//! let tokens = TokenFile::load(std::path::Path::new("tokens.txt"))?;
//! tokens.watch(); // read again on SIGHUP or when the file changes
//! let layer = BearerAuthLayer::new(vec![tokens], Resource::from_request());
//! # let _ = layer; Ok(()) }
//! ```

mod jwt;
mod layer;
mod tokens;
mod watched;

use std::sync::Arc;

pub use jwt::{Jwt, JwtConfig};
pub use layer::{BearerAuth, BearerAuthLayer};
pub use tokens::TokenFile;

/// Who a valid token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `user:<id>`.
    pub principal: String,
    /// `group:<name>` memberships.
    pub groups: Vec<String>,
    /// What the token rests on, so a page session opened with it can end when it does.
    pub credential: Credential,
}

/// What a valid token rests on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// A line of a tokens file, by the SHA-256 of its token: good while a line holds it
    /// ([`Verify::lists`]).
    Listed([u8; 32]),
    /// A token that carries its own end (a JWT's `exp`, seconds since the epoch).
    Until(u64),
}

/// Checks bearer tokens.
pub trait Verify: Send + Sync + std::fmt::Debug {
    /// Who `token` names, or why it is not valid (said to the client in
    /// `error_description`: never a secret).
    fn verify(&self, token: &str) -> Result<Identity, String>;

    /// Does a line of this verifier still give `principal` a token whose SHA-256
    /// `matches`? Asked of sessions opened with a [`Credential::Listed`] token, so they
    /// end when its line goes. Verifiers without lines hold none.
    fn lists(&self, principal: &str, matches: &dyn Fn(&[u8; 32]) -> bool) -> bool {
        let _ = (principal, matches);
        false
    }
}

/// Where the protected resource lives, for `resource_metadata` links and the metadata
/// document: a fixed public base URL, or the scheme and `Host` of each request.
#[derive(Debug, Clone)]
pub struct Resource {
    base: Option<String>,
    authorization_servers: Vec<String>,
}

/// The path of the protected resource metadata document (RFC 9728).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

impl Resource {
    /// The base URL from each request's `Host` (over `http`).
    pub fn from_request() -> Self {
        Self { base: None, authorization_servers: Vec::new() }
    }

    /// A fixed base URL (`https://hitl.example.com`), as clients reach the server.
    pub fn at(base: impl Into<String>) -> Self {
        Self { base: Some(base.into().trim_end_matches('/').to_owned()), authorization_servers: Vec::new() }
    }

    /// Names the authorization servers clients log in with.
    #[must_use]
    pub fn with_authorization_servers(mut self, servers: Vec<String>) -> Self {
        self.authorization_servers = servers;
        self
    }

    /// The base URL for a request with these headers.
    fn base(&self, headers: &http::HeaderMap) -> String {
        if let Some(base) = &self.base {
            return base.clone();
        }
        let host = headers.get(http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
        format!("http://{host}")
    }

    /// The metadata document's URL.
    pub(crate) fn metadata_url(&self, headers: &http::HeaderMap) -> String {
        format!("{}{METADATA_PATH}", self.base(headers))
    }

    /// The metadata document (RFC 9728) for a request with these headers.
    pub fn document(&self, headers: &http::HeaderMap) -> serde_json::Value {
        serde_json::json!({
            "resource": format!("{}/mcp", self.base(headers)),
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
            "resource_name": "hitl",
        })
    }
}

/// The route that serves `resource`'s metadata document, for
/// [`hitl_http::HttpApp::with_route`] at [`METADATA_PATH`] (and at
/// `METADATA_PATH` + `/mcp`, where RFC 9728 puts it for the `/mcp` resource).
pub fn metadata_route(resource: Resource) -> hitl_http::RouteFn {
    Arc::new(move |parts: &http::request::Parts| {
        let body = resource.document(&parts.headers).to_string();
        let mut response = http::Response::new(hitl_http::body(bytes::Bytes::from(body)));
        response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
        response
    })
}
