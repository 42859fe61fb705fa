//! What the admin page shows, as the reader may see it: every tool version with its instances, last minute of calls, switch and rollout; the open approvals the reader may list (as Governance.ListApprovals scopes them); recent changes; whether the reader may act.

use super::feed::{ChangeView, Feed};
use serde::Serialize;
use std::sync::Arc;
use tokio::sync::watch;
use toolmesh::rollout::Rollout;
use toolmesh::{Snapshot, ToolEntry};
use toolmesh_dispatcher::{Dispatcher, RECENT_WINDOW};
use toolmesh_governance::approvals::List;
use toolmesh_identity::{Principal, registry_access};

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
    pub changes: Vec<ChangeView>,
    /// Whether the reader may disable and enable tools and promote and
    /// abort rollouts here (an admin, on a node that runs the registry).
    pub may_act: bool,
    /// Why the reader may not, when it may not.
    pub may_not_act_because: Option<String>,
    /// How the keys of each of the policy's `[[issuers]]` stand.
    pub issuers: Vec<IssuerView>,
}

/// One identity provider's keys.
#[derive(Debug, Serialize)]
pub struct IssuerView {
    /// Its issuer URL.
    pub issuer: String,
    /// Keys held (0: its callers' tokens are refused).
    pub keys: usize,
    /// Seconds since the keys held were fetched.
    pub age_s: Option<u64>,
    /// Whether the last fetch failed and older keys still serve.
    pub stale: bool,
    /// Fetches that failed, of all tried.
    pub failures: u64,
    /// Why the last fetch failed, when it did.
    pub last_error: Option<String>,
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
    /// Instances the registry holds healthy.
    pub healthy_instances: usize,
    /// Its instances.
    pub instances: Vec<InstanceView>,
    /// Its calls over the last minute on this node's dispatcher (none on a
    /// node that runs no dispatcher).
    pub calls: Option<CallsView>,
    /// The tool's rollout, if it has one.
    pub rollout: Option<RolloutView>,
}

/// One tool version's calls over the last minute on this dispatcher.
#[derive(Debug, Serialize)]
pub struct CallsView {
    /// Seconds the figures cover.
    pub window_s: u64,
    /// Calls that ended.
    pub calls: u64,
    /// Those that failed in the tool or its executors.
    pub errors: u64,
    /// Calls per second.
    pub per_second: f64,
    /// Errors per call, 0 to 1.
    pub error_rate: f64,
    /// 95th percentile of the call durations, in milliseconds.
    pub p95_ms: Option<f64>,
}

/// A tool's rollout, as one of its versions' rows shows it.
#[derive(Debug, Serialize)]
pub struct RolloutView {
    /// `canary` on the canary version's row, else `stable`.
    pub side: &'static str,
    /// `name@version` of the canary.
    pub canary: String,
    /// The canary's share of callers, e.g. `25%`.
    pub share: String,
    /// `active`, `promoted` or `aborted`.
    pub state: &'static str,
    /// Who made the last change.
    pub changed_by: String,
    /// Why it was aborted ("" otherwise).
    pub reason: String,
    /// Aborted by a dispatcher's error check.
    pub automatic: bool,
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
    /// What the call would do (the lines below, joined).
    pub summary: String,
    /// The summary's first line: tool, caller, arguments' digest.
    pub heading: String,
    /// One line per argument, `name = value` (long values cut, with a
    /// marker saying how long they were).
    pub arguments: Vec<String>,
}

/// What the state is read from.
#[derive(Clone)]
pub(super) struct Sources {
    pub(super) snapshots: watch::Receiver<Arc<Snapshot>>,
    pub(super) dispatcher: Option<Dispatcher>,
    pub(super) feed: Arc<Feed>,
    /// Whether this node runs the registry (whose decisions the page can make).
    pub(super) registry: bool,
    /// Who callers are, for how the issuers' keys stand.
    pub(super) identity: toolmesh_governance::Identity,
}

impl Sources {
    /// The state as `reader` may see it.
    pub(super) async fn state(&self, reader: &Principal) -> AdminState {
        let snapshot = self.snapshots.borrow().clone();
        // Versions whose executors are all gone past their lease are no
        // rows (a stopped executor leaves nothing behind).
        let tools = snapshot
            .entries()
            .filter(|entry| entry.is_served())
            .map(|entry| self.tool(&snapshot, entry))
            .collect();
        // The approvals the reader may list, by the rule ListApprovals
        // applies (its own, and its tenant's when it is an approver), from
        // the book the dispatcher keeps them in: its own, or the registry's.
        let pending = match &self.dispatcher {
            Some(d) => d
                .governance()
                .approval(List, reader)
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "open approvals not read for the admin page");
                    Vec::new()
                }),
            None => Vec::new(),
        };
        let approvals = pending
            .into_iter()
            .map(|t| {
                let mut lines = t.summary.lines().map(str::to_owned);
                let heading = lines.next().unwrap_or_default();
                ApprovalView {
                    tool: format!("{}@{}", t.tool, t.version),
                    caller: t.caller.name.clone(),
                    heading,
                    arguments: lines.map(|l| l.trim_start().to_owned()).collect(),
                    summary: t.summary,
                    id: t.id,
                }
            })
            .collect();
        let may_not_act_because = self.may_not_act_because(reader);
        AdminState {
            snapshot_version: snapshot.version(),
            tools,
            approvals,
            changes: self.feed.recent(),
            may_act: may_not_act_because.is_none(),
            may_not_act_because,
            issuers: self
                .identity
                .issuer_status()
                .into_iter()
                .map(|s| IssuerView {
                    issuer: s.issuer,
                    keys: s.keys,
                    age_s: s.age.map(|a| a.as_secs()),
                    stale: s.stale,
                    failures: s.failures,
                    last_error: s.last_error,
                })
                .collect(),
        }
    }

    /// Why `reader` may not disable, enable, promote or abort from this
    /// page, if it may not.
    pub(super) fn may_not_act_because(&self, reader: &Principal) -> Option<String> {
        if let Err(refused) = registry_access::may_switch(reader) {
            return Some(refused.to_string());
        }
        (!self.registry).then(|| NO_REGISTRY.to_owned())
    }

    /// One tool version's row.
    fn tool(&self, snapshot: &Snapshot, entry: &ToolEntry) -> ToolView {
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
        let calls = self.dispatcher.as_ref().map(|d| {
            let recent = d.recent_calls(&spec.name, &spec.version);
            CallsView {
                window_s: RECENT_WINDOW.as_secs(),
                calls: recent.calls,
                errors: recent.errors,
                per_second: recent.per_second(),
                error_rate: recent.error_rate(),
                p95_ms: recent.p95.map(|d| d.as_secs_f64() * 1000.0),
            }
        });
        ToolView {
            name: spec.name.clone(),
            version: spec.version.clone(),
            owner: spec.owner.clone(),
            health: if callable { "SERVING" } else { "NOT_SERVING" },
            disabled: entry.disabled.as_deref().map(str::to_owned),
            healthy_instances: entry.healthy_instances().count(),
            instances,
            calls,
            rollout: snapshot
                .rollout(&spec.name)
                .map(|r| rollout_view(r, &spec.version)),
        }
    }
}

/// Why a node without a registry has no buttons.
pub(super) const NO_REGISTRY: &str = "this node runs no registry: disable, enable, promote and abort on the admin page of a node that does (toolmesh serve or registry), or with `toolmesh disable`, `enable` and `rollout`";

/// `rollout` as the row of `version` shows it.
fn rollout_view(rollout: &Rollout, version: &str) -> RolloutView {
    RolloutView {
        side: if rollout.canary.to_string() == version {
            "canary"
        } else {
            "stable"
        },
        canary: rollout.canary_label(),
        share: rollout.share.to_string(),
        state: rollout.state.name(),
        changed_by: rollout.changed_by.clone(),
        reason: rollout.reason.clone(),
        automatic: rollout.automatic,
    }
}
