//! Approval receipts (`[receipts] key_file`): every call a person approved (or edited)
//! goes upstream with `_meta["io.hitl/approval"]`, a compact JWS (EdDSA, Ed25519) the
//! upstream can check against hitl's public key (`GET /.well-known/hitl-receipts.jwks`):
//! which upstream and tool, a digest of the very arguments sent, who called, who
//! approved under which policy, for a few minutes, once (`jti`).
//!
//! ```
//! use hitl_gateway::receipts::Receipts;
//!
//! let pem = Receipts::generate_pem();
//! let receipts = Receipts::from_pem(&pem).unwrap();
//! let token = receipts.sign(&serde_json::json!({"aud": "db", "tool": "drop_partition"}));
//! assert_eq!(token.split('.').count(), 3);
//! let jwks = receipts.jwks();
//! assert_eq!(jwks["keys"][0]["crv"], "Ed25519");
//! ```

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::signature::{Ed25519KeyPair, KeyPair as _};
use serde_json::{Map, Value, json};

/// The `_meta` key a receipt travels under.
pub const META_KEY: &str = "io.hitl/approval";

/// The path hitl serves the receipts' public key at.
pub const JWKS_PATH: &str = "/.well-known/hitl-receipts.jwks";

/// How long a receipt is good for, in seconds.
pub const LIFETIME_SECONDS: u64 = 300;

/// The key that signs receipts, and its id.
pub struct Receipts {
    key: Ed25519KeyPair,
    kid: String,
}

impl std::fmt::Debug for Receipts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receipts").field("kid", &self.kid).finish_non_exhaustive()
    }
}

impl Receipts {
    /// The Ed25519 private key of a PEM file (`-----BEGIN PRIVATE KEY-----`, PKCS#8, as
    /// `openssl genpkey -algorithm ed25519` writes it).
    pub fn from_pem(pem: &str) -> Result<Self, String> {
        let body: String = pem
            .lines()
            .map(str::trim)
            .skip_while(|l| *l != "-----BEGIN PRIVATE KEY-----")
            .skip(1)
            .take_while(|l| *l != "-----END PRIVATE KEY-----")
            .collect();
        if body.is_empty() {
            return Err("no \"-----BEGIN PRIVATE KEY-----\" block (an Ed25519 key in PKCS#8 PEM)".into());
        }
        let der = STANDARD.decode(body).map_err(|e| format!("the PEM block is not base64: {e}"))?;
        let key = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der)
            .map_err(|e| format!("not an Ed25519 private key in PKCS#8: {e}"))?;
        let digest = ring::digest::digest(&ring::digest::SHA256, key.public_key().as_ref());
        let kid = crate::cover::hex(&digest.as_ref()[..8]);
        Ok(Self { key, kid })
    }

    /// A new key as PEM (for tests and `hitl` users without openssl).
    pub fn generate_pem() -> String {
        let rng = ring::rand::SystemRandom::new();
        let der = Ed25519KeyPair::generate_pkcs8(&rng).expect("the system's random numbers");
        let text = STANDARD.encode(der.as_ref());
        let lines: Vec<&str> =
            text.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).expect("base64 is ASCII")).collect();
        format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n", lines.join("\n"))
    }

    /// `claims` as a compact JWS, signed.
    pub fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": "EdDSA", "typ": "JWT", "kid": self.kid});
        let signing_input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let signature = self.key.sign(signing_input.as_bytes());
        format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }

    /// The public key as a JWK set.
    pub fn jwks(&self) -> Value {
        json!({"keys": [{
            "kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "kid": self.kid,
            "x": URL_SAFE_NO_PAD.encode(self.key.public_key().as_ref()),
        }]})
    }
}

/// The hex SHA-256 of `args` as RFC 8785 canonical JSON (keys sorted, compact): what a
/// receipt's `args_sha256` names, what the upstream computes over the arguments it
/// receives, and what an approval of scope `arguments` is kept under.
pub fn args_sha256(args: &Map<String, Value>) -> String {
    let mut text = Vec::with_capacity(256);
    hitl_protocol::canonical::write_object(args.iter().map(|(k, v)| (k.as_str(), v)), &mut text);
    crate::cover::hex(ring::digest::digest(&ring::digest::SHA256, &text).as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{ED25519, UnparsedPublicKey};

    #[test]
    fn a_receipt_verifies_under_the_published_key_and_names_its_claims() {
        let receipts = Receipts::from_pem(&Receipts::generate_pem()).unwrap();
        let claims = json!({"aud": "db", "tool": "drop_partition", "args_sha256": "ab", "jti": "t.1"});
        let token = receipts.sign(&claims);
        let parts: Vec<&str> = token.split('.').collect();
        let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(
            (header["alg"].as_str(), header["kid"].as_str()),
            (Some("EdDSA"), receipts.jwks()["keys"][0]["kid"].as_str())
        );
        let read: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(read, claims);
        let x = URL_SAFE_NO_PAD.decode(receipts.jwks()["keys"][0]["x"].as_str().unwrap()).unwrap();
        let public = UnparsedPublicKey::new(&ED25519, x);
        let signed = format!("{}.{}", parts[0], parts[1]);
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        assert!(public.verify(signed.as_bytes(), &signature).is_ok());
        assert!(public.verify(format!("{signed}x").as_bytes(), &signature).is_err(), "other claims do not verify");
    }

    #[test]
    fn a_key_file_is_read_and_nonsense_is_refused() {
        assert!(Receipts::from_pem("nothing").unwrap_err().contains("BEGIN PRIVATE KEY"));
        assert!(Receipts::from_pem("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----").is_err());
        // The key `openssl genpkey -algorithm ed25519` wrote (PKCS#8 v1).
        let openssl = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIEhsXT2ZEL0h2cAlPAdL5Z2CLnrnYo7eVTOC5ZJ3g6ff\n-----END PRIVATE KEY-----\n";
        assert!(Receipts::from_pem(openssl).is_ok());
        let args: Map<String, Value> = serde_json::from_value(json!({"b": 1, "a": "x"})).unwrap();
        // SHA-256 of `{"a":"x","b":1}`: keys sorted, compact, as RFC 8785 writes it.
        assert_eq!(args_sha256(&args), "cdab067e9f3beb32d1252cfd63e492592fecbf591b0d08cadb24bb17f3864246");
    }
}
