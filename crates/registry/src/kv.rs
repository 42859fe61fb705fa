//! The key-value seam under the registry's rules: what etcd offers and an
//! in-memory store offers too — reads by key and by prefix, transactions
//! that compare revisions, leases that expire unless kept alive, a watch
//! from a revision, and the store's revision.

mod etcd;
mod memory;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub(crate) use etcd::EtcdKv;
pub(crate) use memory::{MemoryKv, at_once};

/// A lease id (0: no lease).
pub(crate) type LeaseId = i64;

/// One stored key, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) key: Vec<u8>,
    /// Empty when read keys only.
    pub(crate) value: Vec<u8>,
    /// The revision that created it.
    pub(crate) create_revision: i64,
    /// The revision that last wrote it (what a compare holds against).
    pub(crate) mod_revision: i64,
    /// The lease it goes with (0: none).
    pub(crate) lease: LeaseId,
}

/// One change a watch reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// `entry` was written.
    Put(Entry),
    /// The key was removed at `revision`.
    Delete { key: Vec<u8>, revision: i64 },
}

impl Event {
    /// The revision that made it.
    pub(crate) fn revision(&self) -> i64 {
        match self {
            Event::Put(entry) => entry.mod_revision,
            Event::Delete { revision, .. } => *revision,
        }
    }
}

/// What a watch reports at once: the changes of one or more revisions in
/// order, or none (a progress notification: the store is at `revision`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Batch {
    pub(crate) events: Vec<Event>,
    pub(crate) revision: i64,
}

/// A watch of the keys under a prefix.
#[tonic::async_trait]
pub(crate) trait Watch: Send {
    /// The next batch.
    async fn next(&mut self) -> Result<Batch, KvError>;
    /// Asks for a progress notification (an empty batch).
    fn request_progress(&self);
}

/// A condition a transaction holds its writes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Compare {
    /// `key` was last written at this revision (0: it does not exist).
    Revision(Vec<u8>, i64),
    /// `key` holds this value.
    Value(Vec<u8>, Vec<u8>),
}

impl Compare {
    /// Holds while `key` does not exist.
    pub(crate) fn absent(key: Vec<u8>) -> Compare {
        Compare::Revision(key, 0)
    }
}

/// One write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// Writes `value` at `key`, going with `lease` (0: none).
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        lease: LeaseId,
    },
    /// Removes `key` (nothing when it does not exist).
    Delete { key: Vec<u8> },
}

/// Writes made together if every compare holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Txn {
    pub(crate) compare: Vec<Compare>,
    pub(crate) success: Vec<Op>,
}

impl Txn {
    /// One write, unconditionally.
    pub(crate) fn write(op: Op) -> Txn {
        Txn {
            compare: Vec::new(),
            success: vec![op],
        }
    }

    /// One write, if `key` is still at `revision` (0: still absent).
    pub(crate) fn if_unchanged(key: &[u8], revision: i64, op: Op) -> Txn {
        Txn {
            compare: vec![Compare::Revision(key.to_vec(), revision)],
            success: vec![op],
        }
    }
}

/// What a transaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Whether every compare held (and the writes were made).
    pub(crate) succeeded: bool,
    /// The store's revision after it.
    pub(crate) revision: i64,
}

/// Why a backend failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KvError {
    /// The revision a watch was to start from is no longer held: read the
    /// whole prefix again and watch from its revision.
    #[error("the store no longer holds revisions before {compacted}")]
    Compacted { compacted: i64 },
    /// etcd refused or could not be reached.
    #[error(transparent)]
    Etcd(#[from] toolmesh_etcd::EtcdError),
    /// A write named a lease that has expired or was revoked.
    #[error("lease {0:x} has expired")]
    LeaseGone(LeaseId),
    /// The memory backend's durable keys could not be saved (nothing was
    /// written).
    #[error(transparent)]
    Durable(#[from] crate::durable::StateFileError),
}

/// A key-value backend: etcd ([`EtcdKv`]) or this process ([`MemoryKv`]).
#[tonic::async_trait]
pub(crate) trait Kv: Send + Sync + 'static {
    /// One key, if present.
    async fn get(&self, key: &[u8]) -> Result<Option<Entry>, KvError>;
    /// Every key under `prefix`, their values left empty when `keys_only`,
    /// and the revision read at.
    async fn range(&self, prefix: &[u8], keys_only: bool) -> Result<(Vec<Entry>, i64), KvError>;
    /// The store's revision now.
    async fn revision(&self) -> Result<i64, KvError>;
    /// Watches the keys under `prefix` from revision `from`.
    async fn watch(&self, prefix: &[u8], from: i64) -> Result<Box<dyn Watch>, KvError>;
    /// Makes `txn`'s writes if its compares hold.
    async fn txn(&self, txn: Txn) -> Result<Outcome, KvError>;
    /// A lease of at least `ttl` (etcd counts whole seconds and may raise a
    /// short one to its minimum); its id and the TTL granted.
    async fn grant(&self, ttl: Duration) -> Result<(LeaseId, Duration), KvError>;
    /// Renews `lease` once; the TTL it has again, `None` when it has
    /// expired (or was revoked).
    async fn keep_alive(&self, lease: LeaseId) -> Result<Option<Duration>, KvError>;
    /// Revokes `lease`: its keys go with it.
    async fn revoke(&self, lease: LeaseId) -> Result<(), KvError>;
}
