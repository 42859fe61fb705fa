//! The registry's behaviour through its public API, each test body run over
//! both key-value backends: the memory backend in this process and etcd (a
//! real member). What only the registry in this process does (paused
//! time, versions from 0 in each epoch, lease TTLs to the millisecond,
//! the data dir, expiries it counts) is tested in `tests.rs`.
//! The etcd half needs an `etcd` binary (see [`crate::backends`]).

use crate::backends::{etcd_cluster, on_both_backends};
use crate::keys::label;
use crate::registry::tests::{ids, request, served, spec, v};
use crate::{
    EtcdAccess, OpenGate, Registry, RegistryConfig, RegistryError, RolloutChange, RolloutError,
    RolloutRequest,
};
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;
use toolmesh::ToolDef;
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
    register_accepts_and_rejects_each_tool,
    register_checks_executor_id_and_endpoint,
    register_refuses_unroutable_endpoints,
    zero_accepted_tools_still_get_a_lease,
    duplicate_in_one_request,
    replicas_that_agree_share_one_entry,
    conflicting_replica_is_rejected_naming_fields_and_executors,
    new_definition_replaces_an_entry_without_instances,
    reregistration_replaces_in_one_snapshot,
    identical_reregistration_publishes_nothing,
    reregistration_with_a_changed_definition,
    tool_stays_known_with_zero_instances,
    unknown_lease_is_not_found,
    untouched_entries_are_shared,
    set_disabled_covers_every_version,
    switches,
    rollouts,
    records_of_the_previous_layout_load,
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

/// Records the previous version stored as JSON documents — a
/// registration, its health verdict, a rollout — load from the store, and
/// the next write of one is the current layout, which loads too.
async fn records_of_the_previous_layout_load(under: Under) {
    use crate::codec::{self, PROTOBUF};
    use crate::keys::{ExecRecord, Slot, parse_lease};
    use crate::kv::{Op, Txn};
    let store = &under.store;
    let tools = vec![spec("search_kb", "1.0.0"), spec("search_kb", "2.0.0")];
    let registered = register(store, "kb-1", "", tools).await;
    let lease = parse_lease(&registered.lease_id).unwrap();
    let kv = &store.inner.kv;
    let stored = |slot: Slot<'static>| async move {
        let entry = store.inner.kv.get(&slot.key()).await.unwrap();
        entry.expect("the key is stored").value
    };
    let written = stored(Slot::Exec("kb-1")).await;
    assert_eq!(
        written[0], PROTOBUF,
        "a registration is written in protobuf"
    );
    let record: ExecRecord = codec::decode(&written).unwrap();
    let exec_json = serde_json::json!({
        "owner": record.owner, "service": record.service, "endpoint": record.endpoint,
        "execute_token": record.execute_token, "ttl_ms": record.ttl_ms, "tools": record.tools,
    });
    let health_json =
        serde_json::json!({"lease": lease, "healthy": false, "reason": "NOT_SERVING"});
    let rollout_json = codec::tests::LEGACY_ROLLOUT.replace("\"aborted\"", "\"active\"");
    let put = |slot: Slot<'_>, value: Vec<u8>, lease: i64| Op::Put {
        key: slot.key(),
        value,
        lease,
    };
    let previous = Txn {
        compare: vec![],
        success: vec![
            put(
                Slot::Exec("kb-1"),
                exec_json.to_string().into_bytes(),
                lease,
            ),
            put(
                Slot::Health("kb-1"),
                health_json.to_string().into_bytes(),
                lease,
            ),
            put(Slot::Rollout("search_kb"), rollout_json.into_bytes(), 0),
        ],
    };
    assert!(kv.txn(previous).await.unwrap().succeeded);
    eventually(
        "the previous layout to load",
        Duration::from_secs(10),
        || async {
            let snapshot = store.current();
            let unhealthy = served(&snapshot, "search_kb", "1.0.0") == ids(&[("kb-1", false)]);
            let rollout = snapshot.rollout("search_kb")?;
            (unhealthy && rollout.share.basis_points() == 750).then_some(())
        },
    )
    .await;
    // The registration read from JSON is still the lease holder's.
    store.heartbeat(&registered.lease_id, "").await.unwrap();
    let set = RolloutChange::Set {
        share: Share::from_basis_points(5000).unwrap(),
    };
    let (_, changed) = store.update_rollout(&rollout(set)).await.unwrap();
    assert_eq!(
        (changed.share.basis_points(), &*changed.tenants),
        (5000, &["acme".to_owned()][..])
    );
    let rewritten = stored(Slot::Rollout("search_kb")).await;
    assert_eq!(rewritten[0], PROTOBUF, "the next write is protobuf");
    let kept = store.current().rollout("search_kb").unwrap().share;
    assert_eq!(kept.basis_points(), 5000);
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

/// Each tool is validated on its own: valid ones are registered, invalid
/// ones come back with the SpecError text as the reason.
async fn register_accepts_and_rejects_each_tool(under: Under) {
    let registry = &under.store;
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
    let before = registry.current().version();
    let response = registry.register(request("kb-1", tools), "").await.unwrap();

    assert_eq!(response.snapshot_version, before + 1);
    assert!(!response.lease_id.is_empty());
    let snapshot = registry.current();
    assert_eq!(snapshot.version(), before + 1);
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
async fn register_checks_executor_id_and_endpoint(under: Under) {
    let registry = &under.store;
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
async fn register_refuses_unroutable_endpoints(under: Under) {
    let registry = &under.store;
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
async fn zero_accepted_tools_still_get_a_lease(under: Under) {
    let registry = &under.store;
    let before = registry.current().version();
    let response = registry
        .register(request("kb-1", vec![spec("", "1.0.0")]), "")
        .await
        .unwrap();
    assert_eq!(response.rejected.len(), 1);
    assert_eq!(response.snapshot_version, before, "nothing to publish");
    assert_eq!(response.lease_ttl_ms, 10_000);
    assert_eq!(registry.heartbeat(&response.lease_id, "").await, Ok(before));
    assert_eq!(
        registry.deregister(&response.lease_id, "").await,
        Ok(before)
    );
}

/// The second of a duplicated name@version in one request is rejected; the
/// first is registered.
async fn duplicate_in_one_request(under: Under) {
    let registry = &under.store;
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
async fn replicas_that_agree_share_one_entry(under: Under) {
    let registry = &under.store;
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
async fn conflicting_replica_is_rejected_naming_fields_and_executors(under: Under) {
    let registry = &under.store;
    let first = registry
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
    assert_eq!(
        response.snapshot_version, first.snapshot_version,
        "nothing changed"
    );
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
async fn new_definition_replaces_an_entry_without_instances(under: Under) {
    let registry = &under.store;
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
async fn reregistration_replaces_in_one_snapshot(under: Under) {
    let registry = &under.store;
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
async fn identical_reregistration_publishes_nothing(under: Under) {
    let registry = &under.store;
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
async fn reregistration_with_a_changed_definition(under: Under) {
    let registry = &under.store;
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
async fn tool_stays_known_with_zero_instances(under: Under) {
    let registry = &under.store;
    let registered = registry
        .register(request("kb-1", vec![spec("search_kb", "1.0.0")]), "")
        .await
        .unwrap();
    assert!(registry.current().entries().all(|e| e.exposed()));
    let version = registry.deregister(&registered.lease_id, "").await.unwrap();
    assert_eq!(version, registered.snapshot_version + 1);
    let snapshot = registry.current();
    let entry = snapshot.get("search_kb", &v("1.0.0")).expect("still known");
    assert!(entry.instances.is_empty());
    assert!(!entry.exposed());
    let wire = snapshot.to_pb();
    assert_eq!(wire.tools.len(), 1);
    assert!(!wire.tools[0].exposed);
}

/// Unknown leases on Heartbeat and Deregister are NOT_FOUND, telling the
/// executor to register again; an empty lease is INVALID_ARGUMENT.
async fn unknown_lease_is_not_found(under: Under) {
    let registry = &under.store;
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

/// A change shares every untouched entry (and definition) with the previous
/// snapshot: structural sharing, not a rebuild.
async fn untouched_entries_are_shared(under: Under) {
    let registry = &under.store;
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
async fn set_disabled_covers_every_version(under: Under) {
    let registry = &under.store;
    let registered = registry
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
    let first = registered.snapshot_version;
    assert_eq!(version, first + 1);
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
    assert_eq!(version, first + 3);
    assert!(registry.current().versions("a").iter().all(|e| e.exposed()));
    assert_eq!(
        registry.set_disabled("a", None).await.unwrap(),
        first + 3,
        "no change, no snapshot"
    );

    let err = registry
        .set_disabled("nope", Some("x".into()))
        .await
        .unwrap_err();
    assert_eq!(err, RegistryError::UnknownTool("nope".into()));
    assert_eq!(tonic::Status::from(err).code(), Code::NotFound);
}
