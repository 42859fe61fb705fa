//! Where published snapshots live: a [`SnapshotHistory`] for lookups and a
//! watch channel for subscribers.

use std::sync::Arc;
use tokio::sync::watch;
use toolmesh::{NotHeld, Snapshot, SnapshotHistory};

/// The published snapshots. Only the registry's single writer calls
/// [`Published::publish`]; readers never wait for it.
pub(crate) struct Published {
    history: SnapshotHistory,
    sender: watch::Sender<Arc<Snapshot>>,
}

impl Published {
    /// A store holding `initial`, keeping at most `capacity` (at least 1) snapshots.
    pub(crate) fn new(initial: Snapshot, capacity: usize) -> Self {
        let initial = Arc::new(initial);
        Published {
            history: SnapshotHistory::new(initial.clone(), capacity),
            sender: watch::Sender::new(initial),
        }
    }

    /// The newest snapshot, without locking.
    pub(crate) fn current(&self) -> Arc<Snapshot> {
        self.history.current()
    }

    /// A receiver that sees the newest snapshot and each one published after.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.sender.subscribe()
    }

    /// Makes `snapshot` the newest. The caller holds the writer lock, so
    /// versions arrive in order.
    pub(crate) fn publish(&self, snapshot: Snapshot) -> Arc<Snapshot> {
        let snapshot = Arc::new(snapshot);
        self.history.install(snapshot.clone());
        self.sender.send_replace(snapshot.clone());
        snapshot
    }

    /// Receivers subscribed now.
    pub(crate) fn watchers(&self) -> usize {
        self.sender.receiver_count()
    }

    /// Snapshot `version`, or the newest for 0.
    pub(crate) fn get(&self, version: u64) -> Result<Arc<Snapshot>, NotHeld> {
        self.history.get(version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Subscribers see the newest snapshot after a publish.
    #[test]
    fn subscribers_see_the_newest() {
        let store = Published::new(Snapshot::empty("e"), 2);
        let mut rx = store.subscribe();
        assert_eq!(rx.borrow_and_update().version(), 0);
        let next = store.current().next().finish();
        store.publish(next);
        assert!(rx.has_changed().unwrap());
        assert_eq!(rx.borrow_and_update().version(), 1);
        assert_eq!(store.get(1).unwrap().version(), 1);
    }
}
