//! Tests of the policy as a whole: file errors, authentication, projection, deny reasons, explain and reload.

use crate::{PolicyHandle, digest};
use std::{path::PathBuf, time::Duration};
use toolmesh::pb::{RiskLevel, ToolSpec};
use toolmesh_identity::{AuthError, Principal};
use toolmesh_policy::{
    ApprovalNeed, DEV_APPROVER_TOKEN, DEV_POLICY_TOML, Decision, EXAMPLE_POLICY_TOML, GrantVerdict,
    Policy, PolicyError, explain,
};
use toolmesh_testkit::policy::{Caller, PolicyBuilder};
use toolmesh_testkit::principal;

fn spec(name: &str, risk: RiskLevel, tags: &[&str]) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        version: "1.0.0".into(),
        description: format!("The {name} tool."),
        input_schema: r#"{"type":"object"}"#.into(),
        risk: risk as i32,
        tags: tags.iter().map(|t| t.to_string()).collect(),
        ..ToolSpec::default()
    }
}

fn error_text(toml: &str) -> String {
    match Policy::from_toml(toml) {
        Ok(_) => panic!("accepted:\n{toml}"),
        Err(e) => e.to_string(),
    }
}

/// The documented example and the development policy both load.
#[test]
fn shipped_policies_parse() {
    let example = Policy::from_toml(EXAMPLE_POLICY_TOML).unwrap();
    assert_eq!(example.grant_names().count(), 3);
    assert!(!example.allows_anonymous());
    assert!(!example.limits().is_empty());
    assert!(example.cache().rule_for("search_kb").is_some());
    let dev = Policy::from_toml(DEV_POLICY_TOML).unwrap();
    assert!(dev.allows_anonymous());
    let _ = Policy::permissive_dev();
}

/// Each kind of mistake in the file is reported with its line, its field and a fix.
#[test]
fn config_errors_name_the_problem() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "unknown field",
            "[[grants]]\nname = \"g\"\nrol = [\"x\"]\ntools = [\"*\"]\n",
            &["line 3", "unknown field `rol`", "roles"],
        ),
        (
            "unknown table",
            "[[grant]]\nname = \"g\"\n",
            &["line 1", "unknown field `grant`", "grants"],
        ),
        (
            "bad risk name",
            "[[grants]]\nname = \"g\"\ntools = [\"*\"]\nmax_risk = \"CRITICAL\"\n",
            &[
                "line 4",
                "unknown risk \"CRITICAL\"",
                "\"LOW\", \"MEDIUM\" or \"HIGH\"",
            ],
        ),
        (
            "approval cap zero",
            "[approval]\nmax_open_per_caller = 0\n",
            &[
                "line 2",
                "approval.max_open_per_caller",
                "0 is out of range",
                "default 100",
            ],
        ),
        (
            "bad approval risk",
            "[approval]\nrequire_for_risk = \"SEVERE\"\n",
            &["line 2", "\"NONE\""],
        ),
        (
            "bad glob",
            "[[grants]]\nname = \"g\"\ntools = [\"search_kb\",\n  \"get_[id]\"]\n",
            &[
                "line 4: [[grants]] #1 tools[1]",
                "'['",
                "'*' (any characters)",
            ],
        ),
        (
            "duplicate token",
            "[[callers]]\ntoken = \"t1\"\nprincipal = \"a\"\n\n[[callers]]\ntoken = \"t1\"\nprincipal = \"b\"\n",
            &[
                "line 6: [[callers]] #2 token",
                "same token as [[callers]] #1 (line 2, principal \"a\")",
            ],
        ),
        (
            "duplicate token via sha256",
            &format!(
                "[[callers]]\ntoken = \"t1\"\nprincipal = \"a\"\n[[callers]]\ntoken_sha256 = \"{}\"\nprincipal = \"b\"\n",
                digest::hex(&digest::sha256(b"t1")).to_uppercase()
            ),
            &["line 5", "same token as [[callers]] #1"],
        ),
        (
            "token and sha256",
            "[[callers]]\ntoken = \"t\"\ntoken_sha256 = \"ab\"\nprincipal = \"a\"\n",
            &["line 3", "keep only one"],
        ),
        (
            "no token",
            "[[callers]]\nprincipal = \"a\"\n",
            &["[[callers]] #1 token", "is missing", "token_sha256"],
        ),
        (
            "bad sha256",
            "[[callers]]\ntoken_sha256 = \"xyz\"\nprincipal = \"a\"\n",
            &["line 2", "not 64 hex digits", "sha256sum"],
        ),
        (
            "token with space",
            "[[callers]]\ntoken = \"a b\"\nprincipal = \"a\"\n",
            &["line 2", "no spaces"],
        ),
        (
            "missing principal",
            "[[callers]]\ntoken = \"t\"\n",
            &["missing field `principal`"],
        ),
        (
            "duplicate grant name",
            "[[grants]]\nname = \"g\"\ntools = [\"*\"]\n[[grants]]\nname = \"g\"\ntools = [\"a\"]\n",
            &[
                "line 5: [[grants]] #2 name",
                "already the name of the grant on line 2",
            ],
        ),
        (
            "grant without tools",
            "[[grants]]\nname = \"g\"\nroles = [\"x\"]\n",
            &["[[grants]] #1 tools", "covers no tool", "tools = [\"*\"]"],
        ),
        (
            "ttl out of range",
            "[approval]\nttl_secs = 0\n",
            &["line 2: approval.ttl_secs", "1..=86400"],
        ),
        (
            "nobody can approve",
            "[approval]\napprover_roles = []\n",
            &["approval.approver_roles", "nobody could approve"],
        ),
        ("negative ttl", "[approval]\nttl_secs = -5\n", &["line 2"]),
        (
            "limit that limits nothing",
            "[[limits]]\ntool = \"x\"\n",
            &["[[limits]] #1", "limits nothing"],
        ),
        (
            "burst without rate",
            "[[limits]]\nmax_concurrent = 1\nburst = 2\n",
            &["line 3: [[limits]] #1 burst", "needs rate_per_sec"],
        ),
        (
            "zero rate",
            "[[limits]]\nrate_per_sec = 0\n",
            &["line 2: [[limits]] #1 rate_per_sec", "above 0"],
        ),
        (
            "bad limit scope",
            "[[limits]]\nper = \"user\"\nrate_per_sec = 1\n",
            &["line 2", "unknown variant `user`", "`caller`"],
        ),
        (
            "bad limit glob",
            "[[limits]]\ntool = \"send email\"\nrate_per_sec = 1\n",
            &["line 2: [[limits]] #1 tool", "' '"],
        ),
        ("not toml", "[[grants]\n", &["line 1"]),
    ];
    for (label, toml, expected) in cases {
        let text = error_text(toml);
        for piece in *expected {
            assert!(text.contains(piece), "{label}: {piece:?} not in:\n{text}");
        }
    }
}

/// All semantic problems come back at once, in file order, and `load` names the file.
#[test]
fn problems_are_collected_and_files_named() {
    let toml = "[[grants]]\nname = \"\"\ntools = [\"[\"]\n[approval]\nttl_secs = 999999\n";
    let err = Policy::from_toml(toml).unwrap_err();
    let PolicyError::Invalid { problems, .. } = &err else {
        panic!("{err}")
    };
    let lines: Vec<_> = problems.iter().map(|p| p.line).collect();
    assert_eq!(lines, [Some(2), Some(3), Some(5)], "{err}");
    assert!(
        err.to_string()
            .starts_with("policy (inline) has 3 problem(s):")
    );

    let path = temp_path("named");
    std::fs::write(&path, toml).unwrap();
    let text = Policy::load(&path).unwrap_err().to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    let _ = std::fs::remove_file(&path);
    let text = Policy::load(&temp_path("missing")).unwrap_err().to_string();
    assert!(text.starts_with("cannot read policy file"), "{text}");
}

const CALLERS: &str = r#"
[auth]
allow_anonymous = true
anonymous = { principal = "anon", tenant = "public", roles = ["agent"] }

[[callers]]
token = "t-support"
principal = "support-bot"
tenant = "acme"
roles = ["agent", "support"]

[[callers]]
token_sha256 = "TOKEN_SHA"
principal = "globex-bot"
tenant = "globex"
roles = ["agent", "support"]

[[callers]]
token = "t-mailer"
principal = "mailer"
tenant = "acme"
roles = ["agent"]

[[callers]]
token = "t-admin"
principal = "alice"
tenant = "acme"
roles = ["admin"]

[[grants]]
name = "support: read-only in acme"
roles = ["support"]
tenants = ["acme"]
tools = ["search_kb", "get_*"]
tags = ["kb"]
max_risk = "MEDIUM"

[[grants]]
name = "mailer sends email"
principals = ["mailer"]
tools = ["send_email"]

[[grants]]
name = "admins: everything"
roles = ["admin"]
tools = ["*"]

[approval]
require_for_tools = ["kb_*"]
pre_approved_principals = ["mailer"]
"#;

fn sample_policy() -> Policy {
    let sha = digest::hex(&digest::sha256(b"t-globex"));
    Policy::from_toml(&CALLERS.replace("TOKEN_SHA", &sha)).unwrap()
}

fn samples() -> Vec<ToolSpec> {
    vec![
        spec("search_kb", RiskLevel::Low, &[]),
        spec("get_user", RiskLevel::Unspecified, &[]),
        spec("get_secrets", RiskLevel::High, &[]),
        spec("kb_reindex", RiskLevel::Medium, &["kb"]),
        spec("create_ticket", RiskLevel::Medium, &[]),
        spec("send_email", RiskLevel::High, &[]),
    ]
}

/// Tokens map to their principals (plain or by SHA-256); missing and unknown tokens are refused with a way forward.
#[test]
fn authentication_table() {
    let open = sample_policy();
    let closed = Policy::from_toml(
        &CALLERS
            .replace("allow_anonymous = true", "allow_anonymous = false")
            .replace("TOKEN_SHA", &digest::hex(&digest::sha256(b"t-globex"))),
    )
    .unwrap();
    let ok = |p: &Policy, bearer: Option<&str>| p.authenticate(bearer).map(|who| who.name);
    assert_eq!(ok(&open, Some("t-support")), Ok("support-bot".into()));
    assert_eq!(
        ok(&open, Some("Bearer t-support")),
        Ok("support-bot".into())
    );
    assert_eq!(ok(&open, Some("  t-admin ")), Ok("alice".into()));
    assert_eq!(ok(&open, Some("t-globex")), Ok("globex-bot".into()));
    let anon = open.authenticate(None).unwrap();
    assert_eq!(
        anon,
        Principal {
            name: "anon".into(),
            tenant: "public".into(),
            roles: vec!["agent".into()],
            anonymous: true,
            issued_by: None,
        }
    );
    assert_eq!(ok(&open, Some("")), Ok("anon".into()));
    // A wrong token is an error even where anonymity is allowed.
    let err = open.authenticate(Some("t-wrong")).unwrap_err();
    assert!(matches!(err, AuthError::UnknownToken { .. }));
    let text = err.to_string();
    assert!(!text.contains("t-wrong"), "{text}");
    assert!(
        text.contains("ask an operator to add it under [[callers]]"),
        "{text}"
    );
    assert_eq!(closed.authenticate(None), Err(AuthError::MissingToken));
    assert!(
        AuthError::MissingToken
            .to_string()
            .contains("`authorization: Bearer <token>`")
    );
    assert_eq!(ok(&closed, Some("Bearer t-mailer")), Ok("mailer".into()));
}

/// Which of six sample tools each caller may use: by name, glob, tag, max_risk, tenant and principal.
#[test]
fn projection_table() {
    let policy = sample_policy();
    // search_kb, get_user, get_secrets, kb_reindex, create_ticket, send_email
    let table = [
        (Some("t-support"), "YYNYNN"), // name, glob, risk cap, tag
        (Some("t-globex"), "NNNNNN"),  // right role, wrong tenant
        (Some("t-mailer"), "NNNNNY"),  // by principal
        (Some("t-admin"), "YYYYYY"),   // glob "*"
        (None, "NNNNNN"),              // anonymous agent
    ];
    for (token, expected) in table {
        let who = policy.authenticate(token).unwrap();
        let got: String = samples()
            .iter()
            .map(|s| {
                if policy.decide(&who, s).is_allowed() {
                    'Y'
                } else {
                    'N'
                }
            })
            .collect();
        assert_eq!(got, expected, "{who}");
    }
}

/// An allow names its grant and the approval need; a deny names why.
#[test]
fn decisions_name_rules_and_reasons() {
    let policy = sample_policy();
    let by = |token: &str, tool: usize| {
        let who = policy.authenticate(Some(token)).unwrap();
        policy.decide(&who, &samples()[tool])
    };
    assert_eq!(
        by("t-support", 1),
        Decision::Allow {
            rule: "support: read-only in acme".into(),
            approval: ApprovalNeed::None
        }
    );
    // kb_reindex matches require_for_tools; send_email is HIGH; mailer is pre-approved.
    assert!(matches!(
        by("t-support", 3),
        Decision::Allow {
            approval: ApprovalNeed::Required,
            ..
        }
    ));
    assert_eq!(
        by("t-admin", 5),
        Decision::Allow {
            rule: "admins: everything".into(),
            approval: ApprovalNeed::Required
        }
    );
    assert!(matches!(
        by("t-mailer", 5),
        Decision::Allow {
            approval: ApprovalNeed::PreApproved,
            ..
        }
    ));

    let reason = |d: Decision| match d {
        Decision::Deny { reason } => reason,
        other => panic!("allowed: {other:?}"),
    };
    let capped = reason(by("t-support", 2));
    assert!(
        capped.starts_with(
            "get_secrets is HIGH risk and grant \"support: read-only in acme\" caps risk at MEDIUM"
        ),
        "{capped}"
    );
    let uncovered = reason(by("t-support", 4));
    assert!(
        uncovered.contains(
            "no grant gives support-bot (tenant acme, roles agent, support) the tool create_ticket"
        ),
        "{uncovered}"
    );
    assert!(
        uncovered.contains("cover tools search_kb, get_*; tags kb"),
        "{uncovered}"
    );
    let stranger = reason(by("t-globex", 0));
    assert!(
        stranger.contains("no grant applies to globex-bot"),
        "{stranger}"
    );
    let anon = policy.authenticate(None).unwrap();
    let anon_reason = reason(policy.decide(&anon, &samples()[0]));
    assert!(
        anon_reason.contains("authenticate with `authorization: Bearer <token>`"),
        "{anon_reason}"
    );
    let empty = Policy::from_toml("").unwrap();
    assert!(reason(empty.decide(&anon, &samples()[0])).contains("the policy has no grants"));
    // An unknown risk number fails closed: treated as HIGH.
    let mut odd = samples()[0].clone();
    odd.risk = 42;
    let who = policy.authenticate(Some("t-support")).unwrap();
    assert!(reason(policy.decide(&who, &odd)).contains("HIGH risk"));
}

/// `explain` lists every grant with its verdict, the decision, the approval reason and the limits.
#[test]
fn explain_lists_every_grant() {
    let policy = Policy::from_toml(EXAMPLE_POLICY_TOML).unwrap();
    let who = policy.authenticate(Some("tok-support-bot")).unwrap();
    let e = explain(
        &policy,
        &who,
        &spec("send_email", RiskLevel::High, &["email"]),
    );
    let verdicts: Vec<_> = e.grants.iter().map(|g| &g.verdict).collect();
    assert!(matches!(verdicts[0], GrantVerdict::ToolNotCovered { .. }));
    assert!(matches!(verdicts[1], GrantVerdict::CallerNotCovered { .. }));
    assert!(matches!(verdicts[2], GrantVerdict::CallerNotCovered { .. }));
    assert!(!e.decision.is_allowed());
    let text = e.to_string();
    let expected = [
        "caller:   support-bot (tenant acme, roles agent, support)",
        "tool:     send_email@1.0.0 (risk HIGH, tags email)",
        "  [skip]   \"support agents: read-only plus tickets\": covers tools search_kb, get_*, create_ticket; tags kb, not this tool",
        "  [skip]   \"ops: everything in acme\": needs one of the roles ops; the caller has agent, support",
        "  [skip]   \"admins: everything\": needs one of the roles admin; the caller has agent, support",
        "decision: DENY: no grant gives support-bot",
        "  [[limits]] #1: send_email: 1 call(s)/s, burst 3, at most 2 in flight, per caller",
        "  [[limits]] #2: every tool: 100 call(s)/s, burst 100, per tool, shared by all callers",
    ];
    for line in expected {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }

    let oncall = policy.authenticate(Some("tok-oncall")).unwrap();
    let e = explain(&policy, &oncall, &spec("send_email", RiskLevel::High, &[]));
    let text = e.to_string();
    assert!(
        text.contains("[allows] \"ops: everything in acme\""),
        "{text}"
    );
    assert!(
        text.contains("decision: ALLOW by grant \"ops: everything in acme\"; pre-approved (risk HIGH is at or above approval.require_for_risk = \"HIGH\", but oncall-bot is in approval.pre_approved_principals)"),
        "{text}"
    );
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json["decision"]["decision"], "allow");
    assert_eq!(json["decision"]["approval"], "pre_approved");
    assert_eq!(json["grants"][1]["verdict"]["verdict"], "allows");
}

/// The dev policy lets anonymous callers use everything, keeps HIGH behind approval, and has an approver.
#[test]
fn permissive_dev_policy() {
    let dev = Policy::permissive_dev();
    let anon = dev.authenticate(None).unwrap();
    assert!(anon.anonymous);
    assert_eq!(anon.tenant, "dev");
    for s in samples() {
        let expected = if s.risk == RiskLevel::High as i32 {
            ApprovalNeed::Required
        } else {
            ApprovalNeed::None
        };
        assert_eq!(
            dev.decide(&anon, &s),
            Decision::Allow {
                rule: "dev: everything".into(),
                approval: expected
            },
            "{}",
            s.name
        );
    }
    let approver = dev.authenticate(Some(DEV_APPROVER_TOKEN)).unwrap();
    assert!(approver.has_any_role(&dev.approval_settings().approver_roles));
}

fn temp_path(label: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "toolmesh-governance-{label}-{}-{:?}.toml",
        std::process::id(),
        std::thread::current().id()
    ))
}

const V1: &str = "[[grants]]\nname = \"v1\"\ntools = [\"*\"]\n";
const V2: &str = "[[grants]]\nname = \"version two\"\ntools = [\"*\"]\n";
const BAD: &str = "[[grants]]\nname = \"broken\"\ntools = [\"*\"]\nmax_risk = \"EXTREME\"\n";

fn rule_of(handle: &PolicyHandle) -> String {
    let anon = principal("x", "t", &[]);
    match handle
        .current()
        .decide(&anon, &spec("a", RiskLevel::Low, &[]))
    {
        Decision::Allow { rule, .. } => rule,
        Decision::Deny { reason } => reason,
    }
}

/// `reload_from` swaps in a good file and keeps the old policy (and the error) on a bad one; held Arcs keep the old rules.
#[test]
fn reload_good_swaps_bad_keeps() {
    let path = temp_path("direct");
    std::fs::write(&path, V1).unwrap();
    let handle = PolicyHandle::new(Policy::load(&path).unwrap());
    let held = handle.current();
    std::fs::write(&path, V2).unwrap();
    handle.reload_from(&path).unwrap();
    assert_eq!(rule_of(&handle), "version two");
    assert_eq!(handle.generation(), 2);
    assert_eq!(held.grant_names().collect::<Vec<_>>(), ["v1"]);
    std::fs::write(&path, BAD).unwrap();
    let err = handle.reload_from(&path).unwrap_err();
    assert!(err.to_string().contains("EXTREME"), "{err}");
    assert_eq!(rule_of(&handle), "version two");
    assert_eq!(handle.generation(), 2);
    assert!(handle.last_error().unwrap().contains("line 4"));
    let _ = std::fs::remove_file(&path);
}

/// The watcher picks up file changes within a poll or two, ignores a bad edit, and recovers on the next good one.
#[tokio::test(start_paused = true)]
async fn watcher_follows_the_file() {
    let path = temp_path("watch");
    std::fs::write(&path, V1).unwrap();
    let (handle, _watcher) = PolicyHandle::watch(&path).unwrap();
    assert_eq!(rule_of(&handle), "v1");
    // Let the first tick pass, so the change below is seen as a change.
    tokio::time::sleep(Duration::from_millis(600)).await;
    std::fs::write(&path, V2).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(rule_of(&handle), "version two");
    assert_eq!(handle.generation(), 2);
    std::fs::write(&path, BAD).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(rule_of(&handle), "version two");
    assert!(handle.last_error().is_some());
    std::fs::write(&path, V1).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(rule_of(&handle), "v1");
    assert_eq!(handle.generation(), 3);
    assert!(handle.last_error().is_none());
    let _ = std::fs::remove_file(&path);
    assert!(PolicyHandle::watch(temp_path("absent")).is_err());
}

/// A caller may be identified by the DNS name of its mTLS certificate
/// instead of a token, never by both.
#[test]
fn tls_name_callers() {
    let policy = Policy::from_toml(
        &PolicyBuilder::new()
            .caller(Caller::tls_name("Bot.Agents.Internal", "bot").roles(&["agent"]))
            .build_toml(),
    )
    .unwrap();
    let who = policy
        .authenticate_tls(|name| name == "bot.agents.internal")
        .expect("matched case-insensitively");
    assert_eq!(who.name, "bot");
    assert!(policy.authenticate_tls(|_| false).is_none());
    let both = Policy::from_toml(
        r#"
[[callers]]
tls_name = "bot.internal"
token = "t"
principal = "bot"
"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        both.contains("tls_name") && both.contains("one or the other"),
        "{both}"
    );
}

/// A `tls_name` may be the caller's SPIFFE ID: kept as written (its path
/// is case-sensitive); a malformed one is refused at load, naming the line.
#[test]
fn spiffe_id_callers() {
    let policy = Policy::from_toml(
        &PolicyBuilder::new()
            .caller(
                Caller::tls_name(
                    "spiffe://example.org/ns/agents/sa/Support-Bot",
                    "support-bot",
                )
                .roles(&["agent"]),
            )
            .build_toml(),
    )
    .unwrap();
    let who = policy
        .authenticate_tls(|name| name == "spiffe://example.org/ns/agents/sa/Support-Bot")
        .expect("matched as written");
    assert_eq!(who.name, "support-bot");
    assert!(
        policy
            .authenticate_tls(|name| name == "spiffe://example.org/ns/agents/sa/support-bot")
            .is_none()
    );
    let bad = Policy::from_toml(
        r#"
[[callers]]
principal = "x"
tls_name = "spiffe://example.org/ns/../sa/x"
"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        bad.contains("line 4") && bad.contains("tls_name") && bad.contains("SPIFFE ID"),
        "{bad}"
    );
}

/// A grant's `[grants.arguments.TOOL]` narrows that tool for its callers
/// only; explain lists the narrowing; other grants see the full schema.
#[test]
fn argument_limits_load_and_explain() {
    let policy = Policy::from_toml(
        &PolicyBuilder::new()
            .grant("agents: small charges", &["agent"], &["charge"])
            .then("[grants.arguments.charge]\ncents = { maximum = 100 }\n")
            .grant("finance: any charge", &["finance"], &["charge"])
            .build_toml(),
    )
    .unwrap();
    let narrowing = policy.narrowing("agents: small charges", "charge").unwrap();
    assert_eq!(narrowing.fields[0].maximum, Some(100.0));
    assert!(policy.narrowing("finance: any charge", "charge").is_none());
    let mut charge = spec("charge", RiskLevel::Low, &[]);
    charge.input_schema = r#"{"type":"object","properties":{"cents":{"type":"integer"}}}"#.into();
    let agent = principal("bot", "t", &["agent"]);
    let explained = explain(&policy, &agent, &charge);
    assert_eq!(explained.argument_limits, ["cents: maximum 100"]);
    assert!(
        explained
            .to_string()
            .contains("argument: cents: maximum 100")
    );
    let finance = Principal {
        roles: vec!["finance".into()],
        ..agent
    };
    assert!(
        explain(&policy, &finance, &charge)
            .argument_limits
            .is_empty()
    );
    assert!(
        Policy::from_toml(EXAMPLE_POLICY_TOML)
            .unwrap()
            .narrowing("support agents: read-only plus tickets", "create_ticket")
            .is_some()
    );
}

/// A narrowing that cannot be a restriction of what the grant gives is
/// refused at load with its line and field: a tool the grant does not
/// cover, an empty range or enum, a bound-less entry, an unknown key.
#[test]
fn argument_limits_refused_at_load() {
    let base = "[[grants]]\nname = \"g\"\ntools = [\"charge\"]\n";
    let cases: &[(&str, &[&str])] = &[
        (
            "[grants.arguments.refund]\ncents = { maximum = 1 }\n",
            &["line 4", "arguments.refund", "do not cover"],
        ),
        (
            "[grants.arguments.charge]\ncents = { minimum = 5, maximum = 1 }\n",
            &["arguments.charge.cents", "minimum is above maximum"],
        ),
        (
            "[grants.arguments.charge]\nkind = { enum = [] }\n",
            &["arguments.charge.kind", "enum is empty"],
        ),
        (
            "[grants.arguments.charge]\nkind = {}\n",
            &["narrows nothing"],
        ),
        (
            "[grants.arguments.charge]\ncents = { maximun = 1 }\n",
            &["unknown field `maximun`"],
        ),
    ];
    for (table, needles) in cases {
        let text = error_text(&format!("{base}{table}"));
        for needle in *needles {
            assert!(text.contains(needle), "{table}: {needle:?} not in {text}");
        }
    }
}
