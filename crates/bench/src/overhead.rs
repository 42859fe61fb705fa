//! Per-call overhead: the same `acc_echo` call straight to the executor,
//! through nginx `grpc_pass`, and through the toolmesh dispatcher.

use crate::Plan;
use crate::error::BenchError;
use crate::load::{self, Client, Throughput, Workload};
use crate::mesh;
use crate::nginx;
use crate::procs::{Proc, SpawnOptions, TempDir};
use crate::stats::Latency;
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// The echo tool every target serves.
const TOOL: &str = "acc_echo";
/// Its version.
const VERSION: &str = "1.0.0";

/// Whether nginx took part, and why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum NginxStatus {
    /// Measured.
    Measured {
        /// The executable used.
        path: String,
        /// What `nginx -v` said.
        version: String,
    },
    /// No `nginx` on PATH.
    NotInstalled,
    /// Found, but it could not be started or could not proxy a call.
    Failed {
        /// Why.
        reason: String,
    },
}

impl NginxStatus {
    /// A short sentence for the report.
    pub fn describe(&self) -> String {
        match self {
            NginxStatus::Measured { path, version } => format!("{version} ({path})"),
            NginxStatus::NotInstalled => "nginx not installed".to_owned(),
            NginxStatus::Failed { reason } => format!("nginx failed: {reason}"),
        }
    }
}

/// One figure for each target; `nginx` is `None` when it was not measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ByTarget<T> {
    /// Client → executor.
    pub direct: T,
    /// Client → nginx grpc_pass → executor.
    pub nginx: Option<T>,
    /// Client → dispatcher Invoke → executor.
    pub toolmesh: T,
}

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
}

/// Part 1 of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overhead {
    /// Whether nginx was measured.
    pub nginx: NginxStatus,
    /// Warm-up calls before each latency series.
    pub warmup_calls: usize,
    /// Timed calls per latency series.
    pub latency_calls: usize,
    /// Warm-up before each throughput window, in ms.
    pub throughput_warmup_ms: f64,
    /// Length of each throughput window, in ms.
    pub throughput_window_ms: f64,
    /// Small and medium arguments.
    pub sizes: Vec<SizeResult>,
}

/// The clients, one per target.
struct Clients {
    direct: Client,
    nginx: Option<Client>,
    toolmesh: Client,
}

/// Starts `toolmesh serve`, the acceptance example and (if installed)
/// nginx in front of the example, measures, and stops them.
pub(crate) async fn run(plan: &Plan, exe: &Path, logs: &Path) -> Result<Overhead, BenchError> {
    let mut serve = Proc::spawn(
        "toolmesh serve",
        exe,
        &["serve", "--listen", "127.0.0.1:0"],
        logs,
        SpawnOptions::default(),
    )?;
    let serve_addr = serve.listen_addr().await?;
    let mut example = Proc::spawn(
        "toolmesh example acceptance",
        exe,
        &["example", "acceptance", "--registry", &serve_addr],
        logs,
        SpawnOptions::default(),
    )?;
    let executor_addr = example.listen_addr().await?;
    mesh::wait_listed(
        &mut mesh::dispatcher_client(&serve_addr)?,
        TOOL,
        true,
        Duration::from_secs(15),
    )
    .await?;

    let prefix = TempDir::new("nginx")?;
    let (nginx, mut nginx_status) = match nginx::find() {
        None => (None, NginxStatus::NotInstalled),
        Some(path) => match nginx::start(&path, prefix.path(), &executor_addr).await {
            Ok(running) => {
                let status = NginxStatus::Measured {
                    path: path.display().to_string(),
                    version: running.version.clone(),
                };
                (Some(running), status)
            }
            Err(e) => (
                None,
                NginxStatus::Failed {
                    reason: e.to_string(),
                },
            ),
        },
    };
    let mut clients = Clients {
        direct: Client::executor(&executor_addr)?,
        nginx: nginx
            .as_ref()
            .map(|n| Client::executor(&n.addr))
            .transpose()?,
        toolmesh: Client::dispatcher(&serve_addr)?,
    };

    let sizes = [
        ("small", load::small_arguments(plan.small_bytes)),
        ("medium", load::medium_arguments(plan.medium_bytes)),
    ];
    let mut results = Vec::new();
    for (label, arguments) in sizes {
        let work = Workload {
            tool: TOOL.into(),
            version: VERSION.into(),
            arguments: arguments.into(),
        };
        load::check_works(&clients.direct, &work, "the executor").await?;
        load::check_works(&clients.toolmesh, &work, "the toolmesh dispatcher").await?;
        if let Some(client) = &clients.nginx
            && let Err(e) = load::check_works(client, &work, "nginx").await
        {
            nginx_status = NginxStatus::Failed {
                reason: e.to_string(),
            };
            clients.nginx = None;
        }
        results.push(measure_size(plan, &clients, label, &work).await);
    }

    if let Some(nginx) = nginx {
        nginx.stop().await;
    }
    example.kill_and_reap().await;
    serve.kill_and_reap().await;
    Ok(Overhead {
        nginx: nginx_status,
        warmup_calls: plan.latency_warmup,
        latency_calls: plan.latency_calls,
        throughput_warmup_ms: crate::stats::ms(plan.throughput_warmup),
        throughput_window_ms: crate::stats::ms(plan.throughput_window),
        sizes: results,
    })
}

/// Latency then throughput, the targets interleaved so that they see the
/// same machine state.
async fn measure_size(plan: &Plan, clients: &Clients, label: &str, work: &Workload) -> SizeResult {
    let latency = |client: &Client| {
        let client = client.clone();
        async move { load::latency(&client, work, plan.latency_warmup, plan.latency_calls).await }
    };
    let direct = latency(&clients.direct).await;
    let nginx = match &clients.nginx {
        Some(client) => Some(latency(client).await),
        None => None,
    };
    let toolmesh = latency(&clients.toolmesh).await;
    let latency = ByTarget {
        direct,
        nginx,
        toolmesh,
    };

    let mut throughput = Vec::new();
    for &in_flight in &plan.in_flight {
        let run = |client: &Client| {
            let client = client.clone();
            async move {
                load::throughput(
                    &client,
                    work,
                    in_flight,
                    plan.throughput_warmup,
                    plan.throughput_window,
                )
                .await
            }
        };
        let direct = run(&clients.direct).await;
        let nginx = match &clients.nginx {
            Some(client) => Some(run(client).await),
            None => None,
        };
        let toolmesh = run(&clients.toolmesh).await;
        throughput.push(ByTarget {
            direct,
            nginx,
            toolmesh,
        });
    }
    SizeResult {
        label: label.to_owned(),
        argument_bytes: work.arguments.len(),
        latency,
        throughput,
    }
}
