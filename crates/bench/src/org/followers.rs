//! The simulated dispatchers: real `WatchSnapshots` followers (the
//! dispatcher's own, with its failover), each holding the snapshot it would
//! serve; in this one process they share tool definitions, as one
//! dispatcher's snapshots do. Here is also how long a change takes to be
//! held by all of them.

use crate::error::BenchError;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use toolmesh::Snapshot;
use toolmesh::snapshot::Definitions;

/// The simulated dispatchers.
pub(crate) struct Followers {
    held: Vec<watch::Receiver<Arc<Snapshot>>>,
    /// Kept for the followers that join later.
    pub(crate) definitions: Arc<Definitions>,
}

impl Followers {
    /// `count` followers of the replicas at `registries` (comma-separated);
    /// each starts on a replica of its own choosing.
    pub(crate) fn start(count: usize, registries: &str) -> Result<Followers, BenchError> {
        let definitions = Arc::new(Definitions::new());
        let held = (0..count)
            .map(|_| {
                toolmesh_dispatcher::follow_registry_sharing(
                    registries,
                    &toolmesh_transport::Tls::none(),
                    None,
                    definitions.clone(),
                )
            })
            .collect::<Result<_, _>>()?;
        Ok(Followers { held, definitions })
    }

    /// How many there are.
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }

    /// How long after `since` each follower first held a snapshot for which
    /// `holds` is true (waiting at most `limit`; a follower that never did
    /// is `None`).
    pub(crate) async fn until_all(
        &self,
        since: Instant,
        limit: Duration,
        holds: impl Fn(&Snapshot) -> bool + Clone + Send + Sync + 'static,
    ) -> Vec<Option<Duration>> {
        until_each(&self.held, since, limit, holds).await
    }

    /// The snapshot follower `i` holds now.
    pub(crate) fn current(&self, i: usize) -> Arc<Snapshot> {
        self.held[i].borrow().clone()
    }
}

/// [`Followers::until_all`] over any receivers (one follower that joins
/// late, too).
pub(crate) async fn until_each(
    held: &[watch::Receiver<Arc<Snapshot>>],
    since: Instant,
    limit: Duration,
    holds: impl Fn(&Snapshot) -> bool + Clone + Send + Sync + 'static,
) -> Vec<Option<Duration>> {
    let mut waits = JoinSet::new();
    for (i, receiver) in held.iter().enumerate() {
        let mut receiver = receiver.clone();
        let holds = holds.clone();
        waits.spawn(async move {
            let wait = async {
                loop {
                    if holds(&receiver.borrow_and_update()) {
                        return Some(since.elapsed());
                    }
                    receiver.changed().await.ok()?;
                }
            };
            let deadline = since + limit;
            (
                i,
                tokio::time::timeout_at(deadline, wait).await.ok().flatten(),
            )
        });
    }
    let mut each = vec![None; held.len()];
    while let Some(Ok((i, took))) = waits.join_next().await {
        each[i] = took;
    }
    each
}

/// Whether `snapshot` has executor `id` serving `tool` as a healthy instance.
pub(crate) fn serves(snapshot: &Snapshot, tool: &str, id: &str) -> bool {
    snapshot.versions(tool).iter().any(|entry| {
        entry
            .instances
            .iter()
            .any(|i| i.healthy && &*i.executor_id == id)
    })
}
