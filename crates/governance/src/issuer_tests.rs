//! `[[issuers]]`: bad sections refused at load with their line; tokens verified and mapped; every attack refused with its own message; keys refreshed at a bounded rate and kept while the provider fails.

use crate::{Governance, PolicyHandle};
use serde_json::{Value, json};
use std::{path::Path, sync::Arc, time::Duration};
use toolmesh_identity::issuers::{KeySet, KeySource, MAX_TOKEN_BYTES};
use toolmesh_identity::{AuthError, Principal};
use toolmesh_policy::{EXAMPLE_POLICY_TOML, Policy, PolicyError};
use toolmesh_testkit::oidc::{self, Mode, Provider, SigningKey};
use toolmesh_testkit::policy::{Caller, PolicyBuilder};

const ISSUER: &str = "https://idp.example.test";

/// The problems of a policy that must not load, as `(line, field, message)`.
fn problems(text: &str) -> Vec<(usize, String, String)> {
    match Policy::from_toml(text) {
        Err(PolicyError::Invalid { problems, .. }) => problems
            .into_iter()
            .map(|p| (p.line.unwrap_or(0), p.field, p.message))
            .collect(),
        other => panic!("expected problems, got {other:?}"),
    }
}

/// Each bad entry is refused at load, naming its line and what to do.
#[test]
fn bad_issuer_sections_are_refused_with_their_line() {
    let cases: &[(&str, usize, &str, &str)] = &[
        (
            "[[issuers]]\nissuer = \"https://a.test\"\naudiences = [\"m\"]\nalgorithms = [\"none\"]\n",
            4,
            "algorithms[0]",
            "unsigned",
        ),
        (
            "[[issuers]]\nissuer = \"https://a.test\"\naudiences = [\"m\"]\nalgorithms = [\"RS256\", \"HS256\"]\n",
            4,
            "algorithms[1]",
            "HMAC",
        ),
        (
            "\n[[issuers]]\nissuer = \"https://a.test\"\n",
            2,
            "audiences",
            "is missing",
        ),
        (
            "[[issuers]]\nissuer = \"a.test\"\naudiences = [\"m\"]\n",
            2,
            "issuer",
            "URL",
        ),
        (
            "[[issuers]]\nissuer = \"https://a.test\"\naudiences = [\"m\"]\njwks_uri = \"https://a.test/k\"\njwks_file = \"k.json\"\n",
            5,
            "jwks_file",
            "one place",
        ),
        (
            "[[issuers]]\nissuer = \"https://a.test\"\naudiences = [\"m\"]\ntenant = \"acme\"\ntenant_claim = \"org\"\n",
            5,
            "tenant_claim",
            "keep one",
        ),
        (
            "[[issuers]]\nissuer = \"https://a.test\"\naudiences = [\"m\"]\nclock_skew_secs = 3600\n",
            4,
            "clock_skew_secs",
            "out of range",
        ),
        (
            "[[issuers]]\nissuer = \"https://a.test\"\naudiences = [\"m\"]\nrole_map = { g = \"agent\" }\n",
            1,
            "role_map",
            "roles_claim",
        ),
        (
            "[[issuers]]\nissuer = \"https://a.test\"\naudiences = [\"m\"]\nroles = [\"dispatcher\"]\n",
            1,
            "roles",
            "dispatcher",
        ),
        (
            "[[issuers]]\nissuer = \"https://a.test\"\naudiences = [\"m\"]\n[[issuers]]\nissuer = \"https://a.test\"\naudiences = [\"n\"]\n",
            4,
            "[[issuers]] #2 issuer",
            "already",
        ),
        (
            "[[issuers]]\nissuer = \"http://idp.example\"\naudiences = [\"m\"]\n",
            1,
            "issuer",
            "https://",
        ),
        (
            "[[issuers]]\nissuer = \"https://a.test\"\naudiences = [\"m\"]\njwks_uri = \"http://a.test/keys\"\n",
            1,
            "jwks_uri",
            "https://",
        ),
    ];
    for (text, line, field, says) in cases {
        let found = problems(text);
        assert!(
            found
                .iter()
                .any(|(l, f, m)| l == line && f.ends_with(field) && m.contains(says)),
            "{text}\nexpected line {line} {field} saying {says:?}, got {found:?}"
        );
    }
    // An unknown key is a syntax error naming it.
    let typo = Policy::from_toml("[[issuers]]\nissuer = \"https://a.test\"\naudience = [\"m\"]\n");
    assert!(typo.unwrap_err().to_string().contains("audience"));
}

/// The defaults: discovery, the three algorithms, `sub`, tenant "default".
#[test]
fn an_issuer_with_only_its_url_and_audience_takes_the_defaults() {
    let policy = Policy::from_toml(&format!(
        "[[issuers]]\nissuer = \"{ISSUER}\"\naudiences = [\"mesh\"]\n"
    ))
    .unwrap();
    let issuer = &policy.issuers()[0];
    assert_eq!(issuer.keys, KeySource::Discovery);
    assert_eq!(issuer.algorithms.len(), 3);
    assert_eq!(issuer.principal_claim, "sub");
    assert_eq!(
        issuer.tenant,
        toolmesh_identity::issuers::TenantFrom::Fixed(toolmesh_identity::DEFAULT_TENANT.into())
    );
}

/// A policy trusting [`ISSUER`] with keys from `jwks_file`, and one static caller.
fn file_policy(jwks_file: &Path, extra: &str) -> Policy {
    let issuer = format!(
        r#"[[issuers]]
issuer = "{ISSUER}"
audiences = ["toolmesh", "mesh-2"]
jwks_file = "{}"
clock_skew_secs = 30
tenant_claim = "org"
roles_claim = "groups"
role_map = {{ "tm-agents" = "agent", "tm-admins" = "admin" }}
roles = ["employee"]
{extra}
"#,
        jwks_file.display()
    );
    let toml = PolicyBuilder::new()
        .caller(
            Caller::token("tok-static", "static-bot")
                .tenant("acme")
                .roles(&["agent"]),
        )
        .then(&issuer)
        .build_toml();
    Policy::from_toml(&toml).unwrap()
}

fn claims(extra: Value) -> Value {
    let now = oidc::now();
    let mut base = json!({"iss": ISSUER, "aud": "toolmesh", "sub": "user-1", "org": "acme",
                          "groups": ["tm-agents", "tm-dispatch", "other"],
                          "iat": now, "exp": now + 300});
    base.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    base
}

struct Files {
    _dir: toolmesh_testkit::TempDir,
    governance: Governance,
    es: SigningKey,
    ed: SigningKey,
    rs: SigningKey,
}

fn with_file_keys(extra: &str) -> Files {
    let dir = toolmesh_testkit::TempDir::new("jwt-file").unwrap();
    let (es, ed, rs) = (
        SigningKey::es256("es-1"),
        SigningKey::ed25519("ed-1"),
        SigningKey::rs256("rs-1"),
    );
    let path = dir.join("jwks.json");
    std::fs::write(&path, oidc::jwks(&[&es, &ed, &rs])).unwrap();
    let policy = file_policy(&path, extra);
    let governance = Governance::new(Arc::new(PolicyHandle::new(policy)), None);
    Files {
        _dir: dir,
        governance,
        es,
        ed,
        rs,
    }
}

fn who(g: &Governance, token: &str) -> Result<Principal, AuthError> {
    g.authenticate(Some(&format!("Bearer {token}")), None)
}

/// Tokens signed with each algorithm are accepted; claims map to the
/// principal, the tenant and the roles (through the map, never
/// "dispatcher"); static tokens work as before beside them.
#[test]
fn tokens_of_each_algorithm_map_to_principals() {
    let f = with_file_keys("");
    for key in [&f.es, &f.ed, &f.rs] {
        let caller = who(&f.governance, &key.mint(&claims(json!({})))).unwrap();
        assert_eq!(caller.name, "user-1");
        assert_eq!(caller.tenant, "acme");
        assert_eq!(caller.roles, ["employee", "agent"]);
        assert!(!caller.anonymous);
        let issued = caller.issued_by.unwrap();
        assert_eq!(
            (issued.issuer.as_str(), issued.subject.as_str()),
            (ISSUER, "user-1")
        );
    }
    // The second audience is accepted too, and `aud` may be a list.
    let other = claims(json!({"aud": ["elsewhere", "mesh-2"]}));
    assert!(who(&f.governance, &f.es.mint(&other)).is_ok());
    let stat = who(&f.governance, "tok-static").unwrap();
    assert_eq!((stat.name.as_str(), stat.issued_by), ("static-bot", None));
    assert!(matches!(
        who(&f.governance, "tok-unknown"),
        Err(AuthError::UnknownToken { .. })
    ));
}

/// A `[[callers]]` entry pinned to one subject of an issuer names that
/// caller, the dispatcher role included; the issuer's other subjects keep
/// its claim mapping, which never gives that role.
#[test]
fn a_caller_pinned_to_a_subject_may_be_the_dispatcher() {
    let f = with_file_keys(
        &PolicyBuilder::new()
            .caller(
                Caller::subject(
                    ISSUER,
                    "system:serviceaccount:mesh:dispatcher",
                    "dispatcher",
                )
                .tenant("ops")
                .roles(&["dispatcher"]),
            )
            .build_toml(),
    );
    let sub = json!({"sub": "system:serviceaccount:mesh:dispatcher"});
    let pinned = who(&f.governance, &f.es.mint(&claims(sub))).unwrap();
    assert_eq!(
        (pinned.name.as_str(), pinned.tenant.as_str()),
        ("dispatcher", "ops")
    );
    assert_eq!(pinned.roles, ["dispatcher"]);
    let issued = pinned.issued_by.unwrap();
    assert_eq!(issued.subject, "system:serviceaccount:mesh:dispatcher");
    // Another subject of the same issuer: the mapping, no dispatcher role.
    let other = json!({"sub": "system:serviceaccount:mesh:other", "groups": ["dispatcher"]});
    let other = who(&f.governance, &f.es.mint(&claims(other))).unwrap();
    assert!(!other.has_role("dispatcher"), "{other}");
    // A pinned subject's token still has to verify.
    let stranger = SigningKey::es256("es-1");
    let forged = stranger.mint(&claims(
        json!({"sub": "system:serviceaccount:mesh:dispatcher"}),
    ));
    assert!(matches!(
        who(&f.governance, &forged),
        Err(AuthError::BadSignature)
    ));
}

/// A subject entry names both halves, an issuer the policy trusts, and no
/// token beside them.
#[test]
fn bad_subject_callers_are_refused_with_their_line() {
    let issuer = format!("[[issuers]]\nissuer = \"{ISSUER}\"\naudiences = [\"m\"]\n");
    let cases: Vec<(String, usize, &str, &str)> = vec![
        (
            format!(
                "{issuer}[[callers]]\nissuer = \"https://other.test\"\nsubject = \"s\"\nprincipal = \"p\"\n"
            ),
            5,
            "[[callers]] #1 issuer",
            "no [[issuers]] entry",
        ),
        (
            format!("{issuer}[[callers]]\nissuer = \"{ISSUER}\"\nprincipal = \"p\"\n"),
            4,
            "[[callers]] #1 subject",
            "is missing",
        ),
        (
            format!(
                "{issuer}[[callers]]\nissuer = \"{ISSUER}\"\nsubject = \"s\"\ntoken = \"t\"\nprincipal = \"p\"\n"
            ),
            6,
            "[[callers]] #1 subject",
            "one of them",
        ),
        (
            format!(
                "{issuer}[[callers]]\nissuer = \"{ISSUER}\"\nsubject = \"s\"\nprincipal = \"p\"\n[[callers]]\nissuer = \"{ISSUER}\"\nsubject = \"s\"\nprincipal = \"q\"\n"
            ),
            10,
            "[[callers]] #2 subject",
            "second time (first on line 6)",
        ),
    ];
    for (text, line, field, says) in cases {
        let found = problems(&text);
        assert!(
            found
                .iter()
                .any(|(l, f, m)| *l == line && f == field && m.contains(says)),
            "{text}\nexpected line {line} {field} saying {says:?}, got {found:?}"
        );
    }
}

/// `list_scope` and `call_scope`: what a token's `scope` (words) or `scp`
/// (a list) lacks is named on the principal; a scope of several words is
/// refused at load.
#[test]
fn required_scopes_are_read_from_scope_or_scp() {
    let f = with_file_keys("list_scope = \"tools:read\"\ncall_scope = \"tools:call\"");
    let lacks = |extra: Value| {
        let who = who(&f.governance, &f.es.mint(&claims(extra))).unwrap();
        (
            who.missing_list_scope().map(str::to_owned),
            who.missing_call_scope().map(str::to_owned),
        )
    };
    assert_eq!(
        lacks(json!({})),
        (Some("tools:read".into()), Some("tools:call".into()))
    );
    assert_eq!(
        lacks(json!({"scope": "openid tools:read"})),
        (None, Some("tools:call".into()))
    );
    assert_eq!(
        lacks(json!({"scp": ["tools:read", "tools:call"]})),
        (None, None)
    );
    // A static token's caller has no scopes to lack.
    let stat = who(&f.governance, "tok-static").unwrap();
    assert_eq!(stat.missing_call_scope(), None);
    let found = problems(
        "[[issuers]]\nissuer = \"https://a.test\"\naudiences = [\"m\"]\ncall_scope = \"tools:call tools:read\"\n",
    );
    assert!(
        found
            .iter()
            .any(|(l, f, m)| *l == 4 && f.ends_with("call_scope") && m.contains("one OAuth scope")),
        "{found:?}"
    );
}

/// `principal_claim` names the principal; a missing claim is refused.
#[test]
fn the_principal_claim_is_configurable() {
    let f = with_file_keys("principal_claim = \"email\"");
    let caller = who(
        &f.governance,
        &f.es.mint(&claims(json!({"email": "ann@acme.test"}))),
    )
    .unwrap();
    assert_eq!(caller.name, "ann@acme.test");
    assert_eq!(caller.issued_by.unwrap().subject, "user-1");
    let err = who(&f.governance, &f.es.mint(&claims(json!({})))).unwrap_err();
    assert!(err.to_string().contains("`email`"), "{err}");
}

/// Every attack gets its own UNAUTHENTICATED message, naming no internals.
#[test]
fn attacks_are_refused_each_with_its_own_message() {
    let f = with_file_keys("");
    let g = &f.governance;
    let now = oidc::now();
    let stranger = SigningKey::es256("es-1");
    let cases: Vec<(&str, String, AuthError)> = vec![
        (
            "alg none",
            oidc::unsigned(&claims(json!({}))),
            AuthError::MalformedToken { why: String::new() },
        ),
        (
            "HS256 keyed with the RSA public key",
            oidc::hs256(&f.rs.public_bytes(), "rs-1", &claims(json!({}))),
            AuthError::AlgorithmNotAllowed {
                algorithm: "HS256".into(),
            },
        ),
        (
            "HS256 keyed with the Ed25519 public key",
            oidc::hs256(&f.ed.public_bytes(), "ed-1", &claims(json!({}))),
            AuthError::AlgorithmNotAllowed {
                algorithm: "HS256".into(),
            },
        ),
        (
            "expired beyond the skew",
            f.es.mint(&claims(json!({"exp": now - 120}))),
            AuthError::TokenExpired,
        ),
        (
            "not yet valid beyond the skew",
            f.es.mint(&claims(json!({"nbf": now + 120}))),
            AuthError::TokenNotYetValid,
        ),
        (
            "another issuer",
            f.es.mint(&claims(json!({"iss": "https://evil.test"}))),
            AuthError::UnknownIssuer {
                issuer: "https://evil.test".into(),
            },
        ),
        (
            "another audience",
            f.es.mint(&claims(json!({"aud": "other-service"}))),
            AuthError::WrongAudience,
        ),
        (
            "no audience",
            stranger_free(&f.es, &["aud"]),
            AuthError::WrongAudience,
        ),
        (
            "no expiry",
            stranger_free(&f.es, &["exp"]),
            AuthError::MalformedToken { why: String::new() },
        ),
        (
            "unknown kid",
            f.es.mint_as("es-404", &claims(json!({}))),
            AuthError::UnknownKey,
        ),
        (
            "signed by another key under a known kid",
            stranger.mint(&claims(json!({}))),
            AuthError::BadSignature,
        ),
        (
            "an ES256 token naming the RSA key",
            f.es.mint_as("rs-1", &claims(json!({}))),
            AuthError::AlgorithmNotAllowed {
                algorithm: "ES256".into(),
            },
        ),
        (
            "1 MB token",
            format!("{}.{}.x", "a".repeat(1 << 19), "b".repeat(1 << 19)),
            AuthError::TokenTooLarge {
                max: MAX_TOKEN_BYTES,
            },
        ),
        (
            "garbage in JWT shape",
            "eyJhbGciOiJFUzI1NiJ9.%%%.sig".into(),
            AuthError::MalformedToken { why: String::new() },
        ),
    ];
    let mut messages = std::collections::HashSet::new();
    for (what, token, expected) in cases {
        let err = who(g, &token).unwrap_err();
        assert_eq!(
            std::mem::discriminant(&err),
            std::mem::discriminant(&expected),
            "{what}: {err}"
        );
        if !matches!(expected, AuthError::MalformedToken { .. }) {
            assert_eq!(err, expected, "{what}");
        }
        let text = err.to_string();
        assert!(
            !text.contains("jsonwebtoken") && !text.contains("Error("),
            "{what}: {text}"
        );
        messages.insert(std::mem::discriminant(&err));
    }
    assert!(messages.len() >= 9, "distinct refusals: {}", messages.len());
    // Within the clock skew (30 s) both are still accepted.
    assert!(who(g, &f.es.mint(&claims(json!({"exp": now - 10})))).is_ok());
    assert!(who(g, &f.es.mint(&claims(json!({"nbf": now + 10})))).is_ok());
}

/// `key`'s token with `claims()` minus the named claims.
fn stranger_free(key: &SigningKey, without: &[&str]) -> String {
    let mut c = claims(json!({}));
    for claim in without {
        c.as_object_mut().unwrap().remove(*claim);
    }
    key.mint(&c)
}

/// An issuer limited to ES256 refuses an EdDSA token of its own keys.
#[test]
fn algorithms_limit_what_an_issuer_signs_with() {
    let f = with_file_keys("algorithms = [\"ES256\"]");
    assert!(who(&f.governance, &f.es.mint(&claims(json!({})))).is_ok());
    assert_eq!(
        who(&f.governance, &f.ed.mint(&claims(json!({})))).unwrap_err(),
        AuthError::AlgorithmNotAllowed {
            algorithm: "EdDSA".into()
        }
    );
}

/// A JWKS keeps only public signature keys: an `oct` (HMAC) key, an
/// encryption key and a P-384 key are left out.
#[test]
fn a_key_set_keeps_only_public_signature_keys() {
    let es = SigningKey::es256("es");
    let doc = json!({"keys": [
        {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
        {"kty": "EC", "crv": "P-256", "use": "enc", "kid": "enc", "x": es.jwk()["x"], "y": es.jwk()["y"]},
        {"kty": "EC", "crv": "P-384", "kid": "p384", "x": "AAAA", "y": "AAAA"},
        {"kty": "weird"},
        es.jwk(),
    ]});
    let set = KeySet::parse(doc.to_string().as_bytes()).unwrap();
    assert_eq!(set.len(), 1);
    assert!(KeySet::parse(b"{\"keys\": []}").is_err());
    assert!(KeySet::parse(b"<html>").is_err());
}

fn provider_policy(provider: &Provider, keys: &str, extra: &str) -> Policy {
    Policy::from_toml(&format!(
        "[[issuers]]\nissuer = \"{}\"\naudiences = [\"toolmesh\"]\n{keys}\nmin_refresh_secs = 1\n{extra}\n",
        provider.issuer
    ))
    .unwrap()
}

/// Authenticates with `token` until it is accepted (keys fetched).
async fn accepted(g: &Governance, token: &str) -> Principal {
    toolmesh_testkit::eventually("the token accepted", Duration::from_secs(20), || {
        let found = who(g, token).ok();
        async move { found }
    })
    .await
}

/// Keys found by discovery; rotated mid-test, a token under the new `kid`
/// is accepted once the bounded refresh fetched them; a storm of random
/// `kid`s fetches at most once per `min_refresh_secs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_rotation_and_a_bounded_refresh_rate() {
    let first = SigningKey::es256("k1");
    let provider = Provider::start(&[&first]).await;
    let policy = provider_policy(&provider, "", "");
    let g = Governance::new(Arc::new(PolicyHandle::new(policy)), None);
    let aud =
        |key: &SigningKey| key.mint(&provider.claims("toolmesh", "ann", Duration::from_secs(300)));
    assert_eq!(accepted(&g, &aud(&first)).await.name, "ann");
    assert!(provider.discovery_hits() >= 1);

    // Rotation: the provider publishes k2 and signs with it.
    let second = SigningKey::ed25519("k2");
    provider.publish(&[&first, &second]);
    accepted(&g, &aud(&second)).await;

    // A storm of unknown kids: each fails fast, the JWKS is fetched at
    // most once per second (min_refresh_secs) plus the schedule.
    let before = provider.jwks_hits();
    let started = std::time::Instant::now();
    for i in 0..500 {
        let token = second.mint_as(
            &format!("random-{i}"),
            &provider.claims("toolmesh", "x", Duration::from_secs(60)),
        );
        assert_eq!(who(&g, &token).unwrap_err(), AuthError::UnknownKey);
        if i % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let secs = started.elapsed().as_secs() as usize;
    let hits = provider.jwks_hits() - before;
    assert!(
        hits <= secs + 2,
        "{hits} JWKS fetches in {secs} s of random kids"
    );
}

/// A provider that hangs, then one that answers garbage: the last good
/// keys keep serving, and the status says the keys are stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_provider_keeps_the_last_good_keys() {
    let key = SigningKey::rs256("rs");
    let provider = Provider::start(&[&key]).await;
    let policy = provider_policy(
        &provider,
        &format!("jwks_uri = \"{}\"", provider.jwks_uri()),
        "refresh_secs = 1",
    );
    let g = Governance::new(Arc::new(PolicyHandle::new(policy)), None);
    let token = key.mint(&provider.claims("toolmesh", "bob", Duration::from_secs(300)));
    accepted(&g, &token).await;
    for mode in [Mode::Hang, Mode::Garbage] {
        provider.set_mode(mode);
        let failures = g.issuer_keys().status()[0].failures;
        toolmesh_testkit::until(
            &format!("a fetch fails ({mode:?})"),
            Duration::from_secs(30),
            || g.issuer_keys().status()[0].failures > failures,
        )
        .await;
        let status = &g.issuer_keys().status()[0];
        assert!(status.stale && status.keys == 1, "{status:?}");
        assert!(status.last_error.is_some());
        assert_eq!(who(&g, &token).unwrap().name, "bob");
    }
    provider.set_mode(Mode::Serve);
    toolmesh_testkit::until("keys fresh again", Duration::from_secs(30), || {
        !g.issuer_keys().status()[0].stale
    })
    .await;
}

/// Keys whose source failed for longer than refresh + `max_stale_secs`
/// no longer serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_keys_expire() {
    let key = SigningKey::es256("es");
    let provider = Provider::start(&[&key]).await;
    let policy = provider_policy(
        &provider,
        &format!("jwks_uri = \"{}\"", provider.jwks_uri()),
        "refresh_secs = 1\nmax_stale_secs = 1",
    );
    let g = Governance::new(Arc::new(PolicyHandle::new(policy)), None);
    let token = key.mint(&provider.claims("toolmesh", "cy", Duration::from_secs(300)));
    accepted(&g, &token).await;
    provider.set_mode(Mode::Garbage);
    toolmesh_testkit::until("the stale keys expire", Duration::from_secs(30), || {
        who(&g, &token) == Err(AuthError::IssuerKeysUnavailable)
    })
    .await;
    assert_eq!(g.issuer_keys().status()[0].keys, 0);
}

/// A reload that keeps the issuer keeps its cached keys (no new fetch);
/// a reload that drops it refuses its tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_keys_of_an_unchanged_issuer() {
    let key = SigningKey::es256("es");
    let provider = Provider::start(&[&key]).await;
    let keys = format!("jwks_uri = \"{}\"", provider.jwks_uri());
    let handle = Arc::new(PolicyHandle::new(provider_policy(&provider, &keys, "")));
    let g = Governance::new(handle.clone(), None);
    let token = key.mint(&provider.claims("toolmesh", "dee", Duration::from_secs(300)));
    accepted(&g, &token).await;
    let hits = provider.jwks_hits();
    handle.replace(provider_policy(&provider, &keys, "clock_skew_secs = 5"));
    assert_eq!(who(&g, &token).unwrap().name, "dee");
    assert_eq!(
        provider.jwks_hits(),
        hits,
        "the reload fetched the keys again"
    );
    handle.replace(Policy::from_toml("").unwrap());
    assert!(matches!(
        who(&g, &token),
        Err(AuthError::UnknownToken { .. })
    ));
}

/// The policy reference documents an issuer with every key, and it loads.
#[test]
fn the_example_policy_documents_an_issuer() {
    let policy = Policy::from_toml(EXAMPLE_POLICY_TOML).unwrap();
    let issuer = &policy.issuers()[0];
    assert_eq!(issuer.principal_claim, "preferred_username");
    assert_eq!(issuer.role_map.len(), 2);
    assert!(matches!(issuer.keys, KeySource::Uri(_)));
    for key in [
        "issuer",
        "audiences",
        "jwks_uri",
        "jwks_file",
        "algorithms",
        "clock_skew_secs",
        "refresh_secs",
        "min_refresh_secs",
        "max_stale_secs",
        "principal_claim",
        "tenant",
        "tenant_claim",
        "roles",
        "roles_claim",
        "role_map",
    ] {
        assert!(
            EXAMPLE_POLICY_TOML.contains(&format!("{key} ="))
                || EXAMPLE_POLICY_TOML.contains(&format!("`{key}`")),
            "{key} is not documented"
        );
    }
}

/// OAuth scopes as roles: `roles_claim = "scope"` reads the space-separated
/// string (or an `scp` list), so grants can require a scope such as
/// `tools:call` through the role it maps to.
#[test]
fn scopes_map_to_roles() {
    let dir = toolmesh_testkit::TempDir::new("jwt-scopes").unwrap();
    let key = SigningKey::es256("es");
    let path = dir.join("jwks.json");
    std::fs::write(&path, oidc::jwks(&[&key])).unwrap();
    let policy = Policy::from_toml(&format!(
        "[[issuers]]\nissuer = \"{ISSUER}\"\naudiences = [\"toolmesh\"]\njwks_file = \"{}\"\n\
         roles_claim = \"scope\"\nrole_map = {{ \"tools:call\" = \"agent\" }}\n",
        path.display()
    ))
    .unwrap();
    let g = Governance::new(Arc::new(PolicyHandle::new(policy)), None);
    let scoped = who(
        &g,
        &key.mint(&claims(json!({"scope": "openid tools:call"}))),
    )
    .unwrap();
    assert_eq!(scoped.roles, ["agent"]);
    let unscoped = who(&g, &key.mint(&claims(json!({"scope": "openid"})))).unwrap();
    assert!(unscoped.roles.is_empty());
}
