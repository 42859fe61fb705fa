//! Registry scale, in this process: registrations per second over gRPC,
//! what one change costs at a small and a large tool count (the design
//! wants O(change)), how soon a change reaches a dispatcher, ListTools at
//! the large count, and resident memory per registered tool.

use crate::Plan;
use crate::error::BenchError;
use crate::loopback::bind;
use crate::procs::AbortOnDrop;
use crate::stats::{self, Latency};
use prost::Message;
use serde::Serialize;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};
use tonic::transport::Server;
use toolmesh::Snapshot;
use toolmesh::pb::{
    ListToolsRequest, RegisterRequest, RiskLevel, ToolFormat, ToolSpec,
    dispatcher_client::DispatcherClient, registry_client::RegistryClient,
};
use toolmesh_dispatcher::{Dispatcher, DispatcherConfig};
use toolmesh_registry::{Registry, RegistryConfig};
use toolmesh_transport::MAX_SNAPSHOT_MESSAGE_BYTES;
use toolmesh_transport::incoming;

/// Longest wait for a change to reach a follower.
const PROPAGATION_LIMIT: Duration = Duration::from_secs(30);
/// Changes run before the measured ones.
const WARMUP_CHANGES: usize = 20;
/// Lease asked for by every fake executor: longer than the whole bench.
const SCALE_LEASE_MS: u32 = 3_600_000;

/// What one change costs, measured around the in-process `Registry` calls.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Publish {
    /// Changes measured (after warm-up).
    pub changes: usize,
    /// Median `Registry::register` of one executor with one tool (includes
    /// validating and compiling its schema), in µs.
    pub register_us: f64,
    /// Median `Registry::deregister` of it, in µs.
    pub deregister_us: f64,
    /// Median of register + deregister, in µs.
    pub change_us: f64,
}

/// How soon a published change is seen by a follower.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Propagation {
    /// Changes timed (each registration and each deregistration is one).
    pub changes: usize,
    /// Median time from the `Registry` call to the follower holding the new
    /// version, in µs.
    pub median_us: f64,
    /// Slowest, in µs.
    pub max_us: f64,
}

/// ListTools over every registered tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ListTools {
    /// Tools listed.
    pub listed: usize,
    /// Encoded size of the native response.
    pub response_bytes: usize,
    /// `Dispatcher::list_tools`, native format, in process (every page).
    pub in_process_native: Latency,
    /// `Dispatcher::list_tools`, OpenAI format (JSON rendered), in process
    /// (every page).
    pub in_process_openai: Latency,
    /// `Dispatcher.ListTools` over gRPC on 127.0.0.1 (native, every page).
    pub grpc_native: Latency,
}

/// Everything measured at one tool count.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AtSize {
    /// Tools registered.
    pub tools: usize,
    /// Executors they are spread over.
    pub executors: usize,
    /// Cost of one change.
    pub publish: Publish,
    /// Change → a `Dispatcher` in this process following `Registry::subscribe`.
    pub to_dispatcher_in_process: Propagation,
    /// Change → a follower over gRPC `WatchSnapshots` (`follow_registry`,
    /// what `toolmesh dispatcher --registry` runs).
    pub to_follower_over_grpc: Propagation,
    /// ListTools.
    pub list_tools: ListTools,
}

/// Part 2 of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scale {
    /// Concurrent gRPC clients registering.
    pub register_clients: usize,
    /// Wall time to register every executor of `large`, in s.
    pub registration_secs: f64,
    /// Register calls per second (one executor each).
    pub registrations_per_sec: f64,
    /// Tools registered per second.
    pub tools_per_sec: f64,
    /// Resident set before the large registry was built, in bytes.
    pub rss_before_bytes: Option<u64>,
    /// Resident set after every tool was registered, in bytes.
    pub rss_after_bytes: Option<u64>,
    /// (after − before) / tools.
    pub rss_bytes_per_tool: Option<f64>,
    /// The small registry (the baseline).
    pub small: AtSize,
    /// The large registry.
    pub large: AtSize,
    /// `large.publish.change_us / small.publish.change_us`.
    pub publish_ratio: f64,
    /// ListTools in pages at the paging size.
    pub paging: crate::Paging,
}

/// Builds a small and a large registry and measures both; the publish
/// cost of the two is measured in alternating blocks so that drift (CPU
/// frequency, other load) hits both alike.
pub(crate) async fn run(plan: &Plan) -> Result<Scale, BenchError> {
    let small_executors = plan.baseline_tools.div_ceil(TOOLS_PER_EXECUTOR);
    let small = World::start().await?;
    for e in 0..small_executors {
        register_in_process(&small.registry, executor_request("small", e)).await?;
    }

    let executors = plan.scale_tools.div_ceil(TOOLS_PER_EXECUTOR);
    let rss_before = rss_bytes();
    let large = World::start().await?;
    let started = Instant::now();
    register_over_grpc(&large.addr, executors, plan.register_clients).await?;
    let registration = started.elapsed();
    let rss_after = rss_bytes();

    let (small_publish, large_publish) =
        publish_costs(&small.registry, &large.registry, plan.publish_changes).await?;
    let small_report = measure(plan, &small, small_executors, small_publish).await?;
    small.stop().await;
    let large_report = measure(plan, &large, executors, large_publish).await?;
    large.stop().await;
    let paging = crate::paging::run(plan).await?;

    let tools = executors * TOOLS_PER_EXECUTOR;
    let secs = registration.as_secs_f64().max(f64::EPSILON);
    Ok(Scale {
        register_clients: plan.register_clients,
        registration_secs: secs,
        registrations_per_sec: executors as f64 / secs,
        tools_per_sec: tools as f64 / secs,
        rss_before_bytes: rss_before,
        rss_after_bytes: rss_after,
        rss_bytes_per_tool: rss_before
            .zip(rss_after)
            .map(|(before, after)| after.saturating_sub(before) as f64 / tools as f64),
        publish_ratio: large_report.publish.change_us
            / small_report.publish.change_us.max(f64::EPSILON),
        small: small_report,
        large: large_report,
        paging,
    })
}

/// Tools per fake executor.
pub(crate) const TOOLS_PER_EXECUTOR: usize = 10;

/// A registry that does not watch health (the endpoints are fake), served
/// over gRPC on 127.0.0.1:0.
struct World {
    registry: Registry,
    addr: String,
    server: Served,
}

impl World {
    async fn start() -> Result<World, BenchError> {
        let registry = Registry::new(RegistryConfig {
            watch_health: false,
            max_ttl: Duration::from_millis(SCALE_LEASE_MS.into()),
            ..RegistryConfig::default()
        });
        let (listener, addr) = bind().await?;
        let service = registry.grpc_service();
        let server = Served::spawn(move |shutdown| async move {
            Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming(listener), shutdown)
                .await
        });
        Ok(World {
            registry,
            addr,
            server,
        })
    }

    async fn stop(self) {
        self.server.stop().await;
    }
}

/// A server task with a shutdown switch; aborted if dropped.
struct Served {
    stop: oneshot::Sender<()>,
    task: AbortOnDrop<Result<(), tonic::transport::Error>>,
}

impl Served {
    fn spawn<F, Fut>(serve: F) -> Served
    where
        F: FnOnce(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> Fut,
        Fut: Future<Output = Result<(), tonic::transport::Error>> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = Box::pin(async move {
            let _ = stopped.await;
        });
        Served {
            stop,
            task: AbortOnDrop(tokio::spawn(serve(shutdown))),
        }
    }

    async fn stop(self) {
        let Served { stop, mut task } = self;
        let _ = stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(2), &mut task.0).await;
    }
}

/// Propagation and ListTools for one populated world.
async fn measure(
    plan: &Plan,
    world: &World,
    executors: usize,
    publish: Publish,
) -> Result<AtSize, BenchError> {
    let (health, _) = tonic_health::server::health_reporter();
    let dispatcher = Dispatcher::new(
        DispatcherConfig::default(),
        world.registry.subscribe(),
        health,
    );
    let current = world.registry.current().version();
    let dispatcher_view = || dispatcher.current_snapshot().version();
    spin_until(&dispatcher_view, current).await?;
    let in_process =
        propagation_in_process(&world.registry, &dispatcher_view, plan.propagation_changes).await?;

    let follower =
        toolmesh_dispatcher::follow_registry(&world.addr, &toolmesh_transport::Tls::none(), None)?;
    let over_grpc =
        propagation_over_grpc(&world.registry, follower, plan.grpc_propagation_changes).await?;

    let list_tools = list_tools(&dispatcher, plan.list_calls).await?;
    Ok(AtSize {
        tools: executors * TOOLS_PER_EXECUTOR,
        executors,
        publish,
        to_dispatcher_in_process: in_process,
        to_follower_over_grpc: over_grpc,
        list_tools,
    })
}

/// Blocks of changes between which the two registries alternate.
const PUBLISH_BLOCKS: usize = 10;

/// Median cost of registering and deregistering one extra executor with
/// one tool, `changes` times per registry after a warm-up, with nobody
/// following; the registries take turns, a block of changes at a time.
async fn publish_costs(
    small: &Registry,
    large: &Registry,
    changes: usize,
) -> Result<(Publish, Publish), BenchError> {
    let mut samples = [Samples::default(), Samples::default()];
    for (registry, into) in [small, large].into_iter().zip(samples.iter_mut()) {
        for i in 0..WARMUP_CHANGES {
            into.change(registry, i, false).await?;
        }
    }
    let per_block = changes.div_ceil(PUBLISH_BLOCKS).max(1);
    let mut done = 0;
    while done < changes {
        let n = per_block.min(changes - done);
        for (registry, into) in [small, large].into_iter().zip(samples.iter_mut()) {
            for i in done..done + n {
                into.change(registry, WARMUP_CHANGES + i, true).await?;
            }
        }
        done += n;
    }
    let [small, large] = samples;
    Ok((small.publish(), large.publish()))
}

/// Timings of register, deregister and both, one per change.
#[derive(Default)]
struct Samples {
    register: Vec<Duration>,
    deregister: Vec<Duration>,
    pair: Vec<Duration>,
}

impl Samples {
    /// Change `i`: register one extra executor, then deregister it.
    async fn change(
        &mut self,
        registry: &Registry,
        i: usize,
        keep: bool,
    ) -> Result<(), BenchError> {
        let request = change_request(i);
        let t0 = Instant::now();
        let lease = register_in_process(registry, request).await?;
        let t1 = Instant::now();
        registry
            .deregister(&lease, "")
            .await
            .map_err(|e| BenchError::failed("Registry::deregister", e.to_string()))?;
        let t2 = Instant::now();
        if keep {
            self.register.push(t1 - t0);
            self.deregister.push(t2 - t1);
            self.pair.push(t2 - t0);
        }
        Ok(())
    }

    fn publish(&self) -> Publish {
        Publish {
            changes: self.pair.len(),
            register_us: stats::us(stats::median(&self.register)),
            deregister_us: stats::us(stats::median(&self.deregister)),
            change_us: stats::us(stats::median(&self.pair)),
        }
    }
}

/// Registers and deregisters one executor `changes` times, timing each call
/// until `version()` reaches the version it published.
async fn propagation_in_process(
    registry: &Registry,
    version: &impl Fn() -> u64,
    changes: usize,
) -> Result<Propagation, BenchError> {
    let mut samples = Vec::with_capacity(2 * changes);
    for i in 0..changes {
        let t0 = Instant::now();
        let response = registry
            .register(change_request(i), "")
            .await
            .map_err(|e| BenchError::failed("Registry::register", e.to_string()))?;
        spin_until(version, response.snapshot_version).await?;
        samples.push(t0.elapsed());
        let t1 = Instant::now();
        let v = registry
            .deregister(&response.lease_id, "")
            .await
            .map_err(|e| BenchError::failed("Registry::deregister", e.to_string()))?;
        spin_until(version, v).await?;
        samples.push(t1.elapsed());
    }
    Ok(propagation(samples))
}

/// As [`propagation_in_process`], for a follower over gRPC.
async fn propagation_over_grpc(
    registry: &Registry,
    mut follower: watch::Receiver<std::sync::Arc<Snapshot>>,
    changes: usize,
) -> Result<Propagation, BenchError> {
    let epoch = registry.current().epoch().to_owned();
    wait_follower(&mut follower, &epoch, registry.current().version()).await?;
    let mut samples = Vec::with_capacity(2 * changes);
    for i in 0..changes {
        let t0 = Instant::now();
        let response = registry
            .register(change_request(i), "")
            .await
            .map_err(|e| BenchError::failed("Registry::register", e.to_string()))?;
        wait_follower(&mut follower, &epoch, response.snapshot_version).await?;
        samples.push(t0.elapsed());
        let t1 = Instant::now();
        let v = registry
            .deregister(&response.lease_id, "")
            .await
            .map_err(|e| BenchError::failed("Registry::deregister", e.to_string()))?;
        wait_follower(&mut follower, &epoch, v).await?;
        samples.push(t1.elapsed());
    }
    Ok(propagation(samples))
}

fn propagation(samples: Vec<Duration>) -> Propagation {
    Propagation {
        changes: samples.len(),
        median_us: stats::us(stats::median(&samples)),
        max_us: stats::us(stats::max(&samples)),
    }
}

/// Yields until `version()` reaches `want` (microsecond resolution; the
/// follower runs on the other worker or between yields).
async fn spin_until(version: &impl Fn() -> u64, want: u64) -> Result<(), BenchError> {
    let started = Instant::now();
    while version() < want {
        if started.elapsed() > PROPAGATION_LIMIT {
            return Err(BenchError::timeout(
                format!("the in-process dispatcher to install snapshot {want}"),
                PROPAGATION_LIMIT,
            ));
        }
        tokio::task::yield_now().await;
    }
    Ok(())
}

/// Waits until the follower holds version `want` of `epoch`.
async fn wait_follower(
    follower: &mut watch::Receiver<std::sync::Arc<Snapshot>>,
    epoch: &str,
    want: u64,
) -> Result<(), BenchError> {
    let reached = |s: &std::sync::Arc<Snapshot>| s.epoch() == epoch && s.version() >= want;
    tokio::time::timeout(PROPAGATION_LIMIT, follower.wait_for(reached))
        .await
        .map_err(|_| {
            BenchError::timeout(
                format!("a gRPC follower to receive snapshot {want}"),
                PROPAGATION_LIMIT,
            )
        })?
        .map(|_| ())
        .map_err(|_| BenchError::failed("follow the registry over gRPC", "the follower stopped"))
}

/// Every page of the anonymous caller's listing in `format`, in process.
pub(crate) fn list_in_process(
    dispatcher: &Dispatcher,
    format: ToolFormat,
) -> Result<toolmesh::pb::ListToolsResponse, BenchError> {
    let request = ListToolsRequest {
        format: format as i32,
        ..ListToolsRequest::default()
    };
    let walk = toolmesh::listing::list_all(request, |page| {
        std::future::ready(dispatcher.list_tools(&page).map(|p| (*p).clone()))
    });
    now_or_never(walk).map_err(|s| BenchError::rpc("Dispatcher::list_tools", s.into()))
}

/// What `walk` gives; it never waits (in-process pages are ready at once).
fn now_or_never<T>(walk: impl std::future::Future<Output = T>) -> T {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(walk).poll(&mut context) {
        std::task::Poll::Ready(done) => done,
        std::task::Poll::Pending => unreachable!("in-process pages are ready at once"),
    }
}

/// Every page of the listing `request` starts, over gRPC.
pub(crate) async fn list_over_grpc(
    client: &DispatcherClient<tonic::transport::Channel>,
    request: ListToolsRequest,
) -> Result<toolmesh::pb::ListToolsResponse, tonic::Status> {
    toolmesh::listing::list_all(request, |page| {
        let mut client = client.clone();
        async move {
            client
                .list_tools(page)
                .await
                .map(tonic::Response::into_inner)
        }
    })
    .await
}

/// ListTools latency (every page of the listing) in process (native and
/// OpenAI) and over gRPC.
async fn list_tools(dispatcher: &Dispatcher, calls: usize) -> Result<ListTools, BenchError> {
    let time_in_process = |format: ToolFormat| -> Result<(Latency, usize, usize), BenchError> {
        let mut samples = Vec::with_capacity(calls);
        let mut last = None;
        for _ in 0..calls.max(1) {
            let t0 = Instant::now();
            let response = list_in_process(dispatcher, format)?;
            samples.push(t0.elapsed());
            last = Some(response);
        }
        let (listed, bytes) = last.map_or((0, 0), |r| (r.tools.len(), r.encoded_len()));
        Ok((Latency::from_samples(samples, 0), listed, bytes))
    };
    let (in_process_native, listed, response_bytes) = time_in_process(ToolFormat::Native)?;
    let (in_process_openai, _, _) = time_in_process(ToolFormat::Openai)?;

    let (listener, addr) = bind().await?;
    let service = dispatcher.grpc_service();
    let server = Served::spawn(move |shutdown| async move {
        Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(incoming(listener), shutdown)
            .await
    });
    let client = DispatcherClient::new(toolmesh_transport::channel(
        &addr,
        &toolmesh_transport::Tls::none(),
    )?)
    .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES);
    let request = || ListToolsRequest {
        format: ToolFormat::Native as i32,
        ..ListToolsRequest::default()
    };
    // The first walk connects; it is not timed.
    let over_grpc = async || {
        list_over_grpc(&client, request())
            .await
            .map_err(|s| BenchError::rpc("ListTools over gRPC", s))
    };
    over_grpc().await?;
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls.max(1) {
        let t0 = Instant::now();
        over_grpc().await?;
        samples.push(t0.elapsed());
    }
    server.stop().await;
    Ok(ListTools {
        listed,
        response_bytes,
        in_process_native,
        in_process_openai,
        grpc_native: Latency::from_samples(samples, 0),
    })
}

/// Registers `request` in process; its lease id.
async fn register_in_process(
    registry: &Registry,
    request: RegisterRequest,
) -> Result<String, BenchError> {
    let response = registry
        .register(request, "")
        .await
        .map_err(|e| BenchError::failed("Registry::register", e.to_string()))?;
    match response.rejected.first() {
        None => Ok(response.lease_id),
        Some(r) => Err(BenchError::failed(
            "Registry::register",
            format!("{} was rejected: {}", r.name, r.reason),
        )),
    }
}

/// Registers executors `0..executors` over gRPC from `clients` concurrent
/// tasks, each with its own connection.
async fn register_over_grpc(
    addr: &str,
    executors: usize,
    clients: usize,
) -> Result<(), BenchError> {
    register_fleet(addr, executors, clients, |e| executor_request("large", e)).await
}

/// Registers executors `0..executors`, each `make(e)`, over gRPC from
/// `clients` concurrent tasks, each with its own connection.
pub(crate) async fn register_fleet(
    addr: &str,
    executors: usize,
    clients: usize,
    make: impl Fn(usize) -> RegisterRequest + Clone + Send + 'static,
) -> Result<(), BenchError> {
    let clients = clients.clamp(1, executors.max(1));
    let mut tasks = Vec::with_capacity(clients);
    for task in 0..clients {
        let mut client = RegistryClient::new(toolmesh_transport::channel(
            addr,
            &toolmesh_transport::Tls::none(),
        )?);
        let make = make.clone();
        tasks.push(AbortOnDrop(tokio::spawn(async move {
            for e in (task..executors).step_by(clients) {
                let response = client
                    .register(make(e))
                    .await
                    .map_err(|s| BenchError::rpc("Register over gRPC", s))?
                    .into_inner();
                if let Some(r) = response.rejected.first() {
                    return Err(BenchError::failed(
                        "Register over gRPC",
                        format!("{} was rejected: {}", r.name, r.reason),
                    ));
                }
            }
            Ok(())
        })));
    }
    for mut task in tasks {
        (&mut task.0)
            .await
            .map_err(|e| BenchError::failed("a registering task", e.to_string()))??;
    }
    Ok(())
}

/// Fake executor `e` of world `prefix`, serving [`TOOLS_PER_EXECUTOR`] tools.
fn executor_request(prefix: &str, e: usize) -> RegisterRequest {
    // Never dialled: the registry does not watch health here and nothing
    // is invoked.
    let endpoint = format!("127.0.0.1:{}", 20_000 + e % 40_000);
    executor_request_at(prefix, e, &endpoint, SCALE_LEASE_MS)
}

/// Fake executor `e` of world `prefix` at `endpoint`, asking for a lease
/// of `lease_ms`.
pub(crate) fn executor_request_at(
    prefix: &str,
    e: usize,
    endpoint: &str,
    lease_ms: u32,
) -> RegisterRequest {
    RegisterRequest {
        executor_id: format!("{prefix}-executor-{e:05}"),
        service: "bench-scale".into(),
        endpoint: endpoint.to_owned(),
        tools: (0..TOOLS_PER_EXECUTOR)
            .map(|t| tool_spec(&format!("{prefix}_{e:05}_{t:02}")))
            .collect(),
        lease_ttl_ms: lease_ms,
        execute_token: String::new(),
    }
}

/// The extra executor of change `i`: one tool.
fn change_request(i: usize) -> RegisterRequest {
    RegisterRequest {
        executor_id: format!("change-executor-{i}"),
        service: "bench-scale".into(),
        endpoint: "127.0.0.1:19999".into(),
        tools: vec![tool_spec("bench_change")],
        lease_ttl_ms: SCALE_LEASE_MS,
        execute_token: String::new(),
    }
}

/// A realistic small tool: an object schema with a required string and a
/// bounded integer.
fn tool_spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        version: "1.0.0".into(),
        description: format!("Benchmark tool {name}: looks a record up by id."),
        input_schema: r#"{"type":"object","properties":{"id":{"type":"string","description":"The record id."},"limit":{"type":"integer","minimum":1,"maximum":100}},"required":["id"],"additionalProperties":false}"#.into(),
        risk: RiskLevel::Low as i32,
        idempotent: true,
        timeout_ms: 5000,
        owner: "toolmesh-bench".into(),
        tags: vec!["bench".into()],
        ..ToolSpec::default()
    }
}

/// This process's resident set from /proc/self/statm, in bytes.
fn rss_bytes() -> Option<u64> {
    rss_of("self")
}

/// Resident memory of process `pid` (or `self`), in bytes.
pub(crate) fn rss_of(pid: &str) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let page = rustix::param::page_size();
    Some(pages * u64::try_from(page).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every generated spec is valid for the registry, names are unique.
    #[test]
    fn generated_specs_are_valid() {
        let request = executor_request("t", 7);
        assert_eq!(request.tools.len(), TOOLS_PER_EXECUTOR);
        for spec in request.tools {
            toolmesh::ToolDef::new(spec).unwrap();
        }
        assert_ne!(
            executor_request("t", 1).tools[0].name,
            executor_request("t", 2).tools[0].name
        );
        assert!(rss_bytes().is_some_and(|b| b > 0));
    }
}
