//! The registry: its rules run over the key-value seam ([`Kv`]), either the
//! memory backend in this process (the default, with `--data-dir`
//! durability) or etcd, where several replicas serve one mesh.
//! Registrations are leases, snapshots are numbered by the store's revision
//! and made from a watch of its prefix, and each executor's health is
//! watched by one replica at a time (claimed under that replica's session
//! lease). Replicas over one etcd publish the same (epoch, version) for the
//! same state.

mod access;
mod claims;
mod model;
mod revision;
mod sync;

use crate::codec;
use crate::config::RegistryConfig;
use crate::durable::DurableFile;
use crate::error::RegistryError;
use crate::gate::{Gate, OpenGate};
use crate::keys::{self, key_of};
use crate::keys::{ExecRecord, PREFIX, Slot, content_hash, lease_label, parse_lease};
use crate::kv::{Compare, EtcdKv, Kv, KvError, MemoryKv, Op, Txn, at_once};
use crate::metrics::Metrics;
use crate::owners::{self, MAX_TXN_OPS};
use crate::published::Published;
use crate::request::{Checked, check_request, validate_tools};
use crate::rollouts::{self, RolloutRequest};
use crate::rules::{check_conflict, check_executor_slot, check_lease_holder, owned_elsewhere};
use crate::shared_records::{SharedRecord, store as shared_store};
use crate::switches;
use model::Model;
use prost::Message;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};
use toolmesh::pb::{self, RejectedTool};
use toolmesh::{Rollout, Snapshot, ToolDef};
use toolmesh_etcd::Client;
use tracing::info;

pub use access::{EtcdAccess, EtcdAccessError};

#[cfg(test)]
mod both_backends;
#[cfg(test)]
pub(crate) mod tests;

/// Most bytes of definitions in one etcd transaction (etcd's default limit
/// is 1.5 MiB for a whole request; the rest is room for the registration's
/// record).
const MAX_DEFS_BYTES: usize = 1024 * 1024;
/// The origin of the memory backend, for messages.
const IN_PROCESS: &str = "this process";
/// How long a write waits for this replica's snapshot to include it.
const READ_YOUR_WRITE: Duration = Duration::from_secs(5);
/// How long `connect` waits for the first full read of the store.
const FIRST_LOAD: Duration = Duration::from_secs(10);
/// The pause between two startup checks of an etcd not reached yet.
const CHECK_AGAIN: Duration = Duration::from_millis(250);

/// The registry: executors register tools and hold leases; every change
/// publishes a new immutable snapshot. In this process ([`Registry::open`])
/// or as one replica of a registry in etcd ([`Registry::connect`]). Cheap
/// to clone; the last clone dropped stops its tasks.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
    _stop: Arc<DropGuard>,
}

pub(crate) struct Inner {
    /// The store, behind the key-value seam (etcd, or memory in tests).
    kv: Arc<dyn Kv>,
    /// Where it is, for messages (etcd's endpoints).
    origin: String,
    /// Whether the store is the memory backend in this process.
    in_process: bool,
    /// Leases this replica is revoking on a Deregister: their executors'
    /// going is no expiry.
    deregistering: Mutex<std::collections::HashSet<i64>>,
    config: RegistryConfig,
    gate: Arc<dyn Gate>,
    /// This replica's id (the value of the health claims it holds).
    replica: String,
    /// Turns at compiling a registration's schemas: one per core.
    compiling: Arc<tokio::sync::Semaphore>,
    /// Turns at opening a health watch ([`claims::OPENING_WATCHES`]).
    opening_watches: Arc<tokio::sync::Semaphore>,
    model: Mutex<Model>,
    published: Published,
    /// The etcd revision the model (and snapshot) reflects.
    applied: watch::Sender<i64>,
    /// The etcd revision the watch has reported progress to: `applied`, or
    /// later when only keys outside the prefix changed since (what
    /// `catch_up` waits for in an etcd shared with other keys).
    progressed: watch::Sender<i64>,
    /// The store's revision, read once for every caller catching up at
    /// the same time (a fleet re-registering after an outage would
    /// otherwise send etcd a linearizable read each).
    revisions: revision::SharedReads,
    /// Asks the watch for a progress notification (a write is waiting for
    /// a revision no change under the prefix may reach).
    progress: tokio::sync::Notify,
    /// Whether etcd answers with a leader.
    writable: watch::Sender<bool>,
    /// This replica's session lease (0 while it has none).
    session: watch::Sender<i64>,
    /// Since when etcd has been failing.
    outage: sync::Outage,
    /// Events this replica saw happen: the registrations it wrote, the
    /// health changes and flap holds of the executors it watches. Lease
    /// expiries are etcd's own and are not counted here.
    metrics: Metrics,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let current = self.current();
        f.debug_struct("Registry")
            .field("store", &self.inner.origin)
            .field("epoch", &current.epoch())
            .field("version", &current.version())
            .field("replica", &self.inner.replica)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// Counts a snapshot watch opened, continuing from a held snapshot
    /// (`delta`) or not, in the registry's metrics.
    pub(crate) fn watch_opened(&self, delta: bool) {
        self.inner.metrics.watch_opened(delta);
    }

    /// A registry in this process with a fresh epoch and no tools.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime: the lease reaper and the health
    /// watches run as tasks on the current runtime.
    pub fn new(config: RegistryConfig) -> Registry {
        // Every setting the caller passed is kept; only the unusable state
        // file is left aside.
        let in_memory = RegistryConfig {
            data_dir: None,
            ..config.clone()
        };
        Registry::open(config, Arc::new(OpenGate)).unwrap_or_else(|error| {
            tracing::error!(%error, "registry state not loaded; keeping it in memory only");
            Registry::open(in_memory, Arc::new(OpenGate)).expect("in-memory state always opens")
        })
    }

    /// A registry in this process (the memory backend) whose disabled
    /// tools, tool owners and rollouts are loaded from (and saved to)
    /// `config.data_dir`, and whose edge asks `gate` who callers are.
    /// Fails when the state file exists but cannot be used.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime.
    pub fn open(config: RegistryConfig, gate: Arc<dyn Gate>) -> Result<Registry, RegistryError> {
        let file =
            (config.data_dir.as_deref()).map(|dir| DurableFile::in_dir(dir, &keys::durable()));
        let kv = MemoryKv::open(file)?;
        let reaper = kv.expire_on_time();
        let registry = Registry::start(Arc::new(kv), IN_PROCESS.to_owned(), config, gate);
        tokio::spawn(
            registry
                .inner
                .shutdown
                .clone()
                .run_until_cancelled_owned(reaper),
        );
        // The memory backend answers at once: the first snapshot is there
        // before this returns, and the store is writable.
        at_once(sync::load(&registry.inner))?;
        registry.inner.writable.send_replace(true);
        info!("registry store: in this process");
        Ok(registry)
    }

    /// A replica over the etcd cluster at `url` (`etcd://host:port[,…]`),
    /// reached as `access` says (TLS, credentials). Waits a few seconds for
    /// the first full read; when etcd is away it starts anyway (empty, not
    /// writable) and catches up once etcd is back. Settings etcd refuses (a
    /// wrong password, a missing client certificate, an untrusted server
    /// certificate, a user without access to the prefix) fail it.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime.
    pub async fn connect(
        url: &str,
        access: &EtcdAccess,
        config: RegistryConfig,
        gate: Arc<dyn Gate>,
    ) -> Result<Registry, RegistryError> {
        let bad = |e: &dyn std::fmt::Display| RegistryError::BadStore(e.to_string());
        let options = access.client_options().map_err(|e| bad(&e))?;
        let client = Client::connect(url, options).map_err(|e| bad(&e))?;
        let kv = Arc::new(EtcdKv::new(client.clone(), Slot::Epoch.key()));
        let store = Registry::start(kv, client.endpoints(), config, gate);
        let inner = &store.inner;
        let mut applied = inner.applied.subscribe();
        let deadline = tokio::time::Instant::now() + FIRST_LOAD;
        // Asked again while etcd is merely not reached (on a loaded machine
        // a handshake can miss its timeout), so that settings etcd refuses
        // stop the registry rather than pass for an outage.
        loop {
            let check = client.check(PREFIX.as_bytes());
            match tokio::time::timeout_at(deadline, check).await {
                Ok(Err(error)) if error.is_misconfigured() => {
                    inner.shutdown.cancel();
                    return Err(bad(&error));
                }
                Ok(Err(error)) if tokio::time::Instant::now() < deadline => {
                    tracing::debug!(%error, "etcd not reached yet; asking again");
                    tokio::time::sleep(CHECK_AGAIN).await;
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, "etcd not reached yet");
                    break;
                }
                Ok(Ok(())) | Err(_) => break,
            }
        }
        let loaded = tokio::time::timeout_at(deadline, applied.wait_for(|r| *r > 0)).await;
        if !matches!(loaded, Ok(Ok(_))) {
            tracing::warn!(etcd = %inner.origin, "etcd not reached yet; serving an empty snapshot until it is");
        }
        info!(etcd = %inner.origin, replica = %inner.replica, "registry store: etcd");
        Ok(store)
    }

    /// A replica over `kv` (found at `origin`), its tasks started.
    fn start(
        kv: Arc<dyn Kv>,
        origin: String,
        config: RegistryConfig,
        gate: Arc<dyn Gate>,
    ) -> Registry {
        let shutdown = CancellationToken::new();
        let inner = Arc::new(Inner {
            kv,
            in_process: origin == IN_PROCESS,
            deregistering: Mutex::default(),
            origin,
            published: Published::new(Snapshot::empty(""), config.history),
            metrics: Metrics::events(&config.metrics),
            config,
            gate,
            replica: uuid::Uuid::new_v4().to_string(),
            compiling: Arc::new(tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(2, usize::from),
            )),
            opening_watches: Arc::new(tokio::sync::Semaphore::new(claims::OPENING_WATCHES)),
            model: Mutex::new(Model::default()),
            applied: watch::Sender::new(0),
            progressed: watch::Sender::new(0),
            progress: tokio::sync::Notify::new(),
            revisions: revision::SharedReads::default(),
            writable: watch::Sender::new(false),
            session: watch::Sender::new(0),
            outage: sync::Outage::default(),
            shutdown: shutdown.clone(),
        });
        crate::metrics::observe(&inner.config.metrics, Arc::downgrade(&inner) as _);
        tokio::spawn(sync::follow(inner.clone()));
        tokio::spawn(sync::watchdog(inner.clone()));
        tokio::spawn(claims::keep_session(inner.clone()));
        if inner.config.watch_health {
            tokio::spawn(claims::watch_claimed(inner.clone()));
        }
        Registry {
            inner,
            _stop: Arc::new(shutdown.drop_guard()),
        }
    }

    /// The store revision this replica's snapshot reflects.
    pub fn applied_revision(&self) -> i64 {
        *self.inner.applied.borrow()
    }

    /// The gate this registry asks at its gRPC edge.
    pub fn gate(&self) -> &dyn Gate {
        &*self.inner.gate
    }

    /// The settings this registry runs with.
    pub fn config(&self) -> &RegistryConfig {
        &self.inner.config
    }

    /// The newest snapshot (lock-free).
    pub fn current(&self) -> Arc<Snapshot> {
        self.inner.published.current()
    }

    /// A receiver holding the newest snapshot and notified of each new one.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.inner.published.subscribe()
    }

    /// Snapshot `version` if still held (0 means the newest).
    pub fn snapshot(&self, version: u64) -> Result<Arc<Snapshot>, RegistryError> {
        Ok(self.inner.published.get(version)?)
    }

    /// Snapshot subscribers now (WatchSnapshots streams, in-process
    /// dispatchers, watches waiting for a version).
    pub fn watchers(&self) -> usize {
        self.inner.published.watchers()
    }

    /// Snapshot `version` if held, waiting up to `within` for this replica
    /// to publish it when it is newer than the newest here: a dispatcher
    /// that moves from a replica ahead of this one holds a version this one
    /// has yet to reach (every replica publishes each revision on etcd).
    pub async fn snapshot_once_reached(
        &self,
        version: u64,
        within: std::time::Duration,
    ) -> Option<Arc<Snapshot>> {
        let mut receiver = self.subscribe();
        let reached = receiver.wait_for(|newest| newest.version() >= version);
        let _ = tokio::time::timeout(within, reached).await;
        self.snapshot(version).ok()
    }

    /// Whether the store can take writes (false while etcd has no quorum).
    pub fn writable(&self) -> watch::Receiver<bool> {
        self.inner.writable.subscribe()
    }
}

impl Inner {
    /// The version of the next snapshot, made at the store's `revision`.
    /// On etcd, the revision itself: every replica publishes the same
    /// (epoch, version) for the same state. In this process, one more than
    /// the last, from 0 at each start (a new epoch): keys no snapshot shows
    /// (health claims) spend no version.
    fn next_version(&self, revision: i64) -> u64 {
        if self.in_process {
            let current = self.published.current();
            if current.epoch().is_empty() {
                0
            } else {
                current.version() + 1
            }
        } else {
            u64::try_from(revision).unwrap_or(0)
        }
    }

    /// Counts and logs the executors of `gone` whose lease expired. Only
    /// in this process is that known: etcd does not say why a key went, and
    /// another replica may have revoked it.
    fn count_expiries(&self, gone: Vec<(Arc<str>, i64, usize)>) {
        if !self.in_process || gone.is_empty() {
            return;
        }
        let version = self.published.current().version();
        let mut deregistering = self
            .deregistering
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (id, lease, tools) in gone {
            if !deregistering.remove(&lease) {
                self.metrics.lease_expiries.inc();
                info!(executor_id = &*id, tools, version, "executor lease expired");
            }
        }
    }

    fn model(&self) -> MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses a change at once while etcd has no leader (it would only
    /// time out).
    fn check_writable(&self) -> Result<(), RegistryError> {
        if *self.writable.borrow() {
            Ok(())
        } else {
            Err(RegistryError::StoreUnavailable(format!(
                "etcd at {} has had no leader for a while",
                self.origin
            )))
        }
    }

    /// Waits until the snapshot reflects `revision`, which a change under
    /// the prefix made.
    async fn reflect(&self, revision: i64) -> Result<(), RegistryError> {
        wait_for(&self.applied, revision).await
    }

    /// Waits until the watch has come to `revision`, which may be a change
    /// outside the prefix (or no change at all).
    async fn settle(&self, revision: i64) -> Result<(), RegistryError> {
        if revision > *self.progressed.borrow() {
            self.progress.notify_one();
        }
        wait_for(&self.progressed, revision).await
    }

    /// Waits until the snapshot reflects everything etcd holds now.
    async fn catch_up(&self) -> Result<(), RegistryError> {
        let revision = self
            .revisions
            .read(|| async { Ok(self.kv.revision().await?) })
            .await?;
        self.settle(revision).await
    }

    /// The owner of the registration holding `lease`, catching up with etcd
    /// once when this replica does not know it yet.
    async fn lease_owner(&self, lease: i64) -> Result<Option<String>, RegistryError> {
        let known = |inner: &Inner| {
            inner
                .model()
                .exec_by_lease(lease)
                .map(|e| e.record.owner.clone())
        };
        if let Some(owner) = known(self) {
            return Ok(Some(owner));
        }
        self.catch_up().await?;
        Ok(known(self))
    }

    /// The lease `lease_id` names, when `owner` holds it.
    async fn held_lease(&self, lease_id: &str, owner: &str) -> Result<i64, RegistryError> {
        if lease_id.is_empty() {
            return Err(RegistryError::EmptyLeaseId);
        }
        let lease = parse_lease(lease_id);
        let holder = match lease {
            Some(lease) => self.lease_owner(lease).await?,
            None => None,
        };
        check_lease_holder(lease_id, holder.as_deref(), owner)?;
        lease.ok_or_else(|| RegistryError::UnknownLease(lease_id.to_owned()))
    }

    /// Stores the definitions etcd does not hold yet, in transactions that
    /// stay under etcd's operation and size limits, all but the last batch;
    /// that one (with room left for the registration's own record) is
    /// returned, to be written with the registration in one revision.
    async fn put_defs(&self, defs: Vec<(String, Vec<u8>)>) -> Result<Vec<Op>, RegistryError> {
        let mut batch = Vec::new();
        let mut bytes = 0;
        for (hash, encoded) in defs {
            // Room is kept for the registration's record and health delete.
            if !batch.is_empty()
                && (batch.len() + 2 >= MAX_TXN_OPS || bytes + encoded.len() > MAX_DEFS_BYTES)
            {
                self.kv
                    .txn(Txn {
                        compare: Vec::new(),
                        success: std::mem::take(&mut batch),
                    })
                    .await?;
                bytes = 0;
            }
            bytes += encoded.len() + hash.len() + PREFIX.len() + 8;
            batch.push(Op::Put {
                key: Slot::Def(&hash).key(),
                value: encoded,
                lease: 0,
            });
        }
        Ok(batch)
    }
}

/// Waits until `counter` reaches `revision`.
async fn wait_for(counter: &watch::Sender<i64>, revision: i64) -> Result<(), RegistryError> {
    let mut seen = counter.subscribe();
    match tokio::time::timeout(READ_YOUR_WRITE, seen.wait_for(|r| *r >= revision)).await {
        Ok(Ok(_)) => Ok(()),
        _ => Err(RegistryError::StoreUnavailable(format!(
            "this replica has not seen etcd revision {revision} within {READ_YOUR_WRITE:?} (its watch of etcd is behind)"
        ))),
    }
}

/// What a registration will write, decided against this replica's view.
struct Plan {
    /// Hashes of the definitions the executor serves.
    hashes: Vec<String>,
    /// Definitions etcd does not hold yet.
    new_defs: Vec<(String, Vec<u8>)>,
    /// Names to claim for the owner.
    unowned: Vec<String>,
    /// The names of the kept tools, in the order of `hashes`.
    names: Vec<String>,
    /// Tools refused against this view.
    rejected: Vec<RejectedTool>,
    /// The lease of the registration this one replaces.
    replaced: Option<i64>,
    /// The revision of the executor's key in this view (0: absent): the
    /// registration is written only if it is still so.
    exec_revision: i64,
}

/// A registration as written.
struct Written {
    record: ExecRecord,
    lease: i64,
    revision: i64,
    replaced: Option<i64>,
    rejected: Vec<RejectedTool>,
}

impl Inner {
    /// Decides, against the model and the newest snapshot, which tools the
    /// registration keeps and what must be written.
    fn plan(
        &self,
        executor_id: &str,
        owner: &str,
        tools: &[ToolDef],
    ) -> Result<Plan, RegistryError> {
        let model = self.model();
        let held = model.execs.get(executor_id);
        let live = model
            .execs
            .values()
            .filter(|e| e.record.owner == owner)
            .count();
        check_executor_slot(
            executor_id,
            held.map(|e| e.record.owner.as_str()),
            live,
            owner,
            self.config.max_executors_per_owner,
        )?;
        let base = self.published.current();
        let mut plan = Plan {
            hashes: Vec::with_capacity(tools.len()),
            new_defs: Vec::new(),
            unowned: Vec::new(),
            names: Vec::with_capacity(tools.len()),
            rejected: Vec::new(),
            replaced: held.map(|e| e.lease),
            exec_revision: held.map_or(0, |e| e.mod_revision),
        };
        for def in tools {
            if let Some(holder) = model.owners.get(def.name()).filter(|h| *h != owner) {
                plan.rejected
                    .push(owned_elsewhere(def.name(), holder, owner));
                continue;
            }
            let key = key_of(def);
            if let Some(entry) = base.get(&key.0, &key.1)
                && let Err(reject) =
                    check_conflict(&key, &entry.def, &entry.instances, executor_id, def)
            {
                plan.rejected.push(reject);
                continue;
            }
            let encoded = def.spec().encode_to_vec();
            let hash = content_hash(&encoded);
            if !model.has_def(&hash) {
                plan.new_defs.push((hash.clone(), encoded));
            }
            if !owner.is_empty() && !model.owners.contains_key(def.name()) {
                plan.unowned.push(def.name().to_owned());
            }
            plan.hashes.push(hash);
            plan.names.push(def.name().to_owned());
        }
        plan.unowned.sort();
        plan.unowned.dedup();
        Ok(plan)
    }

    /// Writes the registration `template` (with the kept tools) on a new
    /// lease of `ttl`, planning again once when another write to the
    /// executor's key came between this replica's view and its transaction.
    async fn write_registration(
        &self,
        executor_id: &str,
        template: &ExecRecord,
        tools: &[ToolDef],
        ttl: Duration,
    ) -> Result<Written, RegistryError> {
        for _ in 0..2 {
            if let Some(written) = self.try_register(executor_id, template, tools, ttl).await? {
                return Ok(written);
            }
        }
        Err(RegistryError::StoreUnavailable(format!(
            "executor {executor_id} could not be written twice in a row (registered again through another replica meanwhile, or its lease ran out before the store took the write)"
        )))
    }

    /// One try: catch up, plan, claim names, store definitions, then grant
    /// the lease (last, so a short one is not spent on large writes) and
    /// put the record unless the executor's key changed since the plan or
    /// the lease ran out before the write (`None`: plan again).
    async fn try_register(
        &self,
        executor_id: &str,
        template: &ExecRecord,
        tools: &[ToolDef],
        ttl: Duration,
    ) -> Result<Option<Written>, RegistryError> {
        self.catch_up().await?;
        let mut plan = self.plan(executor_id, &template.owner, tools)?;
        let lost = owners::claim(&*self.kv, &template.owner, &plan.unowned).await?;
        let mut hashes = Vec::with_capacity(plan.hashes.len());
        for (name, hash) in plan.names.iter().zip(plan.hashes) {
            if lost.contains(name) {
                // Another owner claimed it between our read and our claim.
                plan.rejected.push(RejectedTool {
                    name: name.clone(),
                    reason: format!(
                        "tool {name} was just claimed by another owner: choose a name in your own namespace"
                    ),
                });
            } else {
                hashes.push(hash);
            }
        }
        let defs = self.put_defs(plan.new_defs).await?;
        // etcd counts whole seconds and may raise a short lease to its minimum.
        let (lease, granted) = self.kv.grant(ttl).await?;
        let record = ExecRecord {
            tools: hashes,
            ttl_ms: u64::try_from(granted.as_millis()).unwrap_or(u64::MAX),
            ..template.clone()
        };
        let key = Slot::Exec(executor_id).key();
        let put = Op::Put {
            key: key.clone(),
            value: codec::encode(&record),
            lease,
        };
        // Usually one revision for the whole registration: the last batch
        // of definitions, the record and the end of any old health verdict.
        // Definitions first: the record names them (a watch applies the
        // events of one revision in order).
        let mut success = defs;
        success.push(put);
        success.push(Op::Delete {
            key: Slot::Health(executor_id).key(),
        });
        let txn = Txn {
            compare: vec![Compare::Revision(key.clone(), plan.exec_revision)],
            success,
        };
        let outcome = match self.kv.txn(txn).await {
            // The lease ran out before the write reached the store (a
            // replica or an etcd too loaded to write within the lease):
            // nothing was written; plan again with a new one.
            Err(KvError::LeaseGone(gone)) if gone == lease => {
                tracing::warn!(
                    executor_id,
                    "registration's lease expired before its write; writing again"
                );
                return Ok(None);
            }
            other => other?,
        };
        if !outcome.succeeded {
            // Nothing was written on it.
            let _ = self.kv.revoke(lease).await;
            return Ok(None);
        }
        Ok(Some(Written {
            record,
            lease,
            revision: outcome.revision,
            replaced: plan.replaced,
            rejected: plan.rejected,
        }))
    }
}

/// Renews `lease` every third of its `ttl_ms` until the guard is dropped.
fn renew_until_dropped(kv: Arc<dyn Kv>, lease: i64, ttl_ms: u64) -> DropGuard {
    let period = Duration::from_millis((ttl_ms / 3).max(100));
    let stop = CancellationToken::new();
    let renew = async move {
        loop {
            tokio::time::sleep(period).await;
            if let Err(error) = kv.keep_alive(lease).await {
                tracing::debug!(%error, "registration lease not renewed while answering");
            }
        }
    };
    tokio::spawn(stop.clone().run_until_cancelled_owned(renew));
    stop.drop_guard()
}

/// Scraped: the replica's snapshot, and whether etcd has a leader.
impl crate::metrics::Observed for Inner {
    fn published(&self) -> &Published {
        &self.published
    }

    fn etcd_leader(&self) -> Option<bool> {
        (!self.in_process).then(|| *self.writable.borrow())
    }
}

impl Registry {
    /// Registers an executor's tools as `owner`, or replaces its previous
    /// registration: each tool is validated on its own, invalid,
    /// duplicated or conflicting ones come back in `rejected`, and tool
    /// names another owner holds are refused (an empty owner claims none).
    /// The lease is granted even when no tool was accepted. Anonymous
    /// registrations (no identity at the edge) pass an empty owner.
    pub async fn register(
        &self,
        request: pb::RegisterRequest,
        owner: &str,
    ) -> Result<pb::RegisterResponse, RegistryError> {
        let inner = &self.inner;
        let Checked {
            executor_id,
            endpoint,
            service,
            ttl,
            execute_token,
        } = check_request(&inner.config, &request)?;
        inner.check_writable()?;
        // Schemas compile on the blocking pool, a few registrations at a
        // time: a burst of them (a fleet starting, callers retrying) waits
        // its turn instead of taking a thread each, and one whose caller
        // gave up while it waited is never compiled.
        let turn = Arc::clone(&inner.compiling)
            .acquire_owned()
            .await
            .map_err(|e| RegistryError::Internal(format!("registration not admitted ({e})")))?;
        let (tools, mut rejected) = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            validate_tools(request.tools)
        })
        .await
        .map_err(|e| RegistryError::Internal(format!("registration task failed ({e})")))?;
        let template = ExecRecord {
            owner: owner.to_owned(),
            service: service.to_string(),
            endpoint: endpoint.to_string(),
            execute_token: execute_token.to_string(),
            ttl_ms: 0,
            tools: Vec::new(),
        };
        let written = inner
            .write_registration(&executor_id, &template, &tools, ttl)
            .await?;
        rejected.extend(written.rejected);
        let (record, revision, lease) = (written.record, written.revision, written.lease);
        // Until the answer, the registry keeps the lease alive: catching up
        // on a large registration can outlast a short lease.
        let _renewing = renew_until_dropped(inner.kv.clone(), lease, record.ttl_ms);
        if let Some(old) = written.replaced.filter(|old| *old != lease) {
            // Its keys moved to the new lease; what is left goes with it.
            if let Err(error) = inner.kv.revoke(old).await {
                tracing::warn!(%error, "replaced lease not revoked; it expires by itself");
            }
        }
        inner.reflect(revision).await?;
        // Renewed once more as it is answered, so the executor has a whole
        // lease before its first heartbeat (or hears at once that it must
        // ask for a longer one).
        if inner.kv.keep_alive(lease).await?.is_none() {
            return Err(RegistryError::LeaseOutlived {
                ttl_ms: record.ttl_ms,
            });
        }
        let accepted = record.tools.len();
        inner.metrics.registrations.inc();
        info!(
            executor_id = &*executor_id,
            service = &*service,
            endpoint = &*endpoint,
            tools = accepted,
            rejected = rejected.len(),
            lease = %lease_label(lease),
            version = revision,
            "executor registered"
        );
        for r in &rejected {
            tracing::warn!(executor_id = &*executor_id, tool = %r.name, reason = %r.reason, "tool rejected");
        }
        Ok(pb::RegisterResponse {
            lease_id: lease_label(lease),
            // Where nothing a snapshot shows changed, none was published.
            snapshot_version: self.current().version(),
            lease_ttl_ms: u32::try_from(record.ttl_ms).unwrap_or(u32::MAX),
            rejected,
            execute_token_accepted: !execute_token.is_empty(),
        })
    }

    /// Renews a lease registered by `owner` (only its holder may); the
    /// newest snapshot version.
    pub async fn heartbeat(&self, lease_id: &str, owner: &str) -> Result<u64, RegistryError> {
        // While etcd has no leader a keep-alive cannot renew anything (the
        // next leader renews every lease when it is elected), and 10,000
        // executors' keep-alives, each tried on every member, starved a
        // two-member etcd on a loaded machine until it could not elect one.
        self.inner.check_writable()?;
        let lease = self.inner.held_lease(lease_id, owner).await?;
        if self.inner.kv.keep_alive(lease).await?.is_none() {
            return Err(RegistryError::UnknownLease(lease_id.to_owned()));
        }
        Ok(self.current().version())
    }

    /// Removes the executor holding `lease_id`, registered by `owner`
    /// (only its holder may), at once; the snapshot version after.
    pub async fn deregister(&self, lease_id: &str, owner: &str) -> Result<u64, RegistryError> {
        let lease = self.inner.held_lease(lease_id, owner).await?;
        if self.inner.in_process {
            self.inner
                .deregistering
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(lease);
        }
        self.inner.kv.revoke(lease).await?;
        self.inner.catch_up().await?;
        info!(lease = lease_id, "executor deregistered");
        Ok(self.current().version())
    }

    /// Disables every version of `tool` (`Some(reason)`) or enables it
    /// again (`None`); the snapshot version after the change.
    pub async fn set_disabled(
        &self,
        tool: &str,
        reason: Option<String>,
    ) -> Result<u64, RegistryError> {
        let inner = &self.inner;
        inner.check_writable()?;
        inner.catch_up().await?;
        let snapshot = inner.published.current();
        let switched = switches::write(&*inner.kv, &snapshot, tool, reason.as_deref()).await?;
        let revision = switched.revision;
        if switched.changed {
            inner.reflect(revision).await?;
        } else {
            // Enabling an enabled tool deletes nothing: no event comes.
            inner.settle(revision).await?;
        }
        match &reason {
            Some(reason) => tracing::warn!(
                tool,
                reason = &**reason,
                version = revision,
                "tool disabled"
            ),
            None => info!(tool, version = revision, "tool enabled"),
        }
        Ok(self.current().version())
    }

    /// Applies a rollout request (the rules of [`crate::rollouts`]) and
    /// keeps the result; the snapshot version that holds it, and it.
    pub async fn update_rollout(
        &self,
        request: &RolloutRequest,
    ) -> Result<(u64, Rollout), RegistryError> {
        let inner = &self.inner;
        inner.check_writable()?;
        // Another replica (or a dispatcher's abort) may write the same
        // rollout: it is written only over the version decided on.
        inner.catch_up().await?;
        let snapshot = inner.published.current();
        let (written, rollout) = rollouts::write(&*inner.kv, &snapshot, request).await?;
        inner.reflect(written).await?;
        Ok((self.current().version(), rollout))
    }
}

impl Registry {
    /// Every live shared record under `prefix` (shared approval tickets).
    pub async fn shared_records(&self, prefix: &str) -> Result<Vec<SharedRecord>, RegistryError> {
        shared_store::list(&*self.inner.kv, prefix, false).await
    }

    /// The keys and revisions of every live shared record under `prefix`
    /// (their values left empty): cheaper when only counting or ordering.
    pub async fn shared_keys(&self, prefix: &str) -> Result<Vec<SharedRecord>, RegistryError> {
        shared_store::list(&*self.inner.kv, prefix, true).await
    }

    /// Writes a shared record if its revision is still `revision` (0: it
    /// must not exist), expiring after `ttl`; false when another writer
    /// changed it first.
    pub async fn put_shared(
        &self,
        key: &str,
        value: Vec<u8>,
        revision: i64,
        ttl: Duration,
    ) -> Result<bool, RegistryError> {
        shared_store::put(&*self.inner.kv, key, value, revision, ttl).await
    }

    /// Removes a shared record.
    pub async fn delete_shared(&self, key: &str) -> Result<(), RegistryError> {
        shared_store::delete(&*self.inner.kv, key).await
    }
}
