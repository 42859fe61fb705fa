//! The JSON reader behind the shape check and the canonical digest, side by side: serde_json's against sonic-rs's (SIMD) on the bench's 100 B and 10 KB `acc_echo` arguments and a 1 MB one; ns per call and the ratio, both readers timed in alternating batches of one run.
//!
//! `cargo bench -p toolmesh-bench --bench json --features json-contenders`

use serde_json::Value;
use std::hint::black_box;
use std::time::{Duration, Instant};
use toolmesh::digest::value_digest;
use toolmesh::schema::Shape;

/// Alternating batches per reader and measurement; the median is reported.
const BATCHES: usize = 15;
/// Roughly how long one batch runs.
const BATCH_TIME: Duration = Duration::from_millis(20);

/// One JSON reader, as the shape check and the digest would use it.
struct Reader {
    name: &'static str,
    accepts: fn(&Shape, &str) -> bool,
    digest: fn(&str) -> Option<String>,
}

const SERDE_JSON: Reader = Reader {
    name: "serde_json",
    accepts: |shape, text| shape.accepts(text),
    digest: |text| {
        serde_json::from_str::<Value>(text)
            .ok()
            .map(|v| value_digest(&v))
    },
};

const SONIC_RS: Reader = Reader {
    name: "sonic-rs",
    accepts: |shape, text| {
        let mut reader = sonic_rs::Deserializer::from_str(text);
        shape.accepts_read(&mut reader) && reader.end().is_ok()
    },
    digest: |text| {
        sonic_rs::from_str::<Value>(text)
            .ok()
            .map(|v| value_digest(&v))
    },
};

/// Median ns per call of `a` and of `b`, timed in alternating batches.
fn side_by_side(a: impl Fn() -> bool, b: impl Fn() -> bool) -> (f64, f64) {
    // Calls per batch, from one timed call of each (after a warm-up).
    let once = |f: &dyn Fn() -> bool| {
        for _ in 0..3 {
            black_box(f());
        }
        let started = Instant::now();
        black_box(f());
        started.elapsed()
    };
    let slowest = once(&a).max(once(&b)).max(Duration::from_nanos(1));
    let calls = (BATCH_TIME.as_nanos() / slowest.as_nanos()).clamp(1, 1_000_000) as u32;
    let batch = |f: &dyn Fn() -> bool| {
        let started = Instant::now();
        for _ in 0..calls {
            black_box(f());
        }
        started.elapsed().as_nanos() as f64 / f64::from(calls)
    };
    let (mut times_a, mut times_b) = (Vec::new(), Vec::new());
    for _ in 0..BATCHES {
        times_a.push(batch(&a));
        times_b.push(batch(&b));
    }
    (median(times_a), median(times_b))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let def = toolmesh_bench::acc_echo_def().expect("acc_echo is defined");
    let shape = &def.input().expect("acc_echo's schema compiles").shape;
    let sizes = [
        ("100 B", toolmesh_bench::small_arguments(100)),
        ("10 KB", toolmesh_bench::medium_arguments(10_000)),
        ("1 MB", toolmesh_bench::medium_arguments(1_000_000)),
    ];
    let (a, b) = (SERDE_JSON, SONIC_RS);
    println!(
        "{:<7} {:<12} {:>14} {:>14} {:>8}",
        "size",
        "work",
        format!("{} ns", a.name),
        format!("{} ns", b.name),
        "ratio"
    );
    for (label, text) in &sizes {
        for reader in [&a, &b] {
            assert!(
                (reader.accepts)(shape, text),
                "{} refuses {label}",
                reader.name
            );
        }
        assert_eq!(
            (a.digest)(text),
            (b.digest)(text),
            "{label}: digests differ"
        );
        let rows = [
            (
                "shape check",
                side_by_side(|| (a.accepts)(shape, text), || (b.accepts)(shape, text)),
            ),
            (
                "digest",
                side_by_side(|| (a.digest)(text).is_some(), || (b.digest)(text).is_some()),
            ),
        ];
        for (work, (ns_a, ns_b)) in rows {
            println!(
                "{label:<7} {work:<12} {ns_a:>14.0} {ns_b:>14.0} {:>7.2}x",
                ns_a / ns_b
            );
        }
    }
}
