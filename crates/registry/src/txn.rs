//! One change to the tool map: entries are staged as they are touched, and
//! only those that end up different from the base snapshot go into the next one.

use std::collections::BTreeMap;
use std::sync::Arc;
use toolmesh::{Instance, Snapshot, ToolDef, ToolEntry};

/// A tool name and version: the identity of one `ToolEntry`.
pub(crate) type Key = (Arc<str>, semver::Version);

/// `name@version` for messages.
pub(crate) fn label(key: &Key) -> String {
    toolmesh::spec::label(&key.0, &key.1)
}

/// The key of a definition.
pub(crate) fn key_of(def: &ToolDef) -> Key {
    (def.name().into(), def.version().clone())
}

/// A mutable working copy of one entry.
#[derive(Debug, Clone)]
pub(crate) struct Staged {
    pub(crate) def: Arc<ToolDef>,
    pub(crate) instances: Vec<Instance>,
    pub(crate) disabled: Option<Arc<str>>,
}

impl Staged {
    fn from_entry(entry: &ToolEntry) -> Self {
        Staged {
            def: entry.def.clone(),
            instances: entry.instances.to_vec(),
            disabled: entry.disabled.clone(),
        }
    }

    fn same_as(&self, entry: &ToolEntry) -> bool {
        Arc::ptr_eq(&self.def, &entry.def)
            && self.disabled == entry.disabled
            && *entry.instances == self.instances[..]
    }

    fn into_entry(self) -> ToolEntry {
        ToolEntry {
            def: self.def,
            instances: self.instances.into(),
            disabled: self.disabled,
        }
    }
}

/// The entries one change touches, staged over a base snapshot.
/// Costs O(entries touched), never O(all tools).
pub(crate) struct Txn<'a> {
    base: &'a Snapshot,
    staged: BTreeMap<Key, Staged>,
}

impl<'a> Txn<'a> {
    /// A change on top of `base`.
    pub(crate) fn new(base: &'a Snapshot) -> Self {
        Txn {
            base,
            staged: BTreeMap::new(),
        }
    }

    /// The base snapshot.
    pub(crate) fn base(&self) -> &'a Snapshot {
        self.base
    }

    /// The working copy of `key`, loaded from the base on first touch;
    /// `None` when the entry exists nowhere yet.
    pub(crate) fn get(&mut self, key: &Key) -> Option<&mut Staged> {
        if !self.staged.contains_key(key) {
            let entry = self.base.get(&key.0, &key.1)?;
            self.staged.insert(key.clone(), Staged::from_entry(entry));
        }
        self.staged.get_mut(key)
    }

    /// Stages a new entry for `key`.
    pub(crate) fn insert(&mut self, key: Key, staged: Staged) {
        self.staged.insert(key, staged);
    }

    /// The next snapshot, or `None` when nothing differs from the base.
    pub(crate) fn commit(self) -> Option<Snapshot> {
        let mut builder = None;
        for (key, staged) in self.staged {
            let unchanged = self
                .base
                .get(&key.0, &key.1)
                .is_some_and(|entry| staged.same_as(entry));
            if !unchanged {
                builder
                    .get_or_insert_with(|| self.base.next())
                    .put(staged.into_entry());
            }
        }
        builder.map(|b| b.finish())
    }
}
