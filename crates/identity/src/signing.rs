//! Signing keys of a local issuer (feature `signing`): keys made on the spot, tokens minted from them and their JWKS, for the tests and the benchmark.

use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::{
    rand::SystemRandom,
    signature::{self, KeyPair},
};
use serde_json::{Value, json};

/// A fixed 2048-bit RSA test key (PKCS#1 DER): ring cannot generate RSA keys.
const RSA_TEST_KEY: &[u8] = include_bytes!("../data/rsa-test-key.der");

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A private signing key with its public JWK.
///
/// Made for tests and the benchmark: its constructors and minting panic
/// if ring or the JWT library fail, which they do only on a broken build.
pub struct SigningKey {
    /// Its `kid`.
    pub kid: String,
    /// The algorithm it signs with.
    pub algorithm: Algorithm,
    encoding: EncodingKey,
    jwk: Value,
}

impl SigningKey {
    /// A fresh P-256 key (ES256).
    pub fn es256(kid: &str) -> SigningKey {
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let random = SystemRandom::new();
        let pkcs8 = signature::EcdsaKeyPair::generate_pkcs8(alg, &random)
            .expect("ring generates a P-256 key");
        let pair = signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &random)
            .expect("ring reads the P-256 key it made");
        // Uncompressed point: 0x04 || x || y.
        let point = pair.public_key().as_ref();
        SigningKey {
            kid: kid.into(),
            algorithm: Algorithm::ES256,
            encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk: json!({"kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
                        "x": b64(&point[1..33]), "y": b64(&point[33..65])}),
        }
    }

    /// A fresh Ed25519 key (EdDSA).
    pub fn ed25519(kid: &str) -> SigningKey {
        let pkcs8 = signature::Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
            .expect("ring generates an Ed25519 key");
        let pair = signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref())
            .expect("ring reads the Ed25519 key it made");
        SigningKey {
            kid: kid.into(),
            algorithm: Algorithm::EdDSA,
            encoding: EncodingKey::from_ed_der(pkcs8.as_ref()),
            jwk: json!({"kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": "EdDSA", "kid": kid,
                        "x": b64(pair.public_key().as_ref())}),
        }
    }

    /// The fixed RSA test key (RS256) under `kid`.
    pub fn rs256(kid: &str) -> SigningKey {
        let pair =
            signature::RsaKeyPair::from_der(RSA_TEST_KEY).expect("the RSA test key is valid DER");
        let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(pair.public());
        SigningKey {
            kid: kid.into(),
            algorithm: Algorithm::RS256,
            encoding: EncodingKey::from_rsa_der(RSA_TEST_KEY),
            jwk: json!({"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
                        "n": b64(&public.n), "e": b64(&public.e)}),
        }
    }

    /// Its public JWK.
    pub fn jwk(&self) -> Value {
        self.jwk.clone()
    }

    /// A token with `claims`, signed by this key, naming its `kid`.
    pub fn mint(&self, claims: &Value) -> String {
        self.mint_as(&self.kid, claims)
    }

    /// A token with `claims` signed by this key but naming `kid`.
    pub fn mint_as(&self, kid: &str, claims: &Value) -> String {
        let mut header = Header::new(self.algorithm);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(&header, claims, &self.encoding).expect("a JSON object signs")
    }

    /// A token with `claims` whose header also holds the members of
    /// `extra` (e.g. `crit`, which the JWT library's header cannot carry).
    pub fn mint_with_header(&self, extra: &Value, claims: &Value) -> String {
        let mut header = serde_json::to_value(Header {
            kid: Some(self.kid.clone()),
            ..Header::new(self.algorithm)
        })
        .expect("a JWT header is JSON");
        if let (Some(header), Some(extra)) = (header.as_object_mut(), extra.as_object()) {
            header.extend(extra.clone());
        }
        let message = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let signature =
            jsonwebtoken::crypto::sign(message.as_bytes(), &self.encoding, self.algorithm)
                .expect("the message signs");
        format!("{message}.{signature}")
    }

    /// The public key's bytes as they appear in its JWK (`n` or `x`), the
    /// "secret" of an HS256 forgery.
    pub fn public_bytes(&self) -> Vec<u8> {
        let field = self
            .jwk
            .get("n")
            .or_else(|| self.jwk.get("x"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(field)
            .expect("the JWK holds base64url")
    }
}

/// A JWKS document of `keys`.
pub fn jwks(keys: &[&SigningKey]) -> String {
    json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()}).to_string()
}
