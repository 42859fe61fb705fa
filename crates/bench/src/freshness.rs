//! Freshness with separate processes (registry, dispatcher, executors): how
//! soon a tool leaves ListTools after its executor is SIGKILLed or turns
//! NOT_SERVING, and how soon a new registration can be invoked.

use crate::Binaries;
use crate::Plan;
use crate::error::BenchError;
use crate::mesh;
use crate::procs::{self, AbortOnDrop, Ready, SpawnOptions};
use crate::stats;
use serde::Serialize;
use std::path::Path;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};
use tonic_health::ServingStatus;
use toolmesh::pb::{
    CallContext, DeregisterRequest, ExecuteEvent, ExecuteRequest, ExecuteResponse,
    HeartbeatRequest, InvokeRequest, RegisterRequest, RiskLevel, ToolResult, ToolSpec,
    dispatcher_client::DispatcherClient,
    executor_server::{Executor, ExecutorServer},
    registry_client::RegistryClient,
};
use toolmesh_transport::Tls;
use toolmesh_transport::incoming;

/// How often ListTools (or Invoke) is polled while waiting.
const POLL: Duration = Duration::from_millis(1);
/// Longest wait for one sample; a slower one is recorded as timed out.
const LIMIT: Duration = Duration::from_secs(10);
/// Lease the executors ask for (the registry's minimum).
const LEASE_TTL_MS: u32 = 1000;
/// Time between exposure and the fault, so health watches are in place.
const SETTLE: Duration = Duration::from_millis(200);
/// The tool the in-process executor serves.
const FRESH_TOOL: &str = "bench_fresh";

/// One measured series, in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    /// Every sample, in order; a timed-out one counts as `limit_ms`.
    pub samples_ms: Vec<f64>,
    /// Samples that did not happen within `limit_ms`.
    pub timeouts: usize,
    /// The longest wait for one sample.
    pub limit_ms: f64,
    /// Median sample.
    pub median_ms: f64,
    /// Slowest sample.
    pub max_ms: f64,
}

impl Series {
    /// From samples that may have timed out (`None`) after `limit`.
    pub(crate) fn new(samples: &[Option<Duration>], limit: Duration) -> Series {
        let values: Vec<Duration> = samples.iter().map(|s| s.unwrap_or(limit)).collect();
        Series {
            samples_ms: values.iter().map(|d| stats::ms(*d)).collect(),
            timeouts: samples.iter().filter(|s| s.is_none()).count(),
            limit_ms: stats::ms(limit),
            median_ms: stats::ms(stats::median(&values)),
            max_ms: stats::ms(stats::max(&values)),
        }
    }
}

/// Part 3 of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Freshness {
    /// How often ListTools was polled, in ms.
    pub poll_ms: f64,
    /// Lease the executors held, in ms.
    pub lease_ttl_ms: u32,
    /// (a) SIGKILL of an `acceptance` example → `acc_echo` unlisted.
    pub sigkill_to_unlisted: Series,
    /// (b) health NOT_SERVING → tool unlisted.
    pub not_serving_to_unlisted: Series,
    /// (c) Register sent → first successful Invoke through the dispatcher.
    pub register_to_invocable: Series,
}

/// Starts `toolmesh registry` and `toolmesh dispatcher --registry`, then
/// measures (a) with example processes and (b), (c) with an executor inside
/// this process.
pub(crate) async fn run(
    plan: &Plan,
    bins: &Binaries,
    logs: &Path,
) -> Result<Freshness, BenchError> {
    let mut registry = procs::spawn(
        bins.parent_death,
        "toolmesh registry",
        &bins.toolmesh,
        &[
            "registry",
            "--listen",
            "127.0.0.1:0",
            "--dev-dispatcher-token",
            mesh::DISPATCHER_TOKEN,
        ],
        logs,
        SpawnOptions::default(),
    )?;
    let registry_addr = registry.listen_addr().await?;
    let mut dispatcher = procs::spawn(
        bins.parent_death,
        "toolmesh dispatcher",
        &bins.toolmesh,
        &[
            "dispatcher",
            "--listen",
            "127.0.0.1:0",
            "--registry",
            &registry_addr,
            "--registry-token",
            mesh::DISPATCHER_TOKEN,
        ],
        logs,
        SpawnOptions::default(),
    )?;
    let dispatcher_addr = dispatcher.listen_addr().await?;
    let mut lister = mesh::dispatcher_client(&dispatcher_addr, &Tls::none())?;

    let mut killed = Vec::new();
    for rep in 0..plan.freshness_reps {
        killed.push(sigkill_once(bins, logs, &registry_addr, &mut lister, rep).await?);
    }

    let executor = InProcessExecutor::start().await?;
    let mut registrar = RegistryClient::new(toolmesh_transport::channel(
        &registry_addr,
        &toolmesh_transport::Tls::none(),
    )?);
    let mut invoker = DispatcherClient::new(toolmesh_transport::channel(
        &dispatcher_addr,
        &toolmesh_transport::Tls::none(),
    )?);
    let (mut not_serving, mut invocable) = (Vec::new(), Vec::new());
    for rep in 0..plan.freshness_reps {
        let (b, c) = health_once(&executor, &mut registrar, &mut lister, &mut invoker, rep).await?;
        not_serving.push(b);
        invocable.push(c);
    }
    executor.stop().await;
    dispatcher.kill_and_reap().await;
    registry.kill_and_reap().await;

    Ok(Freshness {
        poll_ms: stats::ms(POLL),
        lease_ttl_ms: LEASE_TTL_MS,
        sigkill_to_unlisted: Series::new(&killed, LIMIT),
        not_serving_to_unlisted: Series::new(&not_serving, LIMIT),
        register_to_invocable: Series::new(&invocable, LIMIT),
    })
}

/// (a) once: start an example, wait until listed, SIGKILL it, time until unlisted.
async fn sigkill_once(
    bins: &Binaries,
    logs: &Path,
    registry_addr: &str,
    lister: &mut DispatcherClient<Channel>,
    rep: usize,
) -> Result<Option<Duration>, BenchError> {
    let executor_id = format!("bench-kill-{}-{rep}", std::process::id());
    let ttl = LEASE_TTL_MS.to_string();
    let mut example = procs::spawn(
        bins.parent_death,
        &format!("toolmesh example acceptance {rep}"),
        &bins.fixture,
        &[
            "example",
            "acceptance",
            "--registry",
            registry_addr,
            "--ttl-ms",
            &ttl,
            "--executor-id",
            &executor_id,
        ],
        logs,
        SpawnOptions::default(),
    )?;
    example.listen_addr().await?;
    mesh::wait_listed(lister, "acc_echo", true, Duration::from_secs(15)).await?;
    tokio::time::sleep(SETTLE).await;
    let killed_at = Instant::now();
    example.kill_now();
    let sample = mesh::until_listed(lister, "acc_echo", false, killed_at, LIMIT, POLL).await;
    example.kill_and_reap().await;
    if sample.is_none() {
        // Leave no stale instance for the next repetition.
        mesh::wait_listed(lister, "acc_echo", false, Duration::from_secs(30)).await?;
    }
    Ok(sample)
}

/// (b) and (c) once, with a fresh executor id (so the registry's flap
/// damping starts clean): Register → first Invoke; then NOT_SERVING →
/// unlisted; then Deregister.
async fn health_once(
    executor: &InProcessExecutor,
    registrar: &mut RegistryClient<Channel>,
    lister: &mut DispatcherClient<Channel>,
    invoker: &mut DispatcherClient<Channel>,
    rep: usize,
) -> Result<(Option<Duration>, Option<Duration>), BenchError> {
    executor.set(ServingStatus::Serving).await;
    let request = RegisterRequest {
        executor_id: format!("bench-fresh-{}-{rep}", std::process::id()),
        service: "toolmesh-bench".into(),
        endpoint: executor.addr.clone(),
        tools: vec![fresh_spec()],
        lease_ttl_ms: LEASE_TTL_MS,
        execute_token: String::new(),
    };
    let registered_at = Instant::now();
    let response = registrar
        .register(request)
        .await
        .map_err(|s| BenchError::rpc("Register the in-process executor", s))?
        .into_inner();
    if let Some(rejected) = response.rejected.first() {
        return Err(BenchError::failed(
            "Register the in-process executor",
            format!("{} was rejected: {}", rejected.name, rejected.reason),
        ));
    }
    let lease_id = response.lease_id;
    let period = Duration::from_millis(u64::from(response.lease_ttl_ms.max(30)) / 3);
    let heartbeat = AbortOnDrop(tokio::spawn(heartbeat(
        registrar.clone(),
        lease_id.clone(),
        period,
    )));
    let invocable = until_invocable(invoker, registered_at).await;
    mesh::wait_listed(lister, FRESH_TOOL, true, Duration::from_secs(15)).await?;
    tokio::time::sleep(SETTLE).await;
    let flipped_at = Instant::now();
    executor.set(ServingStatus::NotServing).await;
    let unlisted = mesh::until_listed(lister, FRESH_TOOL, false, flipped_at, LIMIT, POLL).await;
    drop(heartbeat);
    registrar
        .deregister(DeregisterRequest { lease_id })
        .await
        .map_err(|s| BenchError::rpc("Deregister the in-process executor", s))?;
    mesh::wait_listed(lister, FRESH_TOOL, false, Duration::from_secs(15)).await?;
    Ok((unlisted, invocable))
}

/// Polls Invoke until it succeeds; the time since `since`, or `None` after [`LIMIT`].
async fn until_invocable(
    invoker: &mut DispatcherClient<Channel>,
    since: Instant,
) -> Option<Duration> {
    loop {
        let mut request = Request::new(InvokeRequest {
            tool: FRESH_TOOL.into(),
            arguments: "{}".into(),
            context: Some(CallContext {
                caller: "toolmesh-bench".into(),
                ..CallContext::default()
            }),
            ..InvokeRequest::default()
        });
        request.set_timeout(Duration::from_secs(1));
        if let Ok(response) = invoker.invoke(request).await {
            let ok = response
                .into_inner()
                .result
                .is_some_and(|r| r.error.is_none_or(|e| e.code == 0));
            if ok {
                return Some(since.elapsed());
            }
        }
        if since.elapsed() > LIMIT {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Renews `lease_id` every `period` until aborted.
async fn heartbeat(mut client: RegistryClient<Channel>, lease_id: String, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let _ = client
            .heartbeat(HeartbeatRequest {
                lease_id: lease_id.clone(),
            })
            .await;
    }
}

/// The spec of [`FRESH_TOOL`].
fn fresh_spec() -> ToolSpec {
    ToolSpec {
        name: FRESH_TOOL.into(),
        version: "1.0.0".into(),
        description: "Benchmark tool: answers ok.".into(),
        input_schema: r#"{"type":"object"}"#.into(),
        risk: RiskLevel::Low as i32,
        idempotent: true,
        timeout_ms: 1000,
        owner: "toolmesh-bench".into(),
        ..ToolSpec::default()
    }
}

/// An executor whose health the bench flips: a tonic server on 127.0.0.1:0
/// with a trivial Executor and a grpc.health.v1 service.
struct InProcessExecutor {
    addr: String,
    reporter: tonic_health::server::HealthReporter,
    stop: tokio::sync::oneshot::Sender<()>,
    task: AbortOnDrop<Result<(), tonic::transport::Error>>,
}

impl InProcessExecutor {
    async fn start() -> Result<InProcessExecutor, BenchError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| BenchError::io("bind the in-process executor", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| BenchError::io("read the in-process executor's address", e))?
            .to_string();
        let (reporter, health) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("", ServingStatus::Serving)
            .await;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(
            Server::builder()
                .add_service(health)
                .add_service(ExecutorServer::new(AnswerOk))
                .serve_with_incoming_shutdown(incoming(listener), async {
                    let _ = stopped.await;
                }),
        );
        Ok(InProcessExecutor {
            addr,
            reporter,
            stop,
            task: AbortOnDrop(task),
        })
    }

    async fn set(&self, status: ServingStatus) {
        self.reporter.set_service_status("", status).await;
    }

    async fn stop(self) {
        let InProcessExecutor { stop, mut task, .. } = self;
        let _ = stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(2), &mut task.0).await;
    }
}

/// The trivial executor: every call answers "ok".
struct AnswerOk;

#[tonic::async_trait]
impl Executor for AnswerOk {
    async fn execute(
        &self,
        _request: Request<ExecuteRequest>,
    ) -> Result<Response<ExecuteResponse>, Status> {
        Ok(Response::new(ExecuteResponse {
            result: Some(ToolResult {
                output: "ok".into(),
                ..ToolResult::default()
            }),
        }))
    }

    type ExecuteStreamStream = tonic::codegen::BoxStream<ExecuteEvent>;

    async fn execute_stream(
        &self,
        _request: Request<ExecuteRequest>,
    ) -> Result<Response<Self::ExecuteStreamStream>, Status> {
        Err(Status::unimplemented("the benchmark's tools do not stream"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Timed-out samples count at the limit and are counted.
    #[test]
    fn series_with_timeouts() {
        let s = Series::new(
            &[
                Some(Duration::from_millis(5)),
                None,
                Some(Duration::from_millis(3)),
            ],
            Duration::from_secs(10),
        );
        assert_eq!(s.timeouts, 1);
        assert_eq!(s.samples_ms, [5.0, 10_000.0, 3.0]);
        assert_eq!(s.median_ms, 5.0);
        assert_eq!(s.max_ms, 10_000.0);
    }
}
