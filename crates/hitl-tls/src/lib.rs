//! hitl's one HTTPS client connector, for every crate that makes HTTP requests of its
//! own (MCP upstreams, model APIs, webhooks, JWKS, the OTLP exporter): `http://`, and
//! `https://` through rustls on ring (TLS 1.2 and 1.3), trusting the system's CA roots
//! (which `SSL_CERT_FILE` and `SSL_CERT_DIR` may name) or the PEM certificates given.
//!
//! [`connector`] refuses to build an `https://` connector that trusts nothing;
//! [`system`] trusts what the system has, as many as it finds.
//!
//! ```
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//!
//! let connector = hitl_tls::connector(hitl_tls::Roots::HttpOnly).unwrap();
//! let client: Client<_, http_body_util::Empty<bytes::Bytes>> =
//!     Client::builder(TokioExecutor::new()).build(connector);
//! # let _ = client;
//! ```

use std::sync::Arc;

use hyper_rustls::HttpsConnectorBuilder;
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// A connector for `http://` and `https://` URLs, for a hyper-util client.
pub type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// The CA certificates a connector trusts for `https://`.
#[derive(Debug, Clone, Copy)]
pub enum Roots<'a> {
    /// The system's.
    System,
    /// These PEM certificates, instead of the system's.
    Pem(&'a [u8]),
    /// None: a connector for `http://` URLs (an `https://` one fails its handshake),
    /// which reads no certificates.
    HttpOnly,
}

/// Why a connector could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The PEM certificates given could not be read.
    #[error("its CA certificates: {0}")]
    Pem(String),
    /// No certificate to trust was found.
    #[error("no CA certificates to trust for https (set ca_file or SSL_CERT_FILE)")]
    NoRoots,
}

/// A connector trusting `roots`; fails when the PEM certificates do not parse, or when
/// [`Roots::System`] or [`Roots::Pem`] holds no certificate.
pub fn connector(roots: Roots<'_>) -> Result<Connector, TlsError> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::System => {
            store.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
        Roots::Pem(pem) => {
            for certificate in CertificateDer::pem_slice_iter(pem) {
                let certificate = certificate.map_err(|e| TlsError::Pem(e.to_string()))?;
                store.add(certificate).map_err(|e| TlsError::Pem(e.to_string()))?;
            }
        }
        Roots::HttpOnly => return Ok(build(store)),
    }
    if store.is_empty() {
        return Err(TlsError::NoRoots);
    }
    Ok(build(store))
}

/// A connector trusting the system's CA roots, as many as are found (with none, only
/// `http://` URLs work: an `https://` one fails its handshake).
pub fn system() -> Connector {
    let mut store = RootCertStore::empty();
    store.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    build(store)
}

/// The one place a connector is built.
fn build(roots: RootCertStore) -> Connector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().build()
}

#[cfg(test)]
mod tests;
