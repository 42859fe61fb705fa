//! Where published snapshots live: the current one behind an `ArcSwap`, a
//! watch channel for subscribers, and a ring of recent ones for lookups.

use crate::error::RegistryError;
use arc_swap::ArcSwap;
use std::collections::VecDeque;
use std::sync::{Arc, PoisonError, RwLock};
use tokio::sync::watch;
use toolmesh::Snapshot;

/// The published snapshots. Only the registry's single writer calls
/// [`Store::publish`]; readers never wait for it.
pub(crate) struct Store {
    current: ArcSwap<Snapshot>,
    sender: watch::Sender<Arc<Snapshot>>,
    history: RwLock<VecDeque<Arc<Snapshot>>>,
    capacity: usize,
}

impl Store {
    /// A store holding `initial`, keeping at most `capacity` (at least 1) snapshots.
    pub(crate) fn new(initial: Snapshot, capacity: usize) -> Self {
        let initial = Arc::new(initial);
        let capacity = capacity.max(1);
        let mut history = VecDeque::with_capacity(capacity);
        history.push_back(initial.clone());
        Store {
            current: ArcSwap::new(initial.clone()),
            sender: watch::Sender::new(initial),
            history: RwLock::new(history),
            capacity,
        }
    }

    /// The newest snapshot, without locking.
    pub(crate) fn current(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// A receiver that sees the newest snapshot and each one published after.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.sender.subscribe()
    }

    /// Makes `snapshot` the newest. The caller holds the writer lock, so
    /// versions arrive in order.
    pub(crate) fn publish(&self, snapshot: Snapshot) -> Arc<Snapshot> {
        let snapshot = Arc::new(snapshot);
        {
            let mut history = self.history.write().unwrap_or_else(PoisonError::into_inner);
            while history.len() >= self.capacity {
                history.pop_front();
            }
            history.push_back(snapshot.clone());
        }
        self.current.store(snapshot.clone());
        self.sender.send_replace(snapshot.clone());
        snapshot
    }

    /// Snapshot `version`, or the newest for 0.
    pub(crate) fn get(&self, version: u64) -> Result<Arc<Snapshot>, RegistryError> {
        if version == 0 {
            return Ok(self.current());
        }
        let history = self.history.read().unwrap_or_else(PoisonError::into_inner);
        let oldest = history.front().map_or(0, |s| s.version());
        let newest = history.back().map_or(0, |s| s.version());
        version
            .checked_sub(oldest)
            .and_then(|offset| usize::try_from(offset).ok())
            .and_then(|offset| history.get(offset))
            .filter(|s| s.version() == version)
            .cloned()
            .ok_or(RegistryError::SnapshotNotHeld {
                version,
                oldest,
                newest,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ring keeps the last `capacity` snapshots; older and future versions
    /// are refused with an error naming the oldest held one.
    #[test]
    fn history_ring_and_eviction() {
        let store = Store::new(Snapshot::empty("e"), 3);
        for _ in 0..5 {
            let next = store.current().next().finish();
            store.publish(next);
        }
        assert_eq!(store.current().version(), 5);
        assert_eq!(store.get(0).unwrap().version(), 5);
        for v in 3..=5 {
            assert_eq!(store.get(v).unwrap().version(), v);
        }
        for v in [1, 2, 6] {
            let err = store.get(v).unwrap_err();
            assert_eq!(
                err,
                RegistryError::SnapshotNotHeld {
                    version: v,
                    oldest: 3,
                    newest: 5
                }
            );
            assert!(err.to_string().contains("holds versions 3 to 5"), "{err}");
        }
    }

    /// Subscribers see the newest snapshot after a publish.
    #[test]
    fn subscribers_see_the_newest() {
        let store = Store::new(Snapshot::empty("e"), 2);
        let mut rx = store.subscribe();
        assert_eq!(rx.borrow_and_update().version(), 0);
        let next = store.current().next().finish();
        store.publish(next);
        assert!(rx.has_changed().unwrap());
        assert_eq!(rx.borrow_and_update().version(), 1);
    }
}
