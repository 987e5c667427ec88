//! Who is calling, from a header an authenticating proxy sets: a layer that copies the
//! header's value into the request's [`Principal`], so paused calls are bound to their
//! caller and a `requestState` from another caller fails.
//!
//! Only use it behind a proxy that sets (and strips from clients) the header: hitl
//! trusts it as given. It fails closed: a request whose header is missing, empty, not
//! UTF-8 or repeated gets `401 Unauthorized` and never reaches the endpoint, so no call
//! runs without a principal. Any UTF-8 value is a principal (`josé` included).

use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::Either;
use hitl_protocol::ErrorObject;
use http::{HeaderName, StatusCode};
use tower::{Layer, Service};

use crate::{McpBody, Principal, refusal};

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

impl<S> PrincipalFromHeader<S> {
    /// The principal the request's header names, or why there is none.
    fn principal(&self, headers: &http::HeaderMap) -> Result<Principal, String> {
        let name = &self.header;
        let mut values = headers.get_all(name).iter();
        let value = values.next().ok_or_else(|| format!("the {name} header is missing"))?;
        if values.next().is_some() {
            return Err(format!("the {name} header is repeated"));
        }
        let text = std::str::from_utf8(value.as_bytes()).map_err(|_| format!("the {name} header is not UTF-8"))?;
        let text = text.trim();
        if text.is_empty() {
            return Err(format!("the {name} header is empty"));
        }
        Ok(Principal(text.to_owned()))
    }
}

impl<S> Service<http::Request<Bytes>> for PrincipalFromHeader<S>
where
    S: Service<http::Request<Bytes>, Response = http::Response<McpBody>> + Clone,
{
    type Response = http::Response<McpBody>;
    type Error = S::Error;
    type Future = Admitted<S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Bytes>) -> Self::Future {
        let admitted = match self.principal(request.headers()) {
            Ok(principal) => {
                request.extensions_mut().insert(principal);
                Ok(request)
            }
            Err(why) => {
                let error = ErrorObject::invalid_request(format!("Unauthorized: {why}"));
                Err(refusal(StatusCode::UNAUTHORIZED, error))
            }
        };
        admit(&mut self.inner, admitted)
    }
}

/// The future of a layer that answers some requests itself and passes the rest on.
pub type Admitted<S> = Either<
    std::future::Ready<Result<http::Response<McpBody>, <S as Service<http::Request<Bytes>>>::Error>>,
    <S as Service<http::Request<Bytes>>>::Future,
>;

/// Passes an admitted request to `inner` (the service that was polled ready, leaving a
/// fresh clone in its place), or answers with the refusal.
pub fn admit<S>(inner: &mut S, admitted: Result<http::Request<Bytes>, http::Response<McpBody>>) -> Admitted<S>
where
    S: Service<http::Request<Bytes>, Response = http::Response<McpBody>> + Clone,
{
    match admitted {
        Ok(request) => {
            let clone = inner.clone();
            let mut polled = std::mem::replace(inner, clone);
            Either::Right(polled.call(request))
        }
        Err(refused) => Either::Left(std::future::ready(Ok(refused))),
    }
}
