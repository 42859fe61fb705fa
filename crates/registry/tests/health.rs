//! Health watching against a real `grpc.health.v1` server standing in for an
//! executor: status flips, flap damping, and a server that dies.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::Server;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tonic_health::server::{HealthReporter, health_reporter};
use toolmesh::Snapshot;
use toolmesh::pb::{RegisterRequest, ToolSpec};
use toolmesh_registry::{Registry, RegistryConfig};

const PATIENCE: Duration = Duration::from_secs(10);

/// A health server on its own runtime, so that killing it really closes
/// every connection.
struct FakeExecutor {
    addr: String,
    reporter: HealthReporter,
    runtime: Option<Runtime>,
}

impl FakeExecutor {
    fn start() -> FakeExecutor {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (reporter, service) = health_reporter();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            Server::builder()
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await
        });
        FakeExecutor {
            addr,
            reporter,
            runtime: Some(runtime),
        }
    }

    async fn set(&self, status: ServingStatus) {
        self.reporter.set_service_status("", status).await;
    }

    fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for FakeExecutor {
    fn drop(&mut self) {
        self.kill();
    }
}

fn registry() -> Registry {
    Registry::new(RegistryConfig::default())
}

async fn register(registry: &Registry, executor_id: &str, endpoint: &str) -> u64 {
    let request = RegisterRequest {
        executor_id: executor_id.into(),
        service: "kb-team".into(),
        endpoint: endpoint.into(),
        tools: vec![ToolSpec {
            name: "search_kb".into(),
            version: "1.0.0".into(),
            description: "Search the knowledge base.".into(),
            input_schema: r#"{"type":"object"}"#.into(),
            ..ToolSpec::default()
        }],
        lease_ttl_ms: 60_000,
        execute_token: String::new(),
    };
    let response = registry.register(request, "").await.unwrap();
    assert!(response.rejected.is_empty());
    response.snapshot_version
}

/// Whether `executor_id`'s instance of search_kb is healthy (None: no instance).
fn healthy(snapshot: &Snapshot, executor_id: &str) -> Option<bool> {
    snapshot
        .entries()
        .flat_map(|e| e.instances.iter())
        .find(|i| &*i.executor_id == executor_id)
        .map(|i| i.healthy)
}

/// Waits (event-driven, bounded) for a snapshot that satisfies `pred`.
fn wait_for<'a>(
    registry: &'a Registry,
    what: &'a str,
    pred: impl Fn(&Snapshot) -> bool + 'a,
) -> impl Future<Output = Arc<Snapshot>> + 'a {
    let mut rx = registry.subscribe();
    async move {
        tokio::time::timeout(toolmesh_testkit::patient(PATIENCE), async {
            loop {
                let snapshot = rx.borrow_and_update().clone();
                if pred(&snapshot) {
                    return snapshot;
                }
                rx.changed().await.unwrap();
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting until {what}"))
    }
}

/// Healthy at registration; NOT_SERVING → unhealthy in a new snapshot;
/// SERVING → healthy again; the server dying → unhealthy.
#[tokio::test]
async fn health_status_drives_instance_health() {
    let mut fake = FakeExecutor::start();
    let registry = registry();
    let registered = register(&registry, "kb-1", &fake.addr).await;
    assert_eq!(
        healthy(&registry.current(), "kb-1"),
        Some(true),
        "healthy at once"
    );

    fake.set(ServingStatus::NotServing).await;
    let down = wait_for(&registry, "NOT_SERVING is seen", |s| {
        healthy(s, "kb-1") == Some(false)
    })
    .await;
    assert_eq!(down.version(), registered + 1, "one new snapshot");
    assert!(down.entries().all(|e| !e.exposed()));

    fake.set(ServingStatus::Serving).await;
    let up = wait_for(&registry, "SERVING is seen", |s| {
        healthy(s, "kb-1") == Some(true)
    })
    .await;
    assert!(up.version() > down.version());
    assert!(up.entries().all(|e| e.exposed()));

    fake.kill();
    wait_for(&registry, "the dead server is noticed", |s| {
        healthy(s, "kb-1") == Some(false)
    })
    .await;
}

/// An endpoint where nothing listens is marked unhealthy promptly.
#[tokio::test]
async fn unreachable_executor_is_unhealthy() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let registry = registry();
    register(&registry, "kb-1", &format!("127.0.0.1:{port}")).await;
    wait_for(&registry, "connection refused is seen", |s| {
        healthy(s, "kb-1") == Some(false)
    })
    .await;
}

/// The third recovery within 30 s is held out for about a second before the
/// instance may return.
#[tokio::test]
async fn flapping_executor_is_held_out() {
    let fake = FakeExecutor::start();
    let registry = registry();
    register(&registry, "kb-1", &fake.addr).await;
    for round in 1..=3 {
        fake.set(ServingStatus::NotServing).await;
        wait_for(&registry, "down", |s| healthy(s, "kb-1") == Some(false)).await;
        fake.set(ServingStatus::Serving).await;
        let started = Instant::now();
        wait_for(&registry, "up", |s| healthy(s, "kb-1") == Some(true)).await;
        let took = started.elapsed();
        if round < 3 {
            assert!(took < Duration::from_millis(900), "round {round}: {took:?}");
        } else {
            assert!(took >= Duration::from_millis(900), "held out only {took:?}");
        }
    }
}

/// A health service whose watches answer SERVING and then break when told
/// to, as a peer's GOAWAY or a recycled connection ends a watch; once
/// `dead`, every new watch fails before answering.
#[derive(Clone)]
struct Breaking {
    watches: Arc<std::sync::atomic::AtomicUsize>,
    /// Each change breaks every watch open then.
    breaks: Arc<tokio::sync::watch::Sender<u64>>,
    dead: Arc<std::sync::atomic::AtomicBool>,
}

#[tonic::async_trait]
impl Health for Breaking {
    async fn check(
        &self,
        _: tonic::Request<HealthCheckRequest>,
    ) -> Result<tonic::Response<HealthCheckResponse>, tonic::Status> {
        Ok(tonic::Response::new(HealthCheckResponse { status: 1 }))
    }

    type WatchStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<HealthCheckResponse, tonic::Status>> + Send>,
    >;

    async fn watch(
        &self,
        _: tonic::Request<HealthCheckRequest>,
    ) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
        if self.dead.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(tonic::Status::unavailable("the executor is gone"));
        }
        let mut breaks = self.breaks.subscribe();
        self.watches
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let serving = HealthCheckResponse {
            status: ServingStatus::Serving as i32,
        };
        let stream = async_stream_of(serving, async move {
            let _ = breaks.changed().await;
            tonic::Status::unavailable("connection recycled (GOAWAY)")
        });
        Ok(tonic::Response::new(stream))
    }
}

/// One message, then the error `broken` resolves to.
fn async_stream_of(
    first: HealthCheckResponse,
    broken: impl Future<Output = tonic::Status> + Send + 'static,
) -> std::pin::Pin<
    Box<dyn tokio_stream::Stream<Item = Result<HealthCheckResponse, tonic::Status>> + Send>,
> {
    use futures_util::StreamExt;
    let then = futures_util::stream::once(broken).map(Err);
    Box::pin(futures_util::stream::once(async move { Ok(first) }).chain(then))
}

/// A watch that delivered SERVING and then broke is opened again before
/// the break counts: an executor whose watches break (a GOAWAY for too many
/// pings, a maximum connection age) but which answers SERVING at once on a
/// new one never leaves rotation, and no snapshot is made for it. A break
/// after which nothing answers still counts.
#[tokio::test]
async fn a_broken_watch_of_a_serving_executor_changes_nothing() {
    let health = Breaking {
        watches: Arc::default(),
        breaks: Arc::new(tokio::sync::watch::channel(0).0),
        dead: Arc::default(),
    };
    let addr = toolmesh_testkit::serve_router(
        Server::builder().add_service(HealthServer::new(health.clone())),
    )
    .await
    .to_string();
    let registry = registry();
    let registered = register(&registry, "kb-1", &addr).await;
    let patience = toolmesh_testkit::patient(PATIENCE);
    let watches = || health.watches.load(std::sync::atomic::Ordering::SeqCst);
    for round in 1..=5 {
        toolmesh_testkit::until("the registry watches health", patience, || {
            watches() >= round
        })
        .await;
        health.breaks.send_modify(|n| *n += 1);
    }
    toolmesh_testkit::until("the registry watches again", patience, || watches() >= 6).await;
    let snapshot = registry.subscribe().borrow().clone();
    assert_eq!(
        snapshot.version(),
        registered,
        "no snapshot was made for a watch that broke and was opened again"
    );
    assert_eq!(healthy(&snapshot, "kb-1"), Some(true));
    health.dead.store(true, std::sync::atomic::Ordering::SeqCst);
    health.breaks.send_modify(|n| *n += 1);
    wait_for(&registry, "the dead executor is seen", |s| {
        healthy(s, "kb-1") == Some(false)
    })
    .await;
}
