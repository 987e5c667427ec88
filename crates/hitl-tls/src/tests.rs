use crate::{Roots, TlsError, connector};

#[test]
fn certificates_that_do_not_parse_are_refused() {
    let pem = b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n";
    assert!(matches!(connector(Roots::Pem(pem)), Err(TlsError::Pem(_))));
}

#[test]
fn an_https_connector_that_trusts_nothing_is_refused() {
    assert!(matches!(connector(Roots::Pem(b"")), Err(TlsError::NoRoots)));
    assert_eq!(TlsError::NoRoots.to_string(), "no CA certificates to trust for https (set ca_file or SSL_CERT_FILE)");
}

#[test]
fn an_http_only_connector_needs_no_certificates() {
    assert!(connector(Roots::HttpOnly).is_ok());
}
