//! Percentiles and medians over measured durations (sorted vectors, nearest rank), and the median cost of a piece of work timed in this process.

use serde::Serialize;
use std::time::Duration;

/// Latency percentiles of one series of calls, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Calls measured (after warm-up).
    pub calls: usize,
    /// Calls that failed (counted, not timed).
    pub errors: usize,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Arithmetic mean.
    pub mean_us: f64,
    /// Slowest call.
    pub max_us: f64,
}

impl Latency {
    /// Summarises `samples` (in any order); `errors` failed calls are
    /// reported beside them.
    pub(crate) fn from_samples(mut samples: Vec<Duration>, errors: usize) -> Latency {
        samples.sort_unstable();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let mean = if samples.is_empty() {
            0.0
        } else {
            samples.iter().map(|d| us(*d)).sum::<f64>() / samples.len() as f64
        };
        Latency {
            calls: samples.len(),
            errors,
            p50_us: us(percentile(&samples, 50.0)),
            p90_us: us(percentile(&samples, 90.0)),
            p99_us: us(percentile(&samples, 99.0)),
            mean_us: mean,
            max_us: us(samples.last().copied().unwrap_or_default()),
        }
    }
}

/// The `p`th percentile (0–100) of `sorted` by nearest rank: the smallest
/// sample with at least p % of the samples at or below it. Zero when empty.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p.clamp(0.0, 100.0) / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of `samples` (any order), by nearest rank.
pub(crate) fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    percentile(&sorted, 50.0)
}

/// The largest of `samples`, zero when empty.
pub(crate) fn max(samples: &[Duration]) -> Duration {
    samples.iter().copied().max().unwrap_or_default()
}

/// Microseconds as f64.
pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Milliseconds as f64.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Calls per batch, and batches, of the in-process per-call measurements.
const WORK_CALLS: usize = 200;
const WORK_BATCHES: usize = 7;

/// Median per-call cost of `work` on `input` (one validation of arguments,
/// one identification of a header), in µs.
pub(crate) fn per_call_us(input: &str, work: impl Fn(&str) -> bool) -> f64 {
    let mut batches: Vec<Duration> = (0..WORK_BATCHES)
        .map(|_| {
            let started = std::time::Instant::now();
            for _ in 0..WORK_CALLS {
                std::hint::black_box(work(std::hint::black_box(input)));
            }
            started.elapsed() / u32::try_from(WORK_CALLS).unwrap_or(1)
        })
        .collect();
    batches.sort();
    us(batches[batches.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms_list(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|v| Duration::from_millis(*v)).collect()
    }

    /// Nearest rank on 1..=100 gives the value itself; small and empty
    /// series do not panic.
    #[test]
    fn nearest_rank_percentiles() {
        let sorted = ms_list(&(1..=100).collect::<Vec<_>>());
        for (p, want) in [(50.0, 50), (90.0, 90), (99.0, 99), (100.0, 100), (0.0, 1)] {
            assert_eq!(percentile(&sorted, p), Duration::from_millis(want), "p{p}");
        }
        let three = ms_list(&[10, 20, 30]);
        assert_eq!(percentile(&three, 50.0), Duration::from_millis(20));
        assert_eq!(percentile(&three, 99.0), Duration::from_millis(30));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
        assert_eq!(median(&ms_list(&[5, 1, 9, 3])), Duration::from_millis(3));
        assert_eq!(max(&ms_list(&[5, 1, 9, 3])), Duration::from_millis(9));
    }

    /// The summary sorts its input and reports microseconds.
    #[test]
    fn latency_summary() {
        let l = Latency::from_samples(ms_list(&[3, 1, 2, 4]), 1);
        assert_eq!((l.calls, l.errors), (4, 1));
        assert_eq!(l.p50_us, 2000.0);
        assert_eq!(l.p99_us, 4000.0);
        assert_eq!(l.max_us, 4000.0);
        assert_eq!(l.mean_us, 2500.0);
        let empty = Latency::from_samples(Vec::new(), 0);
        assert_eq!(empty.p50_us, 0.0);
    }
}
