//! What an organisation-scale run measured, the targets it is held to
//! (MET or MISS) and how it prints.

use crate::report::{Target, Verdict};
use crate::stats::Latency;
use serde::Serialize;
use std::fmt;
use std::time::Duration;

/// How long a change took to reach each of many followers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Spread {
    /// Followers that held it in time.
    pub held: usize,
    /// Followers that did not.
    pub missing: usize,
    /// The first follower to hold it, in ms.
    pub min_ms: f64,
    /// Median follower, in ms.
    pub p50_ms: f64,
    /// 99th percentile follower, in ms.
    pub p99_ms: f64,
    /// The last follower, in ms (when all held it).
    #[serde(skip)]
    pub(crate) max: Option<Duration>,
    /// The last follower, in ms.
    pub max_ms: f64,
}

impl Spread {
    /// Summarises per-follower times (`None`: never held).
    pub(crate) fn of(each: &[Option<Duration>]) -> Spread {
        let mut held: Vec<Duration> = each.iter().flatten().copied().collect();
        held.sort_unstable();
        let missing = each.len() - held.len();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let at = |p: f64| ms(crate::stats::percentile(&held, p));
        Spread {
            held: held.len(),
            missing,
            min_ms: held.first().map_or(0.0, |d| ms(*d)),
            p50_ms: at(50.0),
            p99_ms: at(99.0),
            max: (missing == 0).then(|| held.last().copied()).flatten(),
            max_ms: held.last().map_or(0.0, |d| ms(*d)),
        }
    }
}

/// Heartbeats only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Steady {
    /// Length of the window, in s.
    pub secs: f64,
    /// CPU of each registry replica, in cores.
    pub registry_cores: Vec<f64>,
    /// CPU of each etcd member, in cores.
    pub etcd_cores: Vec<f64>,
    /// Resident memory of each replica at the end.
    pub registry_rss_bytes: Vec<u64>,
    /// The most resident memory each replica held since it started (the
    /// cold start's backlog included).
    pub registry_peak_rss_bytes: Vec<u64>,
    /// The same for this process (the simulated executors and followers),
    /// since the run began.
    pub load_peak_rss_bytes: u64,
    /// Resident memory of each etcd member at the end.
    pub etcd_rss_bytes: Vec<u64>,
    /// Raft proposals etcd committed per second (its writes; a lease
    /// keep-alive is none).
    pub etcd_writes_per_sec: Option<f64>,
    /// Snapshot versions published meanwhile (0: heartbeats change nothing).
    pub snapshots_published: u64,
    /// Bytes the replicas wrote to sockets and files per second (to
    /// followers, executors and etcd alike).
    pub bytes_written_per_sec: f64,
    /// etcd's database size.
    pub etcd_db_bytes: Option<f64>,
}

/// Restarts (a kill, then a new process) of executors.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Churn {
    /// Executors restarted.
    pub restarts: usize,
    /// Time between restarts, in ms.
    pub every_ms: u64,
    /// From a kill until every follower holds the instance out of rotation.
    pub kill_to_all: Latency,
    /// From a Register call until every follower holds the new instance.
    pub registration_to_all: Latency,
    /// Changes some follower did not hold within the limit, and what it
    /// held instead.
    pub unheld: Vec<String>,
}

/// A registry replica SIGKILLed and started again.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplicaKill {
    /// From the kill until the survivors held every health watch the
    /// killed replica held, in ms (`None`: not within 30 s).
    pub watches_handed_over_ms: Option<f64>,
    /// From the kill until a registration through another replica was
    /// answered, in ms.
    pub registered_ms: f64,
    /// From the kill until each follower held that registration.
    pub catch_up: Spread,
    /// Bytes the surviving replicas wrote meanwhile.
    pub bytes_written: u64,
    /// What they write in as long a window in steady state.
    pub steady_bytes_in_window: f64,
    /// A full snapshot's encoded size.
    pub full_snapshot_bytes: u64,
    /// Followers in all.
    pub followers: usize,
}

/// etcd's leader SIGKILLed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeaderKill {
    /// From the kill until a registration was answered, in ms.
    pub registered_ms: f64,
    /// From the kill until each follower held it.
    pub held_by_all: Spread,
    /// Why the killed member did not rejoin in time, if it did not.
    pub not_rejoined: Option<String>,
}

/// A dispatcher joining at this scale.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ColdJoin {
    /// Until a new follower held every tool, in s.
    pub follower_secs: Option<f64>,
    /// A full snapshot's encoded size.
    pub full_snapshot_bytes: u64,
    /// Resident memory of a real `toolmesh dispatcher` holding it all,
    /// before anything was listed (none if it never held it all).
    pub dispatcher_holding_rss_bytes: Option<u64>,
    /// Its resident memory after one ListTools of every tool: what it
    /// holds while serving.
    pub dispatcher_rss_bytes: u64,
    /// Tools that dispatcher listed.
    pub dispatcher_listed: usize,
    /// One ListTools of every tool from it, in ms.
    pub dispatcher_list_all_ms: Option<f64>,
}

/// Every phase at one scale.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AtScale {
    /// Executors.
    pub executors: usize,
    /// Tool instances they serve.
    pub instances: usize,
    /// Distinct tool names.
    pub names: usize,
    /// Simulated dispatchers.
    pub dispatchers: usize,
    /// Until every executor's Register was answered, in s.
    pub registered_secs: f64,
    /// From the first Register until each follower held every tool.
    pub cold_start: Spread,
    /// Heartbeats only.
    pub steady: Steady,
    /// Executors whose health each replica watches in steady state, most
    /// first.
    pub health_watches: Vec<usize>,
    /// Executors restarting.
    pub churn: Churn,
    /// A replica killed.
    pub replica_kill: ReplicaKill,
    /// etcd's leader killed.
    pub leader_kill: LeaderKill,
    /// A dispatcher joining.
    pub cold_join: ColdJoin,
    /// Heartbeats answered over the run.
    pub heartbeats: u64,
    /// Heartbeats that failed.
    pub heartbeat_failures: u64,
    /// Registrations answered.
    pub registrations: u64,
    /// Registrations that failed (and were tried again).
    pub registration_failures: u64,
    /// Definitions the simulated followers held (shared among them).
    pub shared_definitions: usize,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OrgReport {
    /// Whether only the smaller scales ran.
    pub quick: bool,
    /// Dispatchers at every scale.
    pub dispatchers: usize,
    /// Wall time, in s.
    pub elapsed_secs: f64,
    /// Smallest first.
    pub scales: Vec<AtScale>,
    /// The targets, judged on the largest scale run.
    pub targets: Vec<Target>,
}

const MIB: f64 = 1024.0 * 1024.0;

impl OrgReport {
    pub(crate) fn new(
        quick: bool,
        dispatchers: usize,
        elapsed_secs: f64,
        scales: Vec<AtScale>,
    ) -> OrgReport {
        let targets = scales.last().map(targets).unwrap_or_default();
        OrgReport {
            quick,
            dispatchers,
            elapsed_secs,
            scales,
            targets,
        }
    }
}

/// The targets, on `at`.
fn targets(at: &AtScale) -> Vec<Target> {
    let target = |name: &str, pass: bool, detail: String| Target {
        name: name.to_owned(),
        verdict: Verdict::of(pass),
        detail,
    };
    // Each executor heartbeats every third of its lease.
    let heartbeats_per_sec = at.executors as f64 * 3000.0 / f64::from(super::fleet::LEASE_MS);
    let churn = &at.churn.registration_to_all;
    let moved = &at.replica_kill;
    let full_33 = moved.full_snapshot_bytes as f64 * 33.0;
    let moved_extra = (moved.bytes_written as f64 - moved.steady_bytes_in_window).max(0.0);
    let max_registry_rss = at
        .steady
        .registry_peak_rss_bytes
        .iter()
        .copied()
        .max()
        .unwrap_or_default() as f64;
    vec![
        target(
            "a registration reaches every dispatcher: p99 < 50 ms, max < 250 ms",
            churn.p99_us < 50_000.0 && churn.max_us < 250_000.0 && at.churn.unheld.is_empty(),
            format!(
                "p99 {:.1} ms, max {:.1} ms, {} changes not held by all",
                churn.p99_us / 1e3,
                churn.max_us / 1e3,
                at.churn.unheld.len()
            ),
        ),
        target(
            "a kill reaches every dispatcher: p99 < 50 ms, max < 250 ms",
            at.churn.kill_to_all.p99_us < 50_000.0 && at.churn.kill_to_all.max_us < 250_000.0,
            format!(
                "p99 {:.1} ms, max {:.1} ms",
                at.churn.kill_to_all.p99_us / 1e3,
                at.churn.kill_to_all.max_us / 1e3
            ),
        ),
        target(
            "steady state: heartbeats write nothing to etcd and publish nothing",
            // A write per heartbeat would be one per heartbeat; what
            // writes remain (a lease from before the window expiring)
            // must be a vanishing share of them.
            at.steady.snapshots_published == 0
                && at
                    .steady
                    .etcd_writes_per_sec
                    .is_some_and(|w| w < 0.001 * heartbeats_per_sec),
            format!(
                "{} snapshots, {} etcd writes/s against {heartbeats_per_sec:.0} heartbeats/s",
                at.steady.snapshots_published,
                at.steady
                    .etcd_writes_per_sec
                    .map_or("?".into(), |w| format!("{w:.1}"))
            ),
        ),
        target(
            "steady state: registry replicas together < 1 core",
            at.steady.registry_cores.iter().sum::<f64>() < 1.0,
            format!("{:.2} cores", at.steady.registry_cores.iter().sum::<f64>()),
        ),
        target(
            "registry RSS < 2 GiB each, at its peak",
            max_registry_rss < 2048.0 * MIB,
            format!("largest peak {:.0} MiB", max_registry_rss / MIB),
        ),
        target(
            "a dispatcher holding every tool < 512 MiB RSS",
            at.cold_join.dispatcher_listed >= at.names
                && (at.cold_join.dispatcher_rss_bytes as f64) < 512.0 * MIB,
            format!(
                "{:.0} MiB holding {} of {} tools",
                at.cold_join.dispatcher_rss_bytes as f64 / MIB,
                at.cold_join.dispatcher_listed,
                at.names
            ),
        ),
        target(
            "a replica kill: bytes sent < 5 % of 33 full snapshots",
            moved_extra < 0.05 * full_33,
            format!(
                "{:.1} MiB beyond steady state; 5 % of 33 full snapshots is {:.1} MiB",
                moved_extra / MIB,
                0.05 * full_33 / MIB
            ),
        ),
        target(
            "health watches shared by the replicas (each ~1/3), a dead one's handed over within the 10 s lease",
            {
                let watched: usize = at.health_watches.iter().sum();
                let most = at.health_watches.first().copied().unwrap_or(0);
                at.health_watches.len() == 3
                    && (most as f64) <= watched as f64 * 0.4
                    && moved.watches_handed_over_ms.is_some_and(|ms| ms < 10_000.0)
            },
            format!(
                "{} watched as {}; handed over after {}",
                at.health_watches.iter().sum::<usize>(),
                at.health_watches
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(" / "),
                moved
                    .watches_handed_over_ms
                    .map_or("never".into(), |ms| format!("{ms:.0} ms"))
            ),
        ),
        target(
            "a replica kill: moving followers spread over >= 1 s, catch-up p99 < 1 s",
            moved.catch_up.missing == 0
                && moved.catch_up.p99_ms < 1_000.0
                && moved.catch_up.max_ms - moved.catch_up.min_ms >= 500.0,
            format!(
                "catch-up min {:.0} ms, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms, {} missing",
                moved.catch_up.min_ms,
                moved.catch_up.p50_ms,
                moved.catch_up.p99_ms,
                moved.catch_up.max_ms,
                moved.catch_up.missing
            ),
        ),
    ]
}

impl fmt::Display for OrgReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "toolmesh bench scale{}: {} dispatchers, 3 registry replicas on a 3-member etcd cluster ({:.0} s)",
            if self.quick { " --quick" } else { "" },
            self.dispatchers,
            self.elapsed_secs
        )?;
        writeln!(f)?;
        let row = |f: &mut fmt::Formatter<'_>,
                   label: &str,
                   cell: &dyn Fn(&AtScale) -> String|
         -> fmt::Result {
            write!(f, "{label:<44}")?;
            for at in &self.scales {
                write!(f, "{:>22}", cell(at))?;
            }
            writeln!(f)
        };
        let ms = |v: f64| format!("{v:.1} ms");
        let mib = |v: u64| format!("{:.0} MiB", v as f64 / MIB);
        row(f, "executors", &|a| a.executors.to_string())?;
        row(f, "tool instances / names", &|a| {
            format!("{} / {}", a.instances, a.names)
        })?;
        row(f, "cold start: all registered", &|a| {
            format!("{:.1} s", a.registered_secs)
        })?;
        row(f, "cold start: held by every dispatcher", &|a| {
            format!("{:.1} s", a.cold_start.max_ms / 1e3)
        })?;
        row(f, "steady: registry cores (sum)", &|a| {
            format!("{:.2}", a.steady.registry_cores.iter().sum::<f64>())
        })?;
        row(f, "steady: etcd cores (sum)", &|a| {
            format!("{:.2}", a.steady.etcd_cores.iter().sum::<f64>())
        })?;
        row(f, "steady: etcd writes/s", &|a| {
            a.steady
                .etcd_writes_per_sec
                .map_or("?".into(), |w| format!("{w:.1}"))
        })?;
        row(f, "steady: snapshots published", &|a| {
            a.steady.snapshots_published.to_string()
        })?;
        row(f, "steady: registry bytes written/s", &|a| {
            format!("{:.0} KiB/s", a.steady.bytes_written_per_sec / 1024.0)
        })?;
        row(f, "registry RSS (largest)", &|a| {
            mib(a
                .steady
                .registry_rss_bytes
                .iter()
                .copied()
                .max()
                .unwrap_or_default())
        })?;
        row(f, "registry peak RSS (largest)", &|a| {
            mib(a
                .steady
                .registry_peak_rss_bytes
                .iter()
                .copied()
                .max()
                .unwrap_or_default())
        })?;
        row(f, "load process peak RSS", &|a| {
            mib(a.steady.load_peak_rss_bytes)
        })?;
        row(f, "etcd RSS (largest)", &|a| {
            mib(a
                .steady
                .etcd_rss_bytes
                .iter()
                .copied()
                .max()
                .unwrap_or_default())
        })?;
        row(f, "etcd database", &|a| {
            a.steady.etcd_db_bytes.map_or("?".into(), |b| mib(b as u64))
        })?;
        row(f, "churn: registration to all, p50", &|a| {
            ms(a.churn.registration_to_all.p50_us / 1e3)
        })?;
        row(f, "churn: registration to all, p99", &|a| {
            ms(a.churn.registration_to_all.p99_us / 1e3)
        })?;
        row(f, "churn: registration to all, max", &|a| {
            ms(a.churn.registration_to_all.max_us / 1e3)
        })?;
        row(f, "churn: kill to all, p50", &|a| {
            ms(a.churn.kill_to_all.p50_us / 1e3)
        })?;
        row(f, "churn: kill to all, p99", &|a| {
            ms(a.churn.kill_to_all.p99_us / 1e3)
        })?;
        row(f, "churn: kill to all, max", &|a| {
            ms(a.churn.kill_to_all.max_us / 1e3)
        })?;
        row(f, "replica kill: registered after", &|a| {
            ms(a.replica_kill.registered_ms)
        })?;
        row(f, "replica kill: catch-up p50", &|a| {
            ms(a.replica_kill.catch_up.p50_ms)
        })?;
        row(f, "replica kill: catch-up p99", &|a| {
            ms(a.replica_kill.catch_up.p99_ms)
        })?;
        row(f, "replica kill: catch-up min..max", &|a| {
            format!(
                "{:.0}..{:.0} ms",
                a.replica_kill.catch_up.min_ms, a.replica_kill.catch_up.max_ms
            )
        })?;
        row(f, "health watches per replica", &|a| {
            let shares: Vec<String> = a.health_watches.iter().map(usize::to_string).collect();
            shares.join(" / ")
        })?;
        row(f, "replica kill: watches handed over", &|a| {
            a.replica_kill
                .watches_handed_over_ms
                .map_or("never".into(), ms)
        })?;
        row(f, "replica kill: bytes written (steady)", &|a| {
            format!(
                "{:.1} ({:.1}) MiB",
                a.replica_kill.bytes_written as f64 / MIB,
                a.replica_kill.steady_bytes_in_window / MIB
            )
        })?;
        row(f, "etcd leader kill: registered after", &|a| {
            ms(a.leader_kill.registered_ms)
        })?;
        row(f, "etcd leader kill: held by all after", &|a| {
            ms(a.leader_kill.held_by_all.max_ms)
        })?;
        row(f, "full snapshot", &|a| {
            format!("{:.1} MiB", a.cold_join.full_snapshot_bytes as f64 / MIB)
        })?;
        row(f, "cold join: a new follower holds all", &|a| {
            a.cold_join
                .follower_secs
                .map_or("never".into(), |s| format!("{s:.2} s"))
        })?;
        row(f, "real dispatcher RSS: holding all", &|a| {
            a.cold_join
                .dispatcher_holding_rss_bytes
                .map_or("never".into(), mib)
        })?;
        row(f, "real dispatcher RSS: after listing all", &|a| {
            mib(a.cold_join.dispatcher_rss_bytes)
        })?;
        row(f, "real dispatcher: ListTools of all", &|a| {
            a.cold_join
                .dispatcher_list_all_ms
                .map_or("never".into(), ms)
        })?;
        row(f, "heartbeats (failed)", &|a| {
            format!("{} ({})", a.heartbeats, a.heartbeat_failures)
        })?;
        row(f, "registrations (failed)", &|a| {
            format!("{} ({})", a.registrations, a.registration_failures)
        })?;
        row(f, "definitions shared by the followers", &|a| {
            a.shared_definitions.to_string()
        })?;
        writeln!(f)?;
        if let Some(at) = self.scales.last() {
            writeln!(f, "targets at {} executors:", at.executors)?;
        }
        for t in &self.targets {
            writeln!(f, "  {} {}: {}", t.verdict.label(), t.name, t.detail)?;
        }
        for at in &self.scales {
            for unheld in &at.churn.unheld {
                writeln!(f, "  not held at {} executors: {unheld}", at.executors)?;
            }
        }
        Ok(())
    }
}
