//! The registry's access rules against callers named by a policy: roles decide who registers, switches and reads.
use toolmesh_identity::registry_access::*;
use toolmesh_policy::Policy;

fn policy() -> Policy {
    Policy::from_toml(
        r#"
[[callers]]
token = "tok-exec"
principal = "kb-team"
roles = ["executor"]

[[callers]]
token = "tok-ops"
principal = "ops"
roles = ["admin"]

[[callers]]
tls_name = "ops.internal"
principal = "ops-host"
roles = ["admin"]

[[callers]]
token = "tok-dispatcher"
principal = "dispatcher-1"
roles = ["dispatcher"]

[[callers]]
token = "tok-agent"
principal = "agent"
roles = ["agent"]
"#,
    )
    .unwrap()
}

/// Executors need the executor role; admins the admin role; each
/// refusal says which role is missing or how to authenticate.
#[test]
fn roles_decide() {
    let policy = policy();
    assert_eq!(
        executor_owner(&policy, Some("tok-exec")).unwrap(),
        "kb-team"
    );
    let forbidden = executor_owner(&policy, Some("tok-ops")).unwrap_err();
    assert!(matches!(&forbidden, AccessError::Forbidden(m) if m.contains("role \"executor\"")));
    let unknown = executor_owner(&policy, Some("tok-nobody")).unwrap_err();
    assert!(matches!(&unknown, AccessError::Unauthenticated(m) if m.contains("[[callers]]")));
    assert_eq!(admin(&policy, Some("tok-ops")).unwrap(), "ops");
    assert!(matches!(
        admin(&policy, Some("tok-exec")),
        Err(AccessError::Forbidden(_))
    ));
    assert!(matches!(
        admin(&policy, None),
        Err(AccessError::Unauthenticated(_))
    ));
    let by_cert = executor_owner_by_certificate(policy.callers(), |name| name == "ops.internal");
    assert!(matches!(by_cert, Some(Err(AccessError::Forbidden(_)))));
    assert!(executor_owner_by_certificate(policy.callers(), |_| false).is_none());
}

/// The admin listener is read with a token whose principal is an admin
/// or operator; no token is refused even where anonymous callers are
/// admins (the development policy), and the refusal names the roles.
#[test]
fn admin_readers() {
    let policy = Policy::from_toml(
        r#"
[auth]
allow_anonymous = true
anonymous = { principal = "anonymous", roles = ["admin"] }

[[callers]]
token = "tok-ops"
principal = "ops"
roles = ["admin"]

[[callers]]
token = "tok-watch"
principal = "watcher"
roles = ["operator"]

[[callers]]
token = "tok-agent"
principal = "agent"
roles = ["agent"]
"#,
    )
    .unwrap();
    assert_eq!(admin_reader(&policy, Some("tok-ops")).unwrap().name, "ops");
    assert_eq!(
        admin_reader(&policy, Some("Bearer tok-watch"))
            .unwrap()
            .name,
        "watcher"
    );
    for (token, forbidden) in [
        (Some("tok-agent"), true),
        (None, false),
        (Some(""), false),
        (Some("nope"), false),
    ] {
        match admin_reader(&policy, token) {
            Err(AccessError::Forbidden(m)) if forbidden => {
                assert!(m.contains("\"operator\""), "{m}")
            }
            Err(AccessError::Unauthenticated(m)) if !forbidden => {
                assert!(m.contains("\"operator\""), "{m}")
            }
            other => panic!("{token:?}: {other:?}"),
        }
    }
}

/// Snapshots are for dispatchers (with executor tokens) and operators
/// (without); anyone else is refused, saying which role is needed.
#[test]
fn snapshot_readers() {
    let policy = policy();
    let dispatcher = snapshot_reader(&policy, Some("tok-dispatcher"), None).unwrap();
    assert!(dispatcher.execute_tokens);
    let ops = snapshot_reader(&policy, Some("tok-ops"), None).unwrap();
    assert_eq!((ops.reader.as_str(), ops.execute_tokens), ("ops", false));
    let by_cert = snapshot_reader(&policy, None, Some(&|name: &str| name == "ops.internal"));
    assert_eq!(by_cert.unwrap().reader, "ops-host");
    assert!(matches!(
        snapshot_reader(&policy, Some("tok-agent"), None),
        Err(AccessError::Forbidden(m)) if m.contains("\"dispatcher\"")
    ));
    assert!(matches!(
        snapshot_reader(&policy, None, None),
        Err(AccessError::Unauthenticated(_))
    ));
    let dev = snapshot_reader(&Policy::permissive_dev(), None, None).unwrap();
    assert!(
        !dev.execute_tokens,
        "under the development policy anonymous callers read snapshots as operators, never as dispatchers"
    );
}

/// No policy may make anonymous callers dispatchers: they would read
/// execute tokens and act for anyone on the approval book.
#[test]
fn anonymous_is_never_a_dispatcher() {
    let text = "[auth]\nallow_anonymous = true\nanonymous = { principal = \"anon\", roles = [\"agent\", \"dispatcher\"] }\n";
    let error = Policy::from_toml(text).unwrap_err().to_string();
    assert!(
        error.contains("auth.anonymous.roles") && error.contains("[[callers]]"),
        "{error}"
    );
}

/// Under the development policy anonymous executors own nothing.
#[test]
fn anonymous_owns_nothing() {
    let dev = Policy::permissive_dev();
    assert_eq!(executor_owner(&dev, None).unwrap(), "");
}
