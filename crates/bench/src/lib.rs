//! The toolmesh benchmark (`toolmesh bench`): what the gateway costs per
//! call compared with calling the executor directly and with nginx
//! `grpc_pass` (and what the MCP door, the executor SDK, JWT callers and an MCP server,
//! a gRPC service and an HTTP API behind `toolmesh bridge` cost beside it), how the registry behaves
//! at 10,000 tools, how fresh the
//! dispatcher's view is when executors die or turn unhealthy, the two
//! registry stores side by side, and what the result cache saves; tool
//! search's speed and retrieval quality apart ([`run_search`]); two builds'
//! per-call figures side by side, taking turns ([`run_compare`]).
//!
//! [`run`] starts everything it needs on 127.0.0.1 (the `toolmesh` binary as
//! separate processes, nginx if it is on PATH, and registries, dispatchers
//! and a small executor inside this process), measures, stops every process
//! it started (drop guards on every path, and `PR_SET_PDEATHSIG` should the
//! bench itself be killed) and returns a [`Report`]: `Display` prints the
//! tables, serde gives the same figures as JSON.
//!
//! ```no_run
//! # async fn example() -> Result<(), toolmesh_bench::BenchError> {
//! let report = toolmesh_bench::run(toolmesh_bench::BenchOptions {
//!     toolmesh_exe: "target/release/toolmesh".into(),
//!     fixture_exe: "target/release/toolmesh".into(),
//!     quick: false,
//!     json: Some("bench.json".into()),
//!     parent_death: None,
//! })
//! .await?;
//! println!("{report}");
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod allocations;
mod bridge;
mod cache;
mod compare;
mod cpu;
mod error;
mod freshness;
mod jwt;
mod load;
mod loopback;
mod machine;
mod mesh;
mod nginx;
mod org;
mod overhead;
mod paging;
mod procs;
mod raw_echo;
mod report;
mod scale;
mod search;
mod stand;
mod stats;
mod stores;
mod turns;

pub use bridge::{BridgeRow, Bridged, ByUpstream, Door, Upstream};
pub use cache::{AtHitRatio, ByPath, CacheSeries, ResultCache};
pub use compare::{CompareOptions, CompareReport, Compared, run_compare};
pub use error::{BenchError, CallFailed};
pub use freshness::{Freshness, Series};
pub use jwt::{ByCredential, JwtRow};
pub use load::{Throughput, acc_echo_def, medium_arguments, small_arguments};
pub use machine::{Build, Machine};
pub use org::{
    AtScale, Churn, ColdJoin, LeaderKill, OrgOptions, OrgReport, ReplicaKill, Spread, Steady,
    run_org,
};
pub use overhead::{Allocations, ByTarget, MtlsRow, NginxStatus, Overhead, SdkRow, SizeResult};
pub use paging::Paging;
pub use report::{Report, Target, Verdict};
pub use scale::{AtSize, ListTools, Propagation, Publish, Scale};
pub use search::{
    AtVisible, BfclFunction, Converted, DEVELOPMENT, EvalOptions, HELD_OUT, IndexChange,
    IndexMemory, Quality, Scores, SearchOptions, SearchReport, SearchSpeed, SetScores, Tuned,
    mesh_name, run_search, to_spec,
};
pub use stats::Latency;
pub use stores::{Failover, StoreAtSize, Stores};

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The `toolmesh` binary to start (build it with
    /// `cargo build --release -p toolmesh-cli --features bench`).
    pub toolmesh_exe: PathBuf,
    /// The binary that serves the acceptance fixture with the command line
    /// `example acceptance …`: `toolmesh` built with the `bench` feature, or
    /// `toolmesh-fixture` (crate `toolmesh-fixtures`).
    pub fixture_exe: PathBuf,
    /// Short series for a smoke test (well under a minute) instead of the
    /// full run (a few minutes).
    pub quick: bool,
    /// Also write the report as JSON to this file.
    pub json: Option<PathBuf>,
    /// Has the kernel signal every child should the bench die (a binary
    /// provides it: it needs `unsafe`); `None` relies on drop guards only.
    pub parent_death: Option<toolmesh_procs::ArmParentDeath>,
}

/// Runs the whole benchmark; see the crate docs. Must be called inside a
/// multi-threaded tokio runtime (the load generator, in-process servers and
/// their followers run as tasks on it).
pub async fn run(options: BenchOptions) -> Result<Report, BenchError> {
    let started = Instant::now();
    let plan = Plan::new(options.quick);
    let find = |exe: &std::path::Path| {
        std::fs::canonicalize(exe).map_err(|e| {
            BenchError::io(
                format!(
                    "find the binary {} (build it with `cargo build --release -p toolmesh-cli --features bench`)",
                    exe.display()
                ),
                e,
            )
        })
    };
    let bins = Binaries {
        toolmesh: find(&options.toolmesh_exe)?,
        fixture: find(&options.fixture_exe)?,
        parent_death: options.parent_death,
    };
    let machine = machine::Machine::read(&bins.toolmesh);
    let logs = procs::TempDir::new("bench-logs")
        .map_err(|e| BenchError::io("create a temp dir for the logs", e))?;

    progress(
        "1/5 per-call overhead: direct, nginx grpc_pass, toolmesh; MCP door, SDK, MCP/gRPC/OpenAPI bridges; mTLS",
    );
    let overhead = overhead::run(&plan, &bins, logs.path()).await?;
    // Freshness before scale: scale leaves in-process dispatcher tasks
    // behind that would add noise to the timings.
    progress("2/5 freshness: registry, dispatcher and executors as separate processes");
    let freshness = freshness::run(&plan, &bins, logs.path()).await?;
    progress(&format!(
        "3/5 registry scale: {} and {} tools in this process",
        plan.baseline_tools, plan.scale_tools
    ));
    let scale = scale::run(&plan).await?;
    progress("4/5 stores: embedded and etcd side by side, then failover on etcd");
    let stores = stores::run(&plan, &bins, logs.path()).await?;
    progress("5/5 result cache: hit, miss and direct, then hit ratios 0, 50 and 90 %");
    let cache = cache::run(&plan, &bins, logs.path()).await?;

    let parts = report::Parts {
        overhead,
        scale,
        freshness,
        stores,
        cache,
    };
    let report = Report::new(machine, plan.quick, started.elapsed().as_secs_f64(), parts);
    if let Some(path) = &options.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n")
            .map_err(|e| BenchError::io(format!("write {}", path.display()), e))?;
    }
    Ok(report)
}

/// The programs the bench starts.
#[derive(Debug, Clone)]
pub(crate) struct Binaries {
    /// `toolmesh`: serve, registry, dispatcher.
    pub(crate) toolmesh: PathBuf,
    /// Serves `example acceptance …`.
    pub(crate) fixture: PathBuf,
    /// Arms the parent-death signal of each child.
    pub(crate) parent_death: Option<toolmesh_procs::ArmParentDeath>,
}

/// One progress line on stderr, so a long run shows where it is.
pub(crate) fn progress(step: &str) {
    eprintln!("toolmesh bench: {step}");
}

/// How much of everything to run.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Whether this is the quick run.
    pub(crate) quick: bool,
    /// Rounds of the per-call measurements (targets take turns in each).
    pub(crate) rounds: usize,
    /// Calls before each latency series.
    pub(crate) latency_warmup: usize,
    /// Timed calls per latency series.
    pub(crate) latency_calls: usize,
    /// Before each throughput window.
    pub(crate) throughput_warmup: Duration,
    /// Each throughput window.
    pub(crate) throughput_window: Duration,
    /// Calls in flight for throughput (1: the CPU a call costs at the
    /// latency targets' concurrency).
    pub(crate) in_flight: Vec<usize>,
    /// Size of the small arguments.
    pub(crate) small_bytes: usize,
    /// Size of the medium arguments.
    pub(crate) medium_bytes: usize,
    /// Tools in the small registry.
    pub(crate) baseline_tools: usize,
    /// Tools in the large registry.
    pub(crate) scale_tools: usize,
    /// Concurrent gRPC clients registering them.
    pub(crate) register_clients: usize,
    /// Changes timed for the publish cost.
    pub(crate) publish_changes: usize,
    /// Changes timed until an in-process dispatcher has them.
    pub(crate) propagation_changes: usize,
    /// Changes timed until a gRPC follower has them.
    pub(crate) grpc_propagation_changes: usize,
    /// ListTools calls timed.
    pub(crate) list_calls: usize,
    /// Tools in the ListTools paging catalog.
    pub(crate) paging_tools: usize,
    /// Repetitions of each freshness measurement.
    pub(crate) freshness_reps: usize,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                quick,
                rounds: 1,
                latency_warmup: 100,
                latency_calls: 300,
                throughput_warmup: Duration::from_millis(200),
                throughput_window: Duration::from_millis(500),
                in_flight: vec![1, 32, 128],
                small_bytes: 100,
                medium_bytes: 10_000,
                baseline_tools: 100,
                scale_tools: 1_000,
                register_clients: 8,
                publish_changes: 50,
                propagation_changes: 10,
                grpc_propagation_changes: 3,
                list_calls: 5,
                paging_tools: 10_000,
                freshness_reps: 2,
            }
        } else {
            Plan {
                quick,
                rounds: 3,
                latency_warmup: 500,
                latency_calls: 2_000,
                throughput_warmup: Duration::from_millis(500),
                throughput_window: Duration::from_secs(3),
                in_flight: vec![1, 32, 128],
                small_bytes: 100,
                medium_bytes: 10_000,
                baseline_tools: 100,
                scale_tools: 10_000,
                register_clients: 16,
                publish_changes: 200,
                propagation_changes: 50,
                grpc_propagation_changes: 10,
                list_calls: 30,
                paging_tools: 100_000,
                freshness_reps: 5,
            }
        }
    }
}
