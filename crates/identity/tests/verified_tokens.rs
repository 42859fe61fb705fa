//! Verified tokens are remembered by their bytes until their `exp`, a key rotation or a policy reload; a refused token never is.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use toolmesh_identity::issuers::{
    self, Algorithm, FetchAuth, Issuer, IssuerKeys, KeySource, TenantFrom,
};
use toolmesh_identity::signing::{SigningKey, jwks};
use toolmesh_identity::{AuthError, Callers, Principal, Token};

const ISSUER: &str = "https://idp.example.test";
const AUDIENCE: &str = "toolmesh";

/// A JWKS file of its own, removed on drop.
struct KeyFile(PathBuf);

impl KeyFile {
    fn new(name: &str, keys: &[&SigningKey]) -> KeyFile {
        let path = std::env::temp_dir().join(format!(
            "toolmesh-identity-{}-{name}.json",
            std::process::id()
        ));
        let file = KeyFile(path);
        file.publish(keys);
        file
    }

    fn publish(&self, keys: &[&SigningKey]) {
        std::fs::write(&self.0, jwks(keys)).unwrap();
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An issuer whose keys are the JWKS at `path`, fetched again every `refresh`.
fn issuer(path: &Path, refresh: Duration) -> Issuer {
    Issuer {
        issuer: ISSUER.into(),
        audiences: vec![AUDIENCE.into()],
        keys: KeySource::File(path.to_owned()),
        fetch: FetchAuth::default(),
        algorithms: vec![Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA],
        clock_skew_secs: issuers::DEFAULT_CLOCK_SKEW_SECS,
        refresh,
        min_refresh: refresh,
        max_stale: Duration::from_secs(issuers::DEFAULT_MAX_STALE_SECS),
        principal_claim: "sub".into(),
        tenant: TenantFrom::Fixed("acme".into()),
        roles_claim: None,
        roles: vec!["agent".into()],
        role_map: Default::default(),
        list_scope: None,
        call_scope: None,
    }
}

fn callers() -> Callers {
    Callers::new(
        false,
        Principal {
            name: "anonymous".into(),
            tenant: "default".into(),
            roles: Vec::new(),
            anonymous: true,
            issued_by: None,
        },
    )
}

fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

/// Claims for `subject` expiring `exp_in` seconds from now (negative: past).
/// `token` verified as a caller presents it.
fn verify(token: &str, issuers: &[Issuer], keys: &IssuerKeys) -> Result<Principal, AuthError> {
    let token = Token::read(token).expect("a token of one word");
    issuers::verify(&token, issuers, &callers(), keys)
}

fn claims(subject: &str, exp_in: i64) -> Value {
    let now = now();
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": subject, "iat": now - 120,
           "exp": now.saturating_add_signed(exp_in)})
}

/// A token verified once answers the same caller again from memory; an
/// expired one, one with a bad signature and one for another audience are
/// refused, each time with their own error, and never remembered.
#[test]
fn verified_tokens_are_remembered_and_refused_ones_never() {
    let key = SigningKey::es256("k1");
    let file = KeyFile::new("remembered", &[&key]);
    let issuers = [issuer(&file.0, Duration::from_secs(300))];
    let keys = IssuerKeys::default();
    keys.follow(1, &issuers);
    let token = key.mint(&claims("alice", 600));
    let first = verify(&token, &issuers, &keys).unwrap();
    assert_eq!(first.name, "alice");
    assert_eq!(keys.verified_tokens(), 1);
    let again = verify(&token, &issuers, &keys).unwrap();
    assert_eq!(again, first);
    assert_eq!(keys.verified_tokens(), 1);

    let expired = key.mint(&claims("bob", -3600));
    let forged = SigningKey::es256("k1").mint(&claims("mallory", 600));
    let mut elsewhere = claims("carol", 600);
    elsewhere["aud"] = json!("another-service");
    let elsewhere = key.mint(&elsewhere);
    for _ in 0..2 {
        assert_eq!(
            verify(&expired, &issuers, &keys),
            Err(AuthError::TokenExpired)
        );
        assert_eq!(
            verify(&forged, &issuers, &keys),
            Err(AuthError::BadSignature)
        );
        assert_eq!(
            verify(&elsewhere, &issuers, &keys),
            Err(AuthError::WrongAudience)
        );
    }
    assert_eq!(keys.verified_tokens(), 1);
}

/// A policy reload forgets every verified token (its claim mapping or
/// pinned subjects may name the caller differently).
#[test]
fn a_policy_reload_forgets_verified_tokens() {
    let key = SigningKey::rs256("r1");
    let file = KeyFile::new("reload", &[&key]);
    let issuers = [issuer(&file.0, Duration::from_secs(300))];
    let keys = IssuerKeys::default();
    keys.follow(1, &issuers);
    let token = key.mint(&claims("alice", 600));
    verify(&token, &issuers, &keys).unwrap();
    assert_eq!(keys.verified_tokens(), 1);
    let mut renamed = issuers.clone();
    renamed[0].tenant = TenantFrom::Fixed("globex".into());
    keys.follow(2, &renamed);
    assert_eq!(keys.verified_tokens(), 0);
    let who = verify(&token, &renamed, &keys).unwrap();
    assert_eq!(who.tenant, "globex");
}

/// A token verified, then its key removed from the JWKS and the JWKS
/// fetched again, is refused: the memory of it ends with the keys that
/// verified it.
#[tokio::test]
async fn a_key_dropped_from_the_jwks_ends_its_verified_tokens() {
    let old = SigningKey::es256("old");
    let new = SigningKey::es256("new");
    let file = KeyFile::new("rotation", &[&old, &new]);
    let issuers = [issuer(&file.0, Duration::from_millis(100))];
    let keys = IssuerKeys::default();
    keys.follow(1, &issuers);
    let token = old.mint(&claims("alice", 600));
    verify(&token, &issuers, &keys).unwrap();
    assert_eq!(keys.verified_tokens(), 1);

    file.publish(&[&new]);
    let fetches = keys.status()[0].fetches;
    let deadline = Instant::now() + Duration::from_secs(10);
    while keys.status()[0].fetches < fetches + 2 {
        assert!(Instant::now() < deadline, "the JWKS was not read again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(verify(&token, &issuers, &keys), Err(AuthError::UnknownKey));
    let fresh = new.mint(&claims("alice", 600));
    assert!(verify(&fresh, &issuers, &keys).is_ok());
}
