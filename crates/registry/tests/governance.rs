//! Registration security and durable operator state over real gRPC: owners
//! from bearer tokens, hijack attempts rejected, admin-only switches, and
//! disabled tools surviving a registry restart.

use std::path::PathBuf;
use std::sync::Arc;
use tonic::Code;
use tonic::transport::{Channel, Server};
use toolmesh::pb::registry_client::RegistryClient;
use toolmesh::pb::{
    DeregisterRequest, GetSnapshotRequest, HeartbeatRequest, WatchSnapshotsRequest,
};
use toolmesh::pb::{DisableToolRequest, EnableToolRequest, RegisterRequest, ToolSpec};
use toolmesh_registry::{AccessError, Gate, Registry, RegistryConfig, SnapshotReader};
use toolmesh_testkit::{TempDir, serve_router, with_token};

/// Tokens `tok-a`/`tok-b` are owners `team-a`/`team-b`; `tok-admin` is the admin.
struct TestGate;

impl Gate for TestGate {
    fn executor_owner(&self, bearer: Option<&str>) -> Result<String, AccessError> {
        match bearer {
            Some("tok-a") => Ok("team-a".into()),
            Some("tok-b") => Ok("team-b".into()),
            Some(_) => Err(AccessError::Unauthenticated(
                "unknown registration token".into(),
            )),
            None => Err(AccessError::Unauthenticated(
                "register with a bearer token".into(),
            )),
        }
    }
    fn admin(&self, bearer: Option<&str>) -> Result<String, AccessError> {
        match bearer {
            Some("tok-admin") => Ok("ops".into()),
            _ => Err(AccessError::Forbidden(
                "only admins may switch tools".into(),
            )),
        }
    }
    fn snapshot_reader(
        &self,
        bearer: Option<&str>,
        _certificate: Option<&toolmesh_transport::PeerCertificate>,
    ) -> Result<SnapshotReader, AccessError> {
        match bearer {
            Some("tok-dispatcher") => Ok(SnapshotReader {
                name: "d".into(),
                execute_tokens: true,
                until: None,
            }),
            Some("tok-admin") => Ok(SnapshotReader {
                name: "ops".into(),
                execute_tokens: false,
                until: None,
            }),
            Some(_) => Err(AccessError::Forbidden("not a reader".into())),
            None => Err(AccessError::Unauthenticated("read with a token".into())),
        }
    }
}

fn config(data_dir: Option<PathBuf>) -> RegistryConfig {
    RegistryConfig {
        watch_health: false,
        data_dir,
        ..RegistryConfig::default()
    }
}

async fn serve(registry: &Registry) -> RegistryClient<Channel> {
    let addr = serve_router(Server::builder().add_service(registry.grpc_service())).await;
    RegistryClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

fn registration(executor: &str, tool: &str) -> RegisterRequest {
    RegisterRequest {
        executor_id: executor.into(),
        service: "svc".into(),
        endpoint: "127.0.0.1:9".into(),
        tools: vec![ToolSpec {
            name: tool.into(),
            version: "1.0.0".into(),
            description: "A tool.".into(),
            input_schema: r#"{"type":"object"}"#.into(),
            ..ToolSpec::default()
        }],
        lease_ttl_ms: 0,
        execute_token: String::new(),
    }
}

/// A tool name owned by one owner cannot be registered, replaced or
/// shadowed by another; the owner itself can add replicas; no token is
/// UNAUTHENTICATED.
#[tokio::test]
async fn hijack_is_rejected() {
    let registry = Registry::open(config(None), Arc::new(TestGate)).unwrap();
    let mut client = serve(&registry).await;
    let first = client
        .register(with_token(registration("a-1", "search_kb"), Some("tok-a")))
        .await
        .unwrap()
        .into_inner();
    assert!(first.rejected.is_empty());

    let hijack = client
        .register(with_token(registration("b-1", "search_kb"), Some("tok-b")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(hijack.rejected.len(), 1);
    let reason = &hijack.rejected[0].reason;
    assert!(reason.contains("belongs to owner \"team-a\""), "{reason}");
    let entry = registry.current().versions("search_kb")[0].clone();
    assert_eq!(entry.instances.len(), 1, "the hijacker is not an instance");

    let replica = client
        .register(with_token(registration("a-2", "search_kb"), Some("tok-a")))
        .await
        .unwrap()
        .into_inner();
    assert!(replica.rejected.is_empty());
    assert_eq!(
        registry.current().versions("search_kb")[0].instances.len(),
        2
    );

    let anonymous = client
        .register(with_token(registration("x", "other"), None))
        .await
        .unwrap_err();
    assert_eq!(anonymous.code(), Code::Unauthenticated);
}

/// An executor id is bound to the owner that registered it while its lease
/// lives: another team reusing the (public) id cannot take it over.
#[tokio::test]
async fn executor_ids_are_bound_to_their_owner() {
    let registry = Registry::open(config(None), Arc::new(TestGate)).unwrap();
    let mut client = serve(&registry).await;
    client
        .register(with_token(registration("a-1", "search_kb"), Some("tok-a")))
        .await
        .unwrap();
    let taken = client
        .register(with_token(
            registration("a-1", "team_b_tool"),
            Some("tok-b"),
        ))
        .await
        .unwrap_err();
    assert_eq!(taken.code(), Code::PermissionDenied);
    assert!(taken.message().contains("unique id"), "{}", taken.message());
    let entry = registry.current().versions("search_kb")[0].clone();
    assert_eq!(entry.instances.len(), 1, "team A's instance stays");
    // Its owner may still replace its own registration.
    client
        .register(with_token(registration("a-1", "search_kb"), Some("tok-a")))
        .await
        .unwrap();
}

/// One owner cannot register executors without bound: past the cap it is
/// told so, while its existing executors re-register freely.
#[tokio::test]
async fn executors_per_owner_are_capped() {
    let config = RegistryConfig {
        max_executors_per_owner: 2,
        ..config(None)
    };
    let registry = Registry::open(config, Arc::new(TestGate)).unwrap();
    let mut client = serve(&registry).await;
    let mut leases = Vec::new();
    for id in ["a-1", "a-2", "a-1"] {
        let granted = client
            .register(with_token(registration(id, "search_kb"), Some("tok-a")))
            .await
            .unwrap();
        leases.push(granted.into_inner().lease_id);
    }
    let third = client
        .register(with_token(registration("a-3", "search_kb"), Some("tok-a")))
        .await
        .unwrap_err();
    assert_eq!(third.code(), Code::ResourceExhausted);
    assert!(
        third.message().contains("already has 2 live executors"),
        "{}",
        third.message()
    );
    client
        .register(with_token(registration("b-1", "other"), Some("tok-b")))
        .await
        .unwrap();
    // A deregistered executor frees its slot.
    client
        .deregister(with_token(
            toolmesh::pb::DeregisterRequest {
                lease_id: leases[1].clone(),
            },
            Some("tok-a"),
        ))
        .await
        .unwrap();
    client
        .register(with_token(registration("a-3", "search_kb"), Some("tok-a")))
        .await
        .unwrap();
}

/// Lease ids are not bearer secrets: only the owner that registered may
/// heartbeat or deregister with them.
#[tokio::test]
async fn leases_answer_only_their_holder() {
    let registry = Registry::open(config(None), Arc::new(TestGate)).unwrap();
    let mut client = serve(&registry).await;
    let lease_id = client
        .register(with_token(registration("a-1", "search_kb"), Some("tok-a")))
        .await
        .unwrap()
        .into_inner()
        .lease_id;
    let heartbeat = HeartbeatRequest {
        lease_id: lease_id.clone(),
    };
    let foreign = client
        .heartbeat(with_token(heartbeat.clone(), Some("tok-b")))
        .await
        .unwrap_err();
    assert_eq!(foreign.code(), Code::PermissionDenied);
    let anonymous = client
        .heartbeat(with_token(heartbeat.clone(), None))
        .await
        .unwrap_err();
    assert_eq!(anonymous.code(), Code::Unauthenticated);
    let deregister = DeregisterRequest {
        lease_id: lease_id.clone(),
    };
    let foreign = client
        .deregister(with_token(deregister.clone(), Some("tok-b")))
        .await
        .unwrap_err();
    assert_eq!(foreign.code(), Code::PermissionDenied);
    let instances = |r: &Registry| {
        r.current()
            .versions("search_kb")
            .iter()
            .map(|e| e.instances.len())
            .sum::<usize>()
    };
    assert_eq!(instances(&registry), 1, "still registered");
    client
        .heartbeat(with_token(heartbeat, Some("tok-a")))
        .await
        .unwrap();
    client
        .deregister(with_token(deregister, Some("tok-a")))
        .await
        .unwrap();
    assert_eq!(instances(&registry), 0, "its holder deregistered it");
}

/// Snapshots name every tool, schema and endpoint: reading them takes a
/// reader role, over GetSnapshot and WatchSnapshots alike.
#[tokio::test]
async fn snapshot_reads_need_a_role() {
    let registry = Registry::open(config(None), Arc::new(TestGate)).unwrap();
    let mut client = serve(&registry).await;
    let mut with_secret = registration("a-1", "search_kb");
    with_secret.execute_token = "s3cret".into();
    let accepted = client
        .register(with_token(with_secret, Some("tok-a")))
        .await
        .unwrap()
        .into_inner();
    assert!(accepted.execute_token_accepted);
    // Dispatchers see the token executors accept calls with; operators not.
    for (token, seen) in [(Some("tok-dispatcher"), "s3cret"), (Some("tok-admin"), "")] {
        let snapshot = client
            .get_snapshot(with_token(GetSnapshotRequest::default(), token))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            snapshot.tools[0].instances[0].execute_token, seen,
            "{token:?}"
        );
        let mut watch = client
            .watch_snapshots(with_token(WatchSnapshotsRequest::default(), token))
            .await
            .unwrap()
            .into_inner();
        let first = watch.message().await.unwrap().unwrap();
        assert_eq!(first.tools[0].instances[0].execute_token, seen, "{token:?}");
    }
    for (token, code) in [
        (None, Some(Code::Unauthenticated)),
        (Some("tok-a"), Some(Code::PermissionDenied)),
        (Some("tok-dispatcher"), None),
        (Some("tok-admin"), None),
    ] {
        let got = client
            .get_snapshot(with_token(GetSnapshotRequest::default(), token))
            .await;
        assert_eq!(got.as_ref().err().map(|e| e.code()), code, "{token:?}");
        let watched = client
            .watch_snapshots(with_token(WatchSnapshotsRequest::default(), token))
            .await;
        assert_eq!(watched.as_ref().err().map(|e| e.code()), code, "{token:?}");
    }
}

/// Only an admin may disable or enable; a reason is required.
#[tokio::test]
async fn switches_are_admin_only() {
    let registry = Registry::open(config(None), Arc::new(TestGate)).unwrap();
    let mut client = serve(&registry).await;
    client
        .register(with_token(registration("a-1", "send_email"), Some("tok-a")))
        .await
        .unwrap();
    let disable = DisableToolRequest {
        tool: "send_email".into(),
        reason: "incident 42".into(),
    };
    let denied = client
        .disable_tool(with_token(disable.clone(), Some("tok-a")))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    let no_reason = client
        .disable_tool(with_token(
            DisableToolRequest {
                tool: "send_email".into(),
                reason: " ".into(),
            },
            Some("tok-admin"),
        ))
        .await
        .unwrap_err();
    assert_eq!(no_reason.code(), Code::InvalidArgument);
    client
        .disable_tool(with_token(disable, Some("tok-admin")))
        .await
        .unwrap();
    let entry = registry.current().versions("send_email")[0].clone();
    assert_eq!(entry.disabled.as_deref(), Some("incident 42"));
    assert!(!entry.exposed());
    client
        .enable_tool(with_token(
            EnableToolRequest {
                tool: "send_email".into(),
            },
            Some("tok-admin"),
        ))
        .await
        .unwrap();
    assert!(registry.current().versions("send_email")[0].exposed());
}

/// Disabled state and owners survive a restart: the tool comes back
/// disabled when it registers again, and the old owner still holds it.
#[tokio::test]
async fn disabled_survives_restart() {
    let dir = TempDir::new("restart").unwrap();
    {
        let registry =
            Registry::open(config(Some(dir.path().to_owned())), Arc::new(TestGate)).unwrap();
        registry
            .register(registration("a-1", "send_email"), "team-a")
            .await
            .unwrap();
        registry
            .set_disabled("send_email", Some("incident 42".into()))
            .await
            .unwrap();
    }
    let registry = Registry::open(config(Some(dir.path().to_owned())), Arc::new(TestGate)).unwrap();
    let hijack = registry
        .register(registration("b-1", "send_email"), "team-b")
        .await
        .unwrap();
    assert_eq!(hijack.rejected.len(), 1, "ownership survived the restart");
    registry
        .register(registration("a-1", "send_email"), "team-a")
        .await
        .unwrap();
    let entry = registry.current().versions("send_email")[0].clone();
    assert_eq!(entry.disabled.as_deref(), Some("incident 42"));
    registry.set_disabled("send_email", None).await.unwrap();
    assert!(registry.current().versions("send_email")[0].exposed());
    let registry = Registry::open(config(Some(dir.path().to_owned())), Arc::new(TestGate)).unwrap();
    registry
        .register(registration("a-1", "send_email"), "team-a")
        .await
        .unwrap();
    assert!(
        registry.current().versions("send_email")[0].exposed(),
        "enable survived too"
    );
}

/// Over the tool-count limit, a registration is refused as a whole.
#[tokio::test]
async fn tool_count_limit() {
    let registry = Registry::open(
        RegistryConfig {
            max_tools_per_executor: 2,
            ..config(None)
        },
        Arc::new(TestGate),
    )
    .unwrap();
    let mut request = registration("a-1", "t1");
    let extra = request.tools[0].clone();
    for name in ["t2", "t3"] {
        request.tools.push(ToolSpec {
            name: name.into(),
            ..extra.clone()
        });
    }
    let err = registry.register(request, "team-a").await.unwrap_err();
    assert!(err.to_string().contains("limit is 2"), "{err}");
}

/// A journal whose `in_force` holds each decision until the test lets it go.
struct HeldJournal {
    asked: tokio::sync::mpsc::UnboundedSender<u64>,
    release: Arc<tokio::sync::Notify>,
}

#[tonic::async_trait]
impl toolmesh_registry::DecisionJournal for HeldJournal {
    async fn rollout(&self, _: &toolmesh_registry::RolloutChange, _: &toolmesh::Rollout) {}
    async fn switched(&self, _: &str, _: Option<&str>, _: &str, _: u64) {}
    async fn in_force(&self, version: u64) {
        let _ = self.asked.send(version);
        self.release.notified().await;
    }
}

/// An operator's switch is answered only once its journal says the
/// decision is in force (a `serve` node: in its own dispatcher), with the
/// version of the snapshot that holds it.
#[tokio::test]
async fn switches_are_answered_once_in_force() {
    let registry = Registry::open(config(None), Arc::new(TestGate)).unwrap();
    let (asked, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let journal = HeldJournal {
        asked,
        release: release.clone(),
    };
    let service = toolmesh_registry::grpc_service(registry.clone(), Some(Arc::new(journal)));
    let addr = serve_router(Server::builder().add_service(service)).await;
    let mut client = RegistryClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    client
        .register(with_token(registration("a-1", "send_email"), Some("tok-a")))
        .await
        .unwrap();
    let disable = DisableToolRequest {
        tool: "send_email".into(),
        reason: "incident 7".into(),
    };
    let mut answer = tokio::spawn(async move {
        client
            .disable_tool(with_token(disable, Some("tok-admin")))
            .await
    });
    let version = heard.recv().await.expect("in_force asked");
    assert_eq!(registry.current().version(), version);
    // Held: no answer while the decision is not in force.
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(300), &mut answer)
            .await
            .is_err(),
        "answered before the decision was in force"
    );
    release.notify_one();
    let answered = answer.await.unwrap().unwrap().into_inner();
    assert_eq!(answered.snapshot_version, version);
}
