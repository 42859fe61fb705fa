//! A JSON Web Key Set parsed into verification keys: public signature keys only, by `kid`.

use crate::IssuerError;
use jsonwebtoken::{
    Algorithm, DecodingKey,
    jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse},
};
use std::collections::HashMap;

/// The largest JWKS document read (bytes).
pub(crate) const MAX_JWKS_BYTES: usize = 256 * 1024;

/// One public key and the algorithm it verifies.
pub(crate) struct Key {
    pub(crate) decoding: DecodingKey,
    /// The one algorithm this key may verify: its JWK `alg`, else the one
    /// its type implies (RSA: RS256, P-256: ES256, Ed25519: EdDSA).
    pub(crate) algorithm: Algorithm,
}

/// The usable keys of one JWKS: RSA, P-256 and Ed25519 signature keys.
/// Symmetric (`oct`) keys, encryption keys and keys of other curves are
/// left out, so no token can be verified with them.
#[derive(Default)]
pub struct KeySet {
    by_kid: HashMap<String, Key>,
    /// Keys without a `kid`, used for tokens without one.
    unnamed: Vec<Key>,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySet")
            .field("kids", &self.by_kid.keys().collect::<Vec<_>>())
            .field("unnamed", &self.unnamed.len())
            .finish()
    }
}

impl KeySet {
    /// Parses a JWKS document (`{"keys": [...]}`); entries that are not
    /// usable signature keys are skipped. An error when the document is
    /// not a JWKS at all or holds no usable key.
    pub fn parse(document: &[u8]) -> Result<KeySet, IssuerError> {
        if document.len() > MAX_JWKS_BYTES {
            return Err(IssuerError::KeySetTooLarge(MAX_JWKS_BYTES));
        }
        #[derive(serde::Deserialize)]
        struct Raw {
            keys: Vec<serde_json::Value>,
        }
        let raw: Raw =
            serde_json::from_slice(document).map_err(|e| IssuerError::NotKeySet(e.to_string()))?;
        let mut set = KeySet::default();
        for entry in raw.keys {
            let Ok(jwk) = serde_json::from_value::<Jwk>(entry) else {
                continue;
            };
            let Some(key) = usable(&jwk) else { continue };
            match jwk.common.key_id {
                Some(kid) => {
                    set.by_kid.insert(kid, key);
                }
                None => set.unnamed.push(key),
            }
        }
        if set.is_empty() {
            return Err(IssuerError::NoUsableKey);
        }
        Ok(set)
    }

    /// The key a token's header names: by `kid`, or the only key without
    /// one when the token names none.
    pub(crate) fn find(&self, kid: Option<&str>) -> Option<&Key> {
        match kid {
            Some(kid) => self.by_kid.get(kid),
            None => match self.unnamed.as_slice() {
                [only] => Some(only),
                _ => None,
            },
        }
    }

    /// How many keys it holds.
    pub fn len(&self) -> usize {
        self.by_kid.len() + self.unnamed.len()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The verification key of a JWK, when it is a public signature key of an
/// accepted type whose declared `alg` (if any) fits it.
fn usable(jwk: &Jwk) -> Option<Key> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    let implied = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => {
            Algorithm::ES256
        }
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => {
            Algorithm::EdDSA
        }
        // Symmetric keys, other curves: never.
        _ => return None,
    };
    let algorithm = match jwk.common.key_algorithm {
        None => implied,
        Some(KeyAlgorithm::RS256) if implied == Algorithm::RS256 => Algorithm::RS256,
        Some(KeyAlgorithm::ES256) if implied == Algorithm::ES256 => Algorithm::ES256,
        Some(KeyAlgorithm::EdDSA) if implied == Algorithm::EdDSA => Algorithm::EdDSA,
        Some(_) => return None,
    };
    let decoding = DecodingKey::from_jwk(jwk).ok()?;
    Some(Key {
        decoding,
        algorithm,
    })
}
