//! A sliding window of call outcomes, lock-free: calls, errors and
//! (optionally) a duration histogram per slot of time, where every counter
//! carries the slot it counts for, so the call path restarts a stale slot
//! with one compare-and-swap instead of a lock, and memory stays fixed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use toolmesh_telemetry::metrics::DURATION_BUCKETS;

/// Calls and errors counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) calls: u64,
    pub(crate) errors: u64,
}

impl Counts {
    /// Errors per call (0 without calls).
    pub(crate) fn rate(self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.errors as f64 / self.calls as f64
        }
    }
}

/// One counter of one slot: the slot's stamp in the high 32 bits, the
/// count in the low 32. Stamps are slot indexes (offset by the slot count,
/// so a counter never written, stamp 0, is outside every window) and
/// compared with wrapping arithmetic: exact while a process counts fewer
/// than 2^31 slots (68 years of one-second slots).
#[derive(Debug, Default)]
struct Stamped(AtomicU64);

fn pack(stamp: u32, count: u32) -> u64 {
    (u64::from(stamp) << 32) | u64::from(count)
}

fn unpack(packed: u64) -> (u32, u32) {
    ((packed >> 32) as u32, packed as u32)
}

impl Stamped {
    /// Counts one in slot `stamp`: a counter of an older slot starts over;
    /// a recorder late by a whole window (its slot is older than the
    /// counter's) is dropped.
    fn add(&self, stamp: u32) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |packed| {
                let (at, count) = unpack(packed);
                if at == stamp {
                    Some(pack(stamp, count.saturating_add(1)))
                } else if (stamp.wrapping_sub(at) as i32) > 0 {
                    Some(pack(stamp, 1))
                } else {
                    None
                }
            });
    }

    /// The count, when its slot is one of the `slots` ending with `newest`.
    fn count(&self, newest: u32, slots: u32) -> u64 {
        let (at, count) = unpack(self.0.load(Ordering::Relaxed));
        if newest.wrapping_sub(at) < slots {
            u64::from(count)
        } else {
            0
        }
    }
}

/// Outcomes over the last `span`, counted in slots of `span / slots`.
#[derive(Debug)]
pub(crate) struct Window {
    slot_ms: u64,
    slots: u32,
    /// Counters per slot: calls, errors, then one per duration bucket
    /// (none for a window without durations).
    width: usize,
    counters: Box<[Stamped]>,
}

/// Counter offsets within a slot.
const CALLS: usize = 0;
const ERRORS: usize = 1;
const FIRST_BUCKET: usize = 2;

impl Window {
    /// A window of calls and errors over `span`, cut into `slots` (at least
    /// one, of at least a millisecond each).
    pub(crate) fn new(span: Duration, slots: u32) -> Window {
        Window::with_width(span, slots, FIRST_BUCKET)
    }

    /// Like [`new`](Self::new), with call durations in the buckets of the
    /// duration metrics (so a quantile here agrees with Prometheus').
    pub(crate) fn timed(span: Duration, slots: u32) -> Window {
        Window::with_width(span, slots, FIRST_BUCKET + DURATION_BUCKETS.len() + 1)
    }

    fn with_width(span: Duration, slots: u32, width: usize) -> Window {
        let slots = slots.max(1);
        let ms = u64::try_from(span.as_millis()).unwrap_or(u64::MAX);
        Window {
            slot_ms: (ms / u64::from(slots)).max(1),
            slots,
            width,
            counters: (0..slots as usize * width)
                .map(|_| Stamped::default())
                .collect(),
        }
    }

    /// The stamp of the slot holding `now_ms` and where its counters start.
    fn slot(&self, now_ms: u64) -> (u32, usize) {
        let index = now_ms / self.slot_ms + u64::from(self.slots);
        let position = (index % u64::from(self.slots)) as usize * self.width;
        (index as u32, position)
    }

    /// Counts one outcome at `now_ms` (milliseconds on a monotonic clock).
    pub(crate) fn record(&self, now_ms: u64, error: bool) {
        let (stamp, at) = self.slot(now_ms);
        self.counters[at + CALLS].add(stamp);
        if error {
            self.counters[at + ERRORS].add(stamp);
        }
    }

    /// Counts one outcome that took `seconds` (its duration is kept only
    /// by a [`timed`](Self::timed) window).
    pub(crate) fn record_timed(&self, now_ms: u64, error: bool, seconds: f64) {
        self.record(now_ms, error);
        if self.width > FIRST_BUCKET {
            let (stamp, at) = self.slot(now_ms);
            let bucket = DURATION_BUCKETS
                .iter()
                .position(|bound| seconds <= *bound)
                .unwrap_or(DURATION_BUCKETS.len());
            self.counters[at + FIRST_BUCKET + bucket].add(stamp);
        }
    }

    /// Counter `offset` summed over the slots of the window ending at `now_ms`.
    fn sum(&self, now_ms: u64, offset: usize) -> u64 {
        let (newest, _) = self.slot(now_ms);
        self.counters
            .chunks(self.width)
            .map(|slot| slot[offset].count(newest, self.slots))
            .sum()
    }

    /// What was counted in the window that ends at `now_ms`.
    pub(crate) fn counts(&self, now_ms: u64) -> Counts {
        Counts {
            calls: self.sum(now_ms, CALLS),
            errors: self.sum(now_ms, ERRORS),
        }
    }

    /// The `q` quantile (0 to 1) of the durations in the window ending at
    /// `now_ms`, as Prometheus' `histogram_quantile` estimates it: linear
    /// within the bucket it falls in, the highest finite bound when it
    /// falls past the last. `None` without timed outcomes.
    pub(crate) fn quantile(&self, now_ms: u64, q: f64) -> Option<f64> {
        let buckets = self.width.checked_sub(FIRST_BUCKET).filter(|n| *n > 0)?;
        let counts: Vec<u64> = (0..buckets)
            .map(|b| self.sum(now_ms, FIRST_BUCKET + b))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut below = 0u64;
        for (bucket, count) in counts.iter().enumerate() {
            if *count > 0 && (below + count) as f64 >= rank {
                let Some(upper) = DURATION_BUCKETS.get(bucket) else {
                    break;
                };
                let lower = bucket.checked_sub(1).map_or(0.0, |b| DURATION_BUCKETS[b]);
                let within = (rank - below as f64) / *count as f64;
                return Some(lower + (upper - lower) * within);
            }
            below += count;
        }
        DURATION_BUCKETS.last().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: Option<f64>, want: f64) -> bool {
        got.is_some_and(|got| (got - want).abs() < 1e-12)
    }

    /// Outcomes count while inside the window and drop out after it.
    #[test]
    fn slides() {
        let window = Window::new(Duration::from_secs(3), 30);
        window.record(0, true);
        window.record(50, false);
        window.record(1_500, false);
        assert_eq!(
            window.counts(1_600),
            Counts {
                calls: 3,
                errors: 1
            }
        );
        assert_eq!(window.counts(3_050).calls, 1, "the first two slid out");
        assert_eq!(window.counts(10_000), Counts::default());
        window.record(10_000, true);
        assert_eq!(window.counts(10_000).rate(), 1.0);
        assert_eq!(Counts::default().rate(), 0.0);
    }

    /// A minute of one-second slots: each second's calls stay counted for
    /// 60 s and no longer, a slot reused a minute later starts over, a
    /// recorder a whole window late is dropped, and a window never written
    /// counts nothing at time 0.
    #[test]
    fn a_minute_of_seconds() {
        let minute = Window::timed(Duration::from_secs(60), 60);
        assert_eq!(minute.counts(0), Counts::default());
        for second in 0..60u64 {
            minute.record(second * 1000 + 999, second % 10 == 0);
        }
        assert_eq!(
            minute.counts(59_999),
            Counts {
                calls: 60,
                errors: 6
            }
        );
        // At 60.0 s the slot of second 0 is the newest again: it restarts.
        assert_eq!(minute.counts(60_000).calls, 59);
        minute.record(60_000, false);
        assert_eq!(
            minute.counts(60_000),
            Counts {
                calls: 60,
                errors: 5
            }
        );
        // A recorder still at second 0 is a whole window late: dropped.
        minute.record(500, true);
        assert_eq!(minute.counts(60_000).errors, 5);
        assert_eq!(minute.counts(119_999).calls, 1, "only second 60 is left");
        assert_eq!(minute.counts(120_000).calls, 0);
    }

    /// The quantile agrees with Prometheus' estimate: linear inside the
    /// bucket the rank falls in, the highest finite bound past the last;
    /// untimed windows have none.
    #[test]
    fn quantiles() {
        let window = Window::timed(Duration::from_secs(60), 60);
        assert_eq!(window.quantile(0, 0.95), None);
        // 100 calls: 90 in (0.005, 0.01], 10 in (0.1, 0.25].
        for i in 0..100 {
            let seconds = if i < 90 { 0.008 } else { 0.2 };
            window.record_timed(1_000, false, seconds);
        }
        // Rank 95 is the 5th of 10 in (0.1, 0.25]: 0.1 + 0.15 * 0.5.
        assert!(close(window.quantile(1_000, 0.95), 0.175));
        // Rank 45 is in the middle of (0.005, 0.01].
        assert!(close(window.quantile(1_000, 0.45), 0.0075));
        window.record_timed(2_000, false, 9_999.0);
        assert_eq!(window.quantile(2_000, 1.0), Some(300.0));
        // A bound itself falls in its own bucket (`le`).
        let exact = Window::timed(Duration::from_secs(60), 60);
        exact.record_timed(0, false, 0.01);
        assert!(close(exact.quantile(0, 1.0), 0.01));
        let untimed = Window::new(Duration::from_secs(60), 60);
        untimed.record_timed(0, false, 1.0);
        assert_eq!(untimed.counts(0).calls, 1);
        assert_eq!(untimed.quantile(0, 0.5), None);
    }

    /// Threads recording at once lose nothing.
    #[test]
    fn concurrent_records_all_count() {
        let window = std::sync::Arc::new(Window::timed(Duration::from_secs(60), 60));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let window = window.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        window.record_timed(5_000 + i % 3, (i + t) % 4 == 0, 0.001);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(
            window.counts(5_002),
            Counts {
                calls: 40_000,
                errors: 10_000
            }
        );
        assert!(close(window.quantile(5_002, 1.0), 0.001));
    }
}
