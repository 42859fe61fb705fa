//! The simulated executors: each registers over gRPC with a lease of its
//! own, heartbeats every third of it (re-registering when the registry
//! forgot it, moving to another replica when one is down) and has a
//! `grpc.health.v1` endpoint the registries watch. They share one tokio
//! runtime, a few HTTP/2 connections per replica and, but for the ones that
//! are killed, one health server.

use super::shape::Shape;
use crate::error::BenchError;
use crate::loopback::{HealthServer, bind};
use crate::procs::AbortOnDrop;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tonic::Code;
use tonic::transport::Channel;
use toolmesh::pb::{HeartbeatRequest, registry_client::RegistryClient};
use toolmesh_executor::{BACKOFF_INITIAL, BACKOFF_MAX, Backoff};

/// The lease every simulated executor asks for (the SDKs' default).
pub(crate) const LEASE_MS: u32 = 10_000;
/// HTTP/2 connections the fleet keeps to each replica.
const CONNECTIONS_PER_REPLICA: usize = 4;
/// Registrations in flight at once at a cold start.
const REGISTERING_AT_ONCE: usize = 64;

/// What the fleet's executors saw.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) heartbeats: AtomicU64,
    pub(crate) heartbeat_failures: AtomicU64,
    pub(crate) registrations: AtomicU64,
    pub(crate) registration_failures: AtomicU64,
}

/// Every simulated executor.
pub(crate) struct Fleet {
    shape: Shape,
    clients: Arc<Vec<Vec<RegistryClient<Channel>>>>,
    health: HealthServer,
    running: Mutex<HashMap<usize, Running>>,
    generations: Mutex<HashMap<usize, usize>>,
    pub(crate) counters: Arc<Counters>,
}

/// One executor process, as long as it runs.
struct Running {
    _heartbeats: AbortOnDrop<()>,
    _own_endpoint: Option<Proxy>,
}

impl Fleet {
    /// A fleet of `shape` that talks to the replicas at `addrs`.
    pub(crate) async fn new(shape: Shape, addrs: &[String]) -> Result<Fleet, BenchError> {
        let mut clients = Vec::with_capacity(addrs.len());
        for addr in addrs {
            let mut per_replica = Vec::with_capacity(CONNECTIONS_PER_REPLICA);
            for _ in 0..CONNECTIONS_PER_REPLICA {
                let channel = toolmesh_transport::channel(addr, &toolmesh_transport::Tls::none())?;
                per_replica.push(RegistryClient::new(channel));
            }
            clients.push(per_replica);
        }
        Ok(Fleet {
            shape,
            clients: Arc::new(clients),
            health: HealthServer::start().await?,
            running: Mutex::default(),
            generations: Mutex::default(),
            counters: Arc::default(),
        })
    }

    /// Registers every executor (a bounded number at once) and keeps each
    /// heartbeating; those from `own_endpoint_from` on get health
    /// endpoints of their own (see [`Fleet::start`]).
    pub(crate) async fn start_all(
        self: &Arc<Self>,
        own_endpoint_from: usize,
    ) -> Result<(), BenchError> {
        let gate = Arc::new(Semaphore::new(REGISTERING_AT_ONCE));
        let mut starting = JoinSet::new();
        for e in 0..self.shape.executors {
            let fleet = self.clone();
            let permit = gate.clone().acquire_owned().await.map_err(|_| {
                BenchError::failed("register the fleet", "the registration gate closed")
            })?;
            starting.spawn(async move {
                let started = fleet.start(e, e >= own_endpoint_from).await;
                drop(permit);
                started
            });
        }
        while let Some(started) = starting.join_next().await {
            started.map_err(|e| BenchError::failed("a registering task", e.to_string()))??;
        }
        Ok(())
    }

    /// Starts executor `e` as a new process (a new generation, a new
    /// executor id): registered when this returns. With `own_endpoint` its
    /// health endpoint is its own, so that [`Fleet::kill`] breaks the
    /// registry's watch of it as a process's death would.
    pub(crate) async fn start(
        self: &Arc<Self>,
        e: usize,
        own_endpoint: bool,
    ) -> Result<String, BenchError> {
        let generation = {
            let mut generations = self
                .generations
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let g = generations.entry(e).or_default();
            *g += 1;
            *g
        };
        let proxy = match own_endpoint {
            true => Some(Proxy::start(self.health.addr.clone()).await?),
            false => None,
        };
        let endpoint = proxy
            .as_ref()
            .map_or(self.health.addr.clone(), |p| p.addr.clone());
        let request = self.shape.request(e, generation, &endpoint, LEASE_MS);
        let id = request.executor_id.clone();
        let (lease, replica) = register(&self.clients, e, request.clone(), &self.counters).await?;
        let heartbeats = tokio::spawn(heartbeat_loop(
            self.clients.clone(),
            self.counters.clone(),
            e,
            replica,
            lease,
            request,
        ));
        let running = Running {
            _heartbeats: AbortOnDrop(heartbeats),
            _own_endpoint: proxy,
        };
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(e, running);
        Ok(id)
    }

    /// The executor id of executor `e`'s newest process.
    pub(crate) fn id_of(&self, e: usize) -> String {
        let generations = self
            .generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        super::shape::executor_id(e, generations.get(&e).copied().unwrap_or_default())
    }

    /// Kills executor `e`'s process: no more heartbeats, and its own health
    /// endpoint (if it has one) closes with every connection to it.
    pub(crate) fn kill(&self, e: usize) {
        let running = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&e);
        drop(running);
    }

    /// Stops every executor (their leases run out).
    pub(crate) fn stop(&self) {
        let all = std::mem::take(&mut *self.running.lock().unwrap_or_else(PoisonError::into_inner));
        drop(all);
    }
}

/// Longest an executor keeps trying to register, as an SDK would through
/// an etcd election or a replica's restart.
const REGISTER_PATIENCE: Duration = Duration::from_secs(120);

/// Registers `request` through replica `e % n`, moving on to the next
/// replica while one is unavailable and backing off once all were tried;
/// the lease and the replica that took it.
async fn register(
    clients: &[Vec<RegistryClient<Channel>>],
    e: usize,
    request: toolmesh::pb::RegisterRequest,
    counters: &Counters,
) -> Result<(String, usize), BenchError> {
    let started = tokio::time::Instant::now();
    let mut backoff = Backoff::new(BACKOFF_INITIAL, BACKOFF_MAX);
    let mut attempt = 0;
    loop {
        let replica = (e + attempt) % clients.len();
        attempt += 1;
        let mut client = clients[replica][e % CONNECTIONS_PER_REPLICA].clone();
        match client.register(request.clone()).await {
            Ok(response) => {
                counters.registrations.fetch_add(1, Ordering::Relaxed);
                let response = response.into_inner();
                if let Some(r) = response.rejected.first() {
                    return Err(BenchError::failed(
                        "Register",
                        format!("{} was rejected: {}", r.name, r.reason),
                    ));
                }
                return Ok((response.lease_id, replica));
            }
            Err(status) if started.elapsed() > REGISTER_PATIENCE => {
                return Err(BenchError::rpc(
                    "Register (every replica, for two minutes)",
                    status,
                ));
            }
            Err(_) => {
                counters
                    .registration_failures
                    .fetch_add(1, Ordering::Relaxed);
                if attempt % clients.len() == 0 {
                    tokio::time::sleep(backoff.next_wait()).await;
                }
            }
        }
    }
}

/// Heartbeats every third of the lease, as the SDKs do: a forgotten lease
/// registers again, an unavailable replica is left for the next after the
/// SDKs' jittered backoff (a fixed 100 ms retry from 10,000 executors is
/// a storm no SDK makes).
async fn heartbeat_loop(
    clients: Arc<Vec<Vec<RegistryClient<Channel>>>>,
    counters: Arc<Counters>,
    e: usize,
    mut replica: usize,
    mut lease: String,
    request: toolmesh::pb::RegisterRequest,
) {
    let period = Duration::from_millis(u64::from(LEASE_MS) / 3);
    // Spread over the period, as processes started apart would be.
    tokio::time::sleep(period.mul_f64(rand_fraction(e))).await;
    let mut backoff = Backoff::new(BACKOFF_INITIAL, BACKOFF_MAX);
    loop {
        let mut client = clients[replica][e % CONNECTIONS_PER_REPLICA].clone();
        let beat = client
            .heartbeat(HeartbeatRequest {
                lease_id: lease.clone(),
            })
            .await;
        match beat {
            Ok(_) => {
                counters.heartbeats.fetch_add(1, Ordering::Relaxed);
                backoff.reset();
                tokio::time::sleep(period).await;
            }
            Err(status) => {
                counters.heartbeat_failures.fetch_add(1, Ordering::Relaxed);
                if status.code() == Code::NotFound {
                    if let Ok((l, r)) =
                        register(&clients, replica, request.clone(), &counters).await
                    {
                        (lease, replica) = (l, r);
                    }
                } else {
                    replica = (replica + 1) % clients.len();
                    tokio::time::sleep(backoff.next_wait()).await;
                }
            }
        }
    }
}

/// A fraction in [0, 1) that differs between executors.
fn rand_fraction(e: usize) -> f64 {
    (e.wrapping_mul(2_654_435_761) % 1_000) as f64 / 1_000.0
}

/// An executor's own endpoint: a TCP relay to the shared health server.
/// Dropping it closes its listener and every connection through it, as
/// the death of a process does.
struct Proxy {
    addr: String,
    _relay: AbortOnDrop<()>,
}

impl Proxy {
    async fn start(to: String) -> Result<Proxy, BenchError> {
        let (listener, addr) = bind().await?;
        let relay = tokio::spawn(async move {
            // Dropped with the relay: every connection ends with it.
            let mut connections = JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                let to = to.clone();
                connections.spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(to.as_str()).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(Proxy {
            addr,
            _relay: AbortOnDrop(relay),
        })
    }
}
