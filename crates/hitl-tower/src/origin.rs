//! DNS-rebinding protection: a layer that answers `403 Forbidden` to requests whose
//! `Host` or `Origin` names a host the server does not serve.
//!
//! A server on loopback is reachable from any web page through DNS rebinding unless it
//! checks these headers: by default only `localhost`, `127.0.0.1` and `[::1]` (any port)
//! are accepted.

use std::task::{Context, Poll};

use bytes::Bytes;
use hitl_protocol::{ErrorObject, Response};
use http::{HeaderMap, StatusCode, header};
use tower::{Layer, Service};

use crate::{McpBody, json_response};

/// Which hosts a request may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHosts {
    /// `None`: any host.
    hosts: Option<Vec<String>>,
}

impl AllowedHosts {
    /// Any host (a server behind a proxy that checks hosts itself).
    pub fn any() -> Self {
        Self { hosts: None }
    }

    /// `localhost`, `127.0.0.1` and `[::1]`.
    pub fn loopback() -> Self {
        Self::new(["localhost", "127.0.0.1", "[::1]"])
    }

    /// These host names (without ports; IPv6 in brackets), compared ignoring case.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(hosts: I) -> Self {
        Self { hosts: Some(hosts.into_iter().map(|h| h.into().to_ascii_lowercase()).collect()) }
    }

    fn allows(&self, authority: &str) -> bool {
        let Some(hosts) = &self.hosts else { return true };
        let host = match authority.rsplit_once(':') {
            // `[::1]:8080`, `host:8080`; a bare `[::1]` has its colons inside brackets.
            Some((host, port)) if !port.contains(']') && port.chars().all(|c| c.is_ascii_digit()) => host,
            _ => authority,
        };
        hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }

    /// Why `headers` are refused, if they are.
    fn refuse(&self, headers: &HeaderMap) -> Option<String> {
        if let Some(host) = headers.get(header::HOST) {
            let host = host.to_str().unwrap_or_default().trim();
            if !self.allows(host) {
                return Some(format!("the Host {host:?} is not served here"));
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default().trim();
            let authority = origin.split_once("://").map_or(origin, |(_, rest)| rest).trim_end_matches('/');
            if origin != "null" && !self.allows(authority) {
                return Some(format!("the Origin {origin:?} is not allowed"));
            }
            if origin == "null" {
                return Some("the Origin \"null\" is not allowed".to_owned());
            }
        }
        None
    }
}

/// The layer of [`ValidateOrigin`].
#[derive(Debug, Clone)]
pub struct ValidateOriginLayer {
    allowed: AllowedHosts,
}

impl ValidateOriginLayer {
    /// Accepts requests whose `Host` and `Origin` (when present) name `allowed` hosts.
    pub fn new(allowed: AllowedHosts) -> Self {
        Self { allowed }
    }
}

impl<S> Layer<S> for ValidateOriginLayer {
    type Service = ValidateOrigin<S>;

    fn layer(&self, inner: S) -> ValidateOrigin<S> {
        ValidateOrigin { inner, allowed: self.allowed.clone() }
    }
}

/// Answers 403 to requests naming hosts the server does not serve.
#[derive(Debug, Clone)]
pub struct ValidateOrigin<S> {
    inner: S,
    allowed: AllowedHosts,
}

impl<S> Service<http::Request<Bytes>> for ValidateOrigin<S>
where
    S: Service<http::Request<Bytes>, Response = http::Response<McpBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<McpBody>;
    type Error = S::Error;
    type Future =
        futures_util::future::Either<std::future::Ready<Result<http::Response<McpBody>, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Bytes>) -> Self::Future {
        if let Some(why) = self.allowed.refuse(request.headers()) {
            let error = Response::Error { id: None, error: ErrorObject::invalid_request(format!("Forbidden: {why}")) };
            return futures_util::future::Either::Left(std::future::ready(Ok(json_response(
                StatusCode::FORBIDDEN,
                &error,
            ))));
        }
        // Call the service that was polled ready, leaving a fresh clone in its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        futures_util::future::Either::Right(inner.call(request))
    }
}
