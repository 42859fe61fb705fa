//! The `toolmesh.v1.Registry` service over a real TCP connection, driven by
//! the generated client.

use std::time::Duration;
use tonic::Code;
use tonic::transport::{Channel, Server};
use toolmesh::pb::registry_client::RegistryClient;
use toolmesh::pb::{
    DeregisterRequest, GetSnapshotRequest, HeartbeatRequest, RegisterRequest, ToolSpec,
    WatchSnapshotsRequest,
};
use toolmesh_registry::{Registry, RegistryConfig};
use toolmesh_testkit::serve_router;

const PATIENCE: Duration = Duration::from_secs(5);

async fn start() -> (Registry, RegistryClient<Channel>) {
    let registry = Registry::new(RegistryConfig {
        watch_health: false,
        ..RegistryConfig::default()
    });
    let addr = serve_router(Server::builder().add_service(registry.grpc_service())).await;
    let client = RegistryClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    (registry, client)
}

fn spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        version: "1.0.0".into(),
        description: format!("The {name} tool."),
        input_schema: r#"{"type":"object"}"#.into(),
        ..ToolSpec::default()
    }
}

fn request(executor_id: &str, tools: Vec<ToolSpec>) -> RegisterRequest {
    RegisterRequest {
        executor_id: executor_id.into(),
        service: "kb-team".into(),
        endpoint: "127.0.0.1:7070".into(),
        tools,
        lease_ttl_ms: 2_500,
        execute_token: String::new(),
    }
}

/// Register over gRPC, then GetSnapshot (newest and by version) shows the
/// tool with its instance; an unheld version is NOT_FOUND; Deregister
/// publishes the next version.
#[tokio::test]
async fn register_then_get_snapshot() {
    let (registry, mut client) = start().await;
    let response = client
        .register(request("kb-1", vec![spec("search_kb"), spec("")]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.snapshot_version, 1);
    assert_eq!(response.lease_ttl_ms, 2_500);
    assert_eq!(response.rejected.len(), 1);
    let snapshot = client
        .get_snapshot(GetSnapshotRequest { version: 0 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(snapshot, registry.current().to_pb());
    assert_eq!(snapshot.version, 1);
    assert_eq!(snapshot.epoch, registry.current().epoch());
    let tool = &snapshot.tools[0];
    assert_eq!(tool.spec.as_ref().unwrap().name, "search_kb");
    assert!(tool.exposed);
    assert_eq!(tool.instances[0].executor_id, "kb-1");
    assert_eq!(tool.instances[0].service, "kb-team");
    let by_version = client
        .get_snapshot(GetSnapshotRequest { version: 1 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_version, snapshot);
    let err = client
        .get_snapshot(GetSnapshotRequest { version: 9 })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(
        err.message().contains("holds versions 0 to 1"),
        "{}",
        err.message()
    );

    let beat = client
        .heartbeat(HeartbeatRequest {
            lease_id: response.lease_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(beat.snapshot_version, 1);
    let gone = client
        .deregister(DeregisterRequest {
            lease_id: response.lease_id,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(gone.snapshot_version, 2);
}

/// A malformed registration is INVALID_ARGUMENT at the gRPC edge.
#[tokio::test]
async fn bad_registration_is_invalid_argument() {
    let (_registry, mut client) = start().await;
    let mut req = request("kb-1", vec![]);
    req.endpoint = "no-port".into();
    let err = client.register(req).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("host:port"), "{}", err.message());
    let err = client.register(request("", vec![])).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

/// Heartbeat or Deregister on an unknown lease is NOT_FOUND: register again.
#[tokio::test]
async fn unknown_lease_is_not_found() {
    let (_registry, mut client) = start().await;
    let err = client
        .heartbeat(HeartbeatRequest {
            lease_id: "L".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(
        err.message(),
        "lease L is unknown (the registry may have restarted): register again"
    );
    let err = client
        .deregister(DeregisterRequest {
            lease_id: "L".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}

/// WatchSnapshots{0} sends the newest at once, then each newer snapshot;
/// a burst always ends on the newest.
#[tokio::test]
async fn watch_sends_current_then_newer() {
    let (registry, mut client) = start().await;
    client
        .register(request("kb-1", vec![spec("a")]))
        .await
        .unwrap();
    let mut stream = watch(&mut client, 0, false).await;
    let first = tokio::time::timeout(toolmesh_testkit::patient(PATIENCE), stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.version, 1);
    assert_eq!(first.tools.len(), 1);
    client
        .register(request("kb-2", vec![spec("b")]))
        .await
        .unwrap();
    let second = tokio::time::timeout(toolmesh_testkit::patient(PATIENCE), stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second.version, 2);
    assert_eq!(second.tools.len(), 2);
    for i in 0..20 {
        registry
            .register(request(&format!("burst-{i}"), vec![spec("b")]), "")
            .await
            .unwrap();
    }
    let newest = registry.current().version();
    assert_eq!(newest, 22);
    let mut last = 2;
    while last < newest {
        let next = tokio::time::timeout(toolmesh_testkit::patient(PATIENCE), stream.message())
            .await
            .expect("the newest arrives")
            .unwrap()
            .unwrap();
        assert!(next.version > last, "strictly newer");
        last = next.version;
    }
    assert_eq!(last, newest);
}

/// WatchSnapshots{after_version = newest} waits for the next change; an
/// after_version ahead of ours (an earlier registry lifetime) gets the
/// newest at once, so the watcher sees the new epoch.
#[tokio::test]
async fn watch_after_version() {
    let (registry, mut client) = start().await;
    client
        .register(request("kb-1", vec![spec("a")]))
        .await
        .unwrap();
    let mut caught_up = watch(&mut client, 1, false).await;
    let mut ahead = watch(&mut client, 40, false).await;
    let restarted = tokio::time::timeout(toolmesh_testkit::patient(PATIENCE), ahead.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(restarted.version, 1);
    assert_eq!(restarted.epoch, registry.current().epoch());
    registry
        .set_disabled("a", Some("maintenance".into()))
        .await
        .unwrap();
    let next = tokio::time::timeout(toolmesh_testkit::patient(PATIENCE), caught_up.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(next.version, 2, "version 1 was not sent again");
    assert!(next.tools[0].disabled);
    assert_eq!(next.tools[0].disabled_reason, "maintenance");
}

/// A WatchSnapshots stream from `after_version`.
async fn watch(
    client: &mut RegistryClient<Channel>,
    after_version: u64,
    deltas: bool,
) -> tonic::Streaming<toolmesh::pb::Snapshot> {
    client
        .watch_snapshots(WatchSnapshotsRequest {
            after_version,
            deltas,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

async fn next(stream: &mut tonic::Streaming<toolmesh::pb::Snapshot>) -> toolmesh::pb::Snapshot {
    tokio::time::timeout(toolmesh_testkit::patient(PATIENCE), stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
}

/// The names of the tools a snapshot message carries.
fn names(snapshot: &toolmesh::pb::Snapshot) -> Vec<String> {
    snapshot
        .tools
        .iter()
        .map(|t| t.spec.clone().unwrap().name)
        .collect()
}

/// With deltas, the first message is the full snapshot and each later one
/// carries only what changed since the previous message.
#[tokio::test]
async fn watch_with_deltas() {
    let (_registry, mut client) = start().await;
    client
        .register(request("kb-1", vec![spec("a")]))
        .await
        .unwrap();
    let mut stream = watch(&mut client, 0, true).await;
    let first = next(&mut stream).await;
    assert!(!first.delta);
    assert_eq!(first.tools.len(), 1);
    client
        .register(request("kb-2", vec![spec("b")]))
        .await
        .unwrap();
    let delta = next(&mut stream).await;
    assert!(delta.delta);
    assert_eq!(delta.base_version, first.version);
    assert_eq!(names(&delta), ["b"], "only the new tool travels");
}

/// A watcher that holds a version this registry has yet to publish (it
/// followed a replica ahead of this one) is not sent the whole snapshot,
/// older than what it holds: once the version is published here, it gets
/// deltas from it.
#[tokio::test]
async fn a_watcher_ahead_of_the_registry_resumes_with_deltas() {
    let (registry, mut client) = start().await;
    client
        .register(request("kb-1", vec![spec("a")]))
        .await
        .unwrap();
    let current = registry.current();
    let ahead = current.version() + 1;
    let resume = WatchSnapshotsRequest {
        after_version: ahead,
        deltas: true,
        epoch: current.epoch().to_owned(),
    };
    let watchers = registry.watchers();
    let mut watcher = client.clone();
    let opened = tokio::spawn(async move { watcher.watch_snapshots(resume).await });
    toolmesh_testkit::until("the watch is open", PATIENCE, || {
        registry.watchers() > watchers
    })
    .await;
    client
        .register(request("kb-2", vec![spec("b")]))
        .await
        .unwrap();
    assert_eq!(registry.current().version(), ahead);
    client
        .register(request("kb-3", vec![spec("c")]))
        .await
        .unwrap();
    let mut stream = opened.await.unwrap().unwrap().into_inner();
    let first = next(&mut stream).await;
    assert!(first.delta, "a delta, not the whole snapshot");
    assert_eq!(first.base_version, ahead);
    assert_eq!(
        names(&first),
        ["c"],
        "only what changed since the version it holds"
    );
}

/// A tool whose schema has `patterns` distinct regular expressions.
fn patterned(name: &str, patterns: &[String]) -> ToolSpec {
    let properties: serde_json::Map<String, serde_json::Value> = patterns
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                format!("p{i}"),
                serde_json::json!({"type": "string", "pattern": p}),
            )
        })
        .collect();
    ToolSpec {
        input_schema: serde_json::json!({"type": "object", "properties": properties}).to_string(),
        ..spec(name)
    }
}

/// A regex-heavy schema is rejected with the limit named; a schema with a
/// few ordinary patterns registers; a registration past 512 patterns in all
/// has the excess tools rejected; and while a costly registration
/// compiles, other RPCs are still answered (compilation runs off the
/// async workers: this test's runtime has a single thread).
#[tokio::test]
async fn regex_heavy_schemas_are_rejected_and_never_stall_other_calls() {
    let (_registry, mut client) = start().await;
    let heavy = patterned("heavy", &vec!["x{99999}".to_owned(); 16]);
    let normal = patterned(
        "normal",
        &["^[a-z0-9_]{1,64}$".into(), "^\\d{4}-\\d{2}$".into()],
    );
    let response = client
        .register(request("re-1", vec![heavy, normal]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.rejected.len(), 1, "{:?}", response.rejected);
    let rejected = &response.rejected[0];
    assert_eq!(rejected.name, "heavy");
    let reason = &rejected.reason;
    assert!(reason.contains("compiles to more than 256 KiB"), "{reason}");

    // Many accepted-but-costly schemas: long enough to compile that a
    // blocked worker would delay GetSnapshot until Register ends.
    // 512 patterns, the most one registration may compile: 32 slow ones
    // (about 10 ms each here) and 480 literal ones.
    let slow = (0..32).map(|t| {
        patterned(
            &format!("slow_{t}"),
            &[format!("^(\\w+\\s){{1,{}}}$", 100 + t)],
        )
    });
    let cheap = (0..60).map(|t| {
        let patterns: Vec<String> = (0..8).map(|p| format!("^k{t}_{p}$")).collect();
        patterned(&format!("cheap_{t}"), &patterns)
    });
    let mut tools: Vec<ToolSpec> = slow.chain(cheap).collect();
    tools.push(patterned("one_too_many", &["^a$".into()]));
    let mut registering = client.clone();
    let register = tokio::spawn(async move {
        let answer = registering.register(request("re-2", tools)).await;
        (answer, tokio::time::Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    client
        .get_snapshot(GetSnapshotRequest { version: 0 })
        .await
        .unwrap();
    let snapshot_done = tokio::time::Instant::now();
    let (answer, register_done) = register.await.unwrap();
    let rejected = answer.unwrap().into_inner().rejected;
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(rejected[0].name, "one_too_many");
    let reason = &rejected[0].reason;
    assert!(
        reason.contains("past 512 (the limit across all its tools)"),
        "{reason}"
    );
    assert!(
        snapshot_done < register_done,
        "GetSnapshot waited for the registration to compile"
    );
}
