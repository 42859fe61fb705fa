//! Search and index upkeep at catalog scale: the cost of one snapshot
//! change at 100,000 tools, preparing a view, and query latency at
//! 10,000 and 100,000 visible tools. Timings are printed; run in release:
//! `cargo test --release -p toolmesh-search --test scale -- --ignored --nocapture`.

use std::sync::Arc;
use std::time::{Duration, Instant};
use toolmesh::pb::ToolSpec;
use toolmesh::{Instance, Snapshot, ToolDef, ToolEntry};
use toolmesh_search::{Query, Ranking, SearchIndex, Update, View};

/// Words the generated catalog is made of.
const WORDS: &[&str] = &[
    "refund", "order", "customer", "email", "ticket", "invoice", "status", "search", "user",
    "delete", "report", "time", "account", "payment", "shipment", "address", "password", "reset",
    "export", "import", "calendar", "event", "message", "channel", "file", "folder", "upload",
    "download", "price", "quote", "contract", "lead", "deal", "task", "project", "issue",
];

/// Tool `i`: a name and description from a few of [`WORDS`], picked by a
/// fixed scramble of `i`.
fn tool(i: usize) -> ToolEntry {
    let word = |k: usize| WORDS[(i.wrapping_mul(2_654_435_761) >> k) % WORDS.len()];
    ToolEntry {
        def: Arc::new(
            ToolDef::new(ToolSpec {
                name: format!("{}_{}_{i}", word(3), word(7)),
                version: "1.0.0".into(),
                description: format!(
                    "{} the {} of a {} by {} and {}.",
                    word(3),
                    word(7),
                    word(11),
                    word(13),
                    word(17)
                ),
                input_schema: format!(
                    r#"{{"type":"object","properties":{{"{}_id":{{"type":"string","description":"The {} to use."}}}}}}"#,
                    word(11),
                    word(11)
                ),
                ..ToolSpec::default()
            })
            .expect("a valid spec"),
        ),
        instances: vec![Instance {
            executor_id: "x".into(),
            endpoint: "127.0.0.1:1".into(),
            service: "s".into(),
            healthy: true,
            execute_token: "".into(),
        }]
        .into(),
        disabled: None,
    }
}

/// Every tool of a snapshot, sorted by name: the shape of a listing.
struct Listing(Vec<(String, String)>);

impl View for Listing {
    fn members(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }
}

fn catalog(tools: usize) -> Snapshot {
    let mut b = Snapshot::empty("e").next();
    for i in 0..tools {
        b.put(tool(i));
    }
    b.finish()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// Query latency over `tools` visible tools, p50 and p99.
fn latency(tools: usize) -> (Duration, Duration) {
    let snapshot = catalog(tools);
    let index = SearchIndex::of(&snapshot);
    let view = Listing(
        snapshot
            .entries()
            .map(|e| (e.def.name().to_owned(), e.def.spec().version.clone()))
            .collect(),
    );
    let queries = [
        "refund a customer's order",
        "reset a user's password",
        "export the invoice report",
        "upload a file to a folder",
        "what is the shipment status",
    ];
    let started = Instant::now();
    let view = index.prepare(&view);
    println!("view of {tools} tools prepared in {:?}", started.elapsed());
    let mut times = Vec::new();
    for round in 0..200 {
        let query = Query::parse(queries[round % queries.len()]).expect("a query");
        let started = Instant::now();
        let found = index.search(&query, &view, &Ranking::default(), 10, |_| true);
        times.push(started.elapsed());
        assert!(!found.is_empty());
    }
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

/// One registration into 100,000 tools analyzes one definition, and takes
/// microseconds, not the catalog's time; query latency at 10,000 and
/// 100,000 visible tools is printed.
#[test]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
fn costs_at_scale() {
    let started = Instant::now();
    let first = catalog(100_000);
    let mut index = SearchIndex::of(&first);
    println!("index of 100,000 tools built in {:?}", started.elapsed());
    let mut b = first.next();
    b.put(tool(100_000));
    let second = b.finish();
    let started = Instant::now();
    let update = index.advance(&first, &second);
    println!("one registration at 100,000 tools: {:?}", started.elapsed());
    assert_eq!(
        update,
        Update {
            indexed: 1,
            removed: 0,
            kept: 0
        }
    );
    for tools in [10_000, 100_000] {
        let (p50, p99) = latency(tools);
        println!("search at {tools} visible tools: p50 {p50:?}, p99 {p99:?}");
    }
}
