//! Which version a bare name gives a caller: newest stable without a
//! rollout, canary or stable by the caller's sticky assignment, stable
//! after an abort or while the canary is down, and what a name@version or
//! a pin gets.

use super::*;
use toolmesh::rollout::{Guard, Share};
use toolmesh_testkit::principal;

fn entry(version: &str, healthy: bool) -> ToolEntry {
    crate::list::tests::entry("kb", version, healthy)
}

fn rollout(basis_points: u32, state: RolloutState) -> Rollout {
    Rollout {
        tool: "kb".into(),
        canary: semver::Version::new(2, 0, 0),
        share: Share::from_basis_points(basis_points).unwrap(),
        tenants: vec![],
        principals: vec![],
        state,
        reason: "too many errors".into(),
        changed_by: "alice".into(),
        automatic: false,
        guard: Guard::default(),
        started_at_ms: 1,
        changed_at_ms: 1,
    }
}

/// kb 1.0.0 and 2.0.0 (2.0.0 healthy or not), with `rollout` if any.
fn snapshot(canary_healthy: bool, rollout: Option<Rollout>) -> Snapshot {
    let mut b = Snapshot::empty("e").next();
    b.put(entry("1.0.0", true))
        .put(entry("2.0.0", canary_healthy));
    if let Some(r) = rollout {
        b.put_rollout(r);
    }
    b.finish()
}

fn picked(
    s: &Snapshot,
    who: &Principal,
    session: &str,
    tool: &str,
) -> (String, Option<&'static str>) {
    let reference = ToolRef::parse(tool).unwrap();
    let (entry, routed) = pick(s, s, &reference, &caller(who, session)).unwrap();
    (entry.def.version().to_string(), routed.map(|r| r.side()))
}

/// Without a rollout the bare name is the newest stable version; at 0 %
/// everyone stays on stable, at 100 % everyone gets the canary; a named
/// version bypasses the rollout.
#[test]
fn shares_and_named_versions() {
    let alice = principal("alice", "acme", &[]);
    assert_eq!(
        picked(&snapshot(true, None), &alice, "", "kb"),
        ("2.0.0".into(), None)
    );
    let none = snapshot(true, Some(rollout(0, RolloutState::Active)));
    assert_eq!(
        picked(&none, &alice, "", "kb"),
        ("1.0.0".into(), Some("stable"))
    );
    assert_eq!(
        picked(&none, &alice, "", "kb@2.0.0"),
        ("2.0.0".into(), None)
    );
    assert_eq!(picked(&none, &alice, "", "kb@2"), ("2.0.0".into(), None));
    let all = snapshot(true, Some(rollout(10_000, RolloutState::Active)));
    assert_eq!(
        picked(&all, &alice, "", "kb"),
        ("2.0.0".into(), Some("canary"))
    );
    assert_eq!(picked(&all, &alice, "", "kb@1"), ("1.0.0".into(), None));
}

/// The listing's choice and the call's are the same function: for 500
/// callers at 30 %, `version` over exposed entries and `pick` agree, and
/// about 30 % get the canary.
#[test]
fn listing_and_calls_agree() {
    let s = snapshot(true, Some(rollout(3000, RolloutState::Active)));
    let mut canary = 0;
    for i in 0..500 {
        let who = principal(&format!("p-{i}"), "acme", &[]);
        let listed = version(&s, "kb", &caller(&who, ""), |e| e.exposed()).unwrap();
        let (called, side) = picked(&s, &who, "", "kb");
        assert_eq!(listed.entry.def.version().to_string(), called);
        canary += usize::from(side == Some("canary"));
    }
    assert!((120..=180).contains(&canary), "{canary} of 500");
}

/// Anonymous callers are bucketed by session; without one they stay on
/// stable, and explain says why.
#[test]
fn anonymous_callers_by_session() {
    let s = snapshot(true, Some(rollout(10_000, RolloutState::Active)));
    let anonymous = Principal {
        anonymous: true,
        ..principal("anonymous", "acme", &[])
    };
    assert_eq!(picked(&s, &anonymous, "run-7", "kb").1, Some("canary"));
    assert_eq!(picked(&s, &anonymous, "", "kb").1, Some("stable"));
    let c = caller(&anonymous, "");
    let choice = version(&s, "kb", &c, |e| e.exposed()).unwrap();
    let said = choice
        .routed
        .unwrap()
        .explain(choice.entry, &c, Audience::Caller);
    assert!(said.contains("without a session id"), "{said}");
}

/// An aborted rollout sends everyone to stable; a canary that is down
/// sends its callers to stable, saying so; a promoted one is no rollout.
#[test]
fn aborted_down_and_promoted() {
    let alice = principal("alice", "acme", &[]);
    let aborted = snapshot(true, Some(rollout(10_000, RolloutState::Aborted)));
    assert_eq!(
        picked(&aborted, &alice, "", "kb"),
        ("1.0.0".into(), Some("stable"))
    );
    let down = snapshot(false, Some(rollout(10_000, RolloutState::Active)));
    let c = caller(&alice, "");
    let choice = version(&down, "kb", &c, |e| e.exposed()).unwrap();
    assert_eq!(choice.entry.def.version().to_string(), "1.0.0");
    let said = choice
        .routed
        .unwrap()
        .explain(choice.entry, &c, Audience::Caller);
    assert!(said.contains("not callable now"), "{said}");
    let promoted = snapshot(true, Some(rollout(0, RolloutState::Promoted)));
    assert_eq!(picked(&promoted, &alice, "", "kb"), ("2.0.0".into(), None));
}

/// A rollout of a tool's only version leaves callers outside its share
/// without a version, saying why and what to do.
#[test]
fn no_stable_version() {
    let mut b = Snapshot::empty("e").next();
    b.put(entry("2.0.0", true))
        .put_rollout(rollout(0, RolloutState::Active));
    let s = b.finish();
    let reference = ToolRef::parse("kb").unwrap();
    let alice = principal("alice", "acme", &[]);
    let refused = pick(&s, &s, &reference, &caller(&alice, "")).unwrap_err();
    let text = refused.to_tool_error().message;
    assert!(
        text.contains("no other stable version") && text.contains("kb@VERSION"),
        "{text}"
    );
}

/// A pinned snapshot routes by its own rollout, with the current
/// snapshot's exposure.
#[test]
fn pins_route_by_their_own_rollout() {
    let alice = principal("alice", "acme", &[]);
    let pinned = snapshot(true, Some(rollout(10_000, RolloutState::Active)));
    let mut b = pinned.next();
    b.put_rollout(rollout(0, RolloutState::Aborted));
    let current = b.finish();
    let reference = ToolRef::parse("kb").unwrap();
    let (entry, routed) = pick(&pinned, &current, &reference, &caller(&alice, "")).unwrap();
    assert_eq!(entry.def.version().to_string(), "2.0.0");
    assert!(routed.unwrap().canary);
    let view = rollout_view(&pinned, &caller(&alice, ""));
    assert_eq!(view, "c");
    assert_eq!(rollout_view(&current, &caller(&alice, "")), "");
}
