//! Property tests of the policy file parser: any text is a policy or an error that says what to fix, never a panic.

use proptest::prelude::*;
use toolmesh_policy::Policy;

/// One `key = value` line with a key the parser knows (or nearly) and a
/// value of any TOML type.
fn line() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("token"),
        Just("token_sha256"),
        Just("tls_name"),
        Just("principal"),
        Just("tenant"),
        Just("roles"),
        Just("name"),
        Just("tools"),
        Just("tags"),
        Just("max_risk"),
        Just("approver_roles"),
        Just("ttl_secs"),
        Just("max_open_per_caller"),
        Just("require_for_risk"),
        Just("require_for_tools"),
        Just("pre_approved_principals"),
        Just("allow_anonymous"),
        Just("tool"),
        Just("per"),
        Just("rate_per_sec"),
        Just("burst"),
        Just("max_concurrent"),
        Just("rol"),
    ];
    let value = prop_oneof![
        "[a-zA-Z0-9_*?\\[\\]-]{0,10}".prop_map(|s| format!("{s:?}")),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        any::<bool>().prop_map(|b| b.to_string()),
        prop::collection::vec("[a-z*_]{0,6}", 0..3).prop_map(|v| format!("{v:?}")),
        Just("\"HIGH\"".to_owned()),
        Just("\"NONE\"".to_owned()),
        Just("\"caller\"".to_owned()),
    ];
    (key, value).prop_map(|(k, v)| format!("{k} = {v}"))
}

/// A file of tables with plausible lines.
fn policy_text() -> impl Strategy<Value = String> {
    let header = prop_oneof![
        Just("[auth]"),
        Just("[auth.anonymous]"),
        Just("[[callers]]"),
        Just("[[grants]]"),
        Just("[approval]"),
        Just("[[limits]]"),
        Just("[[grant]]"),
    ];
    prop::collection::vec((header, prop::collection::vec(line(), 0..5)), 0..5).prop_map(|tables| {
        tables
            .into_iter()
            .map(|(h, lines)| format!("{h}\n{}\n", lines.join("\n")))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Structured but random policies load or are refused with a message naming the problem.
    #[test]
    fn plausible_policies_never_panic(text in policy_text()) {
        if let Err(e) = Policy::from_toml(&text) {
            prop_assert!(e.to_string().len() > 10, "{}", e);
        }
    }

    /// Arbitrary text never panics the parser.
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,80}") {
        if let Err(e) = Policy::from_toml(&text) {
            prop_assert!(!e.to_string().is_empty());
        }
    }
}
