//! Who is calling, from a header an authenticating proxy sets: a layer that copies the
//! header's value into the request's [`Principal`], so paused calls are bound to their
//! caller and a `requestState` from another caller fails.
//!
//! Only use it behind a proxy that sets (and strips from clients) the header: hitl
//! trusts it as given.

use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderName;
use tower::{Layer, Service};

use crate::Principal;

/// The layer of [`PrincipalFromHeader`].
#[derive(Debug, Clone)]
pub struct PrincipalFromHeaderLayer {
    header: HeaderName,
}

impl PrincipalFromHeaderLayer {
    /// Reads the principal from `header`.
    pub fn new(header: HeaderName) -> Self {
        Self { header }
    }
}

impl<S> Layer<S> for PrincipalFromHeaderLayer {
    type Service = PrincipalFromHeader<S>;

    fn layer(&self, inner: S) -> PrincipalFromHeader<S> {
        PrincipalFromHeader { inner, header: self.header.clone() }
    }
}

/// Inserts a [`Principal`] from a header into each request's extensions.
#[derive(Debug, Clone)]
pub struct PrincipalFromHeader<S> {
    inner: S,
    header: HeaderName,
}

impl<S> Service<http::Request<Bytes>> for PrincipalFromHeader<S>
where
    S: Service<http::Request<Bytes>> + Clone,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Bytes>) -> Self::Future {
        let principal = request
            .headers()
            .get(&self.header)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| Principal(v.to_owned()));
        match principal {
            Some(p) => {
                request.extensions_mut().insert(p);
            }
            None => {
                request.extensions_mut().remove::<Principal>();
            }
        }
        // Call the service that was polled ready, leaving a fresh clone in its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        inner.call(request)
    }
}
