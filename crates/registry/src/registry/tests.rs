//! Unit tests of the registry's behaviour, driven through its public API.

use super::*;
use crate::keys::label;
use std::time::Duration;
use tonic::Code;
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

fn v(text: &str) -> semver::Version {
    semver::Version::parse(text).unwrap()
}

/// The (executor, healthy) pairs serving name@version in `snapshot`, or
/// `None` when the entry is unknown.
fn served(snapshot: &Snapshot, name: &str, version: &str) -> Option<Vec<(String, bool)>> {
    snapshot.get(name, &v(version)).map(|e| {
        e.instances
            .iter()
            .map(|i| (i.executor_id.to_string(), i.healthy))
            .collect()
    })
}

fn ids(list: &[(&str, bool)]) -> Option<Vec<(String, bool)>> {
    Some(list.iter().map(|(id, h)| (id.to_string(), *h)).collect())
}

/// Lets spawned tasks (the reaper) run under a paused clock.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// Each tool is validated on its own: valid ones are registered, invalid
/// ones come back with the SpecError text as the reason.
#[tokio::test]
async fn register_accepts_and_rejects_each_tool() {
    let registry = Registry::new(config());
    let mut bad_name = spec("9lives", "1.0.0");
    bad_name.name = "9lives".into();
    let bad_version = spec("versioned", "1.0");
    let mut bad_schema = spec("schemaless", "1.0.0");
    bad_schema.input_schema = "{".into();
    let mut empty_description = spec("mute", "1.0.0");
    empty_description.description = " ".into();
    let mut bad_timeout = spec("slow", "1.0.0");
    bad_timeout.timeout_ms = 600_001;
    let rejects = [
        bad_name,
        bad_version,
        bad_schema,
        empty_description,
        bad_timeout,
    ];
    let mut tools = vec![spec("search_kb", "1.0.0")];
    tools.extend(rejects.iter().cloned());
    tools.push(spec("get_user", "2.1.0"));
    let response = registry.register(request("kb-1", tools), "").await.unwrap();

    assert_eq!(response.snapshot_version, 1);
    assert!(!response.lease_id.is_empty());
    let snapshot = registry.current();
    assert_eq!(snapshot.version(), 1);
    assert_eq!(
        snapshot.names().collect::<Vec<_>>(),
        ["get_user", "search_kb"]
    );
    assert_eq!(
        served(&snapshot, "search_kb", "1.0.0"),
        ids(&[("kb-1", true)])
    );
    assert_eq!(response.rejected.len(), rejects.len());
    for (rejected, spec) in response.rejected.iter().zip(rejects) {
        let expected = ToolDef::new(spec.clone()).unwrap_err().to_string();
        assert_eq!(rejected.name, spec.name);
        assert_eq!(rejected.reason, expected);
    }
}

/// An empty executor_id or an endpoint that is not host:port is
/// INVALID_ARGUMENT with a message saying what is expected.
#[tokio::test]
async fn register_checks_executor_id_and_endpoint() {
    let registry = Registry::new(config());
    let err = registry
        .register(request("  ", vec![]), "")
        .await
        .unwrap_err();
    assert_eq!(err, RegistryError::EmptyExecutorId);
    assert_eq!(tonic::Status::from(err).code(), Code::InvalidArgument);
    let good = [
        "127.0.0.1:7070",
        "kb.internal:443",
        "kb-1_a:1",
        "[::1]:7070",
    ];
    let bad = [
        "",
        "localhost",
        "host:",
        ":80",
        "host:70000",
        "host:+80",
        "http://host:80",
        "a b:80",
        "::1:80",
        "[nope]:80",
    ];
    for endpoint in good {
        let mut req = request(&format!("ex-{endpoint}"), vec![]);
        req.endpoint = endpoint.into();
        assert!(
            registry.register(req, "").await.is_ok(),
            "{endpoint:?} should pass"
        );
    }
    for endpoint in bad {
        let mut req = request("ex", vec![]);
        req.endpoint = endpoint.into();
        let err = registry.register(req, "").await.unwrap_err();
        assert_eq!(err, RegistryError::InvalidEndpoint(endpoint.into()));
        let status = tonic::Status::from(err);
        assert_eq!(status.code(), Code::InvalidArgument, "{endpoint:?}");
        assert!(
            status.message().contains("host:port"),
            "{}",
            status.message()
        );
    }
}

/// A wildcard address or port 0 is refused as INVALID_ARGUMENT whose
/// message names the endpoint and says to set --advertise.
#[tokio::test]
async fn register_refuses_unroutable_endpoints() {
    let registry = Registry::new(config());
    for endpoint in ["0.0.0.0:9001", "[::]:9001", "kb.internal:0", "0.0.0.0:0"] {
        let mut req = request("ex", vec![]);
        req.endpoint = endpoint.into();
        let err = registry.register(req, "").await.unwrap_err();
        assert!(
            matches!(&err, RegistryError::UnroutableEndpoint { endpoint: e, .. } if e == endpoint),
            "{endpoint}: {err:?}"
        );
        let status = tonic::Status::from(err);
        assert_eq!(status.code(), Code::InvalidArgument, "{endpoint:?}");
        for part in [endpoint, "--advertise", "TOOLMESH_ADVERTISE"] {
            assert!(status.message().contains(part), "{}", status.message());
        }
    }
}

/// Zero accepted tools still gets a working lease, and changes nothing.
#[tokio::test]
async fn zero_accepted_tools_still_get_a_lease() {
    let registry = Registry::new(config());
    let response = registry
        .register(request("kb-1", vec![spec("", "1.0.0")]), "")
        .await
        .unwrap();
    assert_eq!(response.rejected.len(), 1);
    assert_eq!(response.snapshot_version, 0, "nothing to publish");
    assert_eq!(response.lease_ttl_ms, 10_000);
    assert_eq!(registry.heartbeat(&response.lease_id, "").await, Ok(0));
    assert_eq!(registry.deregister(&response.lease_id, "").await, Ok(0));
}

/// The second of a duplicated name@version in one request is rejected; the
/// first is registered.
#[tokio::test]
async fn duplicate_in_one_request() {
    let registry = Registry::new(config());
    let mut second = spec("search_kb", "1.0.0");
    second.description = "Another description.".into();
    let response = registry
        .register(
            request(
                "kb-1",
                vec![
                    spec("search_kb", "1.0.0"),
                    second,
                    spec("search_kb", "1.1.0"),
                ],
            ),
            "",
        )
        .await
        .unwrap();
    assert_eq!(response.rejected.len(), 1);
    assert_eq!(response.rejected[0].name, "search_kb");
    assert!(
        response.rejected[0]
            .reason
            .contains("search_kb@1.0.0 is listed more than once"),
        "{}",
        response.rejected[0].reason
    );
    let snapshot = registry.current();
    assert_eq!(snapshot.versions("search_kb").len(), 2);
    let entry = snapshot.get("search_kb", &v("1.0.0")).unwrap();
    assert_eq!(entry.def.spec().description, "The search_kb tool.");
}

/// Executors whose definitions agree are replicas: one entry, one instance
/// each (fields outside the fingerprint, like owner, may differ).
#[tokio::test]
async fn replicas_that_agree_share_one_entry() {
    let registry = Registry::new(config());
    registry
        .register(request("kb-1", vec![spec("search_kb", "1.0.0")]), "")
        .await
        .unwrap();
    let mut replica = spec("search_kb", "1.0.0");
    replica.owner = "someone-else".into();
    replica.input_schema = r#"{ "type" : "object" }"#.into();
    let response = registry
        .register(request("kb-2", vec![replica]), "")
        .await
        .unwrap();
    assert!(response.rejected.is_empty(), "{:?}", response.rejected);
    let snapshot = registry.current();
    assert_eq!(snapshot.entries().count(), 1);
    assert_eq!(
        served(&snapshot, "search_kb", "1.0.0"),
        ids(&[("kb-1", true), ("kb-2", true)])
    );
}

/// A conflicting definition of a served name@version is rejected with the
/// fields that differ and the executor(s) that serve the existing one.
#[tokio::test]
async fn conflicting_replica_is_rejected_naming_fields_and_executors() {
    let registry = Registry::new(config());
    registry
        .register(request("kb-1", vec![spec("search_kb", "1.0.0")]), "")
        .await
        .unwrap();
    let mut other = spec("search_kb", "1.0.0");
    other.description = "Search something else.".into();
    other.timeout_ms = 2_000;
    let response = registry
        .register(request("kb-2", vec![other.clone()]), "")
        .await
        .unwrap();
    assert_eq!(response.snapshot_version, 1, "nothing changed");
    assert_eq!(response.rejected.len(), 1);
    assert_eq!(response.rejected[0].name, "search_kb");
    assert_eq!(
        response.rejected[0].reason,
        "conflicts with search_kb@1.0.0 as served by executor kb-1: fields differ: description, timeout_ms; register it under a new version"
    );
    // With two replicas serving it, both are named.
    registry
        .register(request("kb-3", vec![spec("search_kb", "1.0.0")]), "")
        .await
        .unwrap();
    let response = registry
        .register(request("kb-4", vec![other]), "")
        .await
        .unwrap();
    assert!(
        response.rejected[0]
            .reason
            .contains("as served by executors kb-1, kb-3: fields differ"),
        "{}",
        response.rejected[0].reason
    );
    assert_eq!(
        served(&registry.current(), "search_kb", "1.0.0"),
        ids(&[("kb-1", true), ("kb-3", true)])
    );
}

/// When no instance is left, a new (different) definition replaces the old.
#[tokio::test]
async fn new_definition_replaces_an_entry_without_instances() {
    let registry = Registry::new(config());
    let lease = registry
        .register(request("kb-1", vec![spec("search_kb", "1.0.0")]), "")
        .await
        .unwrap()
        .lease_id;
    registry.deregister(&lease, "").await.unwrap();
    let mut changed = spec("search_kb", "1.0.0");
    changed.description = "A new description.".into();
    let response = registry
        .register(request("kb-2", vec![changed]), "")
        .await
        .unwrap();
    assert!(response.rejected.is_empty(), "{:?}", response.rejected);
    let snapshot = registry.current();
    let entry = snapshot.get("search_kb", &v("1.0.0")).unwrap();
    assert_eq!(entry.def.spec().description, "A new description.");
    assert_eq!(
        served(&snapshot, "search_kb", "1.0.0"),
        ids(&[("kb-2", true)])
    );
}

/// Registering again with the same executor_id replaces the previous
/// registration in ONE snapshot: old lease gone, dropped tools lose the
/// instance (and stay known), new ones gain it.
#[tokio::test]
async fn reregistration_replaces_in_one_snapshot() {
    let registry = Registry::new(config());
    let first = registry
        .register(
            request("kb-1", vec![spec("a", "1.0.0"), spec("b", "1.0.0")]),
            "",
        )
        .await
        .unwrap();
    let mut req = request("kb-1", vec![spec("b", "1.0.0"), spec("c", "1.0.0")]);
    req.endpoint = "127.0.0.1:7071".into();
    let second = registry.register(req, "").await.unwrap();
    assert_eq!(second.snapshot_version, first.snapshot_version + 1);
    let snapshot = registry.current();
    assert_eq!(served(&snapshot, "a", "1.0.0"), Some(vec![]));
    assert_eq!(served(&snapshot, "b", "1.0.0"), ids(&[("kb-1", true)]));
    assert_eq!(served(&snapshot, "c", "1.0.0"), ids(&[("kb-1", true)]));
    let b = snapshot.get("b", &v("1.0.0")).unwrap();
    assert_eq!(&*b.instances[0].endpoint, "127.0.0.1:7071");
    assert_eq!(
        registry.heartbeat(&first.lease_id, "").await,
        Err(RegistryError::UnknownLease(first.lease_id.clone()))
    );
    assert!(registry.heartbeat(&second.lease_id, "").await.is_ok());
    let mut keys: Vec<String> = registry
        .inner
        .model()
        .execs
        .get("kb-1")
        .unwrap()
        .keys
        .iter()
        .map(|(key, _)| label(key))
        .collect();
    keys.sort();
    assert_eq!(keys, ["b@1.0.0", "c@1.0.0"], "per-executor index");
}

/// An identical re-registration renews the lease but publishes nothing, and
/// a replica keeps its place among the instances.
#[tokio::test]
async fn identical_reregistration_publishes_nothing() {
    let registry = Registry::new(config());
    registry
        .register(request("kb-1", vec![spec("a", "1.0.0")]), "")
        .await
        .unwrap();
    registry
        .register(request("kb-2", vec![spec("a", "1.0.0")]), "")
        .await
        .unwrap();
    let before = registry.current();
    let again = registry
        .register(request("kb-1", vec![spec("a", "1.0.0")]), "")
        .await
        .unwrap();
    assert_eq!(again.snapshot_version, before.version());
    assert!(Arc::ptr_eq(&before, &registry.current()));
    assert_eq!(
        served(&registry.current(), "a", "1.0.0"),
        ids(&[("kb-1", true), ("kb-2", true)])
    );
}

/// A sole executor may change its definition on re-registration; with a
/// replica present the change is rejected and its old instance is removed.
#[tokio::test]
async fn reregistration_with_a_changed_definition() {
    let registry = Registry::new(config());
    registry
        .register(request("kb-1", vec![spec("a", "1.0.0")]), "")
        .await
        .unwrap();
    let mut changed = spec("a", "1.0.0");
    changed.idempotent = true;
    let response = registry
        .register(request("kb-1", vec![changed.clone()]), "")
        .await
        .unwrap();
    assert!(response.rejected.is_empty());
    assert!(
        registry
            .current()
            .get("a", &v("1.0.0"))
            .unwrap()
            .def
            .idempotent()
    );

    registry
        .register(request("kb-2", vec![changed.clone()]), "")
        .await
        .unwrap();
    let response = registry
        .register(request("kb-1", vec![spec("a", "1.0.0")]), "")
        .await
        .unwrap();
    assert_eq!(response.rejected.len(), 1);
    assert!(
        response.rejected[0]
            .reason
            .contains("served by executor kb-2: fields differ: idempotent"),
        "{}",
        response.rejected[0].reason
    );
    assert_eq!(
        served(&registry.current(), "a", "1.0.0"),
        ids(&[("kb-2", true)])
    );
}

/// A tool whose instances are all gone stays in the snapshot, not exposed.
#[tokio::test]
async fn tool_stays_known_with_zero_instances() {
    let registry = Registry::new(config());
    let lease = registry
        .register(request("kb-1", vec![spec("search_kb", "1.0.0")]), "")
        .await
        .unwrap()
        .lease_id;
    assert!(registry.current().entries().all(|e| e.exposed()));
    let version = registry.deregister(&lease, "").await.unwrap();
    assert_eq!(version, 2);
    let snapshot = registry.current();
    let entry = snapshot.get("search_kb", &v("1.0.0")).expect("still known");
    assert!(entry.instances.is_empty());
    assert!(!entry.exposed());
    let wire = snapshot.to_pb();
    assert_eq!(wire.tools.len(), 1);
    assert!(!wire.tools[0].exposed);
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

/// Unknown leases on Heartbeat and Deregister are NOT_FOUND, telling the
/// executor to register again; an empty lease is INVALID_ARGUMENT.
#[tokio::test]
async fn unknown_lease_is_not_found() {
    let registry = Registry::new(config());
    for result in [
        registry.heartbeat("L", "").await,
        registry.deregister("L", "").await,
    ] {
        let err = result.unwrap_err();
        assert_eq!(err, RegistryError::UnknownLease("L".into()));
        let status = tonic::Status::from(err);
        assert_eq!(status.code(), Code::NotFound);
        assert_eq!(
            status.message(),
            "lease L is unknown (the registry may have restarted): register again"
        );
    }
    let status = tonic::Status::from(registry.heartbeat("", "").await.unwrap_err());
    assert_eq!(status.code(), Code::InvalidArgument);
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

/// A change shares every untouched entry (and definition) with the previous
/// snapshot: structural sharing, not a rebuild.
#[tokio::test]
async fn untouched_entries_are_shared() {
    let registry = Registry::new(config());
    registry
        .register(
            request("kb-1", vec![spec("a", "1.0.0"), spec("a", "2.0.0")]),
            "",
        )
        .await
        .unwrap();
    let lease = registry
        .register(request("kb-2", vec![spec("b", "1.0.0")]), "")
        .await
        .unwrap()
        .lease_id;
    let before = registry.current();
    registry.deregister(&lease, "").await.unwrap();
    let after = registry.current();
    for version in ["1.0.0", "2.0.0"] {
        let old = before.get("a", &v(version)).unwrap();
        let new = after.get("a", &v(version)).unwrap();
        assert!(Arc::ptr_eq(old, new), "a@{version} must be shared");
    }
    let old_b = before.get("b", &v("1.0.0")).unwrap();
    let new_b = after.get("b", &v("1.0.0")).unwrap();
    assert!(!Arc::ptr_eq(old_b, new_b));
    assert!(Arc::ptr_eq(&old_b.def, &new_b.def), "definition is shared");
}

/// set_disabled switches every version of a tool off (with the reason) and
/// on again; new registrations of a disabled tool stay disabled; an unknown
/// tool is an error.
#[tokio::test]
async fn set_disabled_covers_every_version() {
    let registry = Registry::new(config());
    registry
        .register(
            request(
                "kb-1",
                vec![spec("a", "1.0.0"), spec("a", "1.1.0"), spec("b", "1.0.0")],
            ),
            "",
        )
        .await
        .unwrap();
    let version = registry
        .set_disabled("a", Some("leaks data".into()))
        .await
        .unwrap();
    assert_eq!(version, 2);
    let snapshot = registry.current();
    for entry in snapshot.versions("a") {
        assert_eq!(entry.disabled.as_deref(), Some("leaks data"));
        assert!(!entry.exposed());
    }
    assert!(snapshot.get("b", &v("1.0.0")).unwrap().exposed());
    let wire = snapshot.to_pb();
    assert!(wire.tools[0].disabled && wire.tools[0].disabled_reason == "leaks data");

    registry
        .register(request("kb-2", vec![spec("a", "2.0.0")]), "")
        .await
        .unwrap();
    let entry = registry.current().get("a", &v("2.0.0")).unwrap().clone();
    assert_eq!(
        entry.disabled.as_deref(),
        Some("leaks data"),
        "new version stays disabled"
    );

    let version = registry.set_disabled("a", None).await.unwrap();
    assert_eq!(version, 4);
    assert!(registry.current().versions("a").iter().all(|e| e.exposed()));
    assert_eq!(
        registry.set_disabled("a", None).await.unwrap(),
        4,
        "no change, no snapshot"
    );

    let err = registry
        .set_disabled("nope", Some("x".into()))
        .await
        .unwrap_err();
    assert_eq!(err, RegistryError::UnknownTool("nope".into()));
    assert_eq!(tonic::Status::from(err).code(), Code::NotFound);
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
