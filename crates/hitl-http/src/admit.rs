//! Layers in front of the endpoint that check each request first (who the caller is):
//! an [`Admission`] lets a request through, having added to its extensions, or answers
//! it itself; [`Admit`] is the one service every such layer wraps the endpoint in.

use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::Either;
use tower::Service;

use crate::Body;

/// A check made before the endpoint serves a request.
pub trait Admission {
    /// Lets `request` through (its extensions completed), or answers it (boxed: the
    /// rare path).
    fn admit(&self, request: &mut http::Request<Bytes>) -> Result<(), Box<http::Response<Body>>>;
}

/// `inner` behind `admission`.
#[derive(Debug, Clone)]
pub struct Admit<S, A> {
    inner: S,
    admission: A,
}

impl<S, A> Admit<S, A> {
    /// `inner`, serving only what `admission` lets through.
    pub fn new(inner: S, admission: A) -> Self {
        Self { inner, admission }
    }
}

impl<S, A> Service<http::Request<Bytes>> for Admit<S, A>
where
    S: Service<http::Request<Bytes>, Response = http::Response<Body>> + Clone,
    A: Admission,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Either<std::future::Ready<Result<http::Response<Body>, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Bytes>) -> Self::Future {
        if let Err(refused) = self.admission.admit(&mut request) {
            return Either::Left(std::future::ready(Ok(*refused)));
        }
        // Call the service that was polled ready, leaving a fresh clone in its place.
        let clone = self.inner.clone();
        let mut polled = std::mem::replace(&mut self.inner, clone);
        Either::Right(polled.call(request))
    }
}
