//! The search report: the figures (serialisable to JSON), the issue's
//! targets judged from them, and the tables people read.

use super::eval::{Quality, Scores, SetScores};
use super::speed::SearchSpeed;
use crate::report::{Target, Verdict};
use serde::Serialize;
use std::fmt;

/// What one `toolmesh bench search` run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchReport {
    /// Whether this was the short run.
    pub quick: bool,
    /// Wall time, in s.
    pub elapsed_secs: f64,
    /// The speed part (without `--eval`).
    pub speed: Option<SearchSpeed>,
    /// The retrieval evaluation (with `--eval`).
    pub quality: Option<Quality>,
    /// The targets this run can judge.
    pub targets: Vec<Target>,
}

/// Recall@5 the held-out questions must reach, lexically.
const HELD_OUT_RECALL_AT_5: f64 = 0.77;
/// By how much recall@5 must beat the plain BM25 on them.
const OVER_BASELINE: f64 = 0.04;

impl SearchReport {
    pub(crate) fn new(
        quick: bool,
        elapsed_secs: f64,
        speed: Option<SearchSpeed>,
        quality: Option<Quality>,
    ) -> SearchReport {
        let mut targets = Vec::new();
        if let Some(speed) = &speed {
            speed_targets(speed, &mut targets);
        }
        if let Some(all) = quality
            .as_ref()
            .and_then(|q| q.held_out.as_ref())
            .and_then(|sets| sets.last())
        {
            quality_targets(all, &mut targets);
        }
        SearchReport {
            quick,
            elapsed_secs,
            speed,
            quality,
            targets,
        }
    }
}

fn speed_targets(speed: &SearchSpeed, out: &mut Vec<Target>) {
    for at in &speed.at {
        let limit_ms = match at.tools {
            10_000 => 2.0,
            100_000 => 10.0,
            _ => continue,
        };
        let p99_ms = at.search_grpc.p99_us / 1e3;
        out.push(Target {
            name: format!("SearchTools p99 <= {limit_ms} ms at {} tools", at.tools),
            verdict: Verdict::of(p99_ms <= limit_ms),
            detail: format!("p99 {p99_ms:.2} ms over gRPC"),
        });
    }
    let m = &speed.memory;
    out.push(match (m.index_bytes, m.snapshot_bytes) {
        (Some(index), Some(snapshot)) => Target {
            name: format!("index memory <= the snapshot's at {} tools", m.tools),
            verdict: Verdict::of(index <= snapshot),
            detail: format!("{} against {}", mib(index), mib(snapshot)),
        },
        _ => Target {
            name: "index memory <= the snapshot's".into(),
            verdict: Verdict::NotMeasured,
            detail: "heap not counted (a bench build of toolmesh counts it)".into(),
        },
    });
    let c = &speed.change;
    out.push(Target {
        name: format!("one change costs the change at {} tools", c.tools),
        verdict: Verdict::of(
            c.analyzed_per_change == 1 && c.one_change.p50_us * 1e-3 < c.build_ms / 1000.0,
        ),
        detail: format!(
            "{} definition analyzed, p50 {:.0} us against {:.0} ms for the whole index",
            c.analyzed_per_change, c.one_change.p50_us, c.build_ms
        ),
    });
}

fn quality_targets(all: &SetScores, out: &mut Vec<Target>) {
    let (ours, plain) = (all.toolmesh, all.baseline);
    out.push(Target {
        name: format!("held-out recall@5 >= {HELD_OUT_RECALL_AT_5}"),
        verdict: Verdict::of(ours.recall_at_5 >= HELD_OUT_RECALL_AT_5),
        detail: format!("{:.3}", ours.recall_at_5),
    });
    out.push(Target {
        name: format!("held-out recall@5 >= plain BM25 + {OVER_BASELINE}"),
        verdict: Verdict::of(ours.recall_at_5 >= plain.recall_at_5 + OVER_BASELINE),
        detail: format!("{:.3} against {:.3}", ours.recall_at_5, plain.recall_at_5),
    });
    out.push(Target {
        name: "held-out recall@1 above plain BM25".into(),
        verdict: Verdict::of(ours.recall_at_1 > plain.recall_at_1),
        detail: format!("{:.3} against {:.3}", ours.recall_at_1, plain.recall_at_1),
    });
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

impl fmt::Display for SearchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "toolmesh bench search{}, took {:.0} s",
            if self.quick { ", QUICK run" } else { "" },
            self.elapsed_secs
        )?;
        if let Some(speed) = &self.speed {
            write_speed(f, speed)?;
        }
        if let Some(quality) = &self.quality {
            write_quality(f, quality)?;
        }
        if !self.targets.is_empty() {
            writeln!(f, "Targets")?;
            let width = self.targets.iter().map(|t| t.name.len()).max().unwrap_or(0);
            for t in &self.targets {
                writeln!(
                    f,
                    "  {}  {:<width$}  {}",
                    t.verdict.label(),
                    t.name,
                    t.detail
                )?;
            }
        }
        Ok(())
    }
}

fn write_speed(f: &mut fmt::Formatter<'_>, speed: &SearchSpeed) -> fmt::Result {
    writeln!(f)?;
    writeln!(
        f,
        "Latency, one caller seeing every tool (gRPC on 127.0.0.1; ms)"
    )?;
    writeln!(
        f,
        "  {:>8}  {:>17}  {:>17}  {:>17}  {:>12}",
        "tools",
        "SearchTools p50/p99",
        "ListTools page p50/p99",
        "ranking alone p50/p99",
        "view prepared"
    )?;
    for at in &speed.at {
        let pair = |l: &crate::Latency| format!("{:.2} / {:.2}", l.p50_us / 1e3, l.p99_us / 1e3);
        writeln!(
            f,
            "  {:>8}  {:>19}  {:>22}  {:>21}  {:>10.1} ms",
            at.tools,
            pair(&at.search_grpc),
            pair(&at.list_page_grpc),
            pair(&at.search_in_process),
            at.prepare_view_ms
        )?;
    }
    let c = &speed.change;
    writeln!(f)?;
    writeln!(f, "Index upkeep at {} tools", c.tools)?;
    writeln!(f, "  whole index built        {:>10.0} ms", c.build_ms)?;
    writeln!(
        f,
        "  one registration         {:>10.1} us p50, {:.1} us p99 ({} definition analyzed)",
        c.one_change.p50_us, c.one_change.p99_us, c.analyzed_per_change
    )?;
    let m = &speed.memory;
    let show = |b: Option<u64>| b.map_or_else(|| "not counted".to_owned(), mib);
    writeln!(
        f,
        "  snapshot heap            {:>10}",
        show(m.snapshot_bytes)
    )?;
    writeln!(f, "  index heap               {:>10}", show(m.index_bytes))?;
    writeln!(f)
}

fn write_quality(f: &mut fmt::Formatter<'_>, quality: &Quality) -> fmt::Result {
    writeln!(f)?;
    writeln!(
        f,
        "Retrieval on BFCL: {} tools pooled, {} questions cut to 1024 bytes",
        quality.tools, quality.truncated_questions
    )?;
    write_sets(f, "development (non-live)", &quality.development)?;
    if let Some(held_out) = &quality.held_out {
        write_sets(f, "HELD OUT (live_*)", held_out)?;
    }
    if let Some(t) = &quality.tuned {
        writeln!(
            f,
            "  tuned on development: weights {:?}, length normalization {:?}, k1 {:.2}",
            t.weights, t.length_normalization, t.k1
        )?;
        writeln!(
            f,
            "    R@1 {:.3} R@5 {:.3} R@10 {:.3} MRR {:.3} (default ranking: R@1 {:.3} R@5 {:.3} R@10 {:.3} MRR {:.3})",
            t.development.recall_at_1,
            t.development.recall_at_5,
            t.development.recall_at_10,
            t.development.mrr,
            t.default.recall_at_1,
            t.default.recall_at_5,
            t.default.recall_at_10,
            t.default.mrr
        )?;
    }
    writeln!(f)
}

fn write_sets(f: &mut fmt::Formatter<'_>, title: &str, sets: &[SetScores]) -> fmt::Result {
    writeln!(f, "  {title}: toolmesh | plain BM25")?;
    writeln!(
        f,
        "    {:<24} {:>5}  {:>6} {:>6} {:>6} {:>6} | {:>6} {:>6} {:>6} {:>6}",
        "set", "n", "R@1", "R@5", "R@10", "MRR", "R@1", "R@5", "R@10", "MRR"
    )?;
    let row = |s: &Scores| {
        format!(
            "{:>6.3} {:>6.3} {:>6.3} {:>6.3}",
            s.recall_at_1, s.recall_at_5, s.recall_at_10, s.mrr
        )
    };
    for set in sets {
        writeln!(
            f,
            "    {:<24} {:>5}  {} | {}",
            set.name,
            set.toolmesh.questions,
            row(&set.toolmesh),
            row(&set.baseline)
        )?;
    }
    Ok(())
}
