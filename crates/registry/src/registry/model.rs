//! The replica's mirror of the store and the snapshot it makes: a pure
//! function of the keys at one revision, so every replica publishes the same
//! content under the same (epoch, version).

use crate::codec;
use crate::keys::{ExecRecord, HealthRecord, Slot};
use crate::keys::{Key, key_of};
use crate::kv::{Entry, Event};
use crate::rules::instance;
use prost::Message;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use toolmesh::pb::ToolSpec;
use toolmesh::{Instance, Rollout, Snapshot, ToolDef, ToolEntry};
use tracing::warn;

/// One executor as the store holds it.
#[derive(Debug, Clone)]
pub(crate) struct ExecView {
    /// Orders replicas of one tool: the earliest registration's definition wins.
    pub(crate) create_revision: i64,
    pub(crate) lease: i64,
    /// The revision its key was last written at (a registration replacing
    /// it writes only if it is still this).
    pub(crate) mod_revision: i64,
    pub(crate) record: ExecRecord,
    /// The entries it serves, with the hash of its definition for each.
    pub(crate) keys: Vec<(Key, String)>,
}

#[derive(Debug, Clone)]
struct DefView {
    create_revision: i64,
    def: Arc<ToolDef>,
}

/// Everything under the prefix that snapshots and registrations need.
#[derive(Debug, Default)]
pub(crate) struct Model {
    pub(crate) epoch: String,
    pub(crate) execs: HashMap<Arc<str>, ExecView>,
    /// Lease → the executor holding it.
    by_lease: HashMap<i64, Arc<str>>,
    defs: HashMap<String, DefView>,
    /// Who serves each entry.
    serving: HashMap<Key, BTreeSet<Arc<str>>>,
    /// Every definition stored for each entry, oldest first.
    defs_by_key: HashMap<Key, BTreeSet<(i64, String)>>,
    health: HashMap<Arc<str>, HealthRecord>,
    pub(crate) disabled: HashMap<String, Arc<str>>,
    /// Tool name → its rollout and the revision its key was written at.
    pub(crate) rollouts: HashMap<String, (Rollout, i64)>,
    pub(crate) owners: HashMap<String, String>,
    /// Executor id → the replica watching its health.
    pub(crate) watchers: HashMap<String, String>,
    /// What the health-claims loop has not looked at yet.
    watch_book: WatchBook,
}

/// What changed for the health-claims loop since it last looked: the
/// executors whose registration or claim changed (all of them after a full
/// read), and how many claims each replica holds. The loop reads it in
/// time proportional to the change, not to the fleet.
#[derive(Debug)]
struct WatchBook {
    everything: bool,
    changed: HashSet<Arc<str>>,
    /// How many claims each replica holds.
    held: HashMap<String, usize>,
    /// The replicas that are up, claims or not.
    present: HashSet<String>,
}

impl Default for WatchBook {
    fn default() -> Self {
        WatchBook {
            everything: true,
            changed: HashSet::new(),
            held: HashMap::new(),
            present: HashSet::new(),
        }
    }
}

/// One executor as the health-claims loop sees it.
#[derive(Debug)]
pub(crate) struct WatchItem {
    pub(crate) id: Arc<str>,
    /// Its lease and endpoint; `None` when it is no longer registered.
    pub(crate) exec: Option<(i64, String)>,
    /// The replica holding its claim.
    pub(crate) holder: Option<String>,
}

impl WatchBook {
    /// One claim of `holder` gone.
    fn release(&mut self, holder: &str) {
        if let Some(count) = self.held.get_mut(holder) {
            *count -= 1;
            if *count == 0 {
                self.held.remove(holder);
            }
        }
    }

    /// How many claims each replica holds, counting those up with none.
    fn claims(&self) -> HashMap<String, usize> {
        let mut claims = self.held.clone();
        for replica in &self.present {
            claims.entry(replica.clone()).or_default();
        }
        claims
    }
}

/// The entries (and names) one batch of changes touched.
#[derive(Debug, Default)]
pub(crate) struct Touched {
    keys: BTreeSet<Key>,
    names: BTreeSet<String>,
    /// Tools whose rollout changed.
    rollouts: BTreeSet<String>,
    /// Executors whose key went: their id, lease and how many tools they served.
    pub(crate) gone: Vec<(Arc<str>, i64, usize)>,
    /// A replica came or went: the snapshot is numbered anew even when
    /// nothing in it changed, so that every replica numbers it alike (one
    /// that just read the store numbers its first snapshot with the
    /// revision it read, which may be a write no snapshot shows).
    renumber: bool,
}

impl Touched {
    /// Also every entry and rollout `snapshot` holds: a full read compared
    /// with it removes what is gone.
    pub(crate) fn with_all_of(mut self, snapshot: &Snapshot) -> Touched {
        self.keys.extend(snapshot.entries().map(|e| key_of(&e.def)));
        self.rollouts
            .extend(snapshot.rollouts().map(|r| r.tool.clone()));
        self
    }
}

impl Model {
    /// Whether a definition with this content hash is stored.
    pub(crate) fn has_def(&self, hash: &str) -> bool {
        self.defs.contains_key(hash)
    }

    /// The executor holding `lease`.
    pub(crate) fn exec_by_lease(&self, lease: i64) -> Option<&ExecView> {
        self.execs.get(self.by_lease.get(&lease)?)
    }

    /// Applies one key as read by a full range (definitions must come
    /// before the executors that name them: see [`Model::load`]).
    fn put(&mut self, kv: &Entry, touched: &mut Touched) {
        let Some(slot) = Slot::parse(&kv.key) else {
            return;
        };
        match slot {
            Slot::Epoch => self.epoch = String::from_utf8_lossy(&kv.value).into_owned(),
            Slot::Def(hash) => {
                if self.defs.contains_key(hash) {
                    return;
                }
                match ToolSpec::decode(&kv.value[..])
                    .map_err(|e| e.to_string())
                    .and_then(|spec| ToolDef::stored(spec).map_err(|e| e.to_string()))
                {
                    Ok(def) => {
                        let key = key_of(&def);
                        self.defs_by_key
                            .entry(key.clone())
                            .or_default()
                            .insert((kv.create_revision, hash.to_owned()));
                        self.defs.insert(
                            hash.to_owned(),
                            DefView {
                                create_revision: kv.create_revision,
                                def: Arc::new(def),
                            },
                        );
                        touched.keys.insert(key);
                    }
                    Err(error) => warn!(hash, %error, "stored definition left out"),
                }
            }
            Slot::Exec(id) => {
                let id: Arc<str> = id.into();
                self.remove_exec(&id, touched);
                let record: ExecRecord = match codec::decode(&kv.value) {
                    Ok(record) => record,
                    Err(error) => {
                        warn!(executor_id = &*id, %error, "stored registration left out");
                        return;
                    }
                };
                let keys: Vec<(Key, String)> = record
                    .tools
                    .iter()
                    .filter_map(|hash| {
                        let def = self.defs.get(hash)?;
                        Some((key_of(&def.def), hash.clone()))
                    })
                    .collect();
                for (key, _) in &keys {
                    self.serving
                        .entry(key.clone())
                        .or_default()
                        .insert(id.clone());
                    touched.keys.insert(key.clone());
                }
                self.by_lease.insert(kv.lease, id.clone());
                self.watch_book.changed.insert(id.clone());
                self.execs.insert(
                    id,
                    ExecView {
                        create_revision: kv.create_revision,
                        lease: kv.lease,
                        mod_revision: kv.mod_revision,
                        record,
                        keys,
                    },
                );
            }
            Slot::Health(id) => match codec::decode::<HealthRecord>(&kv.value) {
                Ok(record) => {
                    self.health.insert(id.into(), record);
                    self.touch_exec(id, touched);
                }
                Err(error) => warn!(executor_id = id, %error, "stored health verdict left out"),
            },
            Slot::Watcher(id) => {
                let holder: String = String::from_utf8_lossy(&kv.value).into();
                *self.watch_book.held.entry(holder.clone()).or_default() += 1;
                if let Some(before) = self.watchers.insert(id.to_owned(), holder) {
                    self.watch_book.release(&before);
                }
                self.watch_book.changed.insert(id.into());
            }
            Slot::Owner(name) => {
                self.owners
                    .insert(name.to_owned(), String::from_utf8_lossy(&kv.value).into());
            }
            Slot::Disabled(name) => {
                self.disabled
                    .insert(name.to_owned(), String::from_utf8_lossy(&kv.value).into());
                touched.names.insert(name.to_owned());
            }
            Slot::Rollout(name) => {
                match codec::decode::<Rollout>(&kv.value) {
                    Ok(rollout) => {
                        self.rollouts
                            .insert(name.to_owned(), (rollout, kv.mod_revision));
                    }
                    Err(error) => warn!(tool = name, %error, "stored rollout left out"),
                }
                touched.rollouts.insert(name.to_owned());
            }
            Slot::Replica(replica) => {
                self.watch_book.present.insert(replica.to_owned());
                touched.renumber = true;
            }
            Slot::Shared(_) | Slot::Other => {}
        }
    }

    fn delete(&mut self, key: &[u8], touched: &mut Touched) {
        let Some(slot) = Slot::parse(key) else {
            return;
        };
        match slot {
            Slot::Exec(id) => self.remove_exec(id, touched),
            Slot::Def(hash) => {
                if let Some(view) = self.defs.remove(hash) {
                    let key = key_of(&view.def);
                    if let Some(set) = self.defs_by_key.get_mut(&key) {
                        set.remove(&(view.create_revision, hash.to_owned()));
                        if set.is_empty() {
                            self.defs_by_key.remove(&key);
                        }
                    }
                    touched.keys.insert(key);
                }
            }
            Slot::Health(id) => {
                self.health.remove(id);
                self.touch_exec(id, touched);
            }
            Slot::Watcher(id) => {
                if let Some(before) = self.watchers.remove(id) {
                    self.watch_book.release(&before);
                }
                self.watch_book.changed.insert(id.into());
            }
            Slot::Owner(name) => {
                self.owners.remove(name);
            }
            Slot::Disabled(name) => {
                self.disabled.remove(name);
                touched.names.insert(name.to_owned());
            }
            Slot::Rollout(name) => {
                self.rollouts.remove(name);
                touched.rollouts.insert(name.to_owned());
            }
            Slot::Replica(replica) => {
                self.watch_book.present.remove(replica);
                touched.renumber = true;
            }
            Slot::Epoch | Slot::Shared(_) | Slot::Other => {}
        }
    }

    fn touch_exec(&self, id: &str, touched: &mut Touched) {
        if let Some(exec) = self.execs.get(id) {
            touched
                .keys
                .extend(exec.keys.iter().map(|(k, _)| k.clone()));
        }
    }

    fn remove_exec(&mut self, id: &str, touched: &mut Touched) {
        let Some((id, exec)) = self.execs.remove_entry(id) else {
            return;
        };
        self.by_lease.remove(&exec.lease);
        self.watch_book.changed.insert(id.clone());
        touched.gone.push((id.clone(), exec.lease, exec.keys.len()));
        for (key, _) in exec.keys {
            if let Some(set) = self.serving.get_mut(&key) {
                set.remove(&id);
                if set.is_empty() {
                    self.serving.remove(&key);
                }
            }
            touched.keys.insert(key);
        }
    }

    /// The health verdict stored for executor `id`, as last applied.
    pub(crate) fn health_of(&self, id: &str) -> Option<&HealthRecord> {
        self.health.get(id)
    }

    /// The executors the health-claims loop must look at: those changed
    /// since it last asked and those in `also`, or every one (and every
    /// claim) when `all` or after a full read; with the claims each
    /// replica holds.
    pub(crate) fn watch_items(
        &mut self,
        all: bool,
        also: Vec<Arc<str>>,
    ) -> (Vec<WatchItem>, HashMap<String, usize>) {
        let book = &mut self.watch_book;
        let ids: HashSet<Arc<str>> = if all || book.everything {
            book.changed.clear();
            let mut ids: HashSet<Arc<str>> = self.execs.keys().cloned().collect();
            ids.extend(self.watchers.keys().map(|id| Arc::from(id.as_str())));
            ids
        } else {
            book.changed.drain().chain(also).collect()
        };
        book.everything = false;
        let items = ids
            .into_iter()
            .map(|id| WatchItem {
                exec: (self.execs.get(&id)).map(|e| (e.lease, e.record.endpoint.clone())),
                holder: self.watchers.get(&*id).cloned(),
                id,
            })
            .collect();
        (items, book.claims())
    }

    /// Applies the events of one revision.
    pub(crate) fn apply(&mut self, events: &[Event]) -> Touched {
        let mut touched = Touched::default();
        for event in events {
            match event {
                Event::Put(entry) => self.put(entry, &mut touched),
                Event::Delete { key, .. } => self.delete(key, &mut touched),
            }
        }
        touched
    }

    /// A model of every key a full range returned.
    pub(crate) fn load(mut kvs: Vec<Entry>) -> (Model, Touched) {
        // Definitions first: executors name them.
        kvs.sort_by_key(|kv| !matches!(Slot::parse(&kv.key), Some(Slot::Def(_))));
        let mut model = Model::default();
        let mut touched = Touched::default();
        for kv in &kvs {
            model.put(kv, &mut touched);
        }
        (model, touched)
    }

    /// The entry `key` makes: the definition of its earliest registration
    /// still serving it (else its oldest stored definition), the instances
    /// of every executor serving that same definition, the name's switch.
    fn entry(&self, key: &Key) -> Option<ToolEntry> {
        let mut serving: Vec<(&Arc<str>, &ExecView)> = self
            .serving
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|id| self.execs.get_key_value(id))
            .collect();
        serving.sort_by(|a, b| (a.1.create_revision, a.0).cmp(&(b.1.create_revision, b.0)));
        let hash_of = |exec: &ExecView| {
            exec.keys
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, h)| h.clone())
        };
        let winner = match serving.first() {
            Some((_, exec)) => hash_of(exec)?,
            None => self.defs_by_key.get(key)?.first()?.1.clone(),
        };
        let def = self.defs.get(&winner)?.def.clone();
        let instances: Vec<Instance> = serving
            .iter()
            .filter(|(_, exec)| {
                hash_of(exec)
                    .and_then(|h| self.defs.get(&h))
                    .is_some_and(|d| d.def.conflicts_with(&def).is_empty())
            })
            .map(|(id, exec)| {
                let healthy = self
                    .health
                    .get(*id)
                    .filter(|h| h.lease == exec.lease)
                    .is_none_or(|h| h.healthy);
                instance(
                    (*id).clone(),
                    exec.record.endpoint.as_str().into(),
                    exec.record.service.as_str().into(),
                    exec.record.execute_token.as_str().into(),
                    healthy,
                )
            })
            .collect();
        Some(ToolEntry {
            def,
            instances: instances.into(),
            disabled: self.disabled.get(&*key.0).cloned(),
        })
    }

    /// The snapshot numbered `version`: `base` with every touched entry
    /// made again (unchanged ones stay shared); `None` when no entry and no
    /// rollout came out different (and no replica came or went), so there
    /// is nothing new to publish.
    pub(crate) fn snapshot(
        &self,
        base: &Snapshot,
        touched: Touched,
        version: u64,
    ) -> Option<Snapshot> {
        let mut keys = touched.keys;
        for name in &touched.names {
            keys.extend(base.versions(name).iter().map(|e| key_of(&e.def)));
            keys.extend(self.defs_by_key.keys().filter(|k| *k.0 == **name).cloned());
        }
        let mut builder = base.next();
        builder.at_version(version);
        let mut changed = touched.renumber;
        for name in &touched.rollouts {
            let now = self.rollouts.get(name).map(|(rollout, _)| rollout);
            if base.rollout(name).map(|r| &**r) == now {
                continue;
            }
            changed = true;
            match now {
                Some(rollout) => builder.put_rollout(rollout.clone()),
                None => builder.remove_rollout(name),
            };
        }
        for key in keys {
            match self.entry(&key) {
                Some(entry) => {
                    let unchanged = base.get(&key.0, &key.1).is_some_and(|old| {
                        Arc::ptr_eq(&old.def, &entry.def)
                            && old.disabled == entry.disabled
                            && old.instances == entry.instances
                    });
                    if !unchanged {
                        changed = true;
                        builder.put(entry);
                    }
                }
                None => {
                    if base.get(&key.0, &key.1).is_some() {
                        changed = true;
                        builder.remove(&key.0, &key.1);
                    }
                }
            }
        }
        changed.then(|| builder.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(slot: Slot<'_>, value: &str) -> Event {
        Event::Put(Entry {
            key: slot.key(),
            value: value.as_bytes().to_vec(),
            create_revision: 1,
            mod_revision: 1,
            lease: 7,
        })
    }

    /// A replica that is up counts as holding no claims until it holds
    /// some, and stops counting when its presence goes with its session;
    /// its coming and going numbers the snapshot anew, a claim does not.
    #[test]
    fn replicas_up_without_claims_count_as_holding_none() {
        let mut model = Model::default();
        model.apply(&[
            put(Slot::Watcher("ex-1"), "replica-a"),
            put(Slot::Replica("replica-a"), ""),
            put(Slot::Replica("replica-b"), ""),
        ]);
        let (_, claims) = model.watch_items(true, Vec::new());
        let expected = HashMap::from([("replica-a".to_owned(), 1), ("replica-b".to_owned(), 0)]);
        assert_eq!(claims, expected);

        let touched = model.apply(&[Event::Delete {
            key: Slot::Replica("replica-b").key(),
            revision: 2,
        }]);
        let (_, claims) = model.watch_items(false, Vec::new());
        assert_eq!(claims, HashMap::from([("replica-a".to_owned(), 1)]));
        // Numbered anew though nothing shown changed: every replica numbers
        // the snapshot after a replica came or went alike.
        let base = Snapshot::empty("cluster");
        let renumbered = model.snapshot(&base, touched, 2).expect("renumbered");
        assert_eq!(renumbered.version(), 2);
        let claim_only = model.apply(&[put(Slot::Watcher("ex-2"), "replica-a")]);
        assert!(model.snapshot(&base, claim_only, 3).is_none());
    }
}
