//! The registry's behaviour through its public API, each test body run over
//! both key-value backends: the memory backend in this process and etcd (a
//! real member).
//! The etcd half needs an `etcd` binary (see [`crate::backends`]).

use crate::backends::{etcd_cluster, on_both_backends};
use crate::registry::tests::{request, spec};
use crate::{
    EtcdAccess, OpenGate, Registry, RegistryConfig, RegistryError, RolloutChange, RolloutError,
    RolloutRequest,
};
use std::sync::Arc;
use std::time::Duration;
use toolmesh::pb::{RegisterResponse, ToolSpec};
use toolmesh::rollout::{Guard, RolloutState, Share};
use toolmesh_procs::EtcdCluster;
use toolmesh_testkit::eventually;

/// A registry under test, and the etcd member behind it (if any).
struct Under {
    store: Registry,
    _etcd: Option<EtcdCluster>,
}

fn config() -> RegistryConfig {
    RegistryConfig {
        watch_health: false,
        ..RegistryConfig::default()
    }
}

/// The registry in this process (the memory backend).
async fn memory() -> Under {
    let registry = Registry::open(config(), Arc::new(OpenGate)).unwrap();
    Under {
        store: registry,
        _etcd: None,
    }
}

/// The registry over a fresh one-member etcd cluster.
async fn etcd() -> Under {
    let cluster = etcd_cluster().await;
    let store = Registry::connect(
        &cluster.store_url(),
        &EtcdAccess::default(),
        config(),
        Arc::new(OpenGate),
    )
    .await
    .unwrap();
    let mut writable = store.writable();
    let ready = tokio::time::timeout(
        toolmesh_testkit::patient(Duration::from_secs(10)),
        writable.wait_for(|w| *w),
    );
    assert!(
        matches!(ready.await, Ok(Ok(_))),
        "etcd store never writable"
    );
    Under {
        store,
        _etcd: Some(cluster),
    }
}

on_both_backends!(
    switches,
    rollouts,
    ownership,
    shared_records,
    expiring_shared_records,
    leases,
    lease_expiry,
    replacement,
    conflicts,
    executor_ids,
    one_version_per_change,
);

async fn register(
    store: &Registry,
    executor_id: &str,
    owner: &str,
    tools: Vec<ToolSpec>,
) -> RegisterResponse {
    let request = request(executor_id, tools);
    store.register(request, owner).await.unwrap()
}

/// The executors serving name@version in the newest snapshot (sorted;
/// `None` when the entry is unknown).
fn serving(store: &Registry, name: &str, version: &str) -> Option<Vec<String>> {
    let version = semver::Version::parse(version).unwrap();
    let snapshot = store.current();
    let entry = snapshot.get(name, &version)?;
    let mut ids: Vec<String> = entry
        .instances
        .iter()
        .map(|i| i.executor_id.to_string())
        .collect();
    ids.sort();
    Some(ids)
}

/// The disabled reason of every version of `tool` in the newest snapshot.
fn reasons(store: &Registry, tool: &str) -> Vec<Option<String>> {
    store
        .current()
        .versions(tool)
        .iter()
        .map(|e| e.disabled.as_deref().map(str::to_owned))
        .collect()
}

/// A switch covers every version (later ones too), is refused for an
/// unknown tool, and enabling an enabled tool is fine.
async fn switches(under: Under) {
    let store = &under.store;
    let registered = register(store, "kb-1", "", vec![spec("search_kb", "1.0.0")]).await;
    let unknown = store.set_disabled("nope", Some("x".into())).await;
    assert_eq!(unknown, Err(RegistryError::UnknownTool("nope".into())));
    let off = store
        .set_disabled("search_kb", Some("leaks data".into()))
        .await
        .unwrap();
    assert!(off > registered.snapshot_version);
    assert!(store.current().version() >= off);
    assert_eq!(reasons(store, "search_kb"), [Some("leaks data".into())]);
    register(store, "kb-2", "", vec![spec("search_kb", "2.0.0")]).await;
    assert_eq!(
        reasons(store, "search_kb"),
        [Some("leaks data".into()), Some("leaks data".into())],
        "a new version of a disabled tool stays disabled"
    );
    let on = store.set_disabled("search_kb", None).await.unwrap();
    assert!(on > off);
    assert_eq!(reasons(store, "search_kb"), [None, None]);
    let again = store.set_disabled("search_kb", None).await.unwrap();
    assert!(again >= on);
}

/// Each change an executor or operator makes is one new version: a
/// registration with new definitions, a switch, a deregistration.
async fn one_version_per_change(under: Under) {
    let store = &under.store;
    let before = store.current().version();
    let registered = register(
        store,
        "kb-1",
        "",
        vec![spec("search_kb", "1.0.0"), spec("fetch_doc", "1.0.0")],
    )
    .await;
    assert_eq!(registered.snapshot_version, before + 1, "a registration");
    let off = store
        .set_disabled("search_kb", Some("x".into()))
        .await
        .unwrap();
    assert_eq!(off, registered.snapshot_version + 1, "a switch");
    let gone = store.deregister(&registered.lease_id, "").await.unwrap();
    assert_eq!(gone, off + 1, "a deregistration");
    assert_eq!(store.current().version(), gone);
}

fn rollout(change: RolloutChange) -> RolloutRequest {
    RolloutRequest {
        tool: "search_kb".into(),
        expect: None,
        change,
        actor: "ops".into(),
    }
}

fn start(basis_points: u32) -> RolloutChange {
    RolloutChange::Start {
        canary: semver::Version::new(2, 0, 0),
        share: Share::from_basis_points(basis_points).unwrap(),
        tenants: vec![],
        principals: vec![],
        guard: Guard::default(),
    }
}

/// A rollout starts once, changes, is promoted, and every change is in the
/// snapshot its version names.
async fn rollouts(under: Under) {
    let store = &under.store;
    let unknown = store.update_rollout(&rollout(start(1000))).await;
    assert!(
        matches!(
            unknown,
            Err(RegistryError::Rollout(RolloutError::UnknownTool(_)))
        ),
        "{unknown:?}"
    );
    let tools = vec![spec("search_kb", "1.0.0"), spec("search_kb", "2.0.0")];
    register(store, "kb-1", "", tools).await;
    let (started, made) = store.update_rollout(&rollout(start(1000))).await.unwrap();
    assert_eq!(made.state, RolloutState::Active);
    let snapshot = store.current();
    assert!(snapshot.version() >= started);
    let kept = snapshot
        .rollout("search_kb")
        .expect("the rollout is published");
    assert_eq!(kept.canary, semver::Version::new(2, 0, 0));
    assert_eq!(kept.share.basis_points(), 1000);
    let twice = store.update_rollout(&rollout(start(2000))).await;
    assert!(
        matches!(
            twice,
            Err(RegistryError::Rollout(RolloutError::AlreadyActive { .. }))
        ),
        "{twice:?}"
    );
    let set = RolloutChange::Set {
        share: Share::from_basis_points(5000).unwrap(),
    };
    let (changed, _) = store.update_rollout(&rollout(set)).await.unwrap();
    assert!(changed > started);
    let share = store.current().rollout("search_kb").unwrap().share;
    assert_eq!(share.basis_points(), 5000);
    let (promoted, made) = store
        .update_rollout(&rollout(RolloutChange::Promote))
        .await
        .unwrap();
    assert!(promoted > changed);
    assert_eq!(made.state, RolloutState::Promoted);
    let state = store.current().rollout("search_kb").unwrap().state;
    assert_eq!(state, RolloutState::Promoted);
}

/// The first owner to register a name keeps it: another owner, and an
/// anonymous executor, are refused it; the owner's other executors join.
async fn ownership(under: Under) {
    let store = &under.store;
    let first = register(store, "kb-a", "team-a", vec![spec("search_kb", "1.0.0")]).await;
    assert!(first.rejected.is_empty(), "{:?}", first.rejected);
    for (executor, owner) in [("kb-b", "team-b"), ("kb-anon", "")] {
        let refused = register(store, executor, owner, vec![spec("search_kb", "1.0.0")]).await;
        assert_eq!(refused.rejected.len(), 1, "{owner:?}");
        assert!(
            refused.rejected[0]
                .reason
                .contains("belongs to owner \"team-a\""),
            "{}",
            refused.rejected[0].reason
        );
    }
    let second = register(store, "kb-a2", "team-a", vec![spec("search_kb", "1.0.0")]).await;
    assert!(second.rejected.is_empty(), "{:?}", second.rejected);
    let entry = store
        .current()
        .get("search_kb", &semver::Version::new(1, 0, 0))
        .cloned()
        .unwrap();
    let mut serving: Vec<String> = entry
        .instances
        .iter()
        .map(|i| i.executor_id.to_string())
        .collect();
    serving.sort();
    assert_eq!(serving, ["kb-a", "kb-a2"]);
}

/// A shared record is written only over the revision its writer read;
/// reading keys only leaves values out; deleting removes it.
async fn shared_records(under: Under) {
    let store = &under.store;
    let ttl = Duration::from_secs(60);
    assert!(
        store
            .put_shared("approval/a-1", b"x".to_vec(), 0, ttl)
            .await
            .unwrap()
    );
    assert!(
        !store
            .put_shared("approval/a-1", b"y".to_vec(), 0, ttl)
            .await
            .unwrap()
    );
    assert!(
        store
            .put_shared("other/o-1", b"o".to_vec(), 0, ttl)
            .await
            .unwrap()
    );
    let read = store.shared_records("approval/").await.unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(
        (read[0].key.as_str(), &read[0].value[..]),
        ("approval/a-1", &b"x"[..])
    );
    let keys = store.shared_keys("approval/").await.unwrap();
    assert_eq!(keys.len(), 1);
    assert!(keys[0].value.is_empty());
    assert_eq!(keys[0].revision, read[0].revision);
    let revision = read[0].revision;
    assert!(
        store
            .put_shared("approval/a-1", b"y".to_vec(), revision, ttl)
            .await
            .unwrap()
    );
    assert!(
        !store
            .put_shared("approval/a-1", b"z".to_vec(), revision, ttl)
            .await
            .unwrap()
    );
    let read = store.shared_records("approval/").await.unwrap();
    assert_eq!(read[0].value, b"y");
    assert!(read[0].revision > revision);
    store.delete_shared("approval/a-1").await.unwrap();
    assert!(store.shared_records("approval/").await.unwrap().is_empty());
    assert_eq!(store.shared_records("other/").await.unwrap().len(), 1);
}

/// A shared record goes once its TTL has passed.
async fn expiring_shared_records(under: Under) {
    let store = &under.store;
    let short = Duration::from_secs(1);
    assert!(
        store
            .put_shared("ticket/t-1", b"x".to_vec(), 0, short)
            .await
            .unwrap()
    );
    eventually("the record to expire", Duration::from_secs(10), || async {
        store
            .shared_records("ticket/")
            .await
            .unwrap()
            .is_empty()
            .then_some(())
    })
    .await;
}

/// Only the owner that registered may renew or end a lease; an empty or
/// unknown lease is refused; a deregistered executor leaves the snapshot
/// at once and its lease is unknown after.
async fn leases(under: Under) {
    let store = &under.store;
    let lease = register(store, "kb-1", "team-a", vec![spec("search_kb", "1.0.0")])
        .await
        .lease_id;
    assert!(store.heartbeat(&lease, "team-a").await.is_ok());
    assert_eq!(
        store.heartbeat(&lease, "team-b").await,
        Err(RegistryError::NotYourLease(lease.clone()))
    );
    assert_eq!(
        store.deregister(&lease, "team-b").await,
        Err(RegistryError::NotYourLease(lease.clone()))
    );
    assert_eq!(
        store.heartbeat("", "team-a").await,
        Err(RegistryError::EmptyLeaseId)
    );
    assert_eq!(
        store.heartbeat("zz", "team-a").await,
        Err(RegistryError::UnknownLease("zz".into()))
    );
    assert_eq!(
        serving(store, "search_kb", "1.0.0"),
        Some(vec!["kb-1".into()])
    );
    store.deregister(&lease, "team-a").await.unwrap();
    assert_eq!(
        serving(store, "search_kb", "1.0.0"),
        Some(vec![]),
        "the tool stays known with no instance"
    );
    assert_eq!(
        store.heartbeat(&lease, "team-a").await,
        Err(RegistryError::UnknownLease(lease.clone()))
    );
}

/// A lease not renewed runs out and takes its executor's instances with it.
async fn lease_expiry(under: Under) {
    let store = &under.store;
    let mut short = request("kb-1", vec![spec("search_kb", "1.0.0")]);
    short.lease_ttl_ms = 1000;
    let lease = store.register(short, "").await.unwrap().lease_id;
    assert_eq!(
        serving(store, "search_kb", "1.0.0"),
        Some(vec!["kb-1".into()])
    );
    eventually("the lease to run out", Duration::from_secs(10), || async {
        serving(store, "search_kb", "1.0.0")
            .is_some_and(|ids| ids.is_empty())
            .then_some(())
    })
    .await;
    assert_eq!(
        store.heartbeat(&lease, "").await,
        Err(RegistryError::UnknownLease(lease.clone()))
    );
}

/// Registering an executor again replaces its registration in one change:
/// tools it no longer lists lose its instance, and its old lease is gone.
async fn replacement(under: Under) {
    let store = &under.store;
    let tools = vec![spec("search_kb", "1.0.0"), spec("get_user", "1.0.0")];
    let old = register(store, "kb-1", "", tools).await.lease_id;
    let new = register(store, "kb-1", "", vec![spec("get_user", "1.0.0")]).await;
    assert_ne!(new.lease_id, old);
    assert_eq!(serving(store, "search_kb", "1.0.0"), Some(vec![]));
    assert_eq!(
        serving(store, "get_user", "1.0.0"),
        Some(vec!["kb-1".into()])
    );
    assert!(store.current().version() >= new.snapshot_version);
    assert_eq!(
        store.heartbeat(&old, "").await,
        Err(RegistryError::UnknownLease(old.clone()))
    );
    assert!(store.heartbeat(&new.lease_id, "").await.is_ok());
}

/// Executors serving one name@version must agree on its definition: a
/// differing one is refused naming the fields, the same one joins.
async fn conflicts(under: Under) {
    let store = &under.store;
    register(store, "kb-1", "", vec![spec("search_kb", "1.0.0")]).await;
    let mut other = spec("search_kb", "1.0.0");
    other.description = "Something else.".into();
    let refused = register(store, "kb-2", "", vec![other]).await;
    assert_eq!(refused.rejected.len(), 1);
    let reason = &refused.rejected[0].reason;
    assert!(
        reason.contains("executor kb-1") && reason.contains("description"),
        "{reason}"
    );
    let joined = register(store, "kb-3", "", vec![spec("search_kb", "1.0.0")]).await;
    assert!(joined.rejected.is_empty(), "{:?}", joined.rejected);
    assert_eq!(
        serving(store, "search_kb", "1.0.0"),
        Some(vec!["kb-1".into(), "kb-3".into()])
    );
}

/// An executor id belongs to the owner that registered it while its lease
/// lives.
async fn executor_ids(under: Under) {
    let store = &under.store;
    register(store, "kb-1", "team-a", vec![spec("search_kb", "1.0.0")]).await;
    let taken = store
        .register(request("kb-1", vec![spec("other", "1.0.0")]), "team-b")
        .await;
    assert_eq!(
        taken,
        Err(RegistryError::ExecutorIdTaken { id: "kb-1".into() })
    );
}
