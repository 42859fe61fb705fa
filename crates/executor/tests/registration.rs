//! Registration against a minimal in-test registry server (real gRPC on
//! 127.0.0.1:0): register on start, heartbeat at about ttl/3, register again
//! when the registry forgets the lease, retry while it is down, deregister on
//! shutdown.

use schemars::JsonSchema;
use serde::Deserialize;
use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};
use tokio::{net::TcpListener, sync::oneshot};
use tonic::{Request, Response, Status, transport::server::TcpIncoming};
use toolmesh::pb::{
    DeregisterRequest, DeregisterResponse, GetSnapshotRequest, HeartbeatRequest, HeartbeatResponse,
    RegisterRequest, RegisterResponse, RejectedTool, Snapshot, WatchSnapshotsRequest,
    registry_server::{Registry, RegistryServer},
};
use toolmesh_executor::{
    CallCx, Executor, ExecutorError, ServeOptions, Tool, ToolFailure, ToolInfo, ToolOutput,
};
use toolmesh_testkit::until;

#[derive(Debug, Clone)]
enum Event {
    Register(RegisterRequest),
    Heartbeat(String),
    Deregister(String),
}

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(Instant, Event)>>>);

impl Log {
    fn push(&self, event: Event) {
        self.0.lock().unwrap().push((Instant::now(), event));
    }
    fn events(&self) -> Vec<(Instant, Event)> {
        self.0.lock().unwrap().clone()
    }
    fn registers(&self) -> Vec<RegisterRequest> {
        self.events()
            .into_iter()
            .filter_map(|(_, e)| match e {
                Event::Register(r) => Some(r),
                _ => None,
            })
            .collect()
    }
}

/// Records every call; grants `ttl_ms`; answers NOT_FOUND to the first heartbeat.
struct FakeRegistry {
    log: Log,
    ttl_ms: u32,
    registrations: Mutex<u32>,
    heartbeats: Mutex<u32>,
}

#[tonic::async_trait]
impl Registry for FakeRegistry {
    async fn register(
        &self,
        request: Request<RegisterRequest>,
    ) -> Result<Response<RegisterResponse>, Status> {
        let request = request.into_inner();
        self.log.push(Event::Register(request.clone()));
        let mut n = self.registrations.lock().unwrap();
        *n += 1;
        Ok(Response::new(RegisterResponse {
            lease_id: format!("lease-{n}"),
            snapshot_version: u64::from(*n),
            lease_ttl_ms: self.ttl_ms,
            rejected: vec![RejectedTool {
                name: "not_a_tool".into(),
                reason: "exercises the error! log path".into(),
            }],
            execute_token_accepted: false,
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatResponse>, Status> {
        let lease_id = request.into_inner().lease_id;
        self.log.push(Event::Heartbeat(lease_id.clone()));
        let mut n = self.heartbeats.lock().unwrap();
        *n += 1;
        if *n == 1 {
            return Err(Status::not_found(format!("no lease {lease_id}")));
        }
        Ok(Response::new(HeartbeatResponse {
            snapshot_version: 1,
        }))
    }

    async fn deregister(
        &self,
        request: Request<DeregisterRequest>,
    ) -> Result<Response<DeregisterResponse>, Status> {
        self.log
            .push(Event::Deregister(request.into_inner().lease_id));
        Ok(Response::new(DeregisterResponse {
            snapshot_version: 9,
        }))
    }

    async fn get_snapshot(
        &self,
        _: Request<GetSnapshotRequest>,
    ) -> Result<Response<Snapshot>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn disable_tool(
        &self,
        _: Request<toolmesh::pb::DisableToolRequest>,
    ) -> Result<Response<toolmesh::pb::DisableToolResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn enable_tool(
        &self,
        _: Request<toolmesh::pb::EnableToolRequest>,
    ) -> Result<Response<toolmesh::pb::EnableToolResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn update_rollout(
        &self,
        _: Request<toolmesh::pb::UpdateRolloutRequest>,
    ) -> Result<Response<toolmesh::pb::UpdateRolloutResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn list_rollouts(
        &self,
        _: Request<toolmesh::pb::ListRolloutsRequest>,
    ) -> Result<Response<toolmesh::pb::ListRolloutsResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    type WatchSnapshotsStream = tonic::codegen::tokio_stream::Empty<Result<Snapshot, Status>>;

    async fn watch_snapshots(
        &self,
        _: Request<WatchSnapshotsRequest>,
    ) -> Result<Response<Self::WatchSnapshotsStream>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
}

/// Serves a fake registry on `listener`; dropping the sender stops it.
fn serve_registry(listener: TcpListener, ttl_ms: u32) -> (Log, oneshot::Sender<()>) {
    let log = Log::default();
    let registry = FakeRegistry {
        log: log.clone(),
        ttl_ms,
        registrations: Mutex::new(0),
        heartbeats: Mutex::new(0),
    };
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RegistryServer::new(registry))
            .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
                let _ = rx.await;
            }),
    );
    (log, tx)
}

/// A fake registry on 127.0.0.1 port 0 granting `ttl_ms`: its address, its
/// log, and the sender that stops it.
async fn fake_registry(ttl_ms: u32) -> (String, Log, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (log, stop) = serve_registry(listener, ttl_ms);
    (addr, log, stop)
}

/// A bound executor running until [`Running::stop`].
struct Running {
    stop: oneshot::Sender<()>,
    run: tokio::task::JoinHandle<Result<(), ExecutorError>>,
}

impl Running {
    fn start(bound: toolmesh_executor::BoundExecutor) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let run = tokio::spawn(bound.run(async {
            let _ = stopped.await;
        }));
        Running { stop, run }
    }

    /// Shuts it down; it must drain and return Ok within 3 s.
    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(toolmesh_testkit::patient(Duration::from_secs(3)), self.run)
            .await
            .expect("run returns within 3 s")
            .expect("the run task did not panic")
            .expect("run returns Ok");
    }
}

/// Arguments of `noop`.
#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

struct Noop;

impl Tool for Noop {
    type Args = NoArgs;
    fn info(&self) -> ToolInfo {
        ToolInfo::new("noop", "1.0.0", "Does nothing.")
    }
    async fn call(&self, _: NoArgs, _: CallCx) -> Result<ToolOutput, ToolFailure> {
        Ok(ToolOutput::text("ok"))
    }
}

/// Register on start with the executor's id, endpoint, tools and asked TTL;
/// a heartbeat answered NOT_FOUND leads to an immediate new Register;
/// heartbeats then come every granted_ttl/3 with the new lease; shutdown
/// deregisters that lease before `run` returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_heartbeats_reregisters_and_deregisters() {
    let (registry_addr, log, _registry) = fake_registry(300).await;

    let opts = ServeOptions {
        executor_id: Some("test-exec-1".into()),
        lease_ttl: Duration::from_millis(1500),
        ..ServeOptions::new(registry_addr)
    };
    let bound = Executor::new("team-a").tool(Noop).bind(opts).await.unwrap();
    let endpoint = bound.local_addr().to_string();
    assert_eq!(bound.executor_id(), "test-exec-1");
    let running = Running::start(bound);

    until(
        "a few heartbeats on the second lease",
        Duration::from_secs(3),
        || {
            log.events()
                .iter()
                .filter(|(_, e)| matches!(e, Event::Heartbeat(id) if id == "lease-2"))
                .count()
                >= 4
        },
    )
    .await;
    running.stop().await;

    let events = log.events();
    let registers = log.registers();
    assert_eq!(registers.len(), 2, "{events:?}");
    let first = &registers[0];
    assert_eq!(first.executor_id, "test-exec-1");
    assert_eq!(first.service, "team-a");
    assert_eq!(first.endpoint, endpoint);
    assert_eq!(first.lease_ttl_ms, 1500);
    let names: Vec<&str> = first.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["noop"]);
    assert_eq!(first.tools[0].timeout_ms, 10_000, "normalised spec is sent");
    assert_eq!(registers[1], registers[0]);

    // Order: register, heartbeat(lease-1) -> NOT_FOUND, register at once, heartbeats(lease-2)..., deregister(lease-2).
    assert!(matches!(events[0].1, Event::Register(_)), "{events:?}");
    assert!(
        matches!(&events[1].1, Event::Heartbeat(id) if id == "lease-1"),
        "{events:?}"
    );
    assert!(matches!(events[2].1, Event::Register(_)), "{events:?}");
    let reregister_delay = events[2].0 - events[1].0;
    assert!(
        reregister_delay < Duration::from_millis(50),
        "re-registered after {reregister_delay:?}"
    );
    let beats: Vec<Instant> = events[3..]
        .iter()
        .filter_map(|(at, e)| match e {
            Event::Heartbeat(id) => {
                assert_eq!(id, "lease-2");
                Some(*at)
            }
            _ => None,
        })
        .collect();
    assert!(beats.len() >= 4, "{events:?}");
    // Granted 300 ms: one heartbeat every ~100 ms.
    let first_gap = beats[0] - events[2].0;
    let mean = (beats[beats.len() - 1] - beats[0]) / (beats.len() as u32 - 1);
    for gap in [first_gap, mean] {
        assert!(
            gap >= Duration::from_millis(80) && gap <= Duration::from_millis(180),
            "heartbeat gap {gap:?}"
        );
    }
    assert!(
        matches!(&events[events.len() - 1].1, Event::Deregister(id) if id == "lease-2"),
        "{events:?}"
    );
}

/// While the registry is down the executor keeps serving and keeps trying
/// (backoff up to 2 s); once the registry comes up it registers, with a
/// default executor id of `{service}-{8 hex}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeps_retrying_until_the_registry_comes_up() {
    // A port with nothing listening yet.
    let registry_addr: SocketAddr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let bound = Executor::new("team-b")
        .tool(Noop)
        .bind(ServeOptions::new(registry_addr.to_string()))
        .await
        .unwrap();
    let executor_id = bound.executor_id().to_owned();
    let suffix = executor_id.strip_prefix("team-b-").expect(&executor_id);
    assert!(
        suffix.len() == 8 && suffix.chars().all(|c| c.is_ascii_hexdigit()),
        "{executor_id}"
    );
    let executor_addr = bound.local_addr();
    let running = Running::start(bound);

    tokio::time::sleep(Duration::from_millis(700)).await;
    // It serves while unregistered, but only to dispatchers: a direct call
    // without the token it will register is refused even now.
    let mut client =
        toolmesh::pb::executor_client::ExecutorClient::connect(format!("http://{executor_addr}"))
            .await
            .unwrap();
    let refused = client
        .execute(toolmesh::pb::ExecuteRequest {
            tool: "noop".into(),
            arguments: "{}".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);

    let listener = TcpListener::bind(registry_addr).await.unwrap();
    let came_up = Instant::now();
    let (log, _registry) = serve_registry(listener, 10_000);
    until(
        "registration after the outage",
        Duration::from_secs(4),
        || !log.registers().is_empty(),
    )
    .await;
    assert!(
        came_up.elapsed() < toolmesh_executor::BACKOFF_MAX + Duration::from_secs(2),
        "{:?}",
        came_up.elapsed()
    );
    assert_eq!(log.registers()[0].executor_id, executor_id);
    running.stop().await;
    assert!(
        log.events()
            .iter()
            .any(|(_, e)| matches!(e, Event::Deregister(id) if id == "lease-1"))
    );
}

/// With a registry to register with, a wildcard listen address and no
/// advertised one, or an advertised wildcard or port 0, refuse to start
/// with a message naming the endpoint and --advertise; without a registry
/// nothing is advertised, so a wildcard is fine.
#[tokio::test]
async fn refuses_to_advertise_an_unroutable_endpoint() {
    let cases = [
        ("0.0.0.0:0", None, "0.0.0.0:0"),
        ("127.0.0.1:0", Some("0.0.0.0:9001"), "0.0.0.0:9001"),
        ("127.0.0.1:0", Some("[::]:9001"), "[::]:9001"),
        ("127.0.0.1:0", Some("10.0.0.7:0"), "10.0.0.7:0"),
    ];
    for (listen, advertise, named) in cases {
        let opts = ServeOptions {
            listen: listen.parse().unwrap(),
            advertise: advertise.map(str::to_owned),
            ..ServeOptions::new("127.0.0.1:1")
        };
        let err = Executor::new("team-a")
            .tool(Noop)
            .bind(opts)
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, ExecutorError::Unroutable { .. }),
            "{listen} {advertise:?}: {text}"
        );
        for part in [named, "--advertise", "TOOLMESH_ADVERTISE"] {
            assert!(text.contains(part), "{part:?} missing from: {text}");
        }
    }
    let opts = ServeOptions {
        listen: "0.0.0.0:0".parse().unwrap(),
        ..ServeOptions::default()
    };
    let bound = Executor::new("team-a").tool(Noop).bind(opts).await;
    assert!(bound.is_ok(), "{bound:?}");
}

/// The advertised endpoint, not the bound address, is what gets
/// registered; a wildcard listen address is fine with one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_the_advertised_endpoint() {
    let (registry_addr, log, _registry) = fake_registry(10_000).await;
    let opts = ServeOptions {
        listen: "0.0.0.0:0".parse().unwrap(),
        advertise: Some("10.1.2.3:9001".into()),
        ..ServeOptions::new(registry_addr)
    };
    let bound = Executor::new("team-a").tool(Noop).bind(opts).await.unwrap();
    assert_eq!(bound.endpoint(), "10.1.2.3:9001");
    let running = Running::start(bound);
    until("a Register", Duration::from_secs(3), || {
        !log.registers().is_empty()
    })
    .await;
    assert_eq!(log.registers()[0].endpoint, "10.1.2.3:9001");
    running.stop().await;
}

/// Echoes its arguments back as data; one handler for every dynamic tool.
struct EchoJson;

impl toolmesh_executor::JsonTool for EchoJson {
    async fn call(
        &self,
        arguments: serde_json::Value,
        cx: CallCx,
    ) -> Result<ToolOutput, ToolFailure> {
        if arguments["fail"] == true {
            return Err(ToolFailure::executor_failed(format!("{} broke", cx.tool())));
        }
        Ok(ToolOutput::text(cx.tool().to_owned()).with_data(arguments))
    }
}

fn dynamic(name: &str) -> toolmesh_executor::DynamicTool {
    let spec = toolmesh::pb::ToolSpec {
        name: name.into(),
        version: "1.0.0".into(),
        description: format!("The dynamic tool {name}."),
        input_schema: r#"{"type":"object","properties":{"text":{"type":"string"},"fail":{"type":"boolean"}},"required":["text"]}"#.into(),
        ..Default::default()
    };
    toolmesh_executor::DynamicTool::new(spec, Arc::new(EchoJson))
}

/// A served Execute of `tool` with `arguments` at `addr`, carrying the
/// execute token the executor registered (as a dispatcher does: the
/// executor enforces it until the registry answers, so a call sent before
/// the answer arrives must carry it too).
async fn execute(
    addr: SocketAddr,
    token: &str,
    tool: &str,
    arguments: &str,
) -> toolmesh::pb::ToolResult {
    let channel =
        toolmesh_transport::channel(&addr.to_string(), &toolmesh_transport::Tls::none()).unwrap();
    let mut request = tonic::Request::new(toolmesh::pb::ExecuteRequest {
        call_id: "c-1".into(),
        tool: tool.into(),
        arguments: arguments.into(),
        attempt: 1,
        ..Default::default()
    });
    toolmesh_transport::set_bearer(request.metadata_mut(), token);
    toolmesh::pb::executor_client::ExecutorClient::new(channel)
        .execute(request)
        .await
        .expect("Execute")
        .into_inner()
        .result
        .expect("a result")
}

/// The health status of the whole server at `addr`.
async fn serving(addr: SocketAddr) -> i32 {
    let channel =
        toolmesh_transport::channel(&addr.to_string(), &toolmesh_transport::Tls::none()).unwrap();
    tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .expect("health check")
        .into_inner()
        .status
}

/// Dynamic tools are checked and run like typed ones (arguments against
/// the spec's schema, the handler sees them as JSON, `executor_failed` is
/// EXECUTOR_FAILED); replacing the set serves the new tools and registers
/// them at once under the same executor id, an invalid set changes
/// nothing, and `set_serving` drives the health the registry watches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_tools_are_served_replaced_and_registered_again() {
    use toolmesh::pb::ErrorCode;
    // Heartbeats would come every 200 s: a Register sooner is the change.
    let (registry_addr, log, _registry) = fake_registry(600_000).await;
    let opts = ServeOptions {
        executor_id: Some("bridge-1".into()),
        lease_ttl: Duration::from_secs(600),
        ..ServeOptions::new(registry_addr)
    };
    let bound = Executor::new("bridge")
        .dynamic_tool(dynamic("first"))
        .bind(opts)
        .await
        .unwrap();
    let addr = bound.local_addr();
    let control = bound.control();
    let running = Running::start(bound);
    until("the first Register", Duration::from_secs(5), || {
        !log.registers().is_empty()
    })
    .await;
    let token = log.registers()[0].execute_token.clone();
    let execute =
        |tool: &'static str, arguments: &'static str| execute(addr, &token, tool, arguments);

    let ok = execute("first", r#"{"text":"hi"}"#).await;
    assert!(ok.error.is_none(), "{ok:?}");
    assert_eq!(ok.output, "first");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&ok.data).unwrap(),
        serde_json::json!({"text": "hi"})
    );
    let invalid = execute("first", r#"{"text":5}"#).await;
    assert_eq!(
        invalid.error.unwrap().code,
        ErrorCode::InvalidArguments as i32
    );
    let broke = execute("first", r#"{"text":"x","fail":true}"#).await;
    let broke = broke.error.unwrap();
    assert_eq!(broke.code, ErrorCode::ExecutorFailed as i32, "{broke:?}");
    assert_eq!(broke.message, "first broke");

    let changed = control
        .replace_tools(vec![dynamic("second"), dynamic("third")])
        .unwrap();
    assert!(changed, "a new set is a change");
    until(
        "a Register with the new set",
        Duration::from_secs(5),
        || log.registers().len() >= 2,
    )
    .await;
    let again = log.registers().pop().unwrap();
    assert_eq!(again.executor_id, "bridge-1");
    let names: Vec<&str> = again.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["second", "third"]);
    let gone = execute("first", r#"{"text":"hi"}"#).await;
    assert_eq!(gone.error.unwrap().code, ErrorCode::NotFound as i32);
    assert_eq!(execute("third", r#"{"text":"hi"}"#).await.output, "third");
    let same = control
        .replace_tools(vec![dynamic("second"), dynamic("third")])
        .unwrap();
    assert!(!same, "the same set again is no change");

    let refused = control
        .replace_tools(vec![dynamic("fourth"), dynamic("not a name")])
        .unwrap_err();
    assert!(refused.to_string().contains("not a name"), "{refused}");
    assert_eq!(execute("third", r#"{"text":"hi"}"#).await.output, "third");
    let names: Vec<String> = control.specs().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["second", "third"]);

    control.set_serving(false).await;
    assert_eq!(serving(addr).await, 2, "NOT_SERVING");
    control.set_serving(true).await;
    assert_eq!(serving(addr).await, 1, "SERVING");
    running.stop().await;
    assert_eq!(
        log.registers().len(),
        2,
        "an unchanged set is not registered again"
    );
}
