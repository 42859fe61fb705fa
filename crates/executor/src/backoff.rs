//! Doubling, jittered waits between attempts at a call that keeps failing (a registry in an outage, an upstream gone), so a fleet that lost the same server does not come back in step.

use std::time::Duration;

/// Waits that double from `initial` up to `max`, each drawn between half
/// and all of its step.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    step: Duration,
}

impl Backoff {
    /// Waits from `initial` up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            step: initial,
        }
    }

    /// The wait before the next attempt; the step after it doubles.
    pub fn next_wait(&mut self) -> Duration {
        let step = self.step;
        self.step = (self.step * 2).min(self.max);
        step.mul_f64(rand::random_range(0.5..=1.0))
    }

    /// Starts again from the first step (the call succeeded).
    pub fn reset(&mut self) {
        self.step = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps double up to the cap, each wait between half and all of its
    /// step, and a reset starts over.
    #[test]
    fn waits_double_up_to_the_cap_jittered() {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        let steps = [200, 400, 800, 1600, 3200, 6400, 10_000, 10_000];
        for step in steps {
            let wait = backoff.next_wait().as_millis();
            assert!(
                (step / 2..=step).contains(&wait),
                "waited {wait} ms on a {step} ms step"
            );
        }
        backoff.reset();
        assert!(backoff.next_wait() <= Duration::from_millis(200));
    }

    /// A fleet's waits differ: they are not all the step.
    #[test]
    fn waits_are_spread() {
        let waits: std::collections::HashSet<Duration> = (0..32)
            .map(|_| Backoff::new(Duration::from_secs(1), Duration::from_secs(1)).next_wait())
            .collect();
        assert!(waits.len() > 1, "32 executors waited the same {waits:?}");
    }
}
