//! Organisation scale (`toolmesh bench scale`): thousands of executors and a
//! hundred dispatchers on a three-member etcd cluster with three registry
//! replicas, all real on the wire. The executors and dispatchers are
//! simulated in this process (see [`shape`] for the mix); etcd and the
//! registries run as processes. Each scale runs the same phases: cold start,
//! steady state, churn, a replica killed and restarted, the etcd leader
//! killed, a dispatcher joining cold, and the memory of one real
//! `toolmesh dispatcher` following it all.

mod fleet;
mod followers;
mod report;
mod shape;
mod world;

pub use report::{AtScale, Churn, ColdJoin, LeaderKill, OrgReport, ReplicaKill, Spread, Steady};

use crate::error::BenchError;
use crate::procs::{self, Ready, SpawnOptions, TempDir};
use crate::stats::Latency;
use crate::{Binaries, progress};
use fleet::Fleet;
use followers::{Followers, serves, until_each};
use prost::Message;
use shape::Shape;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;
use toolmesh::pb::{GetSnapshotRequest, ListToolsRequest, ToolFormat};
use toolmesh::pb::{dispatcher_client::DispatcherClient, registry_client::RegistryClient};
use toolmesh_transport::MAX_SNAPSHOT_MESSAGE_BYTES;
use world::{ProcStat, World};

/// Longest wait for any one change to reach every follower.
const CHANGE_LIMIT: Duration = Duration::from_secs(30);
/// Longest wait for a cold start to reach every follower.
const COLD_LIMIT: Duration = Duration::from_secs(300);
/// How long a dispatcher is left alone before its memory is read, so
/// what a step freed on other threads is given back first.
const SETTLE: Duration = Duration::from_secs(2);
/// Time between restarts in the churn phase: 1 % of 10,000 executors a
/// minute, at every scale.
const CHURN_EVERY: Duration = Duration::from_millis(600);

/// What to run.
#[derive(Debug, Clone)]
pub struct OrgOptions {
    /// The `toolmesh` binary (registries and the real dispatcher).
    pub toolmesh_exe: PathBuf,
    /// Executors at full scale.
    pub executors: usize,
    /// Dispatchers (the same at every scale).
    pub dispatchers: usize,
    /// Only 1/100 and 1/10 of the full scale, with shorter phases.
    pub quick: bool,
    /// Also write the report as JSON to this file.
    pub json: Option<PathBuf>,
    /// Keep the logs of etcd, the registries and the dispatcher here (at
    /// info level) instead of a temporary directory.
    pub keep_logs: Option<PathBuf>,
    /// Arms the parent-death signal of each child.
    pub parent_death: Option<toolmesh_procs::ArmParentDeath>,
}

/// How long each phase runs.
#[derive(Debug, Clone, Copy)]
struct Phases {
    steady: Duration,
    restarts: usize,
}

/// Runs every scale; see the module docs.
pub async fn run_org(options: OrgOptions) -> Result<OrgReport, BenchError> {
    let started = std::time::Instant::now();
    let toolmesh = std::fs::canonicalize(&options.toolmesh_exe).map_err(|e| {
        BenchError::io(
            format!("find the binary {}", options.toolmesh_exe.display()),
            e,
        )
    })?;
    let bins = Binaries {
        fixture: toolmesh.clone(),
        toolmesh,
        parent_death: options.parent_death,
    };
    toolmesh_procs::etcd_binary()?;
    let temp = TempDir::new("bench-scale-logs")
        .map_err(|e| BenchError::io("create a temp dir for the logs", e))?;
    let logs = match &options.keep_logs {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .map_err(|e| BenchError::io(format!("create {}", dir.display()), e))?;
            dir.clone()
        }
        None => temp.path().to_path_buf(),
    };
    let (divisors, phases): (&[usize], Phases) = match options.quick {
        true => (
            &[100, 10],
            Phases {
                steady: Duration::from_secs(10),
                restarts: 20,
            },
        ),
        false => (
            &[100, 10, 1],
            Phases {
                steady: Duration::from_secs(30),
                restarts: 60,
            },
        ),
    };
    let mut scales = Vec::new();
    for divisor in divisors {
        let shape = Shape {
            executors: (options.executors / divisor).max(shape::REPLICAS),
        };
        progress(&format!(
            "scale 1/{divisor}: {} executors, {} tool instances, {} names, {} dispatchers",
            shape.executors,
            shape.instances(),
            shape.names(),
            options.dispatchers
        ));
        let logs = logs.join(format!("1-{divisor}"));
        std::fs::create_dir_all(&logs)
            .map_err(|e| BenchError::io(format!("create {}", logs.display()), e))?;
        // Logs worth keeping say what happened, not only what went wrong.
        let log = if options.keep_logs.is_some() {
            "info"
        } else {
            "warn"
        };
        scales.push(at_scale(shape, options.dispatchers, phases, &bins, &logs, log).await?);
        // Written after every scale, so that a run cut short keeps what
        // it measured.
        let so_far = OrgReport::new(
            options.quick,
            options.dispatchers,
            started.elapsed().as_secs_f64(),
            scales.clone(),
        );
        if let Some(path) = &options.json {
            let text = serde_json::to_string_pretty(&so_far)?;
            std::fs::write(path, text + "\n")
                .map_err(|e| BenchError::io(format!("write {}", path.display()), e))?;
        }
        eprintln!("{so_far}");
    }
    let report = OrgReport::new(
        options.quick,
        options.dispatchers,
        started.elapsed().as_secs_f64(),
        scales,
    );
    Ok(report)
}

/// Every phase at one scale, in a world of its own.
async fn at_scale(
    shape: Shape,
    dispatchers: usize,
    phases: Phases,
    bins: &Binaries,
    logs: &Path,
    log: &'static str,
) -> Result<AtScale, BenchError> {
    let mut world = World::start(bins, logs, log).await?;
    let followers = Followers::start(dispatchers, &world.registry_list())?;
    let fleet = Arc::new(Fleet::new(shape, &world.addrs).await?);
    // The last executors are the ones churn restarts: each has a health
    // endpoint of its own, so that its death breaks its watch.
    let churned: Vec<usize> = (0..phases.restarts.min(shape.executors))
        .map(|k| shape.executors - 1 - k)
        .collect();

    progress("  cold start");
    let t0 = Instant::now();
    fleet
        .start_all(
            churned
                .first()
                .map_or(usize::MAX, |_| shape.executors - churned.len()),
        )
        .await?;
    let registered = t0.elapsed();
    let names = shape.names();
    let held = followers
        .until_all(t0, COLD_LIMIT, move |s| s.name_count() >= names)
        .await;
    let cold = report::Spread::of(&held);

    progress("  steady state");
    let steady = steady(&world, &followers, phases.steady).await;
    let mut health_watches: Vec<usize> = world.health_watches().await.into_values().collect();
    health_watches.sort_unstable_by(|a, b| b.cmp(a));

    progress("  churn");
    let churn = churn(&fleet, &followers, &shape, &churned).await?;

    progress("  a registry replica killed and restarted");
    let mut extra = shape.executors + 1_000;
    let replica_kill = replica_kill(
        &mut world,
        &fleet,
        &followers,
        &shape,
        extra,
        bins,
        logs,
        steady.bytes_written_per_sec,
    )
    .await?;
    extra += 1;

    progress("  the etcd leader killed");
    let leader_kill = leader_kill(&mut world, &fleet, &followers, &shape, extra).await?;

    progress("  a dispatcher joining cold, and a real dispatcher's memory");
    let cold_join = cold_join(&world, bins, logs, names).await?;

    fleet.stop();
    let counters = &fleet.counters;
    Ok(AtScale {
        executors: shape.executors,
        instances: shape.instances(),
        names,
        dispatchers: followers.len(),
        registered_secs: registered.as_secs_f64(),
        cold_start: cold,
        steady,
        health_watches,
        churn,
        replica_kill,
        leader_kill,
        cold_join,
        heartbeats: counters.heartbeats.load(Ordering::Relaxed),
        heartbeat_failures: counters.heartbeat_failures.load(Ordering::Relaxed),
        registrations: counters.registrations.load(Ordering::Relaxed),
        registration_failures: counters.registration_failures.load(Ordering::Relaxed),
        shared_definitions: followers.definitions.len(),
    })
}

/// Heartbeats only, for `window`.
async fn steady(world: &World, followers: &Followers, window: Duration) -> Steady {
    let proposals = "etcd_server_proposals_committed_total";
    let before_proposals = world.etcd_metric(0, proposals).await;
    let before_version = followers.current(0).version();
    let (registries_before, etcd_before) = world.stats();
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let secs = t0.elapsed().as_secs_f64();
    let (registries_after, etcd_after) = world.stats();
    let after_proposals = world.etcd_metric(0, proposals).await;
    let cores = |before: &[ProcStat], after: &[ProcStat]| -> Vec<f64> {
        before
            .iter()
            .zip(after)
            .map(|(b, a)| (a.cpu_secs - b.cpu_secs) / secs)
            .collect()
    };
    let written: u64 = registries_before
        .iter()
        .zip(&registries_after)
        .map(|(b, a)| a.written_bytes.saturating_sub(b.written_bytes))
        .sum();
    Steady {
        secs,
        registry_cores: cores(&registries_before, &registries_after),
        etcd_cores: cores(&etcd_before, &etcd_after),
        registry_rss_bytes: registries_after.iter().map(|s| s.rss_bytes).collect(),
        registry_peak_rss_bytes: registries_after.iter().map(|s| s.peak_rss_bytes).collect(),
        load_peak_rss_bytes: world::peak_rss_of(std::process::id().try_into().unwrap_or(0))
            .unwrap_or_default(),
        etcd_rss_bytes: etcd_after.iter().map(|s| s.rss_bytes).collect(),
        etcd_writes_per_sec: match (before_proposals, after_proposals) {
            (Some(b), Some(a)) => Some((a - b) / secs),
            _ => None,
        },
        snapshots_published: followers
            .current(0)
            .version()
            .saturating_sub(before_version),
        bytes_written_per_sec: written as f64 / secs,
        etcd_db_bytes: world
            .etcd_metric(0, "etcd_mvcc_db_total_size_in_bytes")
            .await,
    }
}

/// The live pids among `pids`.
fn pids(pids: &[Option<i32>]) -> Vec<i32> {
    pids.iter().flatten().copied().collect()
}

/// Restarts `churned` executors one after another, [`CHURN_EVERY`] apart:
/// each is killed, then started anew; both changes timed until every
/// follower holds them.
async fn churn(
    fleet: &Arc<Fleet>,
    followers: &Followers,
    shape: &Shape,
    churned: &[usize],
) -> Result<Churn, BenchError> {
    let mut kills = Vec::new();
    let mut registrations = Vec::new();
    let mut unheld = Vec::new();
    let mut next = Instant::now();
    for &e in churned {
        tokio::time::sleep_until(next).await;
        next += CHURN_EVERY;
        let tool = shape.tool_names(e).swap_remove(0);
        let id = fleet.id_of(e);
        let t0 = Instant::now();
        fleet.kill(e);
        let (t, i) = (tool.clone(), id.clone());
        let held = followers
            .until_all(t0, CHANGE_LIMIT, move |s| !serves(s, &t, &i))
            .await;
        note_unheld(
            &mut unheld,
            &held,
            followers,
            &tool,
            &format!("kill of {id}"),
        );
        kills.push(report::Spread::of(&held).max);
        let t0 = Instant::now();
        let id = fleet.start(e, true).await?;
        let (t, i) = (tool.clone(), id.clone());
        let held = followers
            .until_all(t0, CHANGE_LIMIT, move |s| serves(s, &t, &i))
            .await;
        note_unheld(
            &mut unheld,
            &held,
            followers,
            &tool,
            &format!("registration of {id}"),
        );
        registrations.push(report::Spread::of(&held).max);
    }
    Ok(Churn {
        restarts: churned.len(),
        every_ms: CHURN_EVERY.as_millis() as u64,
        kill_to_all: Latency::from_samples(kills.into_iter().flatten().collect(), 0),
        registration_to_all: Latency::from_samples(
            registrations.into_iter().flatten().collect(),
            0,
        ),
        unheld,
    })
}

/// Notes a change some follower did not hold in time, with what the
/// first such follower held of `tool` instead.
fn note_unheld(
    unheld: &mut Vec<String>,
    held: &[Option<Duration>],
    followers: &Followers,
    tool: &str,
    change: &str,
) {
    let Some(first) = held.iter().position(Option::is_none) else {
        return;
    };
    let snapshot = followers.current(first);
    let instances: Vec<String> = snapshot
        .versions(tool)
        .iter()
        .flat_map(|e| e.instances.iter())
        .map(|i| {
            format!(
                "{} ({})",
                i.executor_id,
                if i.healthy { "healthy" } else { "unhealthy" }
            )
        })
        .collect();
    unheld.push(format!(
        "{change}: {} of {} followers did not hold it; follower {first} at version {} has {tool} served by [{}]",
        held.iter().filter(|h| h.is_none()).count(),
        held.len(),
        snapshot.version(),
        instances.join(", ")
    ));
}

/// SIGKILLs replica 0, registers a new executor through the others and
/// times it to every follower (the followers of the dead replica move);
/// then starts the replica again.
#[allow(clippy::too_many_arguments)]
async fn replica_kill(
    world: &mut World,
    fleet: &Arc<Fleet>,
    followers: &Followers,
    shape: &Shape,
    e: usize,
    bins: &Binaries,
    logs: &Path,
    steady_bytes_per_sec: f64,
) -> Result<ReplicaKill, BenchError> {
    let survivors = |world: &World| -> u64 {
        pids(&world.registry_pids()[1..])
            .iter()
            .map(|&p| ProcStat::read(p).written_bytes)
            .sum()
    };
    let full_snapshot_bytes = full_snapshot_bytes(&world.addrs[1]).await?;
    let watches_before = world.health_watches().await;
    let before = survivors(world);
    let t0 = Instant::now();
    world.kill_registry(0).await;
    let id = fleet.start(e, false).await?;
    let registered = t0.elapsed();
    let tool = shape.tool_names(e).swap_remove(0);
    let held = followers
        .until_all(t0, CHANGE_LIMIT, move |s| serves(s, &tool, &id))
        .await;
    let window = t0.elapsed();
    let moved_bytes = survivors(world).saturating_sub(before);
    let watches_handed_over_ms = handed_over(world, &watches_before, t0).await;
    world.restart_registry(bins, logs, 0).await?;
    Ok(ReplicaKill {
        watches_handed_over_ms,
        registered_ms: registered.as_secs_f64() * 1e3,
        catch_up: report::Spread::of(&held),
        bytes_written: moved_bytes,
        steady_bytes_in_window: steady_bytes_per_sec * window.as_secs_f64() * 2.0 / 3.0,
        full_snapshot_bytes,
        followers: followers.len(),
    })
}

/// From `t0` (a replica killed) until the killed replica's health watches
/// are gone and every registered executor is watched by a survivor, in
/// ms; `None` past [`CHANGE_LIMIT`].
async fn handed_over(
    world: &World,
    before: &std::collections::BTreeMap<String, usize>,
    t0: Instant,
) -> Option<f64> {
    loop {
        let now = world.health_watches().await;
        let lost_one = before.keys().any(|replica| !now.contains_key(replica));
        let registered = world.registered_executors().await;
        if lost_one && registered > 0 && now.values().sum::<usize>() >= registered {
            return Some(t0.elapsed().as_secs_f64() * 1e3);
        }
        if t0.elapsed() > CHANGE_LIMIT {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The size of a full snapshot, as `GetSnapshot` at `addr` sends it.
async fn full_snapshot_bytes(addr: &str) -> Result<u64, BenchError> {
    let channel = toolmesh_transport::channel(addr, &toolmesh_transport::Tls::none())?;
    let mut client =
        RegistryClient::new(channel).max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES);
    let snapshot = client
        .get_snapshot(GetSnapshotRequest::default())
        .await
        .map_err(|s| BenchError::rpc("GetSnapshot", s))?
        .into_inner();
    Ok(snapshot.encoded_len() as u64)
}

/// SIGKILLs etcd's leader, registers a new executor and times it to every
/// follower; then starts the member again.
async fn leader_kill(
    world: &mut World,
    fleet: &Arc<Fleet>,
    followers: &Followers,
    shape: &Shape,
    e: usize,
) -> Result<LeaderKill, BenchError> {
    let leader = crate::stores::leader_of(&world.etcd).await?;
    let t0 = Instant::now();
    world.etcd.kill(leader).await;
    let id = fleet.start(e, false).await?;
    let registered = t0.elapsed();
    let tool = shape.tool_names(e).swap_remove(0);
    let held = followers
        .until_all(t0, CHANGE_LIMIT, move |s| serves(s, &tool, &id))
        .await;
    // A member that cannot rejoin in time is reported, not fatal: the
    // other two keep a quorum for the phases after this one.
    let rejoined = match world.etcd.restart(leader).await {
        Ok(()) => None,
        Err(error) => Some(error.to_string()),
    };
    Ok(LeaderKill {
        registered_ms: registered.as_secs_f64() * 1e3,
        held_by_all: report::Spread::of(&held),
        not_rejoined: rejoined,
    })
}

/// A follower with definitions of its own (as a new dispatcher process
/// has) joins; then a real `toolmesh dispatcher` follows the registries
/// until it lists every tool, and its memory is read.
async fn cold_join(
    world: &World,
    bins: &Binaries,
    logs: &Path,
    names: usize,
) -> Result<ColdJoin, BenchError> {
    let full_snapshot_bytes = full_snapshot_bytes(&world.addrs[1]).await?;
    let t0 = Instant::now();
    let joined = toolmesh_dispatcher::follow_registry(
        &world.registry_list(),
        &toolmesh_transport::Tls::none(),
        None,
    )?;
    let held = until_each(std::slice::from_ref(&joined), t0, COLD_LIMIT, move |s| {
        s.name_count() >= names
    })
    .await;
    let follower_secs = held[0].map(|d| d.as_secs_f64());
    let version = joined.borrow().version();

    let list = world.registry_list();
    let args = [
        "dispatcher",
        "--registry",
        &list,
        "--listen",
        "127.0.0.1:0",
        "--mcp-listen",
        "none",
    ];
    let mut dispatcher = procs::spawn(
        bins.parent_death,
        "org dispatcher",
        &bins.toolmesh,
        &args,
        logs,
        SpawnOptions::default(),
    )?;
    let addr = dispatcher.listen_addr().await?;
    let channel = toolmesh_transport::channel(&addr, &toolmesh_transport::Tls::none())?;
    let client = DispatcherClient::new(channel).max_decoding_message_size(usize::MAX);
    let t0 = Instant::now();
    // Holding: the first page names the snapshot the follower above holds
    // (nothing is published in steady state), and nothing was listed yet.
    let mut holding_rss = None;
    while t0.elapsed() < COLD_LIMIT {
        let first = ListToolsRequest {
            page_size: 1,
            ..Default::default()
        };
        let answer = client.clone().list_tools(first).await;
        if answer.is_ok_and(|a| a.into_inner().snapshot_version >= version) {
            tokio::time::sleep(SETTLE).await;
            holding_rss = Some(ProcStat::read(dispatcher.pid()).rss_bytes);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut listed = 0;
    let mut list_ms = None;
    while t0.elapsed() < COLD_LIMIT {
        let asked = Instant::now();
        let request = ListToolsRequest {
            format: ToolFormat::Native as i32,
            ..Default::default()
        };
        // Every page: 100,000 tools are 100 of them.
        let answer = crate::scale::list_over_grpc(&client, request).await;
        if let Ok(answer) = answer {
            listed = answer.tools.len();
            if listed >= names {
                list_ms = Some(asked.elapsed().as_secs_f64() * 1e3);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(SETTLE).await;
    let rss = ProcStat::read(dispatcher.pid()).rss_bytes;
    dispatcher.kill_and_reap().await;
    Ok(ColdJoin {
        follower_secs,
        full_snapshot_bytes,
        dispatcher_holding_rss_bytes: holding_rss,
        dispatcher_rss_bytes: rss,
        dispatcher_listed: listed,
        dispatcher_list_all_ms: list_ms,
    })
}
