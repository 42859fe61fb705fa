//! The `toolmesh.v1.Registry` gRPC service: a thin edge over [`Registry`].

use crate::error::RegistryError;
use crate::gate::SnapshotReader;
use crate::registry::Registry;
use futures_util::{Stream, StreamExt, stream};
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::watch;
use tonic::{Request, Response, Status};
use toolmesh::Snapshot;
use toolmesh::grpc::bearer;
use toolmesh::pb;

/// Serves `toolmesh.v1.Registry` for one [`Registry`]; build it with
/// [`Registry::grpc_service`].
#[derive(Debug, Clone)]
pub struct RegistryService {
    registry: Registry,
}

impl Registry {
    /// The `toolmesh.v1.Registry` gRPC service over this registry, with the
    /// mesh's message size limits.
    pub fn grpc_service(&self) -> pb::registry_server::RegistryServer<RegistryService> {
        pb::registry_server::RegistryServer::new(RegistryService {
            registry: self.clone(),
        })
        .max_decoding_message_size(toolmesh::grpc::MAX_CALL_MESSAGE_BYTES)
        .max_encoding_message_size(toolmesh::grpc::MAX_SNAPSHOT_MESSAGE_BYTES)
    }
}

impl RegistryService {
    /// The executor identity of a request: its bearer token, else a
    /// verified client certificate naming an executor.
    fn executor_owner<T>(&self, request: &Request<T>) -> Result<String, RegistryError> {
        let gate = self.registry.gate();
        let token = bearer(request.metadata());
        let by_certificate = match (token, toolmesh::grpc::peer_certificate(request)) {
            (None, Some(cert)) => gate.executor_owner_by_certificate(&cert),
            _ => None,
        };
        by_certificate
            .unwrap_or_else(|| gate.executor_owner(token))
            .map_err(RegistryError::RegistrationRefused)
    }

    /// Who may read snapshots, and whether it sees executors' call tokens.
    fn reader<T>(&self, request: &Request<T>) -> Result<SnapshotReader, RegistryError> {
        let certificate = toolmesh::grpc::peer_certificate(request);
        self.registry
            .gate()
            .snapshot_reader(bearer(request.metadata()), certificate.as_ref())
            .map_err(RegistryError::ReadRefused)
    }

    fn admin(&self, metadata: &tonic::metadata::MetadataMap) -> Result<String, RegistryError> {
        let admin = self
            .registry
            .gate()
            .admin(bearer(metadata))
            .map_err(RegistryError::SwitchRefused)?;
        tracing::info!(%admin, "admin request");
        Ok(admin)
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
        let owner = self.executor_owner(&request)?;
        // Schemas compile on the blocking pool: a costly one must not stall
        // the async workers that serve every other RPC.
        let registry = self.registry.clone();
        let request = request.into_inner();
        let registered = tokio::task::spawn_blocking(move || registry.register_as(request, &owner))
            .await
            .map_err(|e| {
                Status::internal(format!("registration failed ({e}); register again"))
            })??;
        Ok(Response::new(registered))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let owner = self.executor_owner(&request)?;
        let snapshot_version = self
            .registry
            .heartbeat_as(&request.get_ref().lease_id, &owner)?;
        Ok(Response::new(pb::HeartbeatResponse { snapshot_version }))
    }

    async fn deregister(
        &self,
        request: Request<pb::DeregisterRequest>,
    ) -> Result<Response<pb::DeregisterResponse>, Status> {
        let owner = self.executor_owner(&request)?;
        let snapshot_version = self
            .registry
            .deregister_as(&request.get_ref().lease_id, &owner)?;
        Ok(Response::new(pb::DeregisterResponse { snapshot_version }))
    }

    async fn disable_tool(
        &self,
        request: Request<pb::DisableToolRequest>,
    ) -> Result<Response<pb::DisableToolResponse>, Status> {
        self.admin(request.metadata())?;
        let request = request.into_inner();
        if request.reason.trim().is_empty() {
            return Err(Status::invalid_argument(
                "say why the tool is disabled: callers and operators read the reason",
            ));
        }
        let snapshot_version = self
            .registry
            .set_disabled(&request.tool, Some(request.reason))?;
        Ok(Response::new(pb::DisableToolResponse { snapshot_version }))
    }

    async fn enable_tool(
        &self,
        request: Request<pb::EnableToolRequest>,
    ) -> Result<Response<pb::EnableToolResponse>, Status> {
        self.admin(request.metadata())?;
        let snapshot_version = self.registry.set_disabled(&request.get_ref().tool, None)?;
        Ok(Response::new(pb::EnableToolResponse { snapshot_version }))
    }

    async fn get_snapshot(
        &self,
        request: Request<pb::GetSnapshotRequest>,
    ) -> Result<Response<pb::Snapshot>, Status> {
        let reader = self.reader(&request)?;
        let snapshot = self.registry.snapshot(request.get_ref().version)?;
        Ok(Response::new(for_reader(snapshot.to_pb(), &reader)))
    }

    type WatchSnapshotsStream = SnapshotStream;

    async fn watch_snapshots(
        &self,
        request: Request<pb::WatchSnapshotsRequest>,
    ) -> Result<Response<Self::WatchSnapshotsStream>, Status> {
        let reader = self.reader(&request)?;
        let request = request.get_ref();
        let stream = watch_stream(
            self.registry.subscribe(),
            request.after_version,
            request.deltas,
        );
        let stream = stream.map(move |message| message.map(|m| for_reader(m, &reader)));
        Ok(Response::new(stream.boxed()))
    }
}

/// A snapshot as `reader` may see it: executors' call tokens only for
/// dispatchers (an operator must not be able to call past the dispatcher).
fn for_reader(mut snapshot: pb::Snapshot, reader: &SnapshotReader) -> pb::Snapshot {
    if !reader.execute_tokens {
        for instance in snapshot
            .tools
            .iter_mut()
            .flat_map(|e| e.instances.iter_mut())
        {
            instance.execute_token.clear();
        }
    }
    snapshot
}

/// The newest snapshot at once when the watcher has not seen it, then each
/// newer one as it is published (intermediates may be skipped under bursts,
/// the newest never is). An `after_version` ahead of ours can only come
/// from an earlier registry lifetime, so it also gets the newest at once
/// (its epoch tells the watcher). With `deltas`, every message after the
/// first full one holds only what changed since the previous message.
/// Ends when the client goes away.
pub(crate) fn watch_stream(
    mut receiver: watch::Receiver<Arc<Snapshot>>,
    after_version: u64,
    deltas: bool,
) -> SnapshotStream {
    let current = receiver.borrow_and_update().clone();
    let unseen = after_version == 0 || current.version() != after_version;
    let first = unseen.then(|| Ok(current.to_pb()));
    // A delta needs a base the watcher holds: only once a full one was sent.
    let base = (deltas && unseen).then(|| current.clone());
    let newer = stream::unfold(
        (receiver, current, base),
        |(mut receiver, last, base)| async move {
            loop {
                receiver.changed().await.ok()?;
                let snapshot = receiver.borrow_and_update().clone();
                if snapshot.version() > last.version() {
                    let message = match &base {
                        Some(base) => snapshot.delta_pb(base),
                        None => snapshot.to_pb(),
                    };
                    let base = base.is_some().then(|| snapshot.clone());
                    return Some((Ok(message), (receiver, snapshot, base)));
                }
            }
        },
    );
    stream::iter(first).chain(newer).boxed()
}
