//! `ExecutorControl`: what the host of a running executor may change — its whole tool set (registered again at once) and whether it serves (its `grpc.health.v1` status, which takes its tools out of rotation).

use crate::ExecutorError;
use crate::dynamic::DynamicTool;
use crate::server::{Core, Slot, Tools};
use std::sync::Arc;
use tokio::sync::{Mutex, watch};
use tonic_health::{ServingStatus, server::HealthReporter};
use toolmesh::pb::ToolSpec;
use toolmesh_transport::EXECUTOR_HEALTH_SERVICE;

/// A running executor's tool set and serving status, from
/// [`BoundExecutor::control`](crate::BoundExecutor::control).
///
/// Made for executors that front another system whose tools change at
/// runtime (an MCP server announcing `tools/list_changed`) or that can go
/// away under them (a child process that exits).
#[derive(Clone)]
pub struct ExecutorControl {
    inner: Arc<Inner>,
}

struct Inner {
    core: Arc<Core>,
    /// The validated specs of the set served now; the registration loop
    /// registers again whenever they change.
    specs: watch::Sender<Vec<ToolSpec>>,
    health: HealthReporter,
    /// Whether a drain began (then nothing serves again); held while the
    /// status is written so a late `set_serving(true)` cannot undo a drain.
    draining: Mutex<bool>,
}

impl std::fmt::Debug for ExecutorControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorControl")
            .field("executor_id", &self.inner.core.executor_id)
            .finish_non_exhaustive()
    }
}

impl ExecutorControl {
    pub(crate) fn new(core: Arc<Core>, specs: Vec<ToolSpec>, health: HealthReporter) -> Self {
        ExecutorControl {
            inner: Arc::new(Inner {
                core,
                specs: watch::Sender::new(specs),
                health,
                draining: Mutex::new(false),
            }),
        }
    }

    /// Serves `tools` instead of the current set and registers them at
    /// once (the registration replaces the previous one in one step: a tool
    /// left out leaves the mesh, a new one joins). Calls already running
    /// finish on the tools they started with. True when the specs differ
    /// from those served before; the same specs are not registered again.
    ///
    /// Every spec is checked first: on the first invalid spec or repeated
    /// name nothing changes and the error names the tool. An empty set is
    /// allowed (the executor stays registered with no tools).
    pub fn replace_tools(&self, tools: Vec<DynamicTool>) -> Result<bool, ExecutorError> {
        let mut set = Tools::new();
        for tool in tools {
            let name = tool.spec.name.clone();
            if set.contains_key(&name) {
                return Err(ExecutorError::DuplicateTool(name));
            }
            set.insert(name, Slot::new(tool.spec, tool.tool));
        }
        let specs = valid_specs(&set)?;
        let core = &self.inner.core;
        core.metrics
            .track(specs.iter().map(|s| (s.name.as_str(), s.version.as_str())));
        core.tools.store(Arc::new(set));
        let changed = self.inner.specs.send_if_modified(|current| {
            let changed = *current != specs;
            *current = specs;
            changed
        });
        Ok(changed)
    }

    /// The specs served now, normalised (defaults filled in), by name.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.inner.specs.borrow().clone()
    }

    /// Sets the executor's `grpc.health.v1` status: NOT_SERVING takes its
    /// tools out of rotation at once (the registry watches it), SERVING
    /// puts them back. Once the executor drains it stays NOT_SERVING.
    pub async fn set_serving(&self, serving: bool) {
        let draining = self.inner.draining.lock().await;
        if *draining {
            return;
        }
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        set_health(&self.inner.health, status).await;
    }

    /// Starts the drain: NOT_SERVING for good.
    pub(crate) async fn drain(&self) {
        let mut draining = self.inner.draining.lock().await;
        *draining = true;
        set_health(&self.inner.health, ServingStatus::NotServing).await;
    }

    /// The specs, for the registration loop.
    pub(crate) fn watch_specs(&self) -> watch::Receiver<Vec<ToolSpec>> {
        self.inner.specs.subscribe()
    }
}

/// Sets the status of the whole server and of `toolmesh.v1.Executor`.
pub(crate) async fn set_health(health: &HealthReporter, status: ServingStatus) {
    for name in ["", EXECUTOR_HEALTH_SERVICE] {
        health.set_service_status(name, status).await;
    }
}

/// The normalised spec of every tool of `tools`, or the first invalid one.
pub(crate) fn valid_specs(tools: &Tools) -> Result<Vec<ToolSpec>, ExecutorError> {
    tools
        .iter()
        .map(|(name, slot)| match &slot.def {
            Ok(def) => Ok(def.spec().clone()),
            Err(reason) => Err(ExecutorError::InvalidTool {
                tool: name.clone(),
                reason: reason.clone(),
            }),
        })
        .collect()
}
