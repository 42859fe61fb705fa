//! Per-call overhead: the same `acc_echo` call straight to the executor,
//! through nginx `grpc_pass`, and through the toolmesh dispatcher.

use crate::Binaries;
use crate::Plan;
use crate::error::BenchError;
use crate::load::{self, Client, Throughput, Workload};
use crate::mesh;
use crate::nginx;
use crate::procs::{self, Ready, SpawnOptions, TempDir};
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
}

/// The clients, one per target.
struct Clients {
    direct: Client,
    nginx: Option<Client>,
    toolmesh: Client,
}

/// Starts `toolmesh serve`, the acceptance example and (if installed)
/// nginx in front of the example, measures, and stops them.
pub(crate) async fn run(plan: &Plan, bins: &Binaries, logs: &Path) -> Result<Overhead, BenchError> {
    let mut serve = procs::spawn(
        bins.parent_death,
        "toolmesh serve",
        &bins.toolmesh,
        &["serve", "--listen", "127.0.0.1:0"],
        logs,
        SpawnOptions::default(),
    )?;
    let serve_addr = serve.listen_addr().await?;
    let mut example = procs::spawn(
        bins.parent_death,
        "toolmesh example acceptance",
        &bins.fixture,
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

    let prefix = TempDir::new("bench-nginx")
        .map_err(|e| BenchError::io("create a temp dir for nginx", e))?;
    let (nginx, mut nginx_status) = match nginx::find() {
        None => (None, NginxStatus::NotInstalled),
        Some(path) => {
            match nginx::start(bins.parent_death, &path, prefix.path(), &executor_addr).await {
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
            }
        }
    };
    let token = mesh::execute_token(&serve_addr, &executor_addr).await?;
    let mut clients = Clients {
        direct: Client::executor(&executor_addr, &token)?,
        nginx: nginx
            .as_ref()
            .map(|n| Client::executor(&n.addr, &token))
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
        rounds: plan.rounds.max(1),
        warmup_calls: plan.latency_warmup,
        latency_calls: plan.latency_calls.div_ceil(plan.rounds.max(1)) * plan.rounds.max(1),
        throughput_warmup_ms: crate::stats::ms(plan.throughput_warmup),
        throughput_window_ms: crate::stats::ms(plan.throughput_window),
        sizes: results,
    })
}

/// Latency then throughput in `plan.rounds` rounds, the targets taking
/// turns within each round so that drift on a shared machine hits them alike.
/// Latency samples are pooled over the rounds; throughput is the median round.
async fn measure_size(plan: &Plan, clients: &Clients, label: &str, work: &Workload) -> SizeResult {
    let rounds = plan.rounds.max(1);
    let per_round = plan.latency_calls.div_ceil(rounds);
    let window = plan.throughput_window / u32::try_from(rounds).unwrap_or(1);
    for client in clients.all() {
        load::warm_up(client, work, plan.latency_warmup).await;
    }

    let mut samples = clients.each(load::Samples::default);
    for _ in 0..rounds {
        for (client, into) in clients.zip(&mut samples) {
            into.record(client, work, per_round).await;
        }
    }
    let latency = samples.map(load::Samples::summary);

    let mut throughput = Vec::new();
    for &in_flight in &plan.in_flight {
        let mut windows = clients.each(Vec::new);
        for _ in 0..rounds {
            for (client, into) in clients.zip(&mut windows) {
                let measured =
                    load::throughput(client, work, in_flight, plan.throughput_warmup, window).await;
                into.push(measured);
            }
        }
        throughput.push(windows.map(|w| Throughput::from_rounds(in_flight, &w)));
    }
    SizeResult {
        label: label.to_owned(),
        argument_bytes: work.arguments.len(),
        latency,
        throughput,
    }
}

impl Clients {
    /// direct, nginx (when measured), toolmesh.
    fn all(&self) -> impl Iterator<Item = &Client> {
        std::iter::once(&self.direct)
            .chain(self.nginx.as_ref())
            .chain(std::iter::once(&self.toolmesh))
    }

    /// A fresh accumulator per measured target.
    fn each<T>(&self, mut make: impl FnMut() -> T) -> ByTarget<T> {
        ByTarget {
            direct: make(),
            nginx: self.nginx.as_ref().map(|_| make()),
            toolmesh: make(),
        }
    }

    /// Each measured target's client with its accumulator, in the order of [`Clients::all`].
    fn zip<'a, T>(
        &'a self,
        into: &'a mut ByTarget<T>,
    ) -> impl Iterator<Item = (&'a Client, &'a mut T)> {
        let nginx = self.nginx.as_ref().zip(into.nginx.as_mut());
        std::iter::once((&self.direct, &mut into.direct))
            .chain(nginx)
            .chain(std::iter::once((&self.toolmesh, &mut into.toolmesh)))
    }
}

impl<T> ByTarget<T> {
    /// The same figure, transformed, for every target.
    fn map<U>(self, mut f: impl FnMut(T) -> U) -> ByTarget<U> {
        ByTarget {
            direct: f(self.direct),
            nginx: self.nginx.map(&mut f),
            toolmesh: f(self.toolmesh),
        }
    }
}
