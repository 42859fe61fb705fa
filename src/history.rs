//! The newest snapshot (read without a lock) and a ring of recent ones, so a
//! caller can pin the version it showed a model; shared by the registry and
//! the dispatcher.

use crate::Snapshot;
use arc_swap::ArcSwap;
use std::collections::VecDeque;
use std::sync::{Arc, PoisonError, RwLock};

/// A version asked for that is no longer (or not yet) held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("snapshot version {version} is not held: this server holds versions {oldest} to {newest}")]
pub struct NotHeld {
    /// The version asked for.
    pub version: u64,
    /// The oldest version still held.
    pub oldest: u64,
    /// The newest version.
    pub newest: u64,
}

/// The newest snapshot plus the last few, oldest first.
#[derive(Debug)]
pub struct SnapshotHistory {
    current: ArcSwap<Snapshot>,
    ring: RwLock<VecDeque<Arc<Snapshot>>>,
    keep: usize,
}

impl SnapshotHistory {
    /// A history holding `first`, keeping at most `keep` (at least 1) snapshots.
    pub fn new(first: Arc<Snapshot>, keep: usize) -> Self {
        let keep = keep.max(1);
        let mut ring = VecDeque::with_capacity(keep.min(1024));
        ring.push_back(first.clone());
        SnapshotHistory {
            current: ArcSwap::new(first),
            ring: RwLock::new(ring),
            keep,
        }
    }

    /// The newest snapshot; no lock.
    pub fn current(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Makes `snapshot` the newest. A new epoch restarts versions, so the
    /// history of the old one is dropped.
    pub fn install(&self, snapshot: Arc<Snapshot>) {
        let mut ring = self.ring.write().unwrap_or_else(PoisonError::into_inner);
        if ring
            .back()
            .is_some_and(|last| last.epoch() != snapshot.epoch())
        {
            ring.clear();
        }
        while ring.len() >= self.keep {
            ring.pop_front();
        }
        ring.push_back(snapshot.clone());
        self.current.store(snapshot);
    }

    /// Snapshot `version`, or the newest for 0.
    pub fn get(&self, version: u64) -> Result<Arc<Snapshot>, NotHeld> {
        let current = self.current();
        if version == 0 || version == current.version() {
            return Ok(current);
        }
        let ring = self.ring.read().unwrap_or_else(PoisonError::into_inner);
        // Versions only grow within an epoch: the ring is sorted.
        match ring.binary_search_by_key(&version, |s| s.version()) {
            Ok(at) => Ok(ring[at].clone()),
            Err(_) => Err(NotHeld {
                version,
                oldest: ring.front().map_or(current.version(), |s| s.version()),
                newest: current.version(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ring keeps the last `keep` snapshots; older and future versions
    /// are refused with an error naming what is held.
    #[test]
    fn ring_eviction_and_lookup() {
        let history = SnapshotHistory::new(Arc::new(Snapshot::empty("e")), 3);
        for _ in 0..5 {
            let next = history.current().next().finish();
            history.install(Arc::new(next));
        }
        assert_eq!(history.current().version(), 5);
        assert_eq!(history.get(0).unwrap().version(), 5);
        for v in 3..=5 {
            assert_eq!(history.get(v).unwrap().version(), v);
        }
        for v in [1, 2, 6] {
            let err = history.get(v).unwrap_err();
            assert_eq!(
                err,
                NotHeld {
                    version: v,
                    oldest: 3,
                    newest: 5
                }
            );
            assert!(err.to_string().contains("holds versions 3 to 5"), "{err}");
        }
    }

    /// A new epoch forgets the old one's versions.
    #[test]
    fn new_epoch_drops_old_history() {
        let history = SnapshotHistory::new(Arc::new(Snapshot::empty("a")), 8);
        history.install(Arc::new(history.current().next().finish()));
        history.install(Arc::new(Snapshot::empty("b")));
        assert_eq!(history.current().epoch(), "b");
        assert!(history.get(1).is_err());
    }
}
