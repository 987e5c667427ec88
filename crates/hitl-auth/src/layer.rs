//! The tower layer: a bearer token in, the caller's principal and groups out, or `401`.

use std::sync::Arc;

use bytes::Bytes;
use hitl_http::{Admission, Admit, Body, Groups, Principal};
use hitl_protocol::ErrorObject;
use http::{HeaderValue, StatusCode};
use tower::Layer;

use crate::{Resource, Verify};

/// The layer of [`BearerAuth`].
#[derive(Debug, Clone)]
pub struct BearerAuthLayer {
    verifiers: Arc<Vec<Arc<dyn Verify>>>,
    resource: Resource,
}

impl BearerAuthLayer {
    /// Accepts a token any of `verifiers` accepts (tried in order).
    pub fn new(verifiers: Vec<Arc<dyn Verify>>, resource: Resource) -> Self {
        Self { verifiers: Arc::new(verifiers), resource }
    }
}

impl<S> Layer<S> for BearerAuthLayer {
    type Service = BearerAuth<S>;

    fn layer(&self, inner: S) -> BearerAuth<S> {
        Admit::new(inner, self.clone())
    }
}

/// Names each request's caller from its bearer token, or answers `401`.
pub type BearerAuth<S> = Admit<S, BearerAuthLayer>;

/// Why a request is not let through.
enum Refused {
    /// No bearer token.
    Missing,
    /// A token no verifier accepts.
    Invalid(String),
}

impl BearerAuthLayer {
    fn identify(&self, headers: &http::HeaderMap) -> Result<crate::Identity, Refused> {
        let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
        let Some(value) = values.next() else { return Err(Refused::Missing) };
        if values.next().is_some() {
            return Err(Refused::Invalid("the Authorization header is repeated".into()));
        }
        let value = value.to_str().map_err(|_| Refused::Invalid("the Authorization header is not ASCII".into()))?;
        let token = match value.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() => token.trim(),
            _ => return Err(Refused::Missing),
        };
        let mut why = String::from("the token is not valid");
        for verifier in self.verifiers.iter() {
            match verifier.verify(token) {
                Ok(identity) => return Ok(identity),
                Err(reason) => why = reason,
            }
        }
        Err(Refused::Invalid(why))
    }

    /// `401` with the `WWW-Authenticate` challenge MCP clients follow to log in.
    fn challenge(&self, headers: &http::HeaderMap, refused: Refused) -> http::Response<Body> {
        let metadata = self.resource.metadata_url(headers);
        let (challenge, message) = match refused {
            Refused::Missing => (
                format!("Bearer resource_metadata=\"{metadata}\""),
                "Unauthorized: a bearer token is required".to_owned(),
            ),
            Refused::Invalid(why) => {
                let description = why.replace(['"', '\\'], "'");
                let challenge = format!(
                    "Bearer error=\"invalid_token\", error_description=\"{description}\", resource_metadata=\"{metadata}\""
                );
                (challenge, format!("Unauthorized: {why}"))
            }
        };
        let mut response = hitl_http::refusal(StatusCode::UNAUTHORIZED, ErrorObject::invalid_request(message));
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response.headers_mut().insert(http::header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

impl Admission for BearerAuthLayer {
    fn admit(&self, request: &mut http::Request<Bytes>) -> Result<(), Box<http::Response<Body>>> {
        let identity =
            self.identify(request.headers()).map_err(|refused| Box::new(self.challenge(request.headers(), refused)))?;
        request.extensions_mut().insert(Principal(identity.principal));
        request.extensions_mut().insert(Groups(identity.groups));
        Ok(())
    }
}
