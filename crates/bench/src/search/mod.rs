//! Tool search (`toolmesh bench search`): SearchTools latency through a real
//! dispatcher at 10,000 and 100,000 visible tools beside ListTools of the
//! same caller, the cost of one index change against a whole build, index
//! memory against the snapshot's; and with `--eval`, retrieval quality on
//! the Berkeley Function Calling Leaderboard beside a plain BM25.

mod bfcl;
mod eval;
mod report;
mod speed;

pub use bfcl::{BfclFunction, Converted, mesh_name, to_spec};
pub use eval::{DEVELOPMENT, EvalOptions, HELD_OUT, Quality, Scores, SetScores, Tuned};
pub use report::SearchReport;
pub use speed::{AtVisible, IndexChange, IndexMemory, SearchSpeed};

use crate::error::BenchError;
use crate::progress;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;
use toolmesh::{Principal, Snapshot};
use toolmesh_dispatcher::{Dispatcher, DispatcherConfig};
use toolmesh_governance::{Governance, PolicyHandle};
use toolmesh_policy::Policy;

/// What `toolmesh bench search` runs.
#[derive(Debug, Clone)]
pub struct SearchOptions {
    /// Fewer calls and 1,000/10,000 tools instead of 10,000/100,000.
    pub quick: bool,
    /// The retrieval evaluation instead of the speed part.
    pub eval: Option<EvalOptions>,
    /// Also write the report as JSON to this file.
    pub json: Option<PathBuf>,
}

/// Runs the speed part, or the evaluation when asked; see the module docs.
/// Must be called inside a multi-threaded tokio runtime.
pub async fn run_search(options: SearchOptions) -> Result<SearchReport, BenchError> {
    let started = std::time::Instant::now();
    let (speed, quality) = match &options.eval {
        None => {
            progress("search speed: SearchTools and ListTools through a dispatcher");
            (Some(speed::run(options.quick).await?), None)
        }
        Some(eval) => {
            progress("search quality: BFCL questions against the pooled catalog");
            (None, Some(eval::run(eval).await?))
        }
    };
    let report = SearchReport::new(
        options.quick,
        started.elapsed().as_secs_f64(),
        speed,
        quality,
    );
    if let Some(path) = &options.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n")
            .map_err(|e| BenchError::io(format!("write {}", path.display()), e))?;
    }
    Ok(report)
}

/// The bearer token of the one caller, who may list every tool.
const TOKEN: &str = "searcher";

/// A caller granted every tool.
const POLICY: &str = r#"
[[callers]]
token = "searcher"
principal = "searcher"
roles = ["searcher"]

[[grants]]
name = "everything"
roles = ["searcher"]
tools = ["*"]
"#;

/// A dispatcher serving `snapshot` (and what follows it on the channel),
/// and the caller who sees every tool.
pub(crate) struct Served {
    pub(crate) dispatcher: Dispatcher,
    pub(crate) caller: Principal,
    /// The dispatcher's snapshot channel, held open while it serves.
    _snapshots: watch::Sender<Arc<Snapshot>>,
}

impl Served {
    pub(crate) fn new(snapshot: Snapshot) -> Result<Served, BenchError> {
        let (publish, snapshots) = watch::channel(Arc::new(snapshot));
        let policy = Policy::from_toml(POLICY)
            .map_err(|e| BenchError::failed("parse the search policy", e.to_string()))?;
        let (health, _) = tonic_health::server::health_reporter();
        let governance = Governance::new(Arc::new(PolicyHandle::new(policy)), None);
        let dispatcher =
            Dispatcher::with_governance(DispatcherConfig::default(), snapshots, health, governance);
        let caller = dispatcher
            .governance()
            .authenticate(Some(TOKEN), None)
            .map_err(|e| BenchError::failed("identify the searching caller", e.to_string()))?;
        Ok(Served {
            dispatcher,
            caller,
            _snapshots: publish,
        })
    }
}
