//! DNS-rebinding protection: a layer that answers `403 Forbidden` to requests whose
//! `Host` (or HTTP/2 `:authority`) or `Origin` names a host the server does not serve.
//!
//! A server on loopback is reachable from any web page through DNS rebinding unless it
//! checks these headers: by default only `localhost`, `127.0.0.1` and `[::1]` on the
//! server's own port are accepted as the request's authority. A request that names no
//! authority at all (HTTP/1.0 without `Host`) is refused too. `Origin` is checked by
//! host name only, so a local web client on another port (an inspector) still works.

use std::task::{Context, Poll};

use bytes::Bytes;
use hitl_protocol::ErrorObject;
use http::{StatusCode, header};
use tower::{Layer, Service};

use crate::{Body, refusal};

/// Which hosts a request may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHosts {
    /// `None`: any host. Each entry is a lowercase host name (IPv6 in brackets) and the
    /// port it is served on, `None` for any.
    hosts: Option<Vec<(String, Option<u16>)>>,
}

/// Splits `host[:port]` (IPv6 in brackets) into a host (as written: compare it ignoring
/// case) and its port.
fn split_authority(authority: &str) -> Option<(&str, Option<u16>)> {
    let authority = authority.trim();
    let (host, port) = match authority.rsplit_once(':') {
        // `[::1]:8080`, `host:8080`; a bare `[::1]` has its colons inside brackets.
        Some((host, port)) if !port.contains(']') && (!host.contains(':') || host.ends_with(']')) => {
            (host, Some(port.parse::<u16>().ok()?))
        }
        _ => (authority, None),
    };
    (!host.is_empty()).then_some((host, port))
}

impl AllowedHosts {
    /// Any host (a server behind a proxy that checks hosts itself).
    pub fn any() -> Self {
        Self { hosts: None }
    }

    /// `localhost`, `127.0.0.1` and `[::1]` on `port`.
    pub fn loopback(port: u16) -> Self {
        let hosts = ["localhost", "127.0.0.1", "[::1]"].map(|h| (h.to_owned(), Some(port)));
        Self { hosts: Some(hosts.into()) }
    }

    /// These authorities: `host` (any port) or `host:port` (that port only), IPv6 in
    /// brackets, compared ignoring case. Fails on the first entry that is not one.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(hosts: I) -> Result<Self, String> {
        let parsed = hosts.into_iter().map(|h| {
            let h = h.into();
            split_authority(&h)
                .filter(|(host, _)| !host.contains('/'))
                .map(|(host, port)| (host.to_ascii_lowercase(), port))
                .ok_or_else(|| format!("{h:?} is not a host or host:port"))
        });
        Ok(Self { hosts: Some(parsed.collect::<Result<_, _>>()?) })
    }

    /// Does `authority` (a `Host` value) name an allowed host and port? A missing port
    /// is `default_port`.
    fn allows(&self, authority: &str, default_port: u16) -> bool {
        let Some(hosts) = &self.hosts else { return true };
        let Some((host, port)) = split_authority(authority) else { return false };
        let port = port.unwrap_or(default_port);
        hosts.iter().any(|(h, p)| h.eq_ignore_ascii_case(host) && p.is_none_or(|p| p == port))
    }

    /// Does `authority` (from an `Origin`) name an allowed host, on any port?
    fn allows_host(&self, authority: &str) -> bool {
        let Some(hosts) = &self.hosts else { return true };
        split_authority(authority).is_some_and(|(host, _)| hosts.iter().any(|(h, _)| h.eq_ignore_ascii_case(host)))
    }

    /// Why `request` is refused, if it is.
    fn refuse<B>(&self, request: &http::Request<B>) -> Option<String> {
        self.refuse_origin(request, false)
    }

    /// Why `request` is refused, if it is; `null_origin`: an `Origin: null` passes (a
    /// browser sends it with the pages' forms, whose `Referrer-Policy` is
    /// `no-referrer`; the forms carry CSRF tokens and the cookies are `SameSite`).
    pub(crate) fn refuse_origin<B>(&self, request: &http::Request<B>, null_origin: bool) -> Option<String> {
        // Any host: nothing to check.
        self.hosts.as_ref()?;
        // HTTP/2's `:authority` (and an absolute-form HTTP/1 target) is in the URI; HTTP/1
        // names it in `Host`. Every one given must be allowed, and one must be given.
        let mut named = false;
        if let Some(authority) = request.uri().authority() {
            named = true;
            if !self.allows(authority.as_str(), 80) {
                return Some(format!("the authority {:?} is not served here", authority.as_str()));
            }
        }
        for host in request.headers().get_all(header::HOST) {
            named = true;
            let host = text(host.as_bytes());
            if !self.allows(&host, 80) {
                return Some(format!("the Host {host:?} is not served here"));
            }
        }
        if !named {
            return Some("the request names no Host".to_owned());
        }
        if let Some(origin) = request.headers().get(header::ORIGIN) {
            let origin = text(origin.as_bytes());
            let origin = origin.trim();
            let authority = origin.split_once("://").map_or(origin, |(_, rest)| rest).trim_end_matches('/');
            if origin == "null" && null_origin {
                return None;
            }
            if origin == "null" || !self.allows_host(authority) {
                return Some(format!("the Origin {origin:?} is not allowed"));
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
    S: Service<http::Request<Bytes>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = futures_util::future::Either<std::future::Ready<Result<http::Response<Body>, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Bytes>) -> Self::Future {
        if let Some(why) = self.allowed.refuse(&request) {
            return futures_util::future::Either::Left(std::future::ready(Ok(forbidden(&why))));
        }
        // Call the service that was polled ready, leaving a fresh clone in its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        futures_util::future::Either::Right(inner.call(request))
    }
}

/// A 403 answer: a JSON-RPC error without an id whose message is `Forbidden: <why>`.
pub fn forbidden(why: &str) -> http::Response<Body> {
    refusal(StatusCode::FORBIDDEN, ErrorObject::invalid_request(format!("Forbidden: {why}")))
}

/// A header's value as text: as it is when it is UTF-8 (checked on the short path), else
/// with replacement characters.
fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    std::str::from_utf8(bytes).map_or_else(|_| String::from_utf8_lossy(bytes), std::borrow::Cow::Borrowed)
}
