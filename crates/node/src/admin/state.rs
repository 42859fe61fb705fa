//! What the admin page shows, as the reader may see it: every tool version with its instances, the open approvals the reader may list (as Governance.ListApprovals scopes them), recent changes.

use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::watch;
use toolmesh::Snapshot;
use toolmesh_dispatcher::Dispatcher;
use toolmesh_governance::Principal;
use toolmesh_governance::approvals::{ApprovalFields, ApprovalOp};

/// Changes kept for the page.
const RECENT_CHANGES: usize = 20;

/// What the page shows, also served as JSON at `/api/state`.
#[derive(Debug, Serialize)]
pub struct AdminState {
    /// The newest snapshot's version.
    pub snapshot_version: u64,
    /// Every tool version the snapshot holds.
    pub tools: Vec<ToolView>,
    /// Approvals waiting for an approver.
    pub approvals: Vec<ApprovalView>,
    /// What changed lately, newest first.
    pub changes: Vec<String>,
}

/// One tool version.
#[derive(Debug, Serialize)]
pub struct ToolView {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Who answers for it.
    pub owner: String,
    /// `SERVING` when callable here, else `NOT_SERVING`.
    pub health: &'static str,
    /// Why an operator switched it off, if they did.
    pub disabled: Option<String>,
    /// Its instances.
    pub instances: Vec<InstanceView>,
}

/// One instance of a tool version.
#[derive(Debug, Serialize)]
pub struct InstanceView {
    /// Executor id.
    pub executor_id: String,
    /// host:port.
    pub endpoint: String,
    /// The registry's verdict.
    pub healthy: bool,
    /// Calls in flight from this dispatcher.
    pub in_flight: u32,
    /// Milliseconds left of an outlier ejection, if ejected.
    pub ejected_ms: Option<u64>,
}

/// One open approval.
#[derive(Debug, Serialize)]
pub struct ApprovalView {
    /// Its id, e.g. `a-3`.
    pub id: String,
    /// tool@version.
    pub tool: String,
    /// Who asked.
    pub caller: String,
    /// What the call would do.
    pub summary: String,
}

/// What the state is read from.
#[derive(Clone)]
pub(super) struct Sources {
    pub(super) snapshots: watch::Receiver<Arc<Snapshot>>,
    pub(super) dispatcher: Option<Dispatcher>,
    pub(super) changes: Arc<Mutex<VecDeque<String>>>,
}

impl Sources {
    /// The state as `reader` may see it.
    pub(super) async fn state(&self, reader: &Principal) -> AdminState {
        let snapshot = self.snapshots.borrow().clone();
        let tools = snapshot
            .entries()
            .map(|entry| {
                let spec = entry.def.spec();
                let callable = match &self.dispatcher {
                    Some(d) => d.is_callable(entry),
                    None => entry.exposed(),
                };
                let instances = entry
                    .instances
                    .iter()
                    .map(|i| {
                        let (in_flight, ejected) = self
                            .dispatcher
                            .as_ref()
                            .map_or((0, None), |d| d.instance_state(&i.endpoint, &spec.name));
                        InstanceView {
                            executor_id: i.executor_id.to_string(),
                            endpoint: i.endpoint.to_string(),
                            healthy: i.healthy,
                            in_flight,
                            ejected_ms: ejected.map(|d| d.as_millis() as u64),
                        }
                    })
                    .collect();
                ToolView {
                    name: spec.name.clone(),
                    version: spec.version.clone(),
                    owner: spec.owner.clone(),
                    health: if callable { "SERVING" } else { "NOT_SERVING" },
                    disabled: entry.disabled.as_deref().map(str::to_owned),
                    instances,
                }
            })
            .collect();
        // The approvals the reader may list, by the rule ListApprovals
        // applies (its own, and its tenant's when it is an approver), from
        // the book the dispatcher keeps them in: its own, or the registry's.
        let pending = match &self.dispatcher {
            Some(d) => d
                .governance()
                .approval(ApprovalOp::List, reader, ApprovalFields::default())
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "open approvals not read for the admin page");
                    Vec::new()
                }),
            None => Vec::new(),
        };
        let approvals = pending
            .into_iter()
            .map(|t| ApprovalView {
                tool: format!("{}@{}", t.tool, t.version),
                caller: t.caller.name.clone(),
                summary: t.summary,
                id: t.id,
            })
            .collect();
        let changes = self
            .changes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect();
        AdminState {
            snapshot_version: snapshot.version(),
            tools,
            approvals,
            changes,
        }
    }
}

/// Each executor's (service, healthy) per tool version, to diff snapshots.
fn instances_of(snapshot: &Snapshot) -> BTreeMap<(String, String), bool> {
    snapshot
        .entries()
        .flat_map(|e| {
            let label = e.def.label();
            e.instances
                .iter()
                .map(move |i| ((label.clone(), i.executor_id.to_string()), i.healthy))
        })
        .collect()
}

/// Records, for every new snapshot, which instances came, went or changed health.
pub(super) async fn record_changes(
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
    changes: Arc<Mutex<VecDeque<String>>>,
) {
    let mut before = instances_of(&snapshots.borrow_and_update());
    while snapshots.changed().await.is_ok() {
        let snapshot = snapshots.borrow_and_update().clone();
        let after = instances_of(&snapshot);
        let version = snapshot.version();
        let mut lines = Vec::new();
        for ((tool, executor), healthy) in &after {
            match before.get(&(tool.clone(), executor.clone())) {
                None => lines.push(format!("v{version}: {tool} on {executor} registered")),
                Some(was) if was != healthy => {
                    let now = if *healthy { "healthy" } else { "unhealthy" };
                    lines.push(format!("v{version}: {tool} on {executor} {now}"));
                }
                Some(_) => {}
            }
        }
        for (tool, executor) in before.keys() {
            if !after.contains_key(&(tool.clone(), executor.clone())) {
                lines.push(format!("v{version}: {tool} on {executor} gone"));
            }
        }
        let mut kept = changes.lock().unwrap_or_else(PoisonError::into_inner);
        for line in lines {
            kept.push_front(line);
        }
        kept.truncate(RECENT_CHANGES);
        drop(kept);
        before = after;
    }
}
