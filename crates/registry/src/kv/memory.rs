//! The in-memory backend of the key-value seam: etcd's revision semantics
//! (one revision per transaction that writes, create and mod revisions per
//! key), leases on the tokio clock (expired when due by
//! [`MemoryKv::expire_on_time`], and in any case before the store is next
//! used) and watches from the next revision (no history is kept: an older
//! start is answered as compacted), in this process. Values are bytes, as
//! in etcd: the registry in this process writes the same records as over
//! etcd. Keys under the prefixes its durable file was handed (see
//! [`crate::durable`]) are saved with each transaction that touches them,
//! and a transaction the disk refused is undone.

use super::{Batch, Compare, Entry, Event, Kv, KvError, LeaseId, Op, Outcome, Txn, Watch};
use crate::durable::{DurableFile, StateFileError};
use futures_util::FutureExt;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
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

/// Where a watch's batches go.
#[derive(Debug)]
struct Watcher {
    prefix: Vec<u8>,
    from: i64,
    tx: mpsc::UnboundedSender<Batch>,
}

#[derive(Debug, Default)]
struct Space {
    revision: i64,
    keys: BTreeMap<Vec<u8>, Stored>,
    leases: HashMap<LeaseId, Lease>,
    /// Leases by deadline: expiry looks at the first only.
    deadlines: BTreeSet<(Instant, LeaseId)>,
    last_lease: LeaseId,
    watchers: Vec<Watcher>,
}

impl Space {
    /// Drops every lease due at `now` with its keys (one revision for all).
    fn expire(&mut self, now: Instant) {
        let mut gone = Vec::new();
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(lease) = self.leases.remove(&id) {
                gone.extend(lease.keys);
            }
        }
        self.remove(gone);
    }

    /// Removes the keys of gone leases, in one revision when any existed.
    fn remove(&mut self, keys: impl IntoIterator<Item = Vec<u8>>) {
        let revision = self.revision + 1;
        let events: Vec<Event> = keys
            .into_iter()
            .filter(|key| self.keys.remove(key).is_some())
            .map(|key| Event::Delete { key, revision })
            .collect();
        if !events.is_empty() {
            self.revision = revision;
            self.notify(events);
        }
    }

    /// Tells each watch the events under its prefix.
    fn notify(&mut self, events: Vec<Event>) {
        let revision = self.revision;
        self.watchers.retain(|watcher| {
            let mine: Vec<Event> = events
                .iter()
                .filter(|e| e.revision() >= watcher.from && key_of(e).starts_with(&watcher.prefix))
                .cloned()
                .collect();
            mine.is_empty()
                || watcher
                    .tx
                    .send(Batch {
                        events: mine,
                        revision,
                    })
                    .is_ok()
        });
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

fn key_of(event: &Event) -> &[u8] {
    match event {
        Event::Put(entry) => &entry.key,
        Event::Delete { key, .. } => key,
    }
}

/// Keys in this process, optionally kept in a durable file. Shared
/// behind an `Arc`.
#[derive(Debug)]
pub(crate) struct MemoryKv {
    space: Arc<Mutex<Space>>,
    file: Option<DurableFile>,
    /// Wakes [`MemoryKv::expire_on_time`]: a lease was granted, and may be
    /// due before any other.
    granted: Arc<Notify>,
}

impl MemoryKv {
    /// A store holding what `file` keeps (nothing without one; loaded keys
    /// at revision 1).
    pub(crate) fn open(file: Option<DurableFile>) -> Result<MemoryKv, StateFileError> {
        let mut space = Space {
            // Lease ids start at a random point, as etcd's are unique across
            // its lifetime: a lease id an executor kept from before a
            // restart must not name a lease granted since (its heartbeat
            // would keep another registration alive, and it would never
            // register again).
            last_lease: first_lease_id(),
            ..Space::default()
        };
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
            space: Arc::new(Mutex::new(space)),
            file,
            granted: Arc::new(Notify::new()),
        })
    }

    /// Expires each lease when it is due, as etcd does, rather than when
    /// the store is next used; runs until the store is dropped.
    pub(crate) fn expire_on_time(&self) -> impl Future<Output = ()> + Send + 'static {
        let space = Arc::downgrade(&self.space);
        let granted = self.granted.clone();
        async move {
            loop {
                let next = {
                    let Some(space) = space.upgrade() else {
                        return;
                    };
                    lock(&space).deadlines.first().map(|(at, _)| *at)
                };
                match next {
                    Some(at) => {
                        tokio::select! {
                            () = tokio::time::sleep_until(at) => {}
                            () = granted.notified() => {}
                        }
                    }
                    None => granted.notified().await,
                }
            }
        }
    }

    fn space(&self) -> MutexGuard<'_, Space> {
        lock(&self.space)
    }

    /// Saves the durable keys when `changed` touched one.
    fn save(&self, space: &Space, changed: &[(Vec<u8>, Option<Stored>)]) -> Result<(), KvError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        if !changed.iter().any(|(key, _)| file.keeps(key)) {
            return Ok(());
        }
        let kept = space
            .keys
            .iter()
            .filter(|(key, _)| file.keeps(key))
            .map(|(key, stored)| (key.as_slice(), stored.value.as_slice()));
        file.save(kept).map_err(KvError::Durable)
    }
}

/// A random lease id to count on from: 52 bits, so ids stay positive and
/// exact in JSON numbers, and two runs' ranges practically never meet.
fn first_lease_id() -> LeaseId {
    let random = uuid::Uuid::new_v4().as_u128() as u64;
    LeaseId::try_from(random >> 12).unwrap_or(1)
}

/// The space, its due leases expired.
fn lock(space: &Mutex<Space>) -> MutexGuard<'_, Space> {
    let mut space = space.lock().unwrap_or_else(PoisonError::into_inner);
    space.expire(Instant::now());
    space
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

    async fn range(&self, prefix: &[u8], keys_only: bool) -> Result<(Vec<Entry>, i64), KvError> {
        let space = self.space();
        let entries = space
            .keys
            .range(prefix.to_vec()..)
            .take_while(|(key, _)| key.starts_with(prefix))
            .map(|(key, stored)| entry(key, stored, keys_only))
            .collect();
        Ok((entries, space.revision))
    }

    async fn revision(&self) -> Result<i64, KvError> {
        Ok(self.space().revision)
    }

    async fn watch(&self, prefix: &[u8], from: i64) -> Result<Box<dyn Watch>, KvError> {
        let mut space = self.space();
        if from <= space.revision {
            return Err(KvError::Compacted {
                compacted: space.revision + 1,
            });
        }
        let (tx, rx) = mpsc::unbounded_channel();
        space.watchers.push(Watcher {
            prefix: prefix.to_vec(),
            from,
            tx: tx.clone(),
        });
        Ok(Box::new(MemoryWatch {
            rx,
            tx,
            space: self.space.clone(),
        }))
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
        let events = changed
            .into_iter()
            .filter_map(|(key, old)| match space.keys.get(&key) {
                Some(stored) => Some(Event::Put(entry(&key, stored, false))),
                None => old.map(|_| Event::Delete { key, revision }),
            })
            .collect();
        space.notify(events);
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
        self.granted.notify_one();
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
        space.remove(held.keys);
        Ok(())
    }
}

/// A watch on the memory backend.
struct MemoryWatch {
    rx: mpsc::UnboundedReceiver<Batch>,
    /// Its own sender, for progress notifications.
    tx: mpsc::UnboundedSender<Batch>,
    space: Arc<Mutex<Space>>,
}

#[tonic::async_trait]
impl Watch for MemoryWatch {
    async fn next(&mut self) -> Result<Batch, KvError> {
        // The store keeps a sender of every watch: the channel stays open.
        Ok(self.rx.recv().await.unwrap_or_default())
    }

    fn request_progress(&self) {
        let revision = lock(&self.space).revision;
        let _ = self.tx.send(Batch {
            events: Vec::new(),
            revision,
        });
    }
}

// What both backends do alike is tested once for both (`kv/tests.rs`);
// here, what only this one does.
#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, lease: LeaseId) -> Op {
        Op::Put {
            key: key.as_bytes().to_vec(),
            value: b"1".to_vec(),
            lease,
        }
    }

    /// Leases run on the tokio clock (so paused-time tests can move it):
    /// a lease is gone just after its TTL, and keeping it alive moves its
    /// deadline by a whole TTL from then.
    #[tokio::test(start_paused = true)]
    async fn leases_on_the_tokio_clock() {
        let kv = MemoryKv::open(None).unwrap();
        let ttl = Duration::from_secs(2);
        let (short, granted) = kv.grant(ttl).await.unwrap();
        assert_eq!(granted, ttl);
        let (other, _) = kv.grant(ttl).await.unwrap();
        kv.txn(Txn::write(put("s", short))).await.unwrap();
        kv.txn(Txn::write(put("o", other))).await.unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(kv.keep_alive(other).await.unwrap(), Some(ttl));
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(kv.get(b"s").await.unwrap(), None, "expired with its lease");
        assert!(kv.get(b"o").await.unwrap().is_some(), "kept alive");
    }

    /// No history is kept: a watch from a revision already made is
    /// answered as compacted, from the next one it starts.
    #[tokio::test]
    async fn watches_start_at_the_next_revision() {
        let kv = MemoryKv::open(None).unwrap();
        kv.txn(Txn::write(put("/p/a", 0))).await.unwrap();
        let stale = kv.watch(b"/p/", 1).await.err();
        assert!(matches!(stale, Some(KvError::Compacted { compacted: 2 })));
        assert!(kv.watch(b"/p/", 2).await.is_ok());
    }
}
