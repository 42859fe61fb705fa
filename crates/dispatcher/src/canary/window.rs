//! A sliding window of call outcomes: calls and errors per slot, the
//! oldest slot reused as time moves on, so memory stays fixed.

use std::time::Duration;

/// Slots one window is cut into.
const SLOTS: u64 = 30;

/// Calls and errors of one slot of time.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// Which slot of time (milliseconds since the start / slot length).
    index: u64,
    calls: u64,
    errors: u64,
}

/// Outcomes over the last `window`, counted in [`SLOTS`] slots.
#[derive(Debug, Clone)]
pub(crate) struct Window {
    slot_ms: u64,
    slots: Vec<Slot>,
}

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

impl Window {
    /// A window over `window` (at least one millisecond per slot).
    pub(crate) fn new(window: Duration) -> Self {
        let ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        Window {
            slot_ms: (ms / SLOTS).max(1),
            slots: vec![Slot::default(); SLOTS as usize],
        }
    }

    /// Counts one outcome at `now_ms` (milliseconds on a monotonic clock).
    pub(crate) fn record(&mut self, now_ms: u64, error: bool) {
        let index = now_ms / self.slot_ms;
        let slot = &mut self.slots[(index % SLOTS) as usize];
        if slot.index != index {
            *slot = Slot {
                index,
                ..Slot::default()
            };
        }
        slot.calls += 1;
        slot.errors += u64::from(error);
    }

    /// What was counted in the window that ends at `now_ms`.
    pub(crate) fn counts(&self, now_ms: u64) -> Counts {
        let newest = now_ms / self.slot_ms;
        self.slots
            .iter()
            .filter(|s| s.calls > 0 && s.index + SLOTS > newest && s.index <= newest)
            .fold(Counts::default(), |sum, s| Counts {
                calls: sum.calls + s.calls,
                errors: sum.errors + s.errors,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outcomes count while inside the window and drop out after it.
    #[test]
    fn slides() {
        let mut window = Window::new(Duration::from_secs(3));
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
}
