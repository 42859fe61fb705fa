//! The dispatcher's view of the registry: the newest snapshot (read without
//! a lock) and a short history so a caller can pin the version it showed a
//! model.

use arc_swap::ArcSwap;
use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};
use toolmesh::Snapshot;

/// A pinned version that is no longer held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "snapshot {pinned} is not held by this dispatcher (held: {oldest}..={newest}); list the tools again and pin the version it returns"
)]
pub struct PinExpired {
    /// The version asked for.
    pub pinned: u64,
    /// The oldest version still held.
    pub oldest: u64,
    /// The newest version.
    pub newest: u64,
}

/// Newest snapshot plus recent history.
#[derive(Debug)]
pub(crate) struct SnapshotView {
    current: ArcSwap<Snapshot>,
    history: Mutex<VecDeque<Arc<Snapshot>>>,
    keep: usize,
}

impl SnapshotView {
    pub(crate) fn new(first: Arc<Snapshot>, keep: usize) -> Self {
        SnapshotView {
            current: ArcSwap::new(first.clone()),
            history: Mutex::new(VecDeque::from([first])),
            keep: keep.max(1),
        }
    }

    /// The newest snapshot; no lock.
    pub(crate) fn current(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Installs a newer snapshot. A new registry epoch restarts versions, so
    /// history from the old epoch is dropped.
    pub(crate) fn install(&self, snapshot: Arc<Snapshot>) {
        let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        if history
            .back()
            .is_some_and(|last| last.epoch() != snapshot.epoch())
        {
            history.clear();
        }
        history.push_back(snapshot.clone());
        while history.len() > self.keep {
            history.pop_front();
        }
        self.current.store(snapshot);
    }

    /// `0` is the newest; otherwise the pinned version if still held.
    pub(crate) fn get(&self, version: u64) -> Result<Arc<Snapshot>, PinExpired> {
        let current = self.current();
        if version == 0 || version == current.version() {
            return Ok(current);
        }
        let history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = history.iter().find(|s| s.version() == version) {
            return Ok(found.clone());
        }
        Err(PinExpired {
            pinned: version,
            oldest: history.front().map_or(current.version(), |s| s.version()),
            newest: current.version(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins resolve while held; an evicted pin names the oldest held version.
    #[test]
    fn pins_and_expiry() {
        let s0 = Arc::new(Snapshot::empty("e"));
        let view = SnapshotView::new(s0.clone(), 3);
        let mut last = s0;
        for _ in 0..4 {
            last = Arc::new(last.next().finish());
            view.install(last.clone());
        }
        assert_eq!(view.current().version(), 4);
        assert_eq!(view.get(0).unwrap().version(), 4);
        assert_eq!(view.get(2).unwrap().version(), 2);
        let err = view.get(1).unwrap_err();
        assert_eq!((err.oldest, err.newest), (2, 4));
        assert!(err.to_string().contains("list the tools again"));
    }
}
