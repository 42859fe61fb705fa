//! Search speed at catalog scale: SearchTools and one ListTools page of the
//! same caller over gRPC on 127.0.0.1, the ranking alone in process, one
//! index change against a whole build, and the heap an index holds against
//! the snapshot's.

use super::{Served, TOKEN};
use crate::allocations::retained;
use crate::error::BenchError;
use crate::loopback::bind;
use crate::stats::{Latency, ms};
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;
use tonic::transport::Server;
use toolmesh::pb::{
    ListToolsRequest, SearchToolsRequest, ToolSpec, dispatcher_client::DispatcherClient,
};
use toolmesh::{Instance, Snapshot, ToolDef, ToolEntry};
use toolmesh_search::{Query, Ranking, SearchIndex, View};
use toolmesh_transport::{MAX_SNAPSHOT_MESSAGE_BYTES, incoming};

/// Latency at one catalog size, the caller seeing every tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AtVisible {
    /// Tools the caller sees.
    pub tools: usize,
    /// SearchTools over gRPC (limit 10), the view prepared beforehand.
    pub search_grpc: Latency,
    /// The first page of ListTools over gRPC, interleaved with the searches.
    pub list_page_grpc: Latency,
    /// The ranking alone, in process (`SearchIndex::search`).
    pub search_in_process: Latency,
    /// Resolving the caller's view against the index once (per projection
    /// and snapshot; searches reuse it), in ms.
    pub prepare_view_ms: f64,
}

/// The cost of keeping the index in step at the largest size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IndexChange {
    /// Tools indexed.
    pub tools: usize,
    /// The whole index built from the snapshot, in ms.
    pub build_ms: f64,
    /// One registration advanced into the index.
    pub one_change: Latency,
    /// Definitions analyzed per change (1 when the cost is the change's).
    pub analyzed_per_change: usize,
}

/// Heap held at the largest size (bench builds count it; None otherwise).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IndexMemory {
    /// Tools.
    pub tools: usize,
    /// The snapshot with its definitions.
    pub snapshot_bytes: Option<u64>,
    /// The search index of that snapshot (it shares the definitions).
    pub index_bytes: Option<u64>,
}

/// Everything the speed part measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchSpeed {
    /// Smallest first.
    pub at: Vec<AtVisible>,
    /// At the largest size.
    pub change: IndexChange,
    /// At the largest size.
    pub memory: IndexMemory,
}

/// Queries asked in turn.
const QUERIES: &[&str] = &[
    "refund a customer's order",
    "reset a user's password",
    "export the invoice report",
    "upload a file to a folder",
    "what is the shipment status",
];

/// Words the generated catalog is made of.
const WORDS: &[&str] = &[
    "refund", "order", "customer", "email", "ticket", "invoice", "status", "search", "user",
    "delete", "report", "time", "account", "payment", "shipment", "address", "password", "reset",
    "export", "import", "calendar", "event", "message", "channel", "file", "folder", "upload",
    "download", "price", "quote", "contract", "lead", "deal", "task", "project", "issue",
];

/// Tool `i`: a name, description and one parameter from a few of
/// [`WORDS`], picked by a fixed scramble of `i`.
pub(crate) fn tool(i: usize) -> Result<ToolEntry, BenchError> {
    let word = |k: usize| WORDS[(i.wrapping_mul(2_654_435_761) >> k) % WORDS.len()];
    let def = ToolDef::new(ToolSpec {
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
    .map_err(|e| BenchError::failed("define a search tool", e.to_string()))?;
    Ok(ToolEntry {
        def: Arc::new(def),
        instances: vec![Instance {
            executor_id: "x".into(),
            endpoint: "127.0.0.1:1".into(),
            service: "s".into(),
            healthy: true,
            execute_token: "".into(),
        }]
        .into(),
        disabled: None,
    })
}

/// A snapshot of tools `0..tools`.
fn catalog(tools: usize) -> Result<Snapshot, BenchError> {
    let mut b = Snapshot::empty("search").next();
    for i in 0..tools {
        b.put(tool(i)?);
    }
    Ok(b.finish())
}

/// Every tool of a snapshot.
struct Everything(Vec<(String, String)>);

impl Everything {
    fn of(snapshot: &Snapshot) -> Self {
        Everything(
            snapshot
                .entries()
                .map(|e| (e.def.name().to_owned(), e.def.spec().version.clone()))
                .collect(),
        )
    }
}

impl View for Everything {
    fn members(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }
}

/// Measures the change cost and memory at the largest size, then latency
/// at every size.
pub(crate) async fn run(quick: bool) -> Result<SearchSpeed, BenchError> {
    let (sizes, calls, changes) = if quick {
        ([1_000, 10_000], 200, 20)
    } else {
        ([10_000, 100_000], 2_000, 200)
    };
    // Upkeep and memory first, in a quiet process: the heap is counted
    // process-wide, and a dispatcher of a latency run would still be
    // releasing its snapshots on other threads.
    let largest = sizes[1];
    crate::progress(&format!("index upkeep and memory at {largest} tools"));
    let (snapshot, snapshot_bytes) = retained(|| catalog(largest));
    let snapshot = snapshot?;
    let started = Instant::now();
    let (mut index, index_bytes) = retained(|| SearchIndex::of(&snapshot));
    let build_ms = ms(started.elapsed());
    let (mut older, mut samples, mut analyzed) = (snapshot, Vec::new(), 0);
    for c in 0..changes {
        let mut b = older.next();
        b.put(tool(largest + c)?);
        let newer = b.finish();
        let started = Instant::now();
        let update = index.advance(&older, &newer);
        samples.push(started.elapsed());
        analyzed = analyzed.max(update.indexed + update.removed + update.kept);
        older = newer;
    }
    drop((index, older));
    let mut at = Vec::new();
    for tools in sizes {
        crate::progress(&format!("search speed at {tools} visible tools"));
        at.push(at_size(tools, calls).await?);
    }
    Ok(SearchSpeed {
        at,
        change: IndexChange {
            tools: largest,
            build_ms,
            one_change: Latency::from_samples(samples, 0),
            analyzed_per_change: analyzed,
        },
        memory: IndexMemory {
            tools: largest,
            snapshot_bytes,
            index_bytes,
        },
    })
}

/// SearchTools and ListTools of one caller over gRPC, then the ranking
/// alone in process, at `tools` visible tools.
async fn at_size(tools: usize, calls: usize) -> Result<AtVisible, BenchError> {
    let snapshot = catalog(tools)?;
    let index = SearchIndex::of(&snapshot);
    let started = Instant::now();
    let view = index.prepare(&Everything::of(&snapshot));
    let prepare_view_ms = ms(started.elapsed());
    if view.len() != tools {
        return Err(BenchError::failed(
            "prepare the whole view",
            format!("{} of {tools} tools in it", view.len()),
        ));
    }
    let mut samples = Vec::new();
    for i in 0..calls {
        let query = Query::parse(QUERIES[i % QUERIES.len()])
            .map_err(|e| BenchError::failed("parse a query", e.to_string()))?;
        let started = Instant::now();
        let found = index.search(&query, &view, &Ranking::default(), 10, |_| true);
        samples.push(started.elapsed());
        if found.is_empty() {
            return Err(BenchError::failed("search in process", "nothing found"));
        }
    }
    let search_in_process = Latency::from_samples(samples, 0);
    drop(index);

    let served = Served::new(snapshot)?;
    let (listener, addr) = bind().await?;
    let service = served.dispatcher.grpc_service();
    let server = tokio::spawn(async move {
        Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming(listener))
            .await
    });
    let mut client = DispatcherClient::new(toolmesh_transport::channel(
        &addr,
        &toolmesh_transport::Tls::none(),
    )?)
    .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES);
    let (mut searches, mut pages) = (Vec::new(), Vec::new());
    // The first rounds connect, work out the projection and prepare the
    // view; they are not timed.
    let warmup = 20;
    for i in 0..calls + warmup {
        let mut search = tonic::Request::new(SearchToolsRequest {
            query: QUERIES[i % QUERIES.len()].into(),
            limit: 10,
            ..SearchToolsRequest::default()
        });
        toolmesh_transport::set_bearer(search.metadata_mut(), TOKEN);
        let started = Instant::now();
        let found = client
            .search_tools(search)
            .await
            .map_err(|s| BenchError::rpc("SearchTools", s))?
            .into_inner();
        let searched = started.elapsed();
        if found.matches.len() != 10 {
            return Err(BenchError::failed(
                "search over gRPC",
                format!("{} matches, not 10", found.matches.len()),
            ));
        }
        let mut list = tonic::Request::new(ListToolsRequest::default());
        toolmesh_transport::set_bearer(list.metadata_mut(), TOKEN);
        let started = Instant::now();
        client
            .list_tools(list)
            .await
            .map_err(|s| BenchError::rpc("ListTools", s))?;
        let listed = started.elapsed();
        if i >= warmup {
            searches.push(searched);
            pages.push(listed);
        }
    }
    server.abort();
    Ok(AtVisible {
        tools,
        search_grpc: Latency::from_samples(searches, 0),
        list_page_grpc: Latency::from_samples(pages, 0),
        search_in_process,
        prepare_view_ms,
    })
}
