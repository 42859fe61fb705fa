//! The in-memory backend of the key-value seam: etcd's revision semantics
//! (one revision per transaction that writes, create and mod revisions per
//! key) and leases on the tokio clock, in this process. Values are bytes,
//! as in etcd; only rare writes (switches, rollouts, claims, shared
//! records) go through it, so the registration path pays no encoding. Keys
//! the durable file keeps (see [`crate::durable`]) are saved with each
//! transaction that touches them, and a transaction the disk refused is
//! undone.

use super::{Compare, Entry, Kv, KvError, LeaseId, Op, Outcome, Txn};
use crate::durable::DurableFile;
use crate::error::RegistryError;
use futures_util::FutureExt;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Runs one call on the memory backend, which never waits: its futures
/// finish on their first poll. For the registry's synchronous paths.
///
/// # Panics
///
/// When `future` waits (it was not the memory backend's).
pub(crate) fn at_once<T>(future: impl Future<Output = T>) -> T {
    future
        .now_or_never()
        .expect("the memory backend answers without waiting")
}

#[derive(Debug, Clone)]
struct Stored {
    value: Vec<u8>,
    create_revision: i64,
    mod_revision: i64,
    lease: LeaseId,
}

#[derive(Debug)]
struct Lease {
    ttl: Duration,
    deadline: Instant,
    keys: BTreeSet<Vec<u8>>,
}

#[derive(Debug, Default)]
struct Space {
    revision: i64,
    keys: BTreeMap<Vec<u8>, Stored>,
    leases: HashMap<LeaseId, Lease>,
    /// Leases by deadline: expiry looks at the first only.
    deadlines: BTreeSet<(Instant, LeaseId)>,
    last_lease: LeaseId,
}

impl Space {
    /// Drops every lease due at `now` with its keys (one revision for all).
    fn expire(&mut self, now: Instant) {
        let mut bumped = false;
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(lease) = self.leases.remove(&id) {
                for key in lease.keys {
                    if self.keys.remove(&key).is_some() && !bumped {
                        self.revision += 1;
                        bumped = true;
                    }
                }
            }
        }
    }

    fn holds(&self, compare: &Compare) -> bool {
        match compare {
            Compare::Revision(key, revision) => {
                self.keys.get(key).map_or(0, |s| s.mod_revision) == *revision
            }
            Compare::Value(key, value) => self.keys.get(key).is_some_and(|s| s.value == *value),
        }
    }

    /// Detaches `key` from the lease it went with.
    fn detach(&mut self, key: &[u8], lease: LeaseId) {
        if let Some(lease) = self.leases.get_mut(&lease) {
            lease.keys.remove(key);
        }
    }

    /// Makes one write at `revision`; what `key` held before.
    fn apply(&mut self, op: Op, revision: i64) -> (Vec<u8>, Option<Stored>) {
        match op {
            Op::Put { key, value, lease } => {
                let before = self.keys.get(&key).cloned();
                if let Some(old) = &before {
                    self.detach(&key, old.lease);
                }
                if let Some(held) = self.leases.get_mut(&lease) {
                    held.keys.insert(key.clone());
                }
                let create_revision = before.as_ref().map_or(revision, |s| s.create_revision);
                self.keys.insert(
                    key.clone(),
                    Stored {
                        value,
                        create_revision,
                        mod_revision: revision,
                        lease,
                    },
                );
                (key, before)
            }
            Op::Delete { key } => {
                let before = self.keys.remove(&key);
                if let Some(old) = &before {
                    self.detach(&key, old.lease);
                }
                (key, before)
            }
        }
    }

    /// Puts back what `apply` changed, newest first.
    fn undo(&mut self, changed: Vec<(Vec<u8>, Option<Stored>)>, revision: i64) {
        for (key, before) in changed.into_iter().rev() {
            if let Some(now) = self.keys.remove(&key) {
                self.detach(&key, now.lease);
            }
            if let Some(before) = before {
                if let Some(held) = self.leases.get_mut(&before.lease) {
                    held.keys.insert(key.clone());
                }
                self.keys.insert(key, before);
            }
        }
        self.revision = revision;
    }
}

/// Keys in this process, optionally kept in a durable file. Shared
/// behind an `Arc`.
#[derive(Debug)]
pub(crate) struct MemoryKv {
    space: Mutex<Space>,
    file: Option<DurableFile>,
}

impl MemoryKv {
    /// A store holding what `file` keeps (nothing without one; loaded keys
    /// at revision 1).
    pub(crate) fn open(file: Option<DurableFile>) -> Result<MemoryKv, RegistryError> {
        let mut space = Space::default();
        if let Some(file) = &file {
            for (key, value) in file.load()? {
                space.revision = 1;
                space.keys.insert(
                    key,
                    Stored {
                        value,
                        create_revision: 1,
                        mod_revision: 1,
                        lease: 0,
                    },
                );
            }
        }
        Ok(MemoryKv {
            space: Mutex::new(space),
            file,
        })
    }

    fn space(&self) -> MutexGuard<'_, Space> {
        let mut space = self.space.lock().unwrap_or_else(PoisonError::into_inner);
        space.expire(Instant::now());
        space
    }

    /// Saves the durable keys when `changed` touched one.
    fn save(&self, space: &Space, changed: &[(Vec<u8>, Option<Stored>)]) -> Result<(), KvError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        if !changed.iter().any(|(key, _)| DurableFile::keeps(key)) {
            return Ok(());
        }
        let kept = space
            .keys
            .iter()
            .filter(|(key, _)| DurableFile::keeps(key))
            .map(|(key, stored)| (key.as_slice(), stored.value.as_slice()));
        file.save(kept).map_err(KvError::Durable)
    }
}

fn entry(key: &[u8], stored: &Stored, keys_only: bool) -> Entry {
    Entry {
        key: key.to_vec(),
        value: if keys_only {
            Vec::new()
        } else {
            stored.value.clone()
        },
        create_revision: stored.create_revision,
        mod_revision: stored.mod_revision,
        lease: stored.lease,
    }
}

#[tonic::async_trait]
impl Kv for MemoryKv {
    async fn get(&self, key: &[u8]) -> Result<Option<Entry>, KvError> {
        Ok(self.space().keys.get(key).map(|s| entry(key, s, false)))
    }

    async fn range(&self, prefix: &[u8], keys_only: bool) -> Result<Vec<Entry>, KvError> {
        let space = self.space();
        Ok(space
            .keys
            .range(prefix.to_vec()..)
            .take_while(|(key, _)| key.starts_with(prefix))
            .map(|(key, stored)| entry(key, stored, keys_only))
            .collect())
    }

    async fn txn(&self, txn: Txn) -> Result<Outcome, KvError> {
        let mut space = self.space();
        let before = space.revision;
        let gone = txn.success.iter().find_map(|op| match op {
            Op::Put { lease, .. } if *lease != 0 && !space.leases.contains_key(lease) => {
                Some(*lease)
            }
            _ => None,
        });
        if let Some(lease) = gone {
            return Err(KvError::LeaseGone(lease));
        }
        if !txn.compare.iter().all(|c| space.holds(c)) {
            return Ok(Outcome {
                succeeded: false,
                revision: before,
            });
        }
        if txn.success.is_empty() {
            return Ok(Outcome {
                succeeded: true,
                revision: before,
            });
        }
        let revision = before + 1;
        let changed: Vec<_> = txn
            .success
            .into_iter()
            .map(|op| space.apply(op, revision))
            .collect();
        // etcd moves its revision only when something was written.
        let wrote = changed
            .iter()
            .any(|(key, old)| old.is_some() || space.keys.contains_key(key));
        if !wrote {
            return Ok(Outcome {
                succeeded: true,
                revision: before,
            });
        }
        space.revision = revision;
        if let Err(error) = self.save(&space, &changed) {
            space.undo(changed, before);
            return Err(error);
        }
        Ok(Outcome {
            succeeded: true,
            revision,
        })
    }

    async fn grant(&self, ttl: Duration) -> Result<(LeaseId, Duration), KvError> {
        let mut space = self.space();
        space.last_lease += 1;
        let id = space.last_lease;
        let deadline = Instant::now() + ttl;
        space.deadlines.insert((deadline, id));
        space.leases.insert(
            id,
            Lease {
                ttl,
                deadline,
                keys: BTreeSet::new(),
            },
        );
        Ok((id, ttl))
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Option<Duration>, KvError> {
        let mut space = self.space();
        let Some(held) = space.leases.get_mut(&lease) else {
            return Ok(None);
        };
        let (old, ttl) = (held.deadline, held.ttl);
        held.deadline = Instant::now() + ttl;
        let new = held.deadline;
        space.deadlines.remove(&(old, lease));
        space.deadlines.insert((new, lease));
        Ok(Some(ttl))
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), KvError> {
        let mut space = self.space();
        let Some(held) = space.leases.remove(&lease) else {
            return Ok(());
        };
        space.deadlines.remove(&(held.deadline, lease));
        let mut bumped = false;
        for key in held.keys {
            if space.keys.remove(&key).is_some() && !bumped {
                space.revision += 1;
                bumped = true;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, value: &str, lease: LeaseId) -> Op {
        Op::Put {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            lease,
        }
    }

    /// One revision per transaction that writes; create and mod revisions
    /// per key; compares on revision, absence and value.
    #[tokio::test]
    async fn revisions_and_compares() {
        let kv = MemoryKv::open(None).unwrap();
        let first = Txn {
            compare: vec![Compare::absent(b"a".to_vec())],
            success: vec![put("a", "1", 0), put("b", "1", 0)],
        };
        assert_eq!(
            kv.txn(first.clone()).await.unwrap(),
            Outcome {
                succeeded: true,
                revision: 1
            }
        );
        assert!(!kv.txn(first).await.unwrap().succeeded);
        let a = kv.get(b"a").await.unwrap().unwrap();
        assert_eq!((a.create_revision, a.mod_revision), (1, 1));
        let again = Txn::if_unchanged(b"a", 1, put("a", "2", 0));
        assert_eq!(kv.txn(again).await.unwrap().revision, 2);
        let a = kv.get(b"a").await.unwrap().unwrap();
        assert_eq!((a.create_revision, a.mod_revision), (1, 2));
        let by_value = Txn {
            compare: vec![Compare::Value(b"a".to_vec(), b"2".to_vec())],
            success: vec![Op::Delete { key: b"a".to_vec() }],
        };
        assert_eq!(kv.txn(by_value).await.unwrap().revision, 3);
        let nothing = Txn::write(Op::Delete { key: b"a".to_vec() });
        assert_eq!(
            kv.txn(nothing).await.unwrap().revision,
            3,
            "no write, no revision"
        );
        let keys: Vec<Vec<u8>> = kv
            .range(b"", true)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.key)
            .collect();
        assert_eq!(keys, [b"b".to_vec()]);
    }

    /// A lease's keys go when it expires or is revoked; keeping it alive
    /// moves its deadline; a write on a gone lease is refused.
    #[tokio::test(start_paused = true)]
    async fn leases() {
        let kv = MemoryKv::open(None).unwrap();
        let ttl = Duration::from_secs(2);
        let (short, granted) = kv.grant(ttl).await.unwrap();
        assert_eq!(granted, ttl);
        let (other, _) = kv.grant(ttl).await.unwrap();
        kv.txn(Txn::write(put("s", "1", short))).await.unwrap();
        kv.txn(Txn::write(put("o", "1", other))).await.unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(kv.keep_alive(other).await.unwrap(), Some(ttl));
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(kv.get(b"s").await.unwrap(), None, "expired with its lease");
        assert!(kv.get(b"o").await.unwrap().is_some(), "kept alive");
        assert_eq!(kv.keep_alive(short).await.unwrap(), None);
        let refused = kv.txn(Txn::write(put("s", "2", short))).await;
        assert!(matches!(refused, Err(KvError::LeaseGone(id)) if id == short));
        kv.revoke(other).await.unwrap();
        assert!(kv.range(b"", false).await.unwrap().is_empty());
    }
}
