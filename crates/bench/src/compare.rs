//! Two builds of `toolmesh serve` on the same calls (`toolmesh bench compare --baseline PATH`): each with its own acceptance example (the same fixture binary), measured taking turns in every round, so a change to the call path is read against the build before it within one run rather than across runs on a noisy machine.

use crate::error::BenchError;
use crate::load::{self, Throughput, Workload};
use crate::machine::Machine;
use crate::report::{Table, fmt_bytes, fmt_rate, fmt_ratio, fmt_us};
use crate::stand::{Setup, Stand};
use crate::stats::Latency;
use crate::{Binaries, Plan, procs, progress, turns};
use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What to compare.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// The build measured against: a `toolmesh` binary with `serve`.
    pub baseline_exe: PathBuf,
    /// This build's `toolmesh` binary.
    pub toolmesh_exe: PathBuf,
    /// Serves `example acceptance …` for both (see [`crate::BenchOptions`]).
    pub fixture_exe: PathBuf,
    /// Two rounds of short series instead of six of the full ones.
    pub quick: bool,
    /// Also write the report as JSON to this file.
    pub json: Option<PathBuf>,
    /// Has the kernel signal every child should the bench die.
    pub parent_death: Option<toolmesh_procs::ArmParentDeath>,
}

/// The two builds' figures, argument size by argument size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareReport {
    /// Where and when; `toolmesh_exe` is this build.
    pub machine: Machine,
    /// The baseline binary.
    pub baseline_exe: String,
    /// Rounds the two took turns in.
    pub rounds: usize,
    /// Calls timed per build at concurrency 1, per argument size.
    pub latency_calls: usize,
    /// One entry per argument size.
    pub sizes: Vec<Compared>,
    /// Wall time of the whole run.
    pub elapsed_secs: f64,
}

/// One argument size: each figure as `[baseline, this build]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Compared {
    /// Size of the JSON arguments.
    pub argument_bytes: usize,
    /// Latency at concurrency 1.
    pub latency: [Latency; 2],
    /// Throughput at each number of calls in flight; `cpu_us_per_call`
    /// holds `toolmesh serve`'s CPU alone.
    pub throughput: Vec<[Throughput; 2]>,
}

/// Rounds the builds take turns in: more than the per-call bench's, so
/// that a drift of the machine during the run weighs on both alike.
const ROUNDS: usize = 6;
const QUICK_ROUNDS: usize = 2;

/// Starts a stand per build, measures `acc_echo` with small and medium
/// arguments through each, taking turns, and stops them.
pub async fn run_compare(options: CompareOptions) -> Result<CompareReport, BenchError> {
    let started = Instant::now();
    let mut plan = Plan::new(options.quick);
    plan.rounds = if options.quick { QUICK_ROUNDS } else { ROUNDS };
    let find = |exe: &Path| {
        std::fs::canonicalize(exe)
            .map_err(|e| BenchError::io(format!("find the binary {}", exe.display()), e))
    };
    let fixture = find(&options.fixture_exe)?;
    let builds =
        [find(&options.baseline_exe)?, find(&options.toolmesh_exe)?].map(|toolmesh| Binaries {
            toolmesh,
            fixture: fixture.clone(),
            parent_death: options.parent_death,
        });
    let machine = Machine::read(&builds[1].toolmesh);
    let logs = procs::TempDir::new("bench-compare-logs")
        .map_err(|e| BenchError::io("create a temp dir for the logs", e))?;
    progress("compare: starting toolmesh serve and the acceptance example for each build");
    let baseline = Stand::start(&builds[0], logs.path(), Setup::default()).await?;
    let this = match Stand::start(&builds[1], logs.path(), Setup::default()).await {
        Ok(stand) => stand,
        Err(e) => {
            baseline.stop().await;
            return Err(e);
        }
    };
    let mut stands = [baseline, this];
    let measured = measure(&plan, &mut stands).await;
    for stand in stands {
        stand.stop().await;
    }
    let report = CompareReport {
        machine,
        baseline_exe: builds[0].toolmesh.display().to_string(),
        rounds: plan.rounds,
        latency_calls: plan.latency_calls,
        sizes: measured?,
        elapsed_secs: started.elapsed().as_secs_f64(),
    };
    if let Some(path) = &options.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n")
            .map_err(|e| BenchError::io(format!("write {}", path.display()), e))?;
    }
    Ok(report)
}

/// Both stands on each argument size, taking turns.
async fn measure(plan: &Plan, stands: &mut [Stand; 2]) -> Result<Vec<Compared>, BenchError> {
    let mut sizes = Vec::new();
    for arguments in [
        load::small_arguments(plan.small_bytes),
        load::medium_arguments(plan.medium_bytes),
    ] {
        let work = Workload::acc_echo(arguments);
        for stand in stands.iter_mut() {
            stand.check_works(&work).await?;
        }
        progress(&format!(
            "compare: {} arguments",
            fmt_bytes(work.arguments.len() as f64)
        ));
        let targets: Vec<_> = stands
            .iter()
            .map(|s| (&s.clients.toolmesh, &work))
            .collect();
        let meters: Vec<_> = stands.iter().map(Stand::serve_meter).collect();
        let (latency, throughput) = turns::measure(plan, &targets, &meters, &plan.in_flight).await;
        sizes.push(Compared {
            argument_bytes: work.arguments.len(),
            latency: pair(latency),
            throughput: throughput.into_iter().map(pair).collect(),
        });
    }
    Ok(sizes)
}

/// The first two of `values` (the baseline's, then this build's).
fn pair<T: Default>(values: Vec<T>) -> [T; 2] {
    let mut values = values.into_iter();
    [
        values.next().unwrap_or_default(),
        values.next().unwrap_or_default(),
    ]
}

impl fmt::Display for CompareReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.machine;
        m.heading(f, "toolmesh bench compare")?;
        writeln!(f, "baseline  {}", self.baseline_exe)?;
        writeln!(
            f,
            "this      {} ({})",
            m.toolmesh_exe,
            m.toolmesh_build.describe()
        )?;
        writeln!(
            f,
            "took      {:.0} s; each build's `toolmesh serve` with its own acceptance example, acc_echo through Invoke, the two taking turns in {} rounds; latency over {} calls each at concurrency 1",
            self.elapsed_secs, self.rounds, self.latency_calls
        )?;
        for size in &self.sizes {
            writeln!(f)?;
            writeln!(f, "   {} arguments", fmt_bytes(size.argument_bytes as f64))?;
            write!(f, "{}", size.table())?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "   serve CPU/call = user+system time of that build's `toolmesh serve` (from /proc, over the calls/s windows) per call; x baseline = this build's figure / the baseline's (latency and CPU: lower is better; calls/s: higher)"
        )
    }
}

impl Compared {
    /// The size's rows: each figure for the baseline, this build and their
    /// ratio.
    fn table(&self) -> String {
        let mut table = Table::new(vec!["", "baseline", "this build", "x baseline"]);
        let row = |name: String, [old, new]: [f64; 2], format: fn(f64) -> String| {
            vec![name, format(old), format(new), fmt_ratio(new / old)]
        };
        let [old, new] = &self.latency;
        table.push(row("p50 @1".into(), [old.p50_us, new.p50_us], fmt_us));
        table.push(row("p99 @1".into(), [old.p99_us, new.p99_us], fmt_us));
        for [old, new] in &self.throughput {
            let name = format!("calls/s @{}", old.in_flight);
            table.push(row(name, [old.calls_per_sec, new.calls_per_sec], fmt_rate));
        }
        for [old, new] in &self.throughput {
            let cpu = |t: &Throughput| t.cpu_us_per_call.first().copied().unwrap_or_default();
            let name = format!("serve CPU/call @{}", old.in_flight);
            table.push(row(name, [cpu(old), cpu(new)], fmt_us));
        }
        table.render("   ")
    }
}
