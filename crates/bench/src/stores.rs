//! The etcd store beside the embedded one, in one run and with the same
//! load: registrations per second, change → follower propagation and
//! resident memory at the small and the large tool count, each registry a
//! separate `toolmesh registry` process; then failover on etcd (a replica
//! SIGKILLed under a following dispatcher, the etcd leader SIGKILLed under
//! registrations).

use crate::error::BenchError;
use crate::freshness::Series;
use crate::procs::{self, Proc, Ready, SpawnOptions};
use crate::scale::{TOOLS_PER_EXECUTOR, executor_request_at, register_fleet, rss_of};
use crate::stats::Latency;
use crate::{Binaries, Plan};
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::transport::Channel;
use toolmesh::Snapshot;
use toolmesh::pb::{DeregisterRequest, GetSnapshotRequest, registry_client::RegistryClient};
use toolmesh_procs::EtcdCluster;

/// Lease the fake executors ask for: the registry's longest (5 min).
const LEASE_MS: u32 = 300_000;
/// Longest wait for one propagation or failover sample.
const LIMIT: Duration = Duration::from_secs(30);
/// Longest wait for one Register during an etcd election.
const ATTEMPT: Duration = Duration::from_millis(500);

/// One store at one tool count.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoreAtSize {
    /// Tools registered.
    pub tools: usize,
    /// Executors they are spread over.
    pub executors: usize,
    /// Register calls per second over gRPC (one executor each).
    pub registrations_per_sec: f64,
    /// Register or Deregister sent → a gRPC follower (what `toolmesh
    /// dispatcher --registry` runs) holds the new version, in µs.
    pub propagation: Latency,
    /// Resident memory of the registry process after registering, in bytes.
    pub registry_rss_bytes: Option<u64>,
    /// Resident memory of the etcd member, in bytes (etcd store only).
    pub etcd_rss_bytes: Option<u64>,
}

/// Failover with the etcd store.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failover {
    /// SIGKILL of the replica a follower watches → the follower holds a
    /// change registered through the other replica.
    pub replica_kill_to_follower: Series,
    /// SIGKILL of the etcd leader (of three members) → the first
    /// successful Register.
    pub leader_kill_to_registration: Series,
}

/// Part 4 of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stores {
    /// Concurrent gRPC clients registering.
    pub register_clients: usize,
    /// The embedded store, small then large.
    pub embedded: Vec<StoreAtSize>,
    /// The etcd store (one member), small then large; empty without etcd.
    pub etcd: Vec<StoreAtSize>,
    /// Failover figures; absent without etcd.
    pub failover: Option<Failover>,
    /// Why the etcd store was not measured, when it was not.
    pub etcd_missing: Option<String>,
}

/// Measures the embedded store, then the etcd store if an `etcd` binary
/// is found (`TOOLMESH_TEST_ETCD` or PATH).
pub(crate) async fn run(plan: &Plan, bins: &Binaries, logs: &Path) -> Result<Stores, BenchError> {
    // Every fake executor registers this endpoint: health SERVING, so the
    // registries' watches keep every tool exposed and write no verdicts.
    let sink = crate::loopback::HealthServer::start().await?;
    let sizes = [plan.baseline_tools, plan.scale_tools];
    let run = Run {
        plan,
        bins,
        logs,
        endpoint: &sink.addr,
    };
    let mut embedded = Vec::new();
    for tools in sizes {
        embedded.push(run.at_size(tools, false).await?);
    }
    let mut stores = Stores {
        register_clients: plan.register_clients,
        embedded,
        etcd: Vec::new(),
        failover: None,
        etcd_missing: None,
    };
    if let Err(missing) = toolmesh_procs::etcd_binary() {
        stores.etcd_missing = Some(missing.to_string());
        return Ok(stores);
    }
    for tools in sizes {
        stores.etcd.push(run.at_size(tools, true).await?);
    }
    stores.failover = Some(run.failover().await?);
    drop(sink);
    Ok(stores)
}

/// What every measurement shares.
struct Run<'a> {
    plan: &'a Plan,
    bins: &'a Binaries,
    logs: &'a Path,
    /// Where every fake executor says it serves (health: SERVING).
    endpoint: &'a str,
}

impl Run<'_> {
    /// A `toolmesh registry` process over `store` (None: embedded).
    async fn registry(
        &self,
        name: &str,
        store: Option<&str>,
    ) -> Result<(Proc, String), BenchError> {
        let mut args = vec!["registry", "--listen", "127.0.0.1:0"];
        if let Some(store) = store {
            args.extend(["--store", store]);
        }
        let mut proc = procs::spawn(
            self.bins.parent_death,
            name,
            &self.bins.toolmesh,
            &args,
            self.logs,
            SpawnOptions::default(),
        )?;
        let addr = proc.listen_addr().await?;
        Ok((proc, addr))
    }

    /// Registers `tools` over gRPC into a fresh registry, then times changes
    /// until a follower has them.
    async fn at_size(&self, tools: usize, etcd: bool) -> Result<StoreAtSize, BenchError> {
        let cluster = match etcd {
            true => Some(EtcdCluster::start(1).await?),
            false => None,
        };
        let url = cluster.as_ref().map(EtcdCluster::store_url);
        let label = if etcd {
            "registry on etcd"
        } else {
            "registry embedded"
        };
        let (registry, addr) = self.registry(label, url.as_deref()).await?;
        let executors = tools.div_ceil(TOOLS_PER_EXECUTOR);
        let endpoint = self.endpoint.to_owned();
        let started = Instant::now();
        register_fleet(&addr, executors, self.plan.register_clients, move |e| {
            executor_request_at("store", e, &endpoint, LEASE_MS)
        })
        .await?;
        let secs = started.elapsed().as_secs_f64().max(f64::EPSILON);
        let propagation = self.propagation(&addr).await?;
        Ok(StoreAtSize {
            tools: executors * TOOLS_PER_EXECUTOR,
            executors,
            registrations_per_sec: executors as f64 / secs,
            propagation,
            registry_rss_bytes: rss_of(&registry.pid().to_string()),
            etcd_rss_bytes: cluster
                .as_ref()
                .and_then(|c| c.pid(0))
                .and_then(|pid| rss_of(&pid.to_string())),
        })
    }

    /// Registers and deregisters one executor, timing each until a
    /// follower of `addr` holds the version it published.
    async fn propagation(&self, addr: &str) -> Result<Latency, BenchError> {
        let mut client = registry_client(addr)?;
        let mut follower = toolmesh_dispatcher::follow_registry(addr, &none(), None)?;
        let newest = newest_version(&mut client).await?;
        reach(&mut follower, newest).await?;
        let changes = self.plan.grpc_propagation_changes.max(10);
        let mut samples = Vec::with_capacity(2 * changes);
        for i in 0..changes {
            let t0 = Instant::now();
            let (lease, version) = register_change(&mut client, self.endpoint, i).await?;
            reach(&mut follower, version).await?;
            samples.push(t0.elapsed());
            let t1 = Instant::now();
            let version = client
                .deregister(DeregisterRequest { lease_id: lease })
                .await
                .map_err(|s| BenchError::rpc("Deregister", s))?
                .into_inner()
                .snapshot_version;
            reach(&mut follower, version).await?;
            samples.push(t1.elapsed());
        }
        Ok(Latency::from_samples(samples, 0))
    }

    /// Both failover series, `freshness_reps` samples each.
    async fn failover(&self) -> Result<Failover, BenchError> {
        let reps = self.plan.freshness_reps;
        let mut replica = Vec::with_capacity(reps);
        let mut leader = Vec::with_capacity(reps);
        for _ in 0..reps {
            replica.push(self.replica_kill().await?);
            leader.push(self.leader_kill().await?);
        }
        Ok(Failover {
            replica_kill_to_follower: Series::new(&replica, LIMIT),
            leader_kill_to_registration: Series::new(&leader, LIMIT),
        })
    }

    /// Replicas A and B on one etcd, a follower of `A,B` (it follows A):
    /// SIGKILL A, register through B, time until the follower has it.
    async fn replica_kill(&self) -> Result<Option<Duration>, BenchError> {
        let cluster = EtcdCluster::start(1).await?;
        let url = cluster.store_url();
        let (mut a, a_addr) = self.registry("replica A", Some(&url)).await?;
        let (_b, b_addr) = self.registry("replica B", Some(&url)).await?;
        let mut follower =
            toolmesh_dispatcher::follow_registry(&format!("{a_addr},{b_addr}"), &none(), None)?;
        let mut through_b = registry_client(&b_addr)?;
        let newest = newest_version(&mut through_b).await?;
        reach(&mut follower, newest).await?;
        let t0 = Instant::now();
        a.kill_and_reap().await;
        let (_, version) = register_change(&mut through_b, self.endpoint, 0).await?;
        Ok(reach(&mut follower, version)
            .await
            .ok()
            .map(|()| t0.elapsed()))
    }

    /// One replica on three etcd members: SIGKILL the leader, time until a
    /// Register succeeds.
    async fn leader_kill(&self) -> Result<Option<Duration>, BenchError> {
        let mut cluster = EtcdCluster::start(3).await?;
        let (_replica, addr) = self.registry("replica", Some(&cluster.store_url())).await?;
        let mut client = registry_client(&addr)?;
        register_change(&mut client, self.endpoint, 0).await?;
        let leader = leader_of(&cluster).await?;
        let t0 = Instant::now();
        cluster.kill(leader).await;
        for i in 1.. {
            if t0.elapsed() > LIMIT {
                return Ok(None);
            }
            let attempt = register_change(&mut client, self.endpoint, i);
            if let Ok(Ok(_)) = tokio::time::timeout(ATTEMPT, attempt).await {
                return Ok(Some(t0.elapsed()));
            }
        }
        Ok(None)
    }
}

fn none() -> toolmesh_transport::Tls {
    toolmesh_transport::Tls::none()
}

fn registry_client(addr: &str) -> Result<RegistryClient<Channel>, BenchError> {
    Ok(RegistryClient::new(toolmesh_transport::channel(
        addr,
        &none(),
    )?))
}

/// The registry's newest snapshot version.
async fn newest_version(client: &mut RegistryClient<Channel>) -> Result<u64, BenchError> {
    Ok(client
        .get_snapshot(GetSnapshotRequest::default())
        .await
        .map_err(|s| BenchError::rpc("GetSnapshot", s))?
        .into_inner()
        .version)
}

/// Registers change executor `i` (one tool); its lease and the version.
async fn register_change(
    client: &mut RegistryClient<Channel>,
    endpoint: &str,
    i: usize,
) -> Result<(String, u64), BenchError> {
    let mut request = executor_request_at("change", i, endpoint, LEASE_MS);
    request.tools.truncate(1);
    let response = client
        .register(request)
        .await
        .map_err(|s| BenchError::rpc("Register", s))?
        .into_inner();
    Ok((response.lease_id, response.snapshot_version))
}

/// Waits until `follower` holds version `want` or newer.
async fn reach(follower: &mut watch::Receiver<Arc<Snapshot>>, want: u64) -> Result<(), BenchError> {
    tokio::time::timeout(LIMIT, follower.wait_for(|s| s.version() >= want))
        .await
        .map_err(|_| BenchError::timeout(format!("a follower to hold snapshot {want}"), LIMIT))?
        .map(drop)
        .map_err(|_| BenchError::failed("follow a registry", "the follower stopped"))
}

/// The member that leads `cluster` now.
pub(crate) async fn leader_of(cluster: &EtcdCluster) -> Result<usize, BenchError> {
    let client = toolmesh_etcd::Client::from_url(&cluster.store_url())
        .map_err(|e| BenchError::failed("an etcd client", e.to_string()))?;
    let started = Instant::now();
    while started.elapsed() < LIMIT {
        for i in 0..cluster.len() {
            if let Ok(status) = client.status(&cluster.client_url(i)).await
                && status.header.is_some_and(|h| h.member_id == status.leader)
            {
                return Ok(i);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(BenchError::timeout("an etcd leader", LIMIT))
}
