//! Per-call overhead: the same `acc_echo` call straight to the executor,
//! through nginx `grpc_pass`, and through the toolmesh dispatcher; then the
//! MCP door, the executor SDK and the bridge rows (MCP, gRPC, OpenAPI), the three
//! targets again with mutual TLS on every hop, and callers by static token
//! and by JWT ([`crate::jwt`]).

use crate::Binaries;
use crate::Plan;
use crate::allocations::{self, PerCall};
use crate::bridge::BridgeRow;
use crate::error::BenchError;
use crate::jwt::JwtRow;
use crate::load::{self, Client, Throughput, Workload};
use crate::mesh;
pub use crate::stand::{ByTarget, NginxStatus};
use crate::stand::{Pki, Setup, Stand, TOOL};
use crate::stats::{self, Latency};
use crate::turns::{MCP_IN_FLIGHT, measure};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;
use tokio::time::Instant;
use toolmesh_dispatcher::{Dispatcher, DispatcherConfig};
use toolmesh_transport::Tls;

/// The figures for one argument size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizeResult {
    /// "small" or "medium".
    pub label: String,
    /// Size of the JSON arguments.
    pub argument_bytes: usize,
    /// Latency at concurrency 1.
    pub latency: ByTarget<Latency>,
    /// Throughput at each number of calls in flight.
    pub throughput: Vec<ByTarget<Throughput>>,
    /// What the dispatcher's validate stage costs per call on these
    /// arguments (the schema's fast shape reads them; in this process,
    /// median of batches), in µs: the part of its overhead nginx does not
    /// have.
    pub json_work_us: f64,
    /// The same check taking the full path (parse into a tree refusing
    /// duplicate keys, then jsonschema), which the fast shape spares valid
    /// calls; in µs.
    pub json_full_us: f64,
    /// Heap allocations per call (None in a build that does not count).
    pub allocations: Option<Allocations>,
}

/// Heap allocations per call at concurrency 1, counted in this process: the
/// dispatcher's pipeline run here (its call to the executor included, no
/// front door) beside this process' tonic client calling the executor
/// directly, the baseline any gRPC hop pays.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Allocations {
    /// `Dispatcher::call` in process.
    pub pipeline: PerCall,
    /// A tonic client's `Execute` call to the executor.
    pub direct_client: PerCall,
}

/// Calls counted per allocation figure, after as many warm-up calls.
const ALLOCATION_CALLS: usize = 500;

/// Allocations per call of `in_process` and of `direct` on `work`.
async fn count_allocations(
    in_process: &Client,
    direct: &Client,
    work: &Workload,
) -> Option<Allocations> {
    let per_call = async |client: &Client| {
        load::warm_up(client, work, ALLOCATION_CALLS).await;
        let mut client = client.clone();
        allocations::per_call(ALLOCATION_CALLS, async || {
            let _ = client.call(work).await;
        })
        .await
    };
    Some(Allocations {
        pipeline: per_call(in_process).await?,
        direct_client: per_call(direct).await?,
    })
}

/// A dispatcher in this process following `registry` (as `toolmesh
/// dispatcher` does), once it can call `work`'s tool.
async fn in_process_dispatcher(registry: &str, work: &Workload) -> Result<Client, BenchError> {
    let snapshots = toolmesh_dispatcher::follow_registry(
        registry,
        &Tls::none(),
        Some(mesh::DISPATCHER_TOKEN.into()),
    )?;
    let (health, _) = tonic_health::server::health_reporter();
    let dispatcher = Dispatcher::new(DispatcherConfig::default(), snapshots, health);
    let client = Client::InProcess(dispatcher);
    let deadline = Instant::now() + Duration::from_secs(15);
    // Its health check of the executor must pass before the tool is callable.
    while let Err(source) = client.clone().call(work).await {
        if Instant::now() > deadline {
            return Err(BenchError::call(
                "a call through a dispatcher in process",
                source,
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(client)
}

/// The fast and the full check of `arguments` against `def`'s input
/// schema, per call in µs (not a number if the schema does not compile).
fn json_work_us(def: &toolmesh::ToolDef, arguments: &str) -> (f64, f64) {
    let Ok(checks) = def.input() else {
        return (f64::NAN, f64::NAN);
    };
    let full = |text: &str| {
        toolmesh::schema::parse_arguments(text)
            .is_ok_and(|value| toolmesh::schema::check(&checks.validator, &value).is_ok())
    };
    let fast = |text: &str| checks.shape.accepts(text) || full(text);
    (
        stats::per_call_us(arguments, fast),
        stats::per_call_us(arguments, full),
    )
}

/// Part 1 of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overhead {
    /// Whether nginx was measured.
    pub nginx: NginxStatus,
    /// Rounds in which the targets took turns.
    pub rounds: usize,
    /// Warm-up calls per target before the latency rounds.
    pub warmup_calls: usize,
    /// Timed calls per target at concurrency 1, over all rounds.
    pub latency_calls: usize,
    /// Warm-up before each throughput window, in ms.
    pub throughput_warmup_ms: f64,
    /// Measuring time per target and calls-in-flight setting, over all
    /// rounds (each round measures an equal share), in ms.
    pub throughput_window_ms: f64,
    /// Small and medium arguments.
    pub sizes: Vec<SizeResult>,
    /// The MCP door beside gRPC Invoke (small arguments).
    pub mcp: Option<McpRow>,
    /// The executor SDK beside a hand-written tonic echo (small arguments).
    pub sdk: Option<SdkRow>,
    /// The bridge rows (small arguments), one per upstream kind: an MCP
    /// server behind `toolmesh bridge mcp` through the MCP door, a gRPC
    /// service behind `bridge grpc` and an HTTP API behind `bridge openapi`
    /// through gRPC Invoke, each beside the SDK executor through the same
    /// door and beside the upstream called directly.
    pub bridges: Vec<BridgeRow>,
    /// Every target again with mutual TLS on both hops (small arguments).
    pub mtls: Option<MtlsRow>,
    /// The call through `toolmesh serve` by a static-token caller beside
    /// RS256 and ES256 JWT callers (small arguments).
    pub jwt: Option<JwtRow>,
}

/// The executor SDK (the `acceptance` fixture, a process of its own)
/// beside a minimal hand-written tonic server doing the same echo, called
/// directly: what the SDK costs per call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SdkRow {
    /// Size of the JSON arguments.
    pub argument_bytes: usize,
    /// Latency at concurrency 1: SDK, then hand-written.
    pub latency: [Latency; 2],
    /// Throughput at each number of calls in flight: SDK, then hand-written.
    pub throughput: Vec<[Throughput; 2]>,
}

/// Starts `toolmesh serve`, the acceptance example and (if installed)
/// nginx in front of the example, measures, and stops them; then the same
/// with mutual TLS.
pub(crate) async fn run(plan: &Plan, bins: &Binaries, logs: &Path) -> Result<Overhead, BenchError> {
    let setup = Setup {
        mcp: true,
        nginx: true,
        ..Setup::default()
    };
    let mut stand = Stand::start(bins, logs, setup).await?;
    let serve_addr = stand.serve_addr.clone();
    let mcp_url = stand.mcp_url.clone().unwrap_or_default();
    let sizes = [
        ("small", load::small_arguments(plan.small_bytes)),
        ("medium", load::medium_arguments(plan.medium_bytes)),
    ];
    let mut results = Vec::new();
    let echo = echo_def(&serve_addr).await?;
    let mut mcp = None;
    let mut sdk = None;
    let mut bridges = Vec::new();
    let mut in_process = None;
    for (label, arguments) in sizes {
        let work = Workload::acc_echo(arguments);
        stand.check_works(&work).await?;
        let mut result = measure_size(plan, &stand, label, &work).await;
        (result.json_work_us, result.json_full_us) = json_work_us(&echo, &work.arguments);
        let in_process = match &in_process {
            Some(client) => client,
            None => in_process.insert(in_process_dispatcher(&serve_addr, &work).await?),
        };
        result.allocations = count_allocations(in_process, &stand.clients.direct, &work).await;
        results.push(result);
        if mcp.is_none() {
            mcp = Some(measure_mcp(plan, &stand.clients.toolmesh, &mcp_url, &work).await?);
            sdk = Some(measure_sdk(plan, &stand.clients.direct, &work).await?);
            let doors = crate::bridge::Doors {
                serve: &serve_addr,
                mcp_url: &mcp_url,
            };
            for upstream in crate::bridge::Upstream::ALL {
                bridges
                    .push(crate::bridge::measure(plan, bins, logs, &doors, upstream, &work).await?);
            }
        }
    }
    let nginx = stand.nginx_status.clone();
    stand.stop().await;
    let small = Workload::acc_echo(load::small_arguments(plan.small_bytes));
    let mtls = measure_mtls(plan, bins, logs, &small).await?;
    let jwt = crate::jwt::measure(plan, bins, logs, &small).await?;
    Ok(Overhead {
        nginx,
        rounds: plan.rounds.max(1),
        warmup_calls: plan.latency_warmup,
        latency_calls: plan.latency_calls.div_ceil(plan.rounds.max(1)) * plan.rounds.max(1),
        throughput_warmup_ms: crate::stats::ms(plan.throughput_warmup),
        throughput_window_ms: crate::stats::ms(plan.throughput_window),
        sizes: results,
        mcp,
        sdk,
        bridges,
        mtls: Some(mtls),
        jwt: Some(jwt),
    })
}

/// Calls kept in flight for the mTLS row's throughput.
pub(crate) const MTLS_IN_FLIGHT: usize = 32;

/// The same call with mutual TLS on both hops of every target: toolmesh
/// (agent → dispatcher → executor), nginx (`grpc_pass grpcs://`), and the
/// executor called directly over TLS.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MtlsRow {
    /// Whether nginx was measured with TLS.
    pub nginx: NginxStatus,
    /// Size of the JSON arguments.
    pub argument_bytes: usize,
    /// Latency at concurrency 1.
    pub latency: ByTarget<Latency>,
    /// Throughput at [`MTLS_IN_FLIGHT`] calls in flight.
    pub throughput: Vec<ByTarget<Throughput>>,
}

/// The mTLS row for `work`, on a stand of its own.
async fn measure_mtls(
    plan: &Plan,
    bins: &Binaries,
    logs: &Path,
    work: &Workload,
) -> Result<MtlsRow, BenchError> {
    let pki = Pki::new()?;
    let setup = Setup {
        pki: Some(&pki),
        nginx: true,
        ..Setup::default()
    };
    let mut stand = Stand::start(bins, logs, setup).await?;
    stand.check_works(work).await?;
    let (latency, throughput) = measure_stand(plan, &stand, &[MTLS_IN_FLIGHT], work).await;
    let row = MtlsRow {
        nginx: stand.nginx_status.clone(),
        argument_bytes: work.arguments.len(),
        latency,
        throughput,
    };
    stand.stop().await;
    Ok(row)
}

/// Latency then throughput in `plan.rounds` rounds, the targets taking
/// turns within each round so that drift on a shared machine hits them alike.
/// Latency samples are pooled over the rounds; throughput is the median round.
async fn measure_size(plan: &Plan, stand: &Stand, label: &str, work: &Workload) -> SizeResult {
    let (latency, throughput) = measure_stand(plan, stand, &plan.in_flight, work).await;
    SizeResult {
        label: label.to_owned(),
        argument_bytes: work.arguments.len(),
        latency,
        throughput,
        json_work_us: 0.0,
        json_full_us: 0.0,
        allocations: None,
    }
}

/// [`measure`] on every target of `stand`, by target.
async fn measure_stand(
    plan: &Plan,
    stand: &Stand,
    in_flight: &[usize],
    work: &Workload,
) -> (ByTarget<Latency>, Vec<ByTarget<Throughput>>) {
    let clients = &stand.clients;
    let all: Vec<(&Client, &Workload)> = clients.all().map(|c| (c, work)).collect();
    let meters = clients.meters(&stand.costs);
    let (latency, throughput) = measure(plan, &all, &meters, in_flight).await;
    let mut latency = latency.into_iter();
    let latency = clients.each(|| latency.next().unwrap_or_default());
    let throughput = throughput
        .into_iter()
        .map(|per_target| {
            let mut per_target = per_target.into_iter();
            clients.each(|| per_target.next().unwrap_or_default())
        })
        .collect();
    (latency, throughput)
}

/// The MCP door beside gRPC Invoke: the same call through `/mcp` as
/// JSON-RPC over HTTP/1.1 and over HTTP/2.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpRow {
    /// Size of the JSON arguments.
    pub argument_bytes: usize,
    /// Latency at concurrency 1.
    pub latency: ByDoor<Latency>,
    /// Throughput at 32 calls in flight.
    pub throughput: ByDoor<Throughput>,
}

/// One figure per front door of the same dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ByDoor<T> {
    /// gRPC `Invoke`.
    pub invoke: T,
    /// MCP `tools/call` over HTTP/1.1 (a connection pool).
    pub mcp_http1: T,
    /// MCP `tools/call` over HTTP/2 (one connection).
    pub mcp_http2: T,
}

impl<T: Default> ByDoor<T> {
    fn from_vec(values: Vec<T>) -> ByDoor<T> {
        let mut values = values.into_iter();
        let mut next = || values.next().unwrap_or_default();
        ByDoor {
            invoke: next(),
            mcp_http1: next(),
            mcp_http2: next(),
        }
    }
}

/// The MCP row for `work`: Invoke, MCP over HTTP/1.1 and over HTTP/2
/// taking turns.
async fn measure_mcp(
    plan: &Plan,
    invoke: &Client,
    mcp_url: &str,
    work: &Workload,
) -> Result<McpRow, BenchError> {
    let http1 = Client::mcp(mcp_url, false)?;
    let http2 = Client::mcp(mcp_url, true)?;
    load::check_works(&http1, work, "MCP over HTTP/1.1").await?;
    load::check_works(&http2, work, "MCP over HTTP/2").await?;
    let targets = [(invoke, work), (&http1, work), (&http2, work)];
    let (latency, mut throughput) = measure(plan, &targets, &[], &[MCP_IN_FLIGHT]).await;
    Ok(McpRow {
        argument_bytes: work.arguments.len(),
        latency: ByDoor::from_vec(latency),
        throughput: ByDoor::from_vec(throughput.pop().unwrap_or_default()),
    })
}

/// The measured tool's definition as the dispatcher holds it (its schema
/// compiled as the dispatcher compiles it).
async fn echo_def(serve: &str) -> Result<toolmesh::ToolDef, BenchError> {
    let listed = mesh::dispatcher_client(serve, &Tls::none())?
        .list_tools(toolmesh::pb::ListToolsRequest::default())
        .await
        .map_err(|s| BenchError::rpc("ListTools", s))?
        .into_inner();
    let spec = listed
        .tools
        .into_iter()
        .find(|t| t.name == TOOL)
        .ok_or_else(|| BenchError::failed("find acc_echo in ListTools", "it is not listed"))?;
    toolmesh::ToolDef::new(spec)
        .map_err(|e| BenchError::failed("compile acc_echo's schema", e.to_string()))
}

/// The first two of `values` (defaults where missing).
fn pair<T: Default>(values: Vec<T>) -> [T; 2] {
    let mut values = values.into_iter();
    [
        values.next().unwrap_or_default(),
        values.next().unwrap_or_default(),
    ]
}

/// The SDK executor beside the hand-written echo, taking turns.
async fn measure_sdk(plan: &Plan, sdk: &Client, work: &Workload) -> Result<SdkRow, BenchError> {
    let raw = crate::raw_echo::RawEcho::start()?;
    let raw_client = Client::executor(&raw.addr, "", &Tls::none())?;
    load::check_works(&raw_client, work, "the hand-written tonic echo").await?;
    let targets = [(sdk, work), (&raw_client, work)];
    let (latency, throughput) = measure(plan, &targets, &[], &plan.in_flight).await;
    Ok(SdkRow {
        argument_bytes: work.arguments.len(),
        latency: pair(latency),
        throughput: throughput.into_iter().map(pair).collect(),
    })
}
