//! The rollout rules both stores apply, the requests the gRPC edge reads,
//! and the embedded store keeping rollouts across a restart.

use super::*;
use crate::registry::Registry;
use crate::{OpenGate, RegistryConfig};
use std::sync::Arc;
use toolmesh::pb::{self, RegisterRequest, ToolSpec};
use toolmesh::rollout::{Guard, RolloutState};
use toolmesh_testkit::TempDir;

fn spec(version: &str) -> ToolSpec {
    ToolSpec {
        name: "search_kb".into(),
        version: version.into(),
        description: "Searches.".into(),
        input_schema: r#"{"type":"object"}"#.into(),
        ..ToolSpec::default()
    }
}

fn registry(data_dir: Option<&TempDir>) -> Registry {
    let config = RegistryConfig {
        watch_health: false,
        data_dir: data_dir.map(|d| d.path().to_owned()),
        ..RegistryConfig::default()
    };
    Registry::open(config, Arc::new(OpenGate)).unwrap()
}

async fn register(registry: &Registry, versions: &[&str]) {
    registry
        .register(
            RegisterRequest {
                executor_id: "kb-1".into(),
                service: "kb".into(),
                endpoint: "127.0.0.1:7070".into(),
                tools: versions.iter().map(|v| spec(v)).collect(),
                ..RegisterRequest::default()
            },
            "",
        )
        .await
        .unwrap();
}

fn wire(action: pb::RolloutAction, tool: &str, basis_points: u32) -> pb::UpdateRolloutRequest {
    pb::UpdateRolloutRequest {
        action: action as i32,
        tool: tool.into(),
        basis_points,
        ..Default::default()
    }
}

fn request(action: pb::RolloutAction, tool: &str, basis_points: u32) -> RolloutRequest {
    RolloutRequest::from_pb(wire(action, tool, basis_points), "alice".into()).unwrap()
}

/// Requests are read with their defaults, and malformed ones are refused
/// saying how to write them.
#[test]
fn requests_from_the_wire() {
    let start = request(pb::RolloutAction::Start, "search_kb@2.0.0", 500);
    assert_eq!(start.tool, "search_kb");
    assert!(matches!(
        &start.change,
        RolloutChange::Start { canary, share, guard, .. }
            if canary.to_string() == "2.0.0" && share.basis_points() == 500 && *guard == Guard::default()
    ));
    let abort = request(pb::RolloutAction::Abort, "search_kb@2.0.0", 0);
    assert_eq!(abort.expect, Some(semver::Version::new(2, 0, 0)));
    assert!(
        matches!(&abort.change, RolloutChange::Abort { reason, automatic: false } if reason == "aborted by an operator")
    );
    let refusals = [
        (
            wire(pb::RolloutAction::Start, "search_kb", 500),
            "search_kb@VERSION",
        ),
        (
            wire(pb::RolloutAction::Start, "search_kb@2", 500),
            "not a tool reference",
        ),
        (
            wire(pb::RolloutAction::Set, "search_kb", 10_001),
            "from 0 to 100",
        ),
        (
            wire(pb::RolloutAction::Unspecified, "search_kb", 0),
            "START, SET",
        ),
        (
            wire(pb::RolloutAction::Set, "kb.search", 0),
            "not a tool reference",
        ),
    ];
    for (message, expected) in refusals {
        let refused = RolloutRequest::from_pb(message, "alice".into()).unwrap_err();
        assert!(refused.to_string().contains(expected), "{refused}");
    }
    let mut bad_guard = wire(pb::RolloutAction::Start, "search_kb@2.0.0", 1);
    bad_guard.guard = Some(pb::RolloutGuard {
        max_error_margin: 2.0,
        ..Default::default()
    });
    let refused = RolloutRequest::from_pb(bad_guard, "alice".into()).unwrap_err();
    assert!(refused.to_string().contains("at most 1"), "{refused}");
}

/// Start, set, promote and abort follow the states; each refusal says what
/// to do instead.
#[tokio::test]
async fn rules_by_state() {
    let registry = registry(None);
    let unknown = registry
        .update_rollout(&request(pb::RolloutAction::Start, "search_kb@2.0.0", 500))
        .await
        .unwrap_err();
    assert!(unknown.to_string().contains("no tool named"), "{unknown}");
    register(&registry, &["1.0.0", "2.0.0"]).await;
    let no_rollout = registry
        .update_rollout(&request(pb::RolloutAction::Set, "search_kb", 500))
        .await
        .unwrap_err();
    assert!(
        no_rollout.to_string().contains("rollout start"),
        "{no_rollout}"
    );
    let (version, started) = registry
        .update_rollout(&request(pb::RolloutAction::Start, "search_kb@2.0.0", 500))
        .await
        .unwrap();
    assert_eq!(registry.current().version(), version);
    assert_eq!(started.state, RolloutState::Active);
    assert_eq!(started.changed_by, "alice");
    assert_eq!(
        &**registry.current().rollout("search_kb").unwrap(),
        &started
    );
    let again = registry
        .update_rollout(&request(pb::RolloutAction::Start, "search_kb@2.0.0", 500))
        .await
        .unwrap_err();
    assert!(again.to_string().contains("rollout set"), "{again}");
    let (_, set) = registry
        .update_rollout(&request(pb::RolloutAction::Set, "search_kb", 5000))
        .await
        .unwrap();
    assert_eq!(set.share.basis_points(), 5000);
    assert_eq!(set.started_at_ms, started.started_at_ms);
    let other = registry
        .update_rollout(&request(pb::RolloutAction::Abort, "search_kb@3.0.0", 0))
        .await
        .unwrap_err();
    assert!(other.to_string().contains("not 3.0.0"), "{other}");
    let (_, promoted) = registry
        .update_rollout(&request(pb::RolloutAction::Promote, "search_kb", 0))
        .await
        .unwrap();
    assert_eq!(promoted.state, RolloutState::Promoted);
    let ended = registry
        .update_rollout(&request(pb::RolloutAction::Abort, "search_kb", 0))
        .await
        .unwrap_err();
    assert!(ended.to_string().contains("promoted already"), "{ended}");
    assert_eq!(
        tonic::Status::from(ended).code(),
        tonic::Code::FailedPrecondition
    );
}

/// Promotion is refused while the canary is not what the bare name would
/// resolve to; the status names the stable version.
#[tokio::test]
async fn promote_needs_the_newest_version() {
    let registry = registry(None);
    register(&registry, &["1.0.0", "1.5.0", "2.0.0"]).await;
    registry
        .update_rollout(&request(pb::RolloutAction::Start, "search_kb@1.5.0", 500))
        .await
        .unwrap();
    let refused = registry
        .update_rollout(&request(pb::RolloutAction::Promote, "search_kb", 0))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("that is 2.0.0"), "{refused}");
    let current = registry.current();
    let shown = status(&current, current.rollout("search_kb").unwrap());
    assert_eq!(shown.stable_version, "2.0.0");
    assert!(shown.canary_exposed);
}

/// Rollouts live in the data dir: a registry started again over it
/// publishes them in its first snapshot.
#[tokio::test]
async fn rollouts_survive_a_restart() {
    let dir = TempDir::new("rollouts").unwrap();
    {
        let registry = registry(Some(&dir));
        register(&registry, &["1.0.0", "2.0.0"]).await;
        registry
            .update_rollout(&request(pb::RolloutAction::Start, "search_kb@2.0.0", 2000))
            .await
            .unwrap();
        let mut abort = wire(pb::RolloutAction::Abort, "search_kb", 0);
        abort.reason = "errors up".into();
        abort.automatic = true;
        let abort = RolloutRequest::from_pb(abort, "dispatcher-1".into()).unwrap();
        registry.update_rollout(&abort).await.unwrap();
    }
    let again = registry(Some(&dir));
    let first = again.current();
    let kept = first.rollout("search_kb").expect("kept across the restart");
    assert_eq!(first.version(), 0);
    assert_eq!(kept.state, RolloutState::Aborted);
    assert_eq!(kept.share.basis_points(), 2000);
    assert!(kept.automatic);
    assert_eq!(kept.reason, "errors up");
    assert_eq!(kept.changed_by, "dispatcher-1");
}
