//! Heap allocations counted while the bench measures one series: the `toolmesh` binary's allocator (in bench builds) reports each to [`note`] and each release to [`note_free`]; the rest of the time counting is off and costs one relaxed load.

use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
/// Whether bytes still held are being counted ([`retained`]).
static HOLDING: AtomicBool = AtomicBool::new(false);
/// Bytes allocated less bytes released while [`HOLDING`].
static HELD: AtomicI64 = AtomicI64::new(0);

/// Notes one allocation (or reallocation) of `bytes`; the global allocator
/// of a bench build calls it for each.
#[inline]
pub fn note(bytes: usize) {
    if COUNTING.load(Relaxed) {
        ALLOCATIONS.fetch_add(1, Relaxed);
        BYTES.fetch_add(bytes as u64, Relaxed);
    }
    if HOLDING.load(Relaxed) {
        HELD.fetch_add(i64::try_from(bytes).unwrap_or(i64::MAX), Relaxed);
    }
}

/// Notes the release of `bytes` (a reallocation notes its old size here
/// and its new one to [`note`]).
#[inline]
pub fn note_free(bytes: usize) {
    if HOLDING.load(Relaxed) {
        HELD.fetch_sub(i64::try_from(bytes).unwrap_or(i64::MAX), Relaxed);
    }
}

/// What `make` builds, with the heap bytes it still holds once built
/// (allocated less released meanwhile, in the whole process: run it while
/// nothing else is going on). None for the bytes when nothing was counted:
/// a build whose allocator does not report to [`note`].
pub(crate) fn retained<T>(make: impl FnOnce() -> T) -> (T, Option<u64>) {
    let before = HELD.load(Relaxed);
    HOLDING.store(true, Relaxed);
    let made = make();
    HOLDING.store(false, Relaxed);
    let held = HELD.load(Relaxed) - before;
    (made, u64::try_from(held).ok().filter(|&held| held > 0))
}

/// What one call allocated, on average, in the whole process.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PerCall {
    /// Allocations and reallocations.
    pub allocations: f64,
    /// Bytes asked for by them.
    pub bytes: f64,
}

/// Runs `calls` calls of `call`, one after the other, counting everything
/// the process allocates meanwhile (its other tasks included, so run it
/// while nothing else is going on). None when nothing was counted: a build
/// whose allocator does not report to [`note`].
pub(crate) async fn per_call(calls: usize, mut call: impl AsyncFnMut()) -> Option<PerCall> {
    let (allocations, bytes) = (ALLOCATIONS.load(Relaxed), BYTES.load(Relaxed));
    COUNTING.store(true, Relaxed);
    for _ in 0..calls {
        call().await;
    }
    COUNTING.store(false, Relaxed);
    let allocations = ALLOCATIONS.load(Relaxed) - allocations;
    let bytes = BYTES.load(Relaxed) - bytes;
    let calls = calls.max(1) as f64;
    (allocations > 0).then(|| PerCall {
        allocations: allocations as f64 / calls,
        bytes: bytes as f64 / calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without the counting allocator (a test binary), nothing counts and
    /// the figure says so instead of reporting zero.
    #[tokio::test]
    async fn nothing_counted_is_none() {
        let figure = per_call(10, async || {
            std::hint::black_box(vec![0u8; 64]);
        })
        .await;
        assert_eq!(figure, None);
        note(64);
        assert_eq!(
            ALLOCATIONS.load(Relaxed),
            0,
            "counting is off outside a series"
        );
    }
}
