//! What only the registry in this process does, through its public API:
//! paused time, versions from 0 in each epoch, lease TTLs to the
//! millisecond, the data dir, the expiries it counts. The rest of its
//! behaviour is tested on both backends (`both_backends.rs`).

use super::*;
use std::time::Duration;
use toolmesh::pb::{RegisterRequest, ToolSpec};

fn config() -> RegistryConfig {
    RegistryConfig {
        watch_health: false,
        ..RegistryConfig::default()
    }
}

pub(crate) fn spec(name: &str, version: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        version: version.into(),
        description: format!("The {name} tool."),
        input_schema: r#"{"type":"object"}"#.into(),
        ..ToolSpec::default()
    }
}

pub(crate) fn request(executor_id: &str, tools: Vec<ToolSpec>) -> RegisterRequest {
    RegisterRequest {
        executor_id: executor_id.into(),
        service: "kb-team".into(),
        endpoint: "127.0.0.1:7070".into(),
        tools,
        lease_ttl_ms: 0,
        execute_token: String::new(),
    }
}

pub(crate) fn v(text: &str) -> semver::Version {
    semver::Version::parse(text).unwrap()
}

/// The (executor, healthy) pairs serving name@version in `snapshot`, or
/// `None` when the entry is unknown.
pub(crate) fn served(
    snapshot: &Snapshot,
    name: &str,
    version: &str,
) -> Option<Vec<(String, bool)>> {
    snapshot.get(name, &v(version)).map(|e| {
        e.instances
            .iter()
            .map(|i| (i.executor_id.to_string(), i.healthy))
            .collect()
    })
}

pub(crate) fn ids(list: &[(&str, bool)]) -> Option<Vec<(String, bool)>> {
    Some(list.iter().map(|(id, h)| (id.to_string(), *h)).collect())
}

/// Lets spawned tasks (the reaper) run under a paused clock.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// The granted lease is the asked TTL clamped to [min, max], 0 → default.
#[tokio::test]
async fn lease_ttl_is_clamped() {
    let registry = Registry::new(config());
    for (asked, granted) in [
        (0, 10_000),
        (10, 1_000),
        (4_321, 4_321),
        (u32::MAX, 300_000),
    ] {
        let mut req = request("kb-1", vec![]);
        req.lease_ttl_ms = asked;
        assert_eq!(
            registry.register(req, "").await.unwrap().lease_ttl_ms,
            granted,
            "{asked}"
        );
    }
}

/// A lease expires just after its TTL, not before: the reaper removes the
/// instance in one new snapshot and the lease becomes unknown.
#[tokio::test(start_paused = true)]
async fn lease_expires_just_after_ttl() {
    let registry = Registry::new(config());
    let mut req = request("kb-1", vec![spec("a", "1.0.0"), spec("b", "1.0.0")]);
    req.lease_ttl_ms = 1_000;
    let response = registry.register(req, "").await.unwrap();
    settle().await;
    tokio::time::advance(Duration::from_millis(999)).await;
    settle().await;
    assert_eq!(registry.current().version(), response.snapshot_version);
    assert_eq!(
        served(&registry.current(), "a", "1.0.0"),
        ids(&[("kb-1", true)])
    );
    tokio::time::advance(Duration::from_millis(2)).await;
    settle().await;
    let snapshot = registry.current();
    assert_eq!(
        snapshot.version(),
        response.snapshot_version + 1,
        "one snapshot"
    );
    assert_eq!(served(&snapshot, "a", "1.0.0"), Some(vec![]));
    assert_eq!(served(&snapshot, "b", "1.0.0"), Some(vec![]));
    let metrics = registry.config().metrics.encode();
    assert!(
        metrics.contains("toolmesh_registry_lease_expiries_total 1\n"),
        "{metrics}"
    );
    assert_eq!(
        registry.heartbeat(&response.lease_id, "").await,
        Err(RegistryError::UnknownLease(response.lease_id))
    );
}

/// A heartbeat extends the lease by its TTL from now; no snapshot is published.
#[tokio::test(start_paused = true)]
async fn heartbeat_extends_the_lease() {
    let registry = Registry::new(config());
    let mut req = request("kb-1", vec![spec("a", "1.0.0")]);
    req.lease_ttl_ms = 1_000;
    let lease = registry.register(req, "").await.unwrap().lease_id;
    settle().await;
    tokio::time::advance(Duration::from_millis(800)).await;
    assert_eq!(
        registry.heartbeat(&lease, "").await,
        Ok(1),
        "nothing published"
    );
    settle().await;
    tokio::time::advance(Duration::from_millis(999)).await;
    settle().await;
    assert_eq!(
        served(&registry.current(), "a", "1.0.0"),
        ids(&[("kb-1", true)])
    );
    tokio::time::advance(Duration::from_millis(2)).await;
    settle().await;
    assert_eq!(served(&registry.current(), "a", "1.0.0"), Some(vec![]));
    assert_eq!(registry.current().version(), 2);
}

/// Leases that run out together go in one snapshot; one renewed in time stays.
#[tokio::test(start_paused = true)]
async fn simultaneous_expiries_make_one_snapshot() {
    let registry = Registry::new(config());
    let mut leases = Vec::new();
    for id in ["kb-1", "kb-2", "kb-3"] {
        let mut req = request(id, vec![spec("a", "1.0.0")]);
        req.lease_ttl_ms = 1_000;
        leases.push(registry.register(req, "").await.unwrap().lease_id);
    }
    settle().await;
    tokio::time::advance(Duration::from_millis(500)).await;
    registry.heartbeat(&leases[2], "").await.unwrap();
    tokio::time::advance(Duration::from_millis(501)).await;
    settle().await;
    assert_eq!(registry.current().version(), 4);
    assert_eq!(
        served(&registry.current(), "a", "1.0.0"),
        ids(&[("kb-3", true)])
    );
}

/// A lease id kept from before a restart names no lease granted since:
/// the executor's heartbeat is refused, so it registers again (a restarted
/// registry that reused lease ids would keep another executor's lease
/// alive on its behalf, and it would never come back).
#[tokio::test]
async fn lease_ids_are_not_reused_across_restarts() {
    let before = Registry::new(config());
    let old = before
        .register(request("kb-1", vec![spec("a", "1.0.0")]), "")
        .await
        .unwrap()
        .lease_id;
    drop(before);
    let after = Registry::new(config());
    let new = after
        .register(request("kb-2", vec![spec("b", "1.0.0")]), "")
        .await
        .unwrap()
        .lease_id;
    assert_ne!(old, new);
    assert_eq!(
        after.heartbeat(&old, "").await,
        Err(RegistryError::UnknownLease(old.clone()))
    );
}

/// A deregistration is no expiry.
#[tokio::test]
async fn deregistration_is_no_expiry() {
    let registry = Registry::new(config());
    let lease = registry
        .register(request("kb-1", vec![spec("a", "1.0.0")]), "")
        .await
        .unwrap()
        .lease_id;
    registry.deregister(&lease, "").await.unwrap();
    let metrics = registry.config().metrics.encode();
    assert!(
        metrics.contains("toolmesh_registry_lease_expiries_total 0\n"),
        "{metrics}"
    );
}

/// Every change is exactly one version later; no-op requests publish
/// nothing; recent versions can be looked up and evicted ones say which
/// versions are held.
#[tokio::test]
async fn versions_history_and_eviction() {
    let registry = Registry::new(RegistryConfig {
        history: 3,
        ..config()
    });
    let mut rx = registry.subscribe();
    let mut versions = vec![registry.current().version()];
    let lease = registry
        .register(request("kb-1", vec![spec("a", "1.0.0")]), "")
        .await
        .unwrap()
        .lease_id;
    versions.push(registry.current().version());
    registry.heartbeat(&lease, "").await.unwrap();
    assert_eq!(
        registry.current().version(),
        1,
        "heartbeat publishes nothing"
    );
    registry
        .register(request("kb-2", vec![spec("b", "1.0.0")]), "")
        .await
        .unwrap();
    versions.push(registry.current().version());
    registry
        .set_disabled("a", Some("broken".into()))
        .await
        .unwrap();
    versions.push(registry.current().version());
    registry
        .set_disabled("a", Some("broken".into()))
        .await
        .unwrap();
    registry.deregister(&lease, "").await.unwrap();
    versions.push(registry.current().version());
    assert_eq!(versions, [0, 1, 2, 3, 4]);
    assert!(rx.has_changed().unwrap());
    assert_eq!(rx.borrow_and_update().version(), 4);
    let epoch = registry.current().epoch().to_owned();
    for version in 2..=4 {
        let snapshot = registry.snapshot(version).unwrap();
        assert_eq!((snapshot.version(), snapshot.epoch()), (version, &*epoch));
    }
    assert_eq!(registry.snapshot(0).unwrap().version(), 4);
    assert!(
        registry
            .snapshot(2)
            .unwrap()
            .get("b", &v("1.0.0"))
            .is_some()
    );
    for version in [1, 5] {
        let err = registry.snapshot(version).unwrap_err();
        assert_eq!(
            err,
            RegistryError::SnapshotNotHeld(toolmesh::NotHeld {
                version,
                oldest: 2,
                newest: 4
            })
        );
        assert!(err.to_string().contains("holds versions 2 to 4"), "{err}");
    }
    assert_ne!(
        Registry::new(config()).current().epoch(),
        epoch,
        "fresh epoch"
    );
}

/// The health watch of a registration is claimed while it lives and let go
/// when it is deregistered or expires.
#[tokio::test]
async fn health_watch_stops_with_its_registration() {
    let registry = Registry::new(RegistryConfig {
        min_ttl: Duration::from_millis(10),
        ..RegistryConfig::default()
    });
    let claimed = |registry: &Registry| registry.inner.model().watchers.contains_key("kb-1");
    let until = |what: &'static str, want: bool| {
        let registry = registry.clone();
        toolmesh_testkit::eventually(what, Duration::from_secs(10), move || {
            let registry = registry.clone();
            async move { (claimed(&registry) == want).then_some(()) }
        })
    };
    let mut req = request("kb-1", vec![spec("a", "1.0.0")]);
    // Nothing listens there; the watch would mark it unhealthy, which is fine.
    req.endpoint = "127.0.0.1:9".into();
    registry.register(req.clone(), "").await.unwrap();
    until("the watch claimed", true).await;
    let lease = registry.register(req.clone(), "").await.unwrap().lease_id;
    until("the replacement watched", true).await;
    registry.deregister(&lease, "").await.unwrap();
    until("deregistered: the watch let go", false).await;

    req.lease_ttl_ms = 20;
    registry.register(req, "").await.unwrap();
    until("the watch claimed again", true).await;
    until("expired: the watch let go", false).await;
}

/// A state file that cannot be used leaves the registry in memory, but with
/// every other setting the caller passed (none falls back to a default).
#[tokio::test]
async fn unusable_state_keeps_the_other_settings() {
    let dir = std::env::temp_dir().join(format!("toolmesh-bad-state-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(crate::durable::STATE_FILE), "{not json").unwrap();
    let registry = Registry::new(RegistryConfig {
        data_dir: Some(dir.clone()),
        max_tools_per_executor: 7,
        ..config()
    });
    assert_eq!(registry.config().max_tools_per_executor, 7);
    assert_eq!(registry.config().data_dir, None);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A state file as registries wrote it before it held keys (a section per
/// kind of record: owners, disabled tools, rollouts).
const FIRST_LAYOUT: &str = r#"{
  "disabled": {"send_email": "incident 7"},
  "owners": {"search_kb": "team-a"},
  "rollouts": {"search_kb": {"tool": "search_kb", "canary": "2.0.0", "basis_points": 1000,
    "state": "active", "changed_by": "ops", "max_error_margin": 0.05, "min_calls": 20,
    "window_ms": 60000, "started_at_ms": 1, "changed_at_ms": 1}}
}"#;

/// The operator's state in a state file of the first layout is there
/// after an upgrade — the owner of a name, a disabled tool, a rollout —
/// and still after the next restart, once the file was written again.
#[tokio::test]
async fn state_file_of_the_first_layout_loads() {
    let dir = toolmesh_testkit::TempDir::new("first-layout").unwrap();
    std::fs::write(dir.join(crate::durable::STATE_FILE), FIRST_LAYOUT).unwrap();
    let open = || {
        let config = RegistryConfig {
            data_dir: Some(dir.path().to_owned()),
            ..config()
        };
        Registry::open(config, Arc::new(OpenGate)).unwrap()
    };
    for restart in 0..2 {
        let registry = open();
        let tools = vec![
            spec("search_kb", "1.0.0"),
            spec("search_kb", "2.0.0"),
            spec("send_email", "1.0.0"),
        ];
        let owned = registry
            .register(request("kb-a", tools), "team-a")
            .await
            .unwrap();
        assert!(owned.rejected.is_empty(), "{restart}: {:?}", owned.rejected);
        let other = request("kb-b", vec![spec("search_kb", "1.0.0")]);
        let refused = registry.register(other, "team-b").await.unwrap();
        assert_eq!(
            refused.rejected.len(),
            1,
            "{restart}: the name stays team-a's"
        );
        let snapshot = registry.current();
        let switched = snapshot.versions("send_email");
        assert_eq!(
            switched[0].disabled.as_deref(),
            Some("incident 7"),
            "{restart}"
        );
        let rollout = snapshot.rollout("search_kb").expect("the rollout is kept");
        assert_eq!(
            (rollout.canary.to_string(), rollout.share.basis_points()),
            ("2.0.0".to_owned(), 1000)
        );
    }
    let text = std::fs::read_to_string(dir.join(crate::durable::STATE_FILE)).unwrap();
    assert!(
        !text.contains("\"owners\""),
        "written again in the current layout: {text}"
    );
}

/// A state file the previous version wrote in the keys layout, its rollout
/// a JSON document, loads; the next change writes the rollout in protobuf,
/// which loads after a restart too.
#[tokio::test]
async fn state_file_with_json_records_loads() {
    use crate::rollouts::RolloutChange;
    use toolmesh::rollout::Share;
    let dir = toolmesh_testkit::TempDir::new("json-records").unwrap();
    let rollout = crate::codec::tests::LEGACY_ROLLOUT.replace("\"aborted\"", "\"active\"");
    let previous = serde_json::json!({"keys": {
        "/toolmesh/owner/search_kb": "team-a",
        "/toolmesh/rollout/search_kb": rollout,
    }});
    std::fs::write(dir.join(crate::durable::STATE_FILE), previous.to_string()).unwrap();
    let open = || {
        let config = RegistryConfig {
            data_dir: Some(dir.path().to_owned()),
            ..config()
        };
        Registry::open(config, Arc::new(OpenGate)).unwrap()
    };
    let registry = open();
    let loaded = registry.current().rollout("search_kb").cloned();
    let loaded = loaded.expect("the JSON rollout loads");
    assert_eq!(
        (loaded.share.basis_points(), &*loaded.changed_by),
        (750, "alice")
    );
    let tools = vec![spec("search_kb", "1.0.0"), spec("search_kb", "2.0.0")];
    let registered = registry.register(request("kb-a", tools), "team-a").await;
    assert!(registered.unwrap().rejected.is_empty());
    let set = crate::RolloutRequest {
        tool: "search_kb".into(),
        expect: None,
        change: RolloutChange::Set {
            share: Share::from_basis_points(5000).unwrap(),
        },
        actor: "ops".into(),
    };
    registry.update_rollout(&set).await.unwrap();
    drop(registry);
    let text = std::fs::read_to_string(dir.join(crate::durable::STATE_FILE)).unwrap();
    assert!(
        !text.contains("basis_points"),
        "written in protobuf: {text}"
    );
    let again = open();
    let kept = again.current().rollout("search_kb").cloned().expect("kept");
    assert_eq!(
        (kept.share.basis_points(), &*kept.tenants),
        (5000, &["acme".to_owned()][..])
    );
}
