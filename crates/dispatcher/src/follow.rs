//! Following a registry that runs in other processes: WatchSnapshots from
//! any of its replicas, with reconnects and failover (a replica that reports
//! itself not serving is left for another); the last snapshot keeps serving
//! while every replica is away; a replica of the same epoch continues from
//! the version held, without a full resync; and a restarted registry's
//! first, still-empty snapshots do not hide tools whose executors have yet
//! to register again. A refused read (the registry's policy gives this
//! dispatcher's token no reading role) is told apart from an unreachable
//! registry, at error level: it is fixed by a credential, not by waiting.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
use toolmesh::Snapshot;
use toolmesh::pb::{self, WatchSnapshotsRequest, registry_client::RegistryClient};
use toolmesh::snapshot::Definitions;
use toolmesh_transport::{BadAddress, MAX_SNAPSHOT_MESSAGE_BYTES, channel};
use tracing::{error, info, warn};

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// A replica that went away sends its followers to the others: each waits
/// a random time below this first, so they arrive spread out, not at once.
const MOVE_SPREAD: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How often the followed replica's health is checked when others exist.
const HEALTH_CHECK: Duration = Duration::from_millis(500);
/// The health service name a registry replica reports.
const REGISTRY_SERVICE: &str = "toolmesh.v1.Registry";

/// How long a new registry epoch may lack tools the old one exposed before
/// its snapshot is taken anyway. Executors register again within a third
/// of their lease, so this covers leases up to 15 s.
pub const EPOCH_GRACE: Duration = Duration::from_secs(5);

/// Starts following the registry at `addresses` (one or more replicas,
/// `host:port` separated by commas) over `tls`; the receiver holds the
/// newest snapshot taken (an empty one until the first arrives). `token` is
/// sent as the bearer token (a caller with the `dispatcher` role: snapshots
/// are not for everyone to read).
pub fn follow_registry(
    addresses: &str,
    tls: &toolmesh_transport::Tls,
    token: Option<toolmesh_transport::Credential>,
) -> Result<watch::Receiver<Arc<Snapshot>>, BadAddress> {
    follow_registry_sharing(addresses, tls, token, Arc::default())
}

/// [`follow_registry`], taking tool definitions from `definitions`, which
/// other followers in this process may share: a definition they hold
/// already is neither compiled nor held again.
pub fn follow_registry_sharing(
    addresses: &str,
    tls: &toolmesh_transport::Tls,
    token: Option<toolmesh_transport::Credential>,
    definitions: Arc<Definitions>,
) -> Result<watch::Receiver<Arc<Snapshot>>, BadAddress> {
    let mut replicas = Vec::new();
    for address in addresses
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        replicas.push((address.to_owned(), channel(address, tls)?));
    }
    if replicas.is_empty() {
        // Let the usual address check name the problem.
        replicas.push((addresses.to_owned(), channel(addresses, tls)?));
    }
    let (tx, rx) = watch::channel(Arc::new(Snapshot::empty("")));
    let follower = Follower {
        address: replicas[0].0.clone(),
        token,
        tx,
        pending: None,
        definitions,
    };
    // Once no one holds the snapshots any more, following ends (quietly,
    // rather than reporting the registry's goodbye to no one).
    let held = follower.tx.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = follower.run(replicas) => {}
            () = held.closed() => {}
        }
    });
    Ok(rx)
}

/// How far from the current replica the next one to try is: any other,
/// at random, so the followers of a replica that went away spread over
/// the rest rather than all moving to its neighbour.
fn another(replicas: usize) -> usize {
    rand::random_range(1..replicas.max(2))
}

/// Whether any replica but `current` says it serves.
async fn others_serving(replicas: &[(String, Channel)], current: usize) -> bool {
    for (i, (_, channel)) in replicas.iter().enumerate() {
        if i != current && replica_serving(channel).await {
            return true;
        }
    }
    false
}

/// Whether the replica on `channel` says it serves (a replica that lost
/// its store's quorum says NOT_SERVING; one without a health service, or
/// that cannot be asked, counts as serving so that it is still tried).
async fn replica_serving(channel: &Channel) -> bool {
    let mut client = HealthClient::new(channel.clone());
    let check = client.check(HealthCheckRequest {
        service: REGISTRY_SERVICE.to_owned(),
    });
    match tokio::time::timeout(HEALTH_CHECK, check).await {
        Ok(Ok(response)) => response.into_inner().status != ServingStatus::NotServing as i32,
        _ => true,
    }
}

/// What became of one message.
enum Received {
    /// Installed or held back.
    Taken,
    /// A delta whose base this follower does not hold: watch again.
    NoBase,
    /// Nobody listens any more.
    Closed,
}

struct Follower {
    address: String,
    /// Read again on each (re)connection: a rotated token file is followed.
    token: Option<toolmesh_transport::Credential>,
    tx: watch::Sender<Arc<Snapshot>>,
    /// A new epoch's snapshot held back, and since when.
    pending: Option<(Arc<Snapshot>, Instant)>,
    /// Where new definitions are taken from.
    definitions: Arc<Definitions>,
}

impl Follower {
    /// The next replica to follow, starting after `current`: the first that
    /// says it serves, else simply the next.
    async fn pick(&mut self, replicas: &[(String, Channel)], current: usize) -> usize {
        let n = replicas.len();
        if n > 1 {
            for step in 0..n {
                let i = (current + step) % n;
                if replica_serving(&replicas[i].1).await {
                    self.address = replicas[i].0.clone();
                    return i;
                }
            }
        }
        self.address = replicas[current % n].0.clone();
        current % n
    }

    async fn run(mut self, replicas: Vec<(String, Channel)>) {
        let mut backoff = FIRST_BACKOFF;
        let mut outage = Outage::default();
        // Followers of one registry spread over its replicas.
        let mut current = rand::random_range(0..replicas.len());
        loop {
            // Set when the replica followed went away while serving us.
            let mut moving = false;
            current = self.pick(&replicas, current).await;
            let channel = replicas[current].1.clone();
            let mut client = RegistryClient::new(channel.clone())
                .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES);
            // From the version held, named with its epoch: a replica of the
            // same registry continues with deltas from it; a restarted
            // registry (another epoch) starts with its newest snapshot.
            let installed = self.tx.borrow().clone();
            let mut request = tonic::Request::new(WatchSnapshotsRequest {
                after_version: installed.version(),
                deltas: true,
                epoch: installed.epoch().to_owned(),
            });
            toolmesh_transport::attach_credential(self.token.as_ref(), request.metadata_mut());
            match client.watch_snapshots(request).await {
                Ok(stream) => {
                    let mut stream = stream.into_inner();
                    let mut health = tokio::time::interval(HEALTH_CHECK);
                    loop {
                        let grace_end =
                            self.pending.as_ref().map(|(_, since)| *since + EPOCH_GRACE);
                        let message = tokio::select! {
                            message = stream.message() => message,
                            _ = sleep_until(grace_end) => {
                                self.take_pending("grace period over");
                                continue;
                            }
                            _ = health.tick(), if replicas.len() > 1 => {
                                // Move only to a replica that serves.
                                if replica_serving(&channel).await
                                    || !others_serving(&replicas, current).await
                                {
                                    continue;
                                }
                                warn!(registry = %self.address, "registry replica not serving; following another");
                                current += 1;
                                break;
                            }
                        };
                        match message {
                            Ok(Some(wire)) => {
                                if outage.end() || !self.holds_a_snapshot() {
                                    info!(registry = %self.address, epoch = %wire.epoch, version = wire.version, "following registry");
                                }
                                backoff = FIRST_BACKOFF;
                                match self.receive(&wire) {
                                    Received::Taken => {}
                                    Received::Closed => return,
                                    Received::NoBase => {
                                        warn!(registry = %self.address, "snapshot delta without its base; watching again");
                                        break;
                                    }
                                }
                            }
                            Ok(None) => {
                                current += another(replicas.len());
                                moving = true;
                                break;
                            }
                            // No one holds the snapshots: the registry
                            // going away is no one's concern.
                            Err(_) if self.tx.is_closed() => return,
                            Err(status) => {
                                outage.report(
                                    &self.address,
                                    &status,
                                    Trouble::Broke,
                                    self.holds_a_snapshot(),
                                );
                                current += another(replicas.len());
                                moving = true;
                                break;
                            }
                        }
                    }
                }
                Err(_) if self.tx.is_closed() => return,
                Err(status) => {
                    outage.report(
                        &self.address,
                        &status,
                        Trouble::Unreachable,
                        self.holds_a_snapshot(),
                    );
                    current += 1;
                }
            }
            if self.tx.is_closed() {
                return;
            }
            let grace_end = self.pending.as_ref().map(|(_, since)| *since + EPOCH_GRACE);
            let wait = match moving && replicas.len() > 1 && self.holds_a_snapshot() {
                // The snapshot held keeps serving meanwhile.
                true => MOVE_SPREAD.mul_f64(rand::random::<f64>()),
                false => backoff,
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = sleep_until(grace_end) => self.take_pending("grace period over"),
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Takes in one wire snapshot (full or delta).
    fn receive(&mut self, wire: &pb::Snapshot) -> Received {
        let installed = self.tx.borrow().clone();
        let same_epoch = wire.epoch == installed.epoch();
        // Nothing newer than what is installed: a replica behind the one
        // followed before. Its deltas apply to its own older versions, so
        // they are passed over too (not a reason to watch again, which
        // would bring the whole snapshot, as old); once it is ahead, its
        // deltas apply again (every replica publishes each etcd revision,
        // so the base of its next one is what is installed here), and one
        // that does not find its base starts a watch from ours.
        if same_epoch && wire.version <= installed.version() {
            return Received::Taken;
        }
        let base = match &self.pending {
            Some((pending, _)) if pending.epoch() == wire.epoch => pending.clone(),
            _ => installed.clone(),
        };
        let Some((snapshot, skipped)) =
            Snapshot::from_pb_sharing(wire, Some(&base), Some(&self.definitions))
        else {
            return Received::NoBase;
        };
        for (tool, error) in skipped {
            warn!(%tool, %error, "snapshot entry left out");
        }
        let snapshot = Arc::new(snapshot);
        if same_epoch || installed.epoch().is_empty() || covers(&snapshot, &installed) {
            self.pending = None;
            return match self.tx.send(snapshot) {
                Ok(()) => Received::Taken,
                Err(_) => Received::Closed,
            };
        }
        let since = match &self.pending {
            Some((pending, since)) if pending.epoch() == snapshot.epoch() => *since,
            _ => {
                info!(epoch = %snapshot.epoch(), "registry restarted; keeping the last snapshot until executors register again");
                Instant::now()
            }
        };
        self.pending = Some((snapshot, since));
        Received::Taken
    }

    /// Whether a snapshot from a registry is installed (the empty one a
    /// dispatcher starts with has no epoch).
    fn holds_a_snapshot(&self) -> bool {
        !self.tx.borrow().epoch().is_empty()
    }

    fn take_pending(&mut self, why: &str) {
        if let Some((snapshot, _)) = self.pending.take() {
            info!(epoch = %snapshot.epoch(), version = snapshot.version(), why, "taking the restarted registry's snapshot");
            let _ = self.tx.send(snapshot);
        }
    }
}

/// What kept the follower from a stream, when the status is no refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trouble {
    /// The watch could not start.
    Unreachable,
    /// A stream that ran ended in an error.
    Broke,
    /// The registry refused this dispatcher's credential.
    Refused,
}

/// The trouble last logged since snapshots last arrived: each kind is
/// logged once per outage, and a change of kind again.
#[derive(Debug, Default)]
struct Outage {
    logged: Option<Trouble>,
}

impl Outage {
    /// Logs `status` from `registry` unless the same trouble already was;
    /// a refusal (PERMISSION_DENIED, UNAUTHENTICATED) is logged as one,
    /// whatever `otherwise` says. `holding`: whether a snapshot from a
    /// registry is in hand to serve meanwhile.
    fn report(
        &mut self,
        registry: &str,
        status: &tonic::Status,
        otherwise: Trouble,
        holding: bool,
    ) {
        let trouble = if refused(status) {
            Trouble::Refused
        } else {
            otherwise
        };
        if self.logged == Some(trouble) {
            return;
        }
        self.logged = Some(trouble);
        let reason = status.message();
        match trouble {
            Trouble::Refused => error!(
                registry,
                code = ?status.code(),
                "registry refused: {reason}; this dispatcher reads no snapshot (and serves no tool) until --registry-token (TOOLMESH_REGISTRY_TOKEN) or --registry-token-file (TOOLMESH_REGISTRY_TOKEN_FILE) holds the token of a [[callers]] entry the registry's policy gives the role \"dispatcher\" (a static token, or a JWT whose issuer and subject the entry names)"
            ),
            Trouble::Unreachable | Trouble::Broke => {
                let what = match trouble {
                    Trouble::Broke => "snapshot stream broke",
                    _ => "registry unreachable",
                };
                let meanwhile = if holding {
                    "serving the last snapshot"
                } else {
                    "no snapshot yet: this dispatcher serves no tool and is not ready until a registry answers"
                };
                warn!(registry, %status, "{what}; {meanwhile}")
            }
        }
    }

    /// Snapshots arrive again; whether an outage had been logged.
    fn end(&mut self) -> bool {
        self.logged.take().is_some()
    }
}

/// Whether the registry refused the caller rather than failed to answer.
fn refused(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
    )
}

/// Whether `new` exposes every tool name `old` exposed.
fn covers(new: &Snapshot, old: &Snapshot) -> bool {
    let exposed: HashSet<&str> = new
        .entries()
        .filter(|e| e.exposed())
        .map(|e| e.def.name())
        .collect();
    old.entries()
        .filter(|e| e.exposed())
        .all(|e| exposed.contains(e.def.name()))
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Snapshots of one epoch at versions `1..=n`, each the next of the one
    /// before (no tools: the versions are what is looked at).
    fn lineage(n: u64) -> Vec<Arc<Snapshot>> {
        let mut all = vec![Arc::new(Snapshot::empty("epoch-a"))];
        for version in 1..=n {
            let mut next = all.last().unwrap().next();
            next.at_version(version);
            all.push(Arc::new(next.finish()));
        }
        all
    }

    /// A replica behind the one followed before sends what the follower
    /// holds already, whole or as deltas from its own older versions:
    /// nothing is installed and nothing makes it watch again (each new
    /// watch would bring the whole snapshot, as old, once more); once the
    /// replica reaches the installed version its deltas apply.
    #[test]
    fn a_replica_behind_is_waited_for() {
        let versions = lineage(6);
        let (tx, installed) = watch::channel(versions[5].clone());
        let mut follower = Follower {
            address: "127.0.0.1:1".into(),
            token: None,
            tx,
            pending: None,
            definitions: Arc::new(Definitions::new()),
        };
        let older_whole = versions[3].to_pb();
        let older_delta = versions[4].delta_pb(&versions[3]);
        for wire in [older_whole, older_delta] {
            assert!(matches!(follower.receive(&wire), Received::Taken));
            assert_eq!(installed.borrow().version(), 5, "nothing older installed");
        }
        let caught_up = versions[6].delta_pb(&versions[5]);
        assert!(matches!(follower.receive(&caught_up), Received::Taken));
        assert_eq!(installed.borrow().version(), 6);
    }
}
