//! Verifying a JWT against the configured issuers and turning its claims into a principal.

use super::{Issuer, IssuerKeys, TenantFrom};
use crate::{AuthError, Callers, DISPATCHER_ROLE, IssuedBy, Principal, Token};
use base64::Engine;
use jsonwebtoken::{Validation, errors::ErrorKind};
use serde_json::{Map, Value};
use toolmesh::MissingScopes;

/// The longest token read (bytes); longer ones are refused unparsed.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The longest issuer named back in an error.
const MAX_ECHOED: usize = 120;

/// Whether a bearer token has the shape of a JWT (three dot-separated
/// parts), so a static token is never parsed as one. Counted in blocks
/// folded without an early exit, which the compiler vectorizes.
pub fn looks_like_jwt(token: &str) -> bool {
    let dots: usize = token
        .as_bytes()
        .chunks(64)
        .map(|block| usize::from(block.iter().fold(0u8, |n, &b| n + u8::from(b == b'.'))))
        .sum();
    dots == 2
}

/// The caller a JWT names: its `iss` picks the issuer, its header's `kid`
/// the key (which must be one of the issuer's allowed algorithms and the
/// key's own), then signature, `exp`, `nbf` and `aud` are checked. A
/// subject pinned in `callers` names the caller instead of the claims.
///
/// A token verified before is answered from `keys`' memory of verified
/// tokens (by its SHA-256, taken once when it was read) until its `exp`, until its issuer's keys are
/// fetched again, or until `keys` follows another policy generation; a
/// token that failed is never remembered. `issuers` and `callers` must be
/// those of the policy `keys` follows ([`IssuerKeys::follow`]).
pub fn verify(
    presented: &Token<'_>,
    issuers: &[Issuer],
    callers: &Callers,
    keys: &IssuerKeys,
) -> Result<Principal, AuthError> {
    let token = presented.text();
    if token.len() > MAX_TOKEN_BYTES {
        return Err(AuthError::TokenTooLarge {
            max: MAX_TOKEN_BYTES,
        });
    }
    if let Some(known) = keys.verified().lookup(presented.digest()) {
        return Ok(known);
    }
    let header = jsonwebtoken::decode_header(token).map_err(|_| AuthError::MalformedToken {
        why: "its header is not a JWT header of an RS256, ES256 or EdDSA token".into(),
    })?;
    if segment(token, 0)?.contains_key("crit") {
        // No extension is implemented here, so any critical one is unknown.
        return Err(AuthError::CriticalExtension);
    }
    let iss = unverified_issuer(token)?;
    let issuer = issuers
        .iter()
        .find(|i| i.issuer == iss)
        .ok_or_else(|| AuthError::UnknownIssuer { issuer: echo(&iss) })?;
    let algorithm = format!("{:?}", header.alg);
    if !issuer.algorithms.contains(&header.alg) {
        return Err(AuthError::AlgorithmNotAllowed { algorithm });
    }
    let store = keys.store(issuer).ok_or(AuthError::IssuerKeysUnavailable)?;
    let Some(loaded) = store.keys() else {
        store.request_refresh();
        return Err(AuthError::IssuerKeysUnavailable);
    };
    let Some(key) = loaded.set.find(header.kid.as_deref()) else {
        store.request_refresh();
        return Err(AuthError::UnknownKey);
    };
    if key.algorithm != header.alg {
        // An RSA key must not verify an ES256 token, nor any key an HMAC one.
        return Err(AuthError::AlgorithmNotAllowed { algorithm });
    }
    let mut validation = Validation::new(key.algorithm);
    validation.leeway = issuer.clock_skew_secs;
    validation.validate_nbf = true;
    validation.set_audience(&issuer.audiences);
    validation.set_issuer(&[&issuer.issuer]);
    validation.set_required_spec_claims(&["exp", "iss", "aud"]);
    let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation)
        .map_err(|e| refusal(e.kind()))?
        .claims;
    if let Some(iat) = claims.get("iat").and_then(Value::as_f64)
        && iat > jsonwebtoken::get_current_timestamp() as f64 + issuer.clock_skew_secs as f64
    {
        return Err(AuthError::IssuedInTheFuture);
    }
    let who = caller(issuer, callers, &claims)?;
    if let Some(expires_at) = claims.get("exp").and_then(Value::as_f64) {
        // Remembered until `exp` itself: a token within its clock skew
        // past it is verified afresh (and accepted or not as before).
        keys.verified()
            .remember(presented.digest(), &who, expires_at as u64, &store, &loaded);
    }
    Ok(who)
}

/// The caller verified `claims` of `issuer` name: a `[[callers]]` entry
/// pinned to this exact subject (the only way a token holder gets the
/// dispatcher role), else the issuer's claim mapping.
fn caller(
    issuer: &Issuer,
    callers: &Callers,
    claims: &Map<String, Value>,
) -> Result<Principal, AuthError> {
    if let Some(Value::String(sub)) = claims.get("sub")
        && let Some(pinned) = callers.subject_caller(&issuer.issuer, sub)
    {
        return Ok(Principal {
            issued_by: Some(issued_by(issuer, sub.clone(), claims)),
            ..pinned.clone()
        });
    }
    principal(issuer, claims)
}

/// Who issued the token, and which of its issuer's required scopes it lacks.
fn issued_by(issuer: &Issuer, subject: String, claims: &Map<String, Value>) -> IssuedBy {
    let granted: Vec<&str> = ["scope", "scp"]
        .iter()
        .filter_map(|claim| claims.get(*claim))
        .flat_map(|value| match value {
            Value::String(words) => words.split_whitespace().collect::<Vec<_>>(),
            Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        })
        .collect();
    let lacking = |needed: &Option<String>| {
        needed
            .clone()
            .filter(|scope| !granted.contains(&scope.as_str()))
    };
    IssuedBy {
        issuer: issuer.issuer.clone(),
        subject,
        missing_scopes: MissingScopes {
            list: lacking(&issuer.list_scope),
            call: lacking(&issuer.call_scope),
        },
        expires_at: claims.get("exp").and_then(Value::as_u64),
    }
}

/// The `iss` of a token before its signature is checked: only to pick
/// the issuer whose keys then verify it.
fn unverified_issuer(token: &str) -> Result<String, AuthError> {
    match segment(token, 1)?.get("iss") {
        Some(Value::String(iss)) => Ok(iss.clone()),
        _ => Err(AuthError::MalformedToken {
            why: "it names no issuer (`iss`)".into(),
        }),
    }
}

/// Part `index` of a token (0: the header, 1: the claims) as the JSON
/// object it must be, before the signature is checked.
fn segment(token: &str, index: usize) -> Result<Map<String, Value>, AuthError> {
    let part = ["header", "claims segment"][index.min(1)];
    let malformed = |why: String| AuthError::MalformedToken { why };
    let text = token.split('.').nth(index).unwrap_or_default();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .map_err(|_| malformed(format!("its {part} is not base64url")))?;
    serde_json::from_slice(&bytes)
        .map_err(|_| malformed(format!("its {part} is not a JSON object")))
}

/// The refusal for what the JWT library found wrong.
fn refusal(kind: &ErrorKind) -> AuthError {
    match kind {
        ErrorKind::ExpiredSignature => AuthError::TokenExpired,
        ErrorKind::ImmatureSignature => AuthError::TokenNotYetValid,
        ErrorKind::InvalidAudience => AuthError::WrongAudience,
        ErrorKind::MissingRequiredClaim(claim) if claim == "aud" => AuthError::WrongAudience,
        ErrorKind::MissingRequiredClaim(claim) => AuthError::MalformedToken {
            why: format!("it lacks the claim `{claim}`"),
        },
        ErrorKind::InvalidIssuer => AuthError::UnknownIssuer {
            issuer: String::new(),
        },
        ErrorKind::InvalidSignature | ErrorKind::InvalidEcdsaKey | ErrorKind::InvalidRsaKey(_) => {
            AuthError::BadSignature
        }
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => {
            AuthError::AlgorithmNotAllowed {
                algorithm: String::new(),
            }
        }
        _ => AuthError::MalformedToken {
            why: "its parts are not well-formed".into(),
        },
    }
}

/// The principal of verified `claims` under `issuer`'s mapping.
fn principal(issuer: &Issuer, claims: &Map<String, Value>) -> Result<Principal, AuthError> {
    let text = |claim: &str| match claims.get(claim) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        _ => Err(AuthError::MalformedToken {
            why: format!(
                "it lacks the claim `{claim}` (a non-empty string) this mesh names callers by"
            ),
        }),
    };
    let name = text(&issuer.principal_claim)?;
    let tenant = match &issuer.tenant {
        TenantFrom::Fixed(tenant) => tenant.clone(),
        TenantFrom::Claim(claim) => text(claim)?,
    };
    let mut roles = issuer.roles.clone();
    if let Some(claim) = &issuer.roles_claim {
        let values: Vec<&str> = match claims.get(claim) {
            Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
            Some(Value::String(words)) => words.split_whitespace().collect(),
            _ => Vec::new(),
        };
        for value in values {
            let role = if issuer.role_map.is_empty() {
                Some(value)
            } else {
                issuer.role_map.get(value).map(String::as_str)
            };
            // The dispatcher role is never one a token can claim.
            if let Some(role) = role.filter(|r| *r != DISPATCHER_ROLE && !r.is_empty())
                && !roles.iter().any(|r| r == role)
            {
                roles.push(role.to_owned());
            }
        }
    }
    let subject = match claims.get("sub") {
        Some(Value::String(sub)) => sub.clone(),
        _ => name.clone(),
    };
    Ok(Principal {
        name,
        tenant,
        roles,
        anonymous: false,
        issued_by: Some(issued_by(issuer, subject, claims)),
    })
}

/// A value from the token, shortened and stripped of control characters,
/// to name back in an error.
fn echo(text: &str) -> String {
    let mut out: String = text
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_ECHOED)
        .collect();
    if text.chars().count() > MAX_ECHOED {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::looks_like_jwt;

    /// Exactly two dots make a JWT's shape, wherever they fall in a long
    /// token (across the blocks it is counted in) and however many other
    /// characters there are.
    #[test]
    fn two_dots_make_a_jwt_shape() {
        for (dots, long) in [(0, 10), (1, 100), (2, 700), (3, 700), (200, 5000)] {
            let mut token: Vec<u8> = vec![b'a'; long];
            for i in 0..dots {
                token[i * (long / dots.max(1)) + 63 % (long / dots.max(1))] = b'.';
            }
            let token = String::from_utf8(token).unwrap();
            let counted = token.bytes().filter(|&b| b == b'.').count();
            assert_eq!(counted, dots, "the test placed its dots");
            assert_eq!(
                looks_like_jwt(&token),
                dots == 2,
                "{dots} dots in {long} bytes"
            );
        }
        assert!(looks_like_jwt("a.b.c"));
        assert!(!looks_like_jwt("a.b.c.d"));
    }
}
