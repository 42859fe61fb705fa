//! The bridge row: the fixture's `acc_echo` as a plain MCP server (`mcp-echo`) behind `toolmesh bridge mcp`, over stdio and over Streamable HTTP, beside the SDK executor's `acc_echo` and beside that server called directly — every call by the same MCP client.

use crate::Binaries;
use crate::Plan;
use crate::error::BenchError;
use crate::load::{self, Client, Throughput, Workload};
use crate::mesh;
use crate::procs::{self, Proc, Ready, SpawnOptions};
use crate::stats::Latency;
use crate::turns::{self, MCP_IN_FLIGHT};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;
use toolmesh_transport::Tls;

/// What the bridged copies of `acc_echo` are called in the mesh.
const OVER_STDIO: &str = "acc_echo_stdio";
const OVER_HTTP: &str = "acc_echo_http";

/// The bridge row (small arguments).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BridgeRow {
    /// Size of the JSON arguments.
    pub argument_bytes: usize,
    /// Latency at concurrency 1.
    pub latency: ByUpstream<Latency>,
    /// Throughput at 32 calls in flight.
    pub throughput: ByUpstream<Throughput>,
}

/// One figure per path of the same call.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ByUpstream<T> {
    /// MCP door → dispatcher → the SDK executor.
    pub native: T,
    /// MCP door → dispatcher → bridge → `mcp-echo` over stdio.
    pub bridged_stdio: T,
    /// MCP door → dispatcher → bridge → `mcp-echo` over Streamable HTTP.
    pub bridged_http: T,
    /// `mcp-echo` over Streamable HTTP, called directly.
    pub direct: T,
}

impl<T: Default> ByUpstream<T> {
    fn from_vec(values: Vec<T>) -> ByUpstream<T> {
        let mut values = values.into_iter();
        let mut next = || values.next().unwrap_or_default();
        ByUpstream {
            native: next(),
            bridged_stdio: next(),
            bridged_http: next(),
            direct: next(),
        }
    }
}

/// `work` (an `acc_echo` call) through the four paths, taking turns: starts
/// `mcp-echo` over HTTP and two bridges registering with `serve`, whose
/// MCP door is `mcp_url`, measures, and stops what it started.
pub(crate) async fn measure(
    plan: &Plan,
    bins: &Binaries,
    logs: &Path,
    serve: &str,
    mcp_url: &str,
    work: &Workload,
) -> Result<BridgeRow, BenchError> {
    let start = |name: &str, program: &Path, args: &[&str]| {
        procs::spawn(
            bins.parent_death,
            name,
            program,
            args,
            logs,
            SpawnOptions::default(),
        )
    };
    let mut upstream = start(
        "mcp-echo over HTTP",
        &bins.fixture,
        &["mcp-echo", "--http", "127.0.0.1:0"],
    )?;
    let upstream_url = format!("http://{}/mcp", upstream.listen_addr().await?);
    let fixture = bins.fixture.display().to_string();
    let bridge = |name: &str, tool: &str, upstream: &[&str]| {
        let rename = format!("acc_echo={tool}");
        let mut args = vec![
            "bridge",
            "mcp",
            "--registry",
            serve,
            "--name",
            name,
            "--rename",
            &rename,
        ];
        args.extend_from_slice(upstream);
        start(name, &bins.toolmesh, &args)
    };
    let mut over_stdio = bridge(
        "bench-bridge-stdio",
        OVER_STDIO,
        &["--", &fixture, "mcp-echo"],
    )?;
    let mut over_http = bridge("bench-bridge-http", OVER_HTTP, &["--url", &upstream_url])?;
    let measured = async {
        for bridge in [&mut over_stdio, &mut over_http] {
            bridge.listen_addr().await?;
        }
        let mut dispatcher = mesh::dispatcher_client(serve, &Tls::none())?;
        for tool in [OVER_STDIO, OVER_HTTP] {
            mesh::wait_listed(&mut dispatcher, tool, true, Duration::from_secs(15)).await?;
        }
        let door = Client::mcp(mcp_url, false)?;
        let direct = Client::mcp(&upstream_url, false)?;
        let named = |tool: &str| Workload {
            tool: tool.into(),
            ..work.clone()
        };
        let (stdio_work, http_work) = (named(OVER_STDIO), named(OVER_HTTP));
        let targets = [
            (&door, work),
            (&door, &stdio_work),
            (&door, &http_work),
            (&direct, work),
        ];
        for (name, (client, work)) in [
            "the MCP door",
            "the stdio bridge",
            "the HTTP bridge",
            "mcp-echo",
        ]
        .iter()
        .zip(targets)
        {
            load::check_works(client, work, name).await?;
        }
        let (latency, mut throughput) = turns::measure(plan, &targets, &[], &[MCP_IN_FLIGHT]).await;
        Ok::<_, BenchError>(BridgeRow {
            argument_bytes: work.arguments.len(),
            latency: ByUpstream::from_vec(latency),
            throughput: ByUpstream::from_vec(throughput.pop().unwrap_or_default()),
        })
    }
    .await;
    for proc in [&mut over_stdio, &mut over_http, &mut upstream] {
        Proc::kill_and_reap(proc).await;
    }
    measured
}
