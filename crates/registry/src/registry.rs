//! The `Registry` handle: validates requests, runs every change through the
//! single writer, publishes snapshots, and drives the lease reaper and the
//! health watches.

use crate::config::RegistryConfig;
use crate::durable::DurableFile;
use crate::error::RegistryError;
use crate::gate::{Gate, OpenGate};
use crate::health_watch;
use crate::keys::Slot;
use crate::kv::{Kv, MemoryKv, at_once};
use crate::metrics::Metrics;
use crate::published::Published;
use crate::rollouts::{self, RolloutRequest};
use crate::state::{Executor, Registration, State};
use crate::txn::{Key, key_of, label};
use std::collections::HashSet;
use std::fmt;
use std::future::pending;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use tokio::runtime::Handle;
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use toolmesh::pb::{self, RejectedTool};
use toolmesh::schema::MAX_REGISTRATION_PATTERNS;
use toolmesh::{Rollout, Snapshot, ToolDef};
use tracing::{debug, info, warn};

/// The registry: executors register tools and hold leases; every change
/// publishes a new immutable snapshot. Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    config: RegistryConfig,
    /// Decides who registers as which owner, and who is an admin.
    gate: Arc<dyn Gate>,
    /// The single writer lock; readers never take it.
    state: Mutex<State>,
    store: Arc<Published>,
    metrics: Metrics,
    /// Wakes the reaper when an earlier deadline may exist.
    reaper: Arc<Notify>,
    /// The memory backend: tool owners, switches, rollouts and shared
    /// records (the rest of the state is in `state`).
    kv: Arc<MemoryKv>,
    /// Cancelled when the last handle goes: stops the reaper and every watch.
    shutdown: CancellationToken,
    runtime: Handle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let current = self.current();
        f.debug_struct("Registry")
            .field("epoch", &current.epoch())
            .field("version", &current.version())
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// A registry with a fresh epoch and an empty snapshot (version 0).
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

    /// A registry whose disabled tools and tool owners are loaded from (and
    /// saved to) `config.data_dir`, and whose edge asks `gate` who callers
    /// are. Fails when the state file exists but cannot be used.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime.
    pub fn open(config: RegistryConfig, gate: Arc<dyn Gate>) -> Result<Registry, RegistryError> {
        let kv = Arc::new(MemoryKv::open(
            config.data_dir.as_deref().map(DurableFile::in_dir),
        )?);
        let runtime = Handle::current();
        let epoch = uuid::Uuid::new_v4().to_string();
        let first = first_snapshot(epoch, &*kv)?;
        let store = Arc::new(Published::new(first, config.history));
        let metrics = Metrics::new(&config.metrics, Arc::downgrade(&store) as _);
        let inner = Arc::new(Inner {
            store,
            metrics,
            config,
            gate,
            state: Mutex::new(State::over(kv.clone())),
            reaper: Arc::new(Notify::new()),
            kv,
            shutdown: CancellationToken::new(),
            runtime,
        });
        inner.runtime.spawn(reap(
            Arc::downgrade(&inner),
            inner.reaper.clone(),
            inner.shutdown.clone(),
        ));
        Ok(Registry { inner })
    }

    /// The gate this registry asks at its gRPC edge.
    pub fn gate(&self) -> &dyn Gate {
        &*self.inner.gate
    }

    /// Its key-value backend (shared records).
    pub(crate) fn kv(&self) -> &dyn Kv {
        &*self.inner.kv
    }

    /// The settings this registry runs with.
    pub fn config(&self) -> &RegistryConfig {
        &self.inner.config
    }

    /// The newest snapshot (lock-free).
    pub fn current(&self) -> Arc<Snapshot> {
        self.inner.store.current()
    }

    /// A receiver holding the newest snapshot and notified of each new one.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.inner.store.subscribe()
    }

    /// Snapshot `version` if still held (0 means the newest).
    pub fn snapshot(&self, version: u64) -> Result<Arc<Snapshot>, RegistryError> {
        Ok(self.inner.store.get(version)?)
    }

    /// Registers an executor's tools, or replaces its previous registration.
    ///
    /// Each tool is validated on its own: invalid, duplicated or conflicting
    /// tools come back in `rejected`, the rest are registered. The lease is
    /// granted even when no tool was accepted.
    pub fn register(
        &self,
        req: pb::RegisterRequest,
    ) -> Result<pb::RegisterResponse, RegistryError> {
        self.register_as(req, "")
    }

    /// Registers as `owner`: tool names another owner holds are rejected,
    /// unowned ones are claimed (an empty owner claims nothing).
    pub fn register_as(
        &self,
        req: pb::RegisterRequest,
        owner: &str,
    ) -> Result<pb::RegisterResponse, RegistryError> {
        let Checked {
            executor_id,
            endpoint,
            service,
            ttl,
            execute_token,
        } = check_request(&self.inner.config, &req)?;
        // Schemas compile here, outside the writer lock.
        let (tools, mut rejected) = validate_tools(req.tools);
        let lease_id: Arc<str> = uuid::Uuid::new_v4().to_string().into();
        let watch = self
            .inner
            .config
            .watch_health
            .then(|| self.inner.shutdown.child_token());
        let registration = Registration {
            executor_id: executor_id.clone(),
            service: service.clone(),
            endpoint: endpoint.clone(),
            execute_token: execute_token.clone(),
            ttl,
            tools,
            watch: watch.clone(),
        };
        let (version, registered) = {
            let mut state = self.inner.lock();
            let base = self.current();
            let mut registered = state.register(
                &base,
                registration,
                lease_id.clone(),
                Instant::now(),
                owner,
                self.inner.config.max_executors_per_owner,
            )?;
            let version = self.inner.publish(registered.snapshot.take(), &base);
            self.inner.metrics.registrations.inc();
            (version, registered)
        };
        rejected.extend(registered.rejected);
        let replaced = registered.replaced.is_some();
        if let Some(old) = &registered.replaced {
            old.stop_watch();
        }
        self.inner.reaper.notify_one();
        if let Some(token) = watch {
            self.spawn_health_watch(
                executor_id.clone(),
                lease_id.clone(),
                endpoint.clone(),
                token,
            );
        }
        info!(
            executor_id = &*executor_id,
            service = &*service,
            endpoint = &*endpoint,
            tools = registered.accepted,
            rejected = rejected.len(),
            replaced,
            lease_ttl_ms = ttl.as_millis() as u64,
            version,
            "executor registered"
        );
        for r in &rejected {
            warn!(executor_id = &*executor_id, tool = %r.name, reason = %r.reason, "tool rejected");
        }
        Ok(pb::RegisterResponse {
            lease_id: lease_id.to_string(),
            snapshot_version: version,
            lease_ttl_ms: u32::try_from(ttl.as_millis()).unwrap_or(u32::MAX),
            rejected,
            execute_token_accepted: !execute_token.is_empty(),
        })
    }

    /// Renews a lease of an anonymous registration; returns the newest
    /// snapshot version.
    pub fn heartbeat(&self, lease_id: &str) -> Result<u64, RegistryError> {
        self.heartbeat_as(lease_id, "")
    }

    /// Renews a lease registered by `owner` (only its holder may); returns
    /// the newest snapshot version.
    pub fn heartbeat_as(&self, lease_id: &str, owner: &str) -> Result<u64, RegistryError> {
        if lease_id.is_empty() {
            return Err(RegistryError::EmptyLeaseId);
        }
        let mut state = self.inner.lock();
        let now = Instant::now();
        // A lease past its deadline is gone even if the reaper has not run yet.
        self.inner.expire_due(&mut state, now);
        state.renew(lease_id, owner, now)?;
        debug!(lease_id, "lease renewed");
        Ok(self.current().version())
    }

    /// Removes the anonymous registration holding `lease_id` at once;
    /// returns the snapshot version after the removal.
    pub fn deregister(&self, lease_id: &str) -> Result<u64, RegistryError> {
        self.deregister_as(lease_id, "")
    }

    /// Removes the executor holding `lease_id`, registered by `owner`
    /// (only its holder may), at once; returns the snapshot version after.
    pub fn deregister_as(&self, lease_id: &str, owner: &str) -> Result<u64, RegistryError> {
        if lease_id.is_empty() {
            return Err(RegistryError::EmptyLeaseId);
        }
        let (version, executor) = {
            let mut state = self.inner.lock();
            let base = self.current();
            let (snapshot, executor) = state.deregister(&base, lease_id, owner)?;
            (self.inner.publish(snapshot, &base), executor)
        };
        executor.stop_watch();
        info!(
            executor_id = &*executor.id,
            service = &*executor.service,
            tools = executor.keys.len(),
            version,
            "executor deregistered"
        );
        Ok(version)
    }

    /// Disables every version of `tool` (`Some(reason)`) or enables it
    /// again (`None`); returns the snapshot version after the change.
    pub fn set_disabled(&self, tool: &str, reason: Option<String>) -> Result<u64, RegistryError> {
        let reason: Option<Arc<str>> = reason.map(Into::into);
        let version = {
            let mut state = self.inner.lock();
            let base = self.current();
            let snapshot = state.set_disabled(&base, tool, reason.clone())?;
            self.inner.publish(snapshot, &base)
        };
        match &reason {
            Some(reason) => warn!(tool, reason = &**reason, version, "tool disabled"),
            None => info!(tool, version, "tool enabled"),
        }
        Ok(version)
    }

    /// Applies a rollout request and keeps the result (in the data dir);
    /// the snapshot version that carries it, and it.
    pub fn update_rollout(
        &self,
        request: &RolloutRequest,
    ) -> Result<(u64, Rollout), RegistryError> {
        let mut state = self.inner.lock();
        let base = self.current();
        let (snapshot, rollout) = state.update_rollout(&base, request)?;
        Ok((self.inner.publish(Some(snapshot), &base), rollout))
    }

    fn spawn_health_watch(
        &self,
        executor_id: Arc<str>,
        lease_id: Arc<str>,
        endpoint: Arc<str>,
        token: CancellationToken,
    ) {
        let weak = Arc::downgrade(&self.inner);
        let report: health_watch::Report = Box::new(move |healthy, reason| {
            if let Some(inner) = weak.upgrade() {
                inner.apply_health(&executor_id, &lease_id, healthy, reason);
            }
        });
        self.inner.runtime.spawn(health_watch::watch(
            endpoint,
            self.inner.config.tls.clone(),
            token,
            report,
            self.inner.metrics.flap_holds.clone(),
        ));
    }

    #[cfg(test)]
    pub(crate) fn with_state<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.inner.lock())
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Publishes `snapshot` if there is one; returns the newest version.
    /// Called with the writer lock held.
    fn publish(&self, snapshot: Option<Snapshot>, base: &Snapshot) -> u64 {
        match snapshot {
            Some(snapshot) => self.store.publish(snapshot).version(),
            None => base.version(),
        }
    }

    /// Removes every lease due at `now`; returns the next deadline.
    fn expire_due(&self, state: &mut State, now: Instant) -> Option<Instant> {
        let base = self.store.current();
        let (snapshot, gone) = state.expire(&base, now);
        let version = self.publish(snapshot, &base);
        for executor in &gone {
            self.metrics.lease_expiries.inc();
            executor.stop_watch();
            log_expiry(executor, version);
        }
        state.next_deadline()
    }

    fn apply_health(&self, executor_id: &str, lease_id: &str, healthy: bool, reason: &str) {
        let mut state = self.lock();
        let base = self.store.current();
        if let Some((snapshot, executor)) = state.set_health(&base, executor_id, lease_id, healthy)
        {
            let version = self.store.publish(snapshot).version();
            self.metrics.transition(healthy);
            warn!(
                executor_id,
                service = &*executor.service,
                endpoint = &*executor.endpoint,
                healthy,
                reason,
                version,
                "executor health changed"
            );
        }
    }
}

/// Snapshot 0 of a registry lifetime: no tools yet, the kept rollouts
/// (one this build cannot read is left out, saying so).
fn first_snapshot(epoch: String, kv: &dyn Kv) -> Result<Snapshot, RegistryError> {
    let mut first = Snapshot::empty(epoch).next();
    let (kept, _) = at_once(kv.range(&Slot::Rollout("").key(), false))?;
    for entry in kept {
        match rollouts::decode(&entry.value) {
            Ok(rollout) => {
                first.put_rollout(rollout);
            }
            Err(problem) => tracing::error!(
                key = %String::from_utf8_lossy(&entry.key),
                %problem,
                "stored rollout left out"
            ),
        }
    }
    first.at_version(0);
    Ok(first.finish())
}

fn log_expiry(executor: &Executor, version: u64) {
    info!(
        executor_id = &*executor.id,
        service = &*executor.service,
        tools = executor.keys.len(),
        version,
        "executor lease expired"
    );
}

/// The lease reaper: sleeps until the earliest deadline (or until woken
/// because deadlines changed), then expires what is due.
async fn reap(inner: Weak<Inner>, wake: Arc<Notify>, shutdown: CancellationToken) {
    loop {
        let next = {
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let mut state = inner.lock();
            inner.expire_due(&mut state, Instant::now())
        };
        let sleep = async {
            match next {
                Some(deadline) => sleep_until(deadline).await,
                None => pending().await,
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = wake.notified() => {}
            () = sleep => {}
        }
    }
}

/// The parts of a registration request every store checks the same way.
pub(crate) struct Checked {
    pub(crate) executor_id: Arc<str>,
    pub(crate) endpoint: Arc<str>,
    pub(crate) service: Arc<str>,
    pub(crate) ttl: std::time::Duration,
    /// The token the executor's Execute service accepts ("" for none).
    pub(crate) execute_token: Arc<str>,
}

/// Checks the tool count, executor id, endpoint and execute token, and
/// grants the lease TTL.
pub(crate) fn check_request(
    config: &RegistryConfig,
    req: &pb::RegisterRequest,
) -> Result<Checked, RegistryError> {
    let limit = config.max_tools_per_executor;
    if req.tools.len() > limit {
        return Err(RegistryError::TooManyTools {
            count: req.tools.len(),
            limit,
        });
    }
    let executor_id = req.executor_id.trim();
    if executor_id.is_empty() {
        return Err(RegistryError::EmptyExecutorId);
    }
    let endpoint = req.endpoint.trim();
    check_endpoint(endpoint)?;
    let execute_token = check_execute_token(&req.execute_token)?;
    Ok(Checked {
        executor_id: executor_id.into(),
        endpoint: endpoint.into(),
        service: req.service.trim().into(),
        ttl: config.grant_ttl(req.lease_ttl_ms),
        execute_token,
    })
}

/// Validates each spec on its own; the second of a duplicated name@version
/// is rejected.
pub(crate) fn validate_tools(specs: Vec<pb::ToolSpec>) -> (Vec<ToolDef>, Vec<RejectedTool>) {
    let mut seen: HashSet<Key> = HashSet::with_capacity(specs.len());
    let mut accepted = Vec::with_capacity(specs.len());
    let mut rejected = Vec::new();
    let mut patterns = 0;
    for spec in specs {
        let name = spec.name.clone();
        match ToolDef::new(spec) {
            Err(error) => rejected.push(RejectedTool {
                name,
                reason: error.to_string(),
            }),
            Ok(def) if patterns + def.pattern_count() > MAX_REGISTRATION_PATTERNS => {
                rejected.push(RejectedTool {
                    name,
                    reason: format!(
                        "its {} regular expressions would bring this registration past {MAX_REGISTRATION_PATTERNS} (the limit across all its tools); use fewer patterns (`enum`, `format`, `maxLength`) or register some tools from another executor",
                        def.pattern_count()
                    ),
                });
            }
            Ok(def) => {
                let key = key_of(&def);
                if seen.insert(key.clone()) {
                    patterns += def.pattern_count();
                    accepted.push(def);
                } else {
                    rejected.push(RejectedTool {
                        name,
                        reason: format!(
                            "{} is listed more than once in this registration; the first was kept",
                            label(&key)
                        ),
                    });
                }
            }
        }
    }
    (accepted, rejected)
}

/// Longest execute token accepted.
const MAX_EXECUTE_TOKEN_BYTES: usize = 256;

/// An executor's execute token: empty (none), or printable ASCII that fits
/// an `authorization` header.
fn check_execute_token(token: &str) -> Result<Arc<str>, RegistryError> {
    if token.len() > MAX_EXECUTE_TOKEN_BYTES || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(RegistryError::InvalidExecuteToken {
            limit: MAX_EXECUTE_TOKEN_BYTES,
        });
    }
    Ok(token.into())
}

/// Checks that `endpoint` is `host:port` that a dispatcher can dial: not a
/// wildcard address, not port 0.
fn check_endpoint(endpoint: &str) -> Result<(), RegistryError> {
    toolmesh_transport::check_advertised(endpoint).map_err(|reason| {
        RegistryError::UnroutableEndpoint {
            endpoint: endpoint.to_owned(),
            reason,
        }
    })?;
    let bad = || RegistryError::InvalidEndpoint(endpoint.to_owned());
    let (host, port) = endpoint.rsplit_once(':').ok_or_else(bad)?;
    let port_ok = !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p != 0);
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host.len() <= 253
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        }
    };
    if port_ok && host_ok {
        Ok(())
    } else {
        Err(bad())
    }
}

#[cfg(test)]
pub(crate) mod tests;
