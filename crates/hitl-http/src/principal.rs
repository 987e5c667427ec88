//! Who is calling, from a header an authenticating proxy sets: a layer that copies the
//! header's value into the request's [`Principal`], so paused calls are bound to their
//! caller and a `requestState` from another caller fails.
//!
//! Only use it behind a proxy that sets (and strips from clients) the header: hitl
//! trusts it as given. It fails closed: a request whose header is missing, empty, not
//! UTF-8 or repeated gets `401 Unauthorized` and never reaches the endpoint, so no call
//! runs without a principal. Any UTF-8 value is a principal (`josé` included).

use bytes::Bytes;
use hitl_protocol::ErrorObject;
use http::{HeaderName, StatusCode};
use tower::Layer;

use crate::{Admission, Admit, Body, Principal, refusal};

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

impl<S> Layer<S> for PrincipalFromHeaderLayer {
    type Service = PrincipalFromHeader<S>;

    fn layer(&self, inner: S) -> PrincipalFromHeader<S> {
        Admit::new(inner, self.clone())
    }
}

impl Admission for PrincipalFromHeaderLayer {
    fn admit(&self, request: &mut http::Request<Bytes>) -> Result<(), Box<http::Response<Body>>> {
        match self.principal(request.headers()) {
            Ok(principal) => {
                request.extensions_mut().insert(principal);
                Ok(())
            }
            Err(why) => {
                let error = ErrorObject::invalid_request(format!("Unauthorized: {why}"));
                Err(Box::new(refusal(StatusCode::UNAUTHORIZED, error)))
            }
        }
    }
}

/// Inserts a [`Principal`] from a header into each request's extensions.
pub type PrincipalFromHeader<S> = Admit<S, PrincipalFromHeaderLayer>;
