//! Which lane this thread serves: a server running thread per core gives each of its threads a lane number, and a dispatcher keeps one connection per executor per lane, so a call, its upstream request and its answer stay on one thread.

use std::cell::Cell;

/// Lanes with connections of their own; threads past the last share it.
pub const SLOTS: usize = 64;

thread_local! {
    static LANE: Cell<usize> = const { Cell::new(0) };
}

/// Marks the calling thread as lane `lane` (1 and up; 0, the default, is
/// the shared multi-thread runtime).
pub fn enter(lane: usize) {
    LANE.with(|l| l.set(lane));
}

/// The connection slot of the calling thread's lane.
pub(crate) fn slot() -> usize {
    LANE.with(Cell::get).min(SLOTS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread starts on the shared slot; entering a lane moves it, and
    /// lanes past the last slot share the last.
    #[test]
    fn lanes_pick_slots() {
        std::thread::spawn(|| {
            assert_eq!(slot(), 0);
            enter(3);
            assert_eq!(slot(), 3);
            enter(SLOTS + 10);
            assert_eq!(slot(), SLOTS - 1);
        })
        .join()
        .unwrap();
    }
}
