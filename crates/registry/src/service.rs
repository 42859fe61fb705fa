//! The `toolmesh.v1.Registry` gRPC service: a thin edge over [`Registry`].

use crate::registry::Registry;
use futures_util::{Stream, StreamExt, stream};
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::watch;
use tonic::{Request, Response, Status};
use toolmesh::Snapshot;
use toolmesh::pb;

/// Serves `toolmesh.v1.Registry` for one [`Registry`]; build it with
/// [`Registry::grpc_service`].
#[derive(Debug, Clone)]
pub struct RegistryService {
    registry: Registry,
}

impl RegistryService {
    pub(crate) fn new(registry: Registry) -> Self {
        RegistryService { registry }
    }
}

/// The stream of snapshots `WatchSnapshots` answers with.
pub type SnapshotStream = Pin<Box<dyn Stream<Item = Result<pb::Snapshot, Status>> + Send>>;

#[tonic::async_trait]
impl pb::registry_server::Registry for RegistryService {
    async fn register(
        &self,
        request: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterResponse>, Status> {
        Ok(Response::new(self.registry.register(request.into_inner())?))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let snapshot_version = self.registry.heartbeat(&request.get_ref().lease_id)?;
        Ok(Response::new(pb::HeartbeatResponse { snapshot_version }))
    }

    async fn deregister(
        &self,
        request: Request<pb::DeregisterRequest>,
    ) -> Result<Response<pb::DeregisterResponse>, Status> {
        let snapshot_version = self.registry.deregister(&request.get_ref().lease_id)?;
        Ok(Response::new(pb::DeregisterResponse { snapshot_version }))
    }

    async fn get_snapshot(
        &self,
        request: Request<pb::GetSnapshotRequest>,
    ) -> Result<Response<pb::Snapshot>, Status> {
        let snapshot = self.registry.snapshot(request.get_ref().version)?;
        Ok(Response::new(snapshot.to_pb()))
    }

    type WatchSnapshotsStream = SnapshotStream;

    async fn watch_snapshots(
        &self,
        request: Request<pb::WatchSnapshotsRequest>,
    ) -> Result<Response<Self::WatchSnapshotsStream>, Status> {
        let stream = watch_stream(self.registry.subscribe(), request.get_ref().after_version);
        Ok(Response::new(stream))
    }
}

/// The newest snapshot at once when the watcher has not seen it, then each
/// newer one as it is published (intermediates may be skipped under bursts,
/// the newest never is). An `after_version` ahead of ours can only come
/// from an earlier registry lifetime, so it also gets the newest at once
/// (its epoch tells the watcher). Ends when the client goes away.
pub(crate) fn watch_stream(
    mut receiver: watch::Receiver<Arc<Snapshot>>,
    after_version: u64,
) -> SnapshotStream {
    let current = receiver.borrow_and_update().clone();
    let last = current.version();
    let unseen = after_version == 0 || last != after_version;
    let first = unseen.then_some(current);
    let newer = stream::unfold((receiver, last), |(mut receiver, last)| async move {
        loop {
            receiver.changed().await.ok()?;
            let snapshot = receiver.borrow_and_update().clone();
            if snapshot.version() > last {
                let version = snapshot.version();
                return Some((snapshot, (receiver, version)));
            }
        }
    });
    stream::iter(first)
        .chain(newer)
        .map(|snapshot| Ok(snapshot.to_pb()))
        .boxed()
}
