//! Load shedding: a layer that answers `503 Service Unavailable` with `Retry-After`
//! once a number of requests are in flight, instead of queueing them without bound.
//!
//! A request counts until its response body ends, so a long SSE stream holds its
//! place for as long as it runs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::Either;
use hitl_protocol::ErrorObject;
use http::{HeaderValue, StatusCode, header};
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Layer, Service};

use crate::{Body, refusal};

/// The layer of [`MaxConcurrentRequests`].
#[derive(Debug, Clone)]
pub struct MaxConcurrentRequestsLayer {
    permits: Arc<Semaphore>,
    max: usize,
}

impl MaxConcurrentRequestsLayer {
    /// Serves at most `max` requests at a time; the services it makes share the count.
    pub fn new(max: usize) -> Self {
        Self { permits: Arc::new(Semaphore::new(max)), max }
    }
}

impl<S> Layer<S> for MaxConcurrentRequestsLayer {
    type Service = MaxConcurrentRequests<S>;

    fn layer(&self, inner: S) -> MaxConcurrentRequests<S> {
        MaxConcurrentRequests { inner, permits: self.permits.clone(), max: self.max }
    }
}

/// Answers 503 with `Retry-After: 1` while `max` requests are in flight.
#[derive(Debug, Clone)]
pub struct MaxConcurrentRequests<S> {
    inner: S,
    permits: Arc<Semaphore>,
    max: usize,
}

type Busy<E> = std::future::Ready<Result<http::Response<Body>, E>>;

impl<S> Service<http::Request<Bytes>> for MaxConcurrentRequests<S>
where
    S: Service<http::Request<Bytes>, Response = http::Response<Body>> + Clone,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Either<Busy<S::Error>, Hold<S::Future>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Bytes>) -> Self::Future {
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            let why = format!("the server is busy: {} requests are in flight; retry shortly", self.max);
            let mut response = refusal(StatusCode::SERVICE_UNAVAILABLE, ErrorObject::internal(why));
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return Either::Left(std::future::ready(Ok(response)));
        };
        // Call the service that was polled ready, leaving a fresh clone in its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Either::Right(Hold { response: inner.call(request), permit: Some(permit) })
    }
}

pin_project_lite::pin_project! {
    /// The inner service's response, its body made to keep the request's place.
    pub struct Hold<F> {
        #[pin]
        response: F,
        permit: Option<OwnedSemaphorePermit>,
    }
}

impl<F, E> Future for Hold<F>
where
    F: Future<Output = Result<http::Response<Body>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let response = std::task::ready!(this.response.poll(cx))?;
        Poll::Ready(Ok(match this.permit.take() {
            Some(permit) => response.map(|body| Holding { body, _permit: permit }.boxed_unsync()),
            // Polled again after it answered: nothing is left to hold.
            None => response,
        }))
    }
}

/// A response body that keeps its request's place until it is dropped.
struct Holding {
    body: Body,
    _permit: OwnedSemaphorePermit,
}

impl http_body::Body for Holding {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
