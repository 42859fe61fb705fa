//! The registry's mutable state behind its single writer lock: executors,
//! their leases and the tool keys each serves, and how each change turns into
//! the next snapshot.

use crate::error::RegistryError;
use crate::kv::{MemoryKv, at_once};
use crate::leases::LeaseTable;
use crate::rollouts::RolloutRequest;
use crate::txn::{Key, Staged, Txn, key_of, label};
use crate::{owners, rollouts, switches};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolmesh::pb::RejectedTool;
use toolmesh::{Instance, Rollout, Snapshot, ToolDef};

/// How many executors a conflict message names before "and N more".
const NAMED_EXECUTORS: usize = 5;

/// A registration whose tools were validated before taking the lock.
pub(crate) struct Registration {
    pub(crate) executor_id: Arc<str>,
    pub(crate) service: Arc<str>,
    pub(crate) endpoint: Arc<str>,
    /// The token its Execute service accepts ("" when it asked for none).
    pub(crate) execute_token: Arc<str>,
    pub(crate) ttl: Duration,
    /// Valid definitions, no name@version twice.
    pub(crate) tools: Vec<ToolDef>,
    /// The task token of the health watch for this registration, if any.
    pub(crate) watch: Option<CancellationToken>,
}

/// One registered executor process.
#[derive(Debug)]
pub(crate) struct Executor {
    pub(crate) id: Arc<str>,
    /// The identity that registered it ("" for anonymous registrations):
    /// only it may replace, renew or deregister this registration.
    pub(crate) owner: Arc<str>,
    /// The token its Execute service accepts.
    pub(crate) execute_token: Arc<str>,
    pub(crate) service: Arc<str>,
    pub(crate) endpoint: Arc<str>,
    pub(crate) lease_id: Arc<str>,
    /// The entries this executor has an instance in (the per-executor index).
    pub(crate) keys: Vec<Key>,
    /// Its health as last applied to its instances.
    pub(crate) healthy: bool,
    /// Cancels its health watch.
    pub(crate) watch: Option<CancellationToken>,
}

impl Executor {
    /// Stops its health watch.
    pub(crate) fn stop_watch(&self) {
        if let Some(token) = &self.watch {
            token.cancel();
        }
    }

    fn instance(&self, healthy: bool) -> Instance {
        instance(
            self.id.clone(),
            self.endpoint.clone(),
            self.service.clone(),
            self.execute_token.clone(),
            healthy,
        )
    }
}

/// An executor's instance in a snapshot entry, carrying the token its
/// Execute service accepts (handed to dispatcher readers only). Both
/// stores build instances with this, so none leaves the token out.
pub(crate) fn instance(
    executor_id: Arc<str>,
    endpoint: Arc<str>,
    service: Arc<str>,
    execute_token: Arc<str>,
    healthy: bool,
) -> Instance {
    Instance {
        executor_id,
        endpoint,
        service,
        healthy,
        execute_token,
    }
}

/// What a registration did.
pub(crate) struct Registered {
    /// The next snapshot, when anything changed.
    pub(crate) snapshot: Option<Snapshot>,
    /// Tools refused because they conflict with existing definitions.
    pub(crate) rejected: Vec<RejectedTool>,
    /// How many tools this executor now serves.
    pub(crate) accepted: usize,
    /// The registration this one replaced.
    pub(crate) replaced: Option<Executor>,
}

/// Executors and leases; changed only under the registry's writer lock.
#[derive(Debug)]
pub(crate) struct State {
    executors: HashMap<Arc<str>, Executor>,
    /// Live executors per owner, kept with `executors` so that the
    /// per-owner cap costs one lookup per registration, not a scan.
    per_owner: HashMap<Arc<str>, usize>,
    leases: LeaseTable,
    /// Tool owners, disabled tools and rollouts (kept across restarts with
    /// a data dir), and shared records.
    kv: Arc<MemoryKv>,
}

impl State {
    /// An empty state over the memory backend `kv`.
    pub(crate) fn over(kv: Arc<MemoryKv>) -> Self {
        State {
            executors: HashMap::new(),
            per_owner: HashMap::new(),
            leases: LeaseTable::default(),
            kv,
        }
    }

    /// Registers (or replaces) an executor under `lease_id`, in one change.
    pub(crate) fn register(
        &mut self,
        base: &Snapshot,
        reg: Registration,
        lease_id: Arc<str>,
        now: Instant,
        owner: &str,
        max_per_owner: usize,
    ) -> Result<Registered, RegistryError> {
        let held = self.executors.get(&reg.executor_id).map(|e| &*e.owner);
        let live = self.per_owner.get(owner).copied().unwrap_or(0);
        check_executor_slot(&reg.executor_id, held, live, owner, max_per_owner)?;
        let mut txn = Txn::new(base);
        let replaced = self.take(&reg.executor_id);
        if let Some(old) = &replaced {
            self.leases.revoke(&old.lease_id);
        }
        let executor = Executor {
            id: reg.executor_id.clone(),
            owner: owner.into(),
            execute_token: reg.execute_token,
            service: reg.service,
            endpoint: reg.endpoint,
            lease_id: lease_id.clone(),
            keys: Vec::with_capacity(reg.tools.len()),
            healthy: true,
            watch: reg.watch,
        };
        let mut keys = Vec::with_capacity(reg.tools.len());
        let mut rejected = Vec::new();
        let mut unowned = Vec::new();
        let kv = &*self.kv;
        for def in reg.tools {
            let holder = at_once(owners::holder(kv, def.name()))?;
            if let Some(holder) = holder.as_deref().filter(|h| *h != owner) {
                rejected.push(owned_elsewhere(def.name(), holder, owner));
                continue;
            }
            let disabled = at_once(switches::reason(kv, def.name()))?.map(Arc::<str>::from);
            let name = def.name().to_owned();
            match add_instance(&mut txn, def, &executor, disabled) {
                Ok(key) => {
                    keys.push(key);
                    if holder.is_none() {
                        unowned.push(name);
                    }
                }
                Err(reject) => rejected.push(reject),
            }
        }
        if !owner.is_empty() {
            unowned.sort();
            unowned.dedup();
            if let Err(e) = at_once(owners::claim(kv, owner, &unowned)) {
                tracing::error!(error = %e, "tool ownership could not be saved");
            }
        }
        if let Some(old) = &replaced {
            let kept: HashSet<&Key> = keys.iter().collect();
            for key in old.keys.iter().filter(|k| !kept.contains(k)) {
                if let Some(staged) = txn.get(key) {
                    staged.instances.retain(|i| i.executor_id != old.id);
                }
            }
        }
        let accepted = keys.len();
        let executor = Executor { keys, ..executor };
        self.leases
            .grant(lease_id, executor.id.clone(), reg.ttl, now);
        *self.per_owner.entry(executor.owner.clone()).or_default() += 1;
        self.executors.insert(executor.id.clone(), executor);
        Ok(Registered {
            snapshot: txn.commit(),
            rejected,
            accepted,
            replaced,
        })
    }

    /// Checks that `lease_id` is live and was granted to `owner`.
    fn check_holder(&self, lease_id: &str, owner: &str) -> Result<(), RegistryError> {
        let holder = self
            .leases
            .executor_of(lease_id)
            .and_then(|id| self.executors.get(id))
            .map(|executor| &*executor.owner);
        check_lease_holder(lease_id, holder, owner)
    }

    /// Renews a lease held by `owner`.
    pub(crate) fn renew(
        &mut self,
        lease_id: &str,
        owner: &str,
        now: Instant,
    ) -> Result<(), RegistryError> {
        self.check_holder(lease_id, owner)?;
        self.leases
            .renew(lease_id, now)
            .map(|_| ())
            .ok_or_else(|| RegistryError::UnknownLease(lease_id.to_owned()))
    }

    /// Removes the executor holding `lease_id` at once.
    pub(crate) fn deregister(
        &mut self,
        base: &Snapshot,
        lease_id: &str,
        owner: &str,
    ) -> Result<(Option<Snapshot>, Executor), RegistryError> {
        self.check_holder(lease_id, owner)?;
        let lease = self
            .leases
            .revoke(lease_id)
            .ok_or_else(|| RegistryError::UnknownLease(lease_id.to_owned()))?;
        let mut txn = Txn::new(base);
        let executor = self
            .remove_executor(&mut txn, &lease.executor_id)
            .ok_or_else(|| RegistryError::UnknownLease(lease_id.to_owned()))?;
        Ok((txn.commit(), executor))
    }

    /// Removes every executor whose lease ran out at or before `now`, in one change.
    pub(crate) fn expire(
        &mut self,
        base: &Snapshot,
        now: Instant,
    ) -> (Option<Snapshot>, Vec<Executor>) {
        let expired = self.leases.take_expired(now);
        if expired.is_empty() {
            return (None, Vec::new());
        }
        let mut txn = Txn::new(base);
        let gone = expired
            .iter()
            .filter_map(|(_, lease)| self.remove_executor(&mut txn, &lease.executor_id))
            .collect();
        (txn.commit(), gone)
    }

    /// The earliest lease deadline.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.leases.earliest()
    }

    /// Marks the instances of the registration `executor_id`/`lease_id`
    /// healthy or not. `None` when it is gone, replaced, or already so.
    pub(crate) fn set_health(
        &mut self,
        base: &Snapshot,
        executor_id: &str,
        lease_id: &str,
        healthy: bool,
    ) -> Option<(Snapshot, &Executor)> {
        let executor = self.executors.get_mut(executor_id)?;
        if *executor.lease_id != *lease_id || executor.healthy == healthy {
            return None;
        }
        executor.healthy = healthy;
        let mut txn = Txn::new(base);
        for key in &executor.keys {
            if let Some(staged) = txn.get(key) {
                for instance in staged
                    .instances
                    .iter_mut()
                    .filter(|i| i.executor_id == executor.id)
                {
                    instance.healthy = healthy;
                }
            }
        }
        let snapshot = txn.commit()?;
        Some((snapshot, executor))
    }

    /// Disables (`Some(reason)`) or enables every version of `tool`.
    pub(crate) fn set_disabled(
        &mut self,
        base: &Snapshot,
        tool: &str,
        reason: Option<Arc<str>>,
    ) -> Result<Option<Snapshot>, RegistryError> {
        // Saved first: a switch the disk lost must not seem to have worked.
        at_once(switches::write(&*self.kv, base, tool, reason.as_deref()))?;
        let mut txn = Txn::new(base);
        for entry in base.versions(tool) {
            if let Some(staged) = txn.get(&key_of(&entry.def)) {
                staged.disabled = reason.clone();
            }
        }
        Ok(txn.commit())
    }

    /// Applies `request` to the kept rollout (saved first); the rollout it
    /// made and the snapshot that carries it.
    pub(crate) fn update_rollout(
        &mut self,
        base: &Snapshot,
        request: &RolloutRequest,
    ) -> Result<(Snapshot, Rollout), RegistryError> {
        let (_, rollout) = at_once(rollouts::write(&*self.kv, base, request))?;
        let mut next = base.next();
        next.put_rollout(rollout.clone());
        Ok((next.finish(), rollout))
    }

    /// The registration of `executor_id`.
    #[cfg(test)]
    pub(crate) fn executor(&self, executor_id: &str) -> Option<&Executor> {
        self.executors.get(executor_id)
    }

    /// Removes `executor_id`'s registration from the table (and its owner's count).
    fn take(&mut self, executor_id: &str) -> Option<Executor> {
        let executor = self.executors.remove(executor_id)?;
        if let Some(count) = self.per_owner.get_mut(&executor.owner) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_owner.remove(&executor.owner);
            }
        }
        Some(executor)
    }

    fn remove_executor(&mut self, txn: &mut Txn<'_>, executor_id: &str) -> Option<Executor> {
        let executor = self.take(executor_id)?;
        self.leases.revoke(&executor.lease_id);
        for key in &executor.keys {
            if let Some(staged) = txn.get(key) {
                staged.instances.retain(|i| i.executor_id != executor.id);
            }
        }
        Some(executor)
    }
}

/// Whether `owner` may register as `executor_id`: an id registered by
/// another owner is taken, and a new executor must stay within the owner's
/// cap (`live_for_owner` executors it holds now; replacing one of them does
/// not count, and anonymous registrations are not capped). Both stores ask
/// this before writing.
pub(crate) fn check_executor_slot(
    executor_id: &str,
    held_owner: Option<&str>,
    live_for_owner: usize,
    owner: &str,
    max: usize,
) -> Result<(), RegistryError> {
    match held_owner {
        Some(holder) if holder != owner => Err(RegistryError::ExecutorIdTaken {
            id: executor_id.to_owned(),
        }),
        Some(_) => Ok(()),
        None if !owner.is_empty() && live_for_owner >= max => {
            Err(RegistryError::TooManyExecutors {
                owner: owner.to_owned(),
                limit: max,
            })
        }
        None => Ok(()),
    }
}

/// Adds (or refreshes) `executor`'s instance of `def`, or explains why the
/// definition conflicts with the one other executors serve.
fn add_instance(
    txn: &mut Txn<'_>,
    def: ToolDef,
    executor: &Executor,
    disabled: Option<Arc<str>>,
) -> Result<Key, RejectedTool> {
    let key = key_of(&def);
    let instance = executor.instance(true);
    // New versions of a disabled tool stay disabled: every version of a name
    // shares the operator's switch, which also survives restarts.
    let family_disabled = disabled.or_else(|| {
        txn.base()
            .versions(&key.0)
            .first()
            .and_then(|e| e.disabled.clone())
    });
    let Some(staged) = txn.get(&key) else {
        txn.insert(
            key.clone(),
            Staged {
                def: Arc::new(def),
                instances: vec![instance],
                disabled: family_disabled,
            },
        );
        return Ok(key);
    };
    let others_serve = check_conflict(&key, &staged.def, &staged.instances, &executor.id, &def)?;
    // Nobody else serves it: this definition wins (the old allocation is
    // kept when nothing about the spec changed, so the entry stays shared).
    if !others_serve && staged.def.spec() != def.spec() {
        staged.def = Arc::new(def);
    }
    match staged
        .instances
        .iter_mut()
        .find(|i| i.executor_id == executor.id)
    {
        Some(existing) => *existing = instance,
        None => staged.instances.push(instance),
    }
    Ok(key)
}

/// Whether `owner` may renew or end the lease `lease_id`, whose
/// registration was made by `holder` (`None`: no live registration holds
/// it). Both stores ask this.
pub(crate) fn check_lease_holder(
    lease_id: &str,
    holder: Option<&str>,
    owner: &str,
) -> Result<(), RegistryError> {
    match holder {
        Some(holder) if holder == owner => Ok(()),
        Some(_) => Err(RegistryError::NotYourLease(lease_id.to_owned())),
        None => Err(RegistryError::UnknownLease(lease_id.to_owned())),
    }
}

/// Whether `executor_id` may serve `def` in the entry `key`, whose
/// definition is `current` and whose instances are `instances`: refused
/// when other executors serve it and the two definitions differ in a field
/// that matters. `Ok(true)` when others serve it (their definition stays),
/// `Ok(false)` when nobody else does. Both stores decide with this.
pub(crate) fn check_conflict(
    key: &Key,
    current: &ToolDef,
    instances: &[Instance],
    executor_id: &str,
    def: &ToolDef,
) -> Result<bool, RejectedTool> {
    let others: Vec<&str> = instances
        .iter()
        .filter(|i| &*i.executor_id != executor_id)
        .map(|i| &*i.executor_id)
        .collect();
    if others.is_empty() {
        return Ok(false);
    }
    let fields = current.conflicts_with(def);
    if fields.is_empty() {
        Ok(true)
    } else {
        Err(RejectedTool {
            name: def.name().to_owned(),
            reason: conflict_reason(key, &others, &fields),
        })
    }
}

/// The refusal of a tool name another owner holds.
pub(crate) fn owned_elsewhere(name: &str, holder: &str, owner: &str) -> RejectedTool {
    RejectedTool {
        name: name.to_owned(),
        reason: format!(
            "tool {name} belongs to owner {holder:?}; an executor registering as {owner:?} cannot register, replace or shadow it: choose a name in your own namespace"
        ),
    }
}

fn conflict_reason(key: &Key, executors: &[&str], fields: &[&str]) -> String {
    let noun = if executors.len() == 1 {
        "executor"
    } else {
        "executors"
    };
    let mut named = executors
        .iter()
        .take(NAMED_EXECUTORS)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if executors.len() > NAMED_EXECUTORS {
        named.push_str(&format!(" and {} more", executors.len() - NAMED_EXECUTORS));
    }
    format!(
        "conflicts with {} as served by {noun} {named}: fields differ: {}; register it under a new version",
        label(key),
        fields.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::{check_conflict, check_executor_slot, check_lease_holder};
    use crate::error::RegistryError;
    use crate::txn::key_of;
    use toolmesh::pb::ToolSpec;
    use toolmesh::{Instance, ToolDef};

    fn def(description: &str) -> ToolDef {
        ToolDef::new(ToolSpec {
            name: "search_kb".into(),
            version: "1.0.0".into(),
            description: description.into(),
            input_schema: r#"{"type":"object"}"#.into(),
            ..ToolSpec::default()
        })
        .unwrap()
    }

    fn served_by(id: &str) -> Instance {
        Instance {
            executor_id: id.into(),
            endpoint: "127.0.0.1:1".into(),
            service: "kb".into(),
            healthy: true,
            execute_token: "".into(),
        }
    }

    /// Only the owner that registered may use a lease; an unknown lease is
    /// unknown to everyone.
    #[test]
    fn lease_holders() {
        assert!(check_lease_holder("l1", Some("bob"), "bob").is_ok());
        assert!(check_lease_holder("l1", Some(""), "").is_ok());
        assert!(matches!(
            check_lease_holder("l1", Some("alice"), "bob"),
            Err(RegistryError::NotYourLease(l)) if l == "l1"
        ));
        assert!(matches!(
            check_lease_holder("l1", None, "bob"),
            Err(RegistryError::UnknownLease(l)) if l == "l1"
        ));
    }

    /// A differing definition is refused only while other executors serve
    /// the entry; the same one joins them; alone, an executor may change it.
    #[test]
    fn conflicts() {
        let current = def("Searches.");
        let key = key_of(&current);
        let others = [served_by("kb-1"), served_by("kb-2")];
        let reject = check_conflict(&key, &current, &others, "kb-3", &def("Other.")).unwrap_err();
        assert_eq!(reject.name, "search_kb");
        assert!(
            reject.reason.contains("executors kb-1, kb-2") && reject.reason.contains("description"),
            "{}",
            reject.reason
        );
        assert_eq!(
            check_conflict(&key, &current, &others, "kb-3", &def("Searches.")),
            Ok(true)
        );
        let alone = [served_by("kb-3")];
        assert_eq!(
            check_conflict(&key, &current, &alone, "kb-3", &def("Other.")),
            Ok(false)
        );
        assert_eq!(
            check_conflict(&key, &current, &[], "kb-3", &def("Other.")),
            Ok(false)
        );
    }

    /// Another owner's id is taken; a new executor past the owner's cap is
    /// refused; replacing one's own executor and anonymous registrations are
    /// not capped.
    #[test]
    fn executor_slots() {
        assert!(matches!(
            check_executor_slot("ex", Some("alice"), 0, "bob", 10),
            Err(RegistryError::ExecutorIdTaken { id }) if id == "ex"
        ));
        assert!(matches!(
            check_executor_slot("ex", Some(""), 0, "bob", 10),
            Err(RegistryError::ExecutorIdTaken { .. })
        ));
        assert!(matches!(
            check_executor_slot("ex", None, 2, "bob", 2),
            Err(RegistryError::TooManyExecutors { owner, limit: 2 }) if owner == "bob"
        ));
        assert!(check_executor_slot("ex", None, 1, "bob", 2).is_ok());
        assert!(check_executor_slot("ex", Some("bob"), 2, "bob", 2).is_ok());
        assert!(check_executor_slot("ex", None, 5, "", 2).is_ok());
    }
}
