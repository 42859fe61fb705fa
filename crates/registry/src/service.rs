//! The `toolmesh.v1.Registry` gRPC service: a thin edge over [`Registry`].

use crate::error::RegistryError;
use crate::gate::AccessError;
use crate::gate::SnapshotReader;
use crate::registry::Registry;
use crate::rollouts::{DecisionJournal, RolloutDesk, RolloutRequest};
use futures_util::{Stream, StreamExt};
use std::pin::Pin;
use std::sync::Arc;
use tonic::{Request, Response, Status};
use toolmesh::pb;
use toolmesh_transport::bearer;
use watch::{FrameStream, SharedEncodings};

/// How long a watch from a dispatcher that holds a newer snapshot than
/// this replica (it followed a replica ahead of this one) waits for this
/// one to publish it, so that it resumes with deltas. Past it, the newest
/// snapshot is sent whole.
const CATCH_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

mod watch;

/// Serves `toolmesh.v1.Registry` for one [`Registry`]; build it with
/// [`Registry::grpc_service`].
#[derive(Clone)]
pub struct RegistryService {
    registry: Registry,
    rollouts: RolloutDesk,
    /// Hears of tools disabled and enabled (rollouts tell it through `rollouts`).
    journal: Option<Arc<dyn DecisionJournal>>,
    /// Logs refused executor calls, at most one line per period.
    refusals: Arc<RefusalLog>,
    /// The snapshot messages its watch streams send, each encoded once.
    encodings: Arc<SharedEncodings>,
}

/// At most one line per [`RefusalLog::PERIOD`] for executors refused at
/// the door (a token the policy does not know, a missing role), counting
/// the refusals it did not log: an executor with a stale token retries
/// forever, and the operator must hear of it without a flood.
#[derive(Debug, Default)]
struct RefusalLog {
    last: std::sync::Mutex<Option<std::time::Instant>>,
    unlogged: std::sync::atomic::AtomicU64,
}

impl RefusalLog {
    const PERIOD: std::time::Duration = std::time::Duration::from_secs(10);

    fn refused(&self, peer: Option<std::net::SocketAddr>, error: &AccessError) {
        use std::sync::atomic::Ordering;
        let now = std::time::Instant::now();
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|at| now.duration_since(at) < Self::PERIOD) {
            self.unlogged.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(now);
        let unlogged = self.unlogged.swap(0, Ordering::Relaxed);
        let peer = peer.map_or_else(|| "unknown".to_owned(), |p| p.to_string());
        tracing::warn!(%peer, %error, unlogged, "refused an executor's registry call; it retries until its token is fixed");
    }
}

impl std::fmt::Debug for RegistryService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryService").finish_non_exhaustive()
    }
}

impl Registry {
    /// The `toolmesh.v1.Registry` gRPC service over this registry, with the
    /// mesh's message size limits.
    pub fn grpc_service(&self) -> RegistryRoutes {
        grpc_service(self.clone(), None)
    }
}

/// The `toolmesh.v1.Registry` gRPC service over `registry`, with the
/// mesh's message size limits (see [`RegistryService::new`]).
pub fn grpc_service(
    registry: Registry,
    journal: Option<Arc<dyn DecisionJournal>>,
) -> RegistryRoutes {
    RegistryService::new(registry, journal).into_server()
}

impl RegistryService {
    /// The service over `registry`: `journal` hears of every rollout
    /// change and every tool disabled or enabled.
    pub fn new(registry: Registry, journal: Option<Arc<dyn DecisionJournal>>) -> RegistryService {
        RegistryService {
            rollouts: RolloutDesk::new(registry.clone(), journal.clone()),
            registry,
            journal,
            refusals: Arc::default(),
            encodings: Arc::default(),
        }
    }

    /// As a gRPC server, with the mesh's message size limits.
    pub fn into_server(self) -> RegistryRoutes {
        let server = pb::registry_server::RegistryServer::new(self.clone())
            .max_decoding_message_size(toolmesh_transport::MAX_CALL_MESSAGE_BYTES)
            .max_encoding_message_size(toolmesh_transport::MAX_SNAPSHOT_MESSAGE_BYTES);
        RegistryRoutes {
            service: self,
            server,
        }
    }

    /// `admin` (already allowed to) disables `tool` for `reason`: stored,
    /// journaled, in force; the snapshot version that holds it. The one
    /// path of `DisableTool` and of the admin page's button.
    pub async fn disable(
        &self,
        tool: &str,
        reason: &str,
        admin: &str,
    ) -> Result<u64, RegistryError> {
        if reason.trim().is_empty() {
            return Err(RegistryError::NoReason);
        }
        let version = self
            .registry
            .set_disabled(tool, Some(reason.to_owned()))
            .await?;
        self.journal_switch(tool, Some(reason), admin, version)
            .await;
        self.in_force(version).await;
        Ok(version)
    }

    /// `admin` (already allowed to) enables `tool` again: the one path of
    /// `EnableTool` and of the admin page's button.
    pub async fn enable(&self, tool: &str, admin: &str) -> Result<u64, RegistryError> {
        let version = self.registry.set_disabled(tool, None).await?;
        self.journal_switch(tool, None, admin, version).await;
        self.in_force(version).await;
        Ok(version)
    }

    /// `actor` (already allowed to) changes a rollout as `wire` asks: the
    /// one path of `UpdateRollout` and of the admin page's buttons.
    pub async fn change_rollout(
        &self,
        wire: pb::UpdateRolloutRequest,
        actor: String,
    ) -> Result<pb::UpdateRolloutResponse, RegistryError> {
        let request = RolloutRequest::from_pb(wire, actor)?;
        let (snapshot_version, rollout) = self.rollouts.update(request).await?;
        self.in_force(snapshot_version).await;
        Ok(pb::UpdateRolloutResponse {
            rollout: Some(rollout.to_pb()),
            snapshot_version,
        })
    }

    /// The executor identity of a request: its bearer token, else a
    /// verified client certificate naming an executor.
    fn executor_owner<T>(&self, request: &Request<T>) -> Result<String, RegistryError> {
        let gate = self.registry.gate();
        let token = bearer(request.metadata());
        let by_certificate = match (token, toolmesh_transport::peer_certificate(request)) {
            (None, Some(cert)) => gate.executor_owner_by_certificate(&cert),
            _ => None,
        };
        by_certificate
            .unwrap_or_else(|| gate.executor_owner(token))
            .map_err(|error| {
                if !matches!(error, AccessError::Unavailable(_)) {
                    self.refusals.refused(request.remote_addr(), &error);
                }
                RegistryError::RegistrationRefused(error)
            })
    }

    /// Who may read snapshots, and whether it sees executors' call tokens.
    fn reader<T>(&self, request: &Request<T>) -> Result<SnapshotReader, RegistryError> {
        reader(&self.registry, request)
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

    /// Tells the journal, if any, that `admin` disabled or enabled `tool`
    /// in snapshot `version`.
    async fn journal_switch(&self, tool: &str, reason: Option<&str>, admin: &str, version: u64) {
        if let Some(journal) = &self.journal {
            journal.switched(tool, reason, admin, version).await;
        }
    }

    /// Returns once the decision that made snapshot `version` is in force
    /// where this registry's answers must hold (see
    /// [`DecisionJournal::in_force`]).
    async fn in_force(&self, version: u64) {
        if let Some(journal) = &self.journal {
            journal.in_force(version).await;
        }
    }

    /// Who changes a rollout: an admin, or — for an automatic abort — a
    /// dispatcher.
    fn rollout_actor(
        &self,
        request: &Request<pb::UpdateRolloutRequest>,
    ) -> Result<String, RegistryError> {
        let wire = request.get_ref();
        if !wire.automatic {
            return self.admin(request.metadata()).map_err(|e| match e {
                RegistryError::SwitchRefused(AccessError::Forbidden(why)) => {
                    RegistryError::SwitchRefused(AccessError::Forbidden(format!(
                        "{why}; rollouts need that role too"
                    )))
                }
                other => other,
            });
        }
        let reader = self.reader(request)?;
        let abort = wire.action == pb::RolloutAction::Abort as i32;
        if !reader.execute_tokens || !abort {
            return Err(RegistryError::SwitchRefused(AccessError::Forbidden(
                format!(
                    "{} may not make automatic rollout changes: only a dispatcher (role \"dispatcher\") may, and only ABORT; an operator runs `toolmesh rollout` with an admin token",
                    reader.name
                ),
            )));
        }
        tracing::info!(dispatcher = %reader.name, tool = %wire.tool, "automatic rollout abort");
        Ok(reader.name)
    }
}

/// Who may read `registry`'s snapshots, and whether it sees executors'
/// call tokens (a dispatcher does).
pub(crate) fn reader<T>(
    registry: &Registry,
    request: &Request<T>,
) -> Result<SnapshotReader, RegistryError> {
    let certificate = toolmesh_transport::peer_certificate(request);
    registry
        .gate()
        .snapshot_reader(bearer(request.metadata()), certificate.as_ref())
        .map_err(RegistryError::ReadRefused)
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
        let registered = self.registry.register(request.into_inner(), &owner).await?;
        Ok(Response::new(registered))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let owner = self.executor_owner(&request)?;
        let snapshot_version = self
            .registry
            .heartbeat(&request.get_ref().lease_id, &owner)
            .await?;
        Ok(Response::new(pb::HeartbeatResponse { snapshot_version }))
    }

    async fn deregister(
        &self,
        request: Request<pb::DeregisterRequest>,
    ) -> Result<Response<pb::DeregisterResponse>, Status> {
        let owner = self.executor_owner(&request)?;
        let snapshot_version = self
            .registry
            .deregister(&request.get_ref().lease_id, &owner)
            .await?;
        Ok(Response::new(pb::DeregisterResponse { snapshot_version }))
    }

    async fn disable_tool(
        &self,
        request: Request<pb::DisableToolRequest>,
    ) -> Result<Response<pb::DisableToolResponse>, Status> {
        let admin = self.admin(request.metadata())?;
        let request = request.get_ref();
        let snapshot_version = self.disable(&request.tool, &request.reason, &admin).await?;
        Ok(Response::new(pb::DisableToolResponse { snapshot_version }))
    }

    async fn enable_tool(
        &self,
        request: Request<pb::EnableToolRequest>,
    ) -> Result<Response<pb::EnableToolResponse>, Status> {
        let admin = self.admin(request.metadata())?;
        let snapshot_version = self.enable(&request.get_ref().tool, &admin).await?;
        Ok(Response::new(pb::EnableToolResponse { snapshot_version }))
    }

    async fn get_snapshot(
        &self,
        request: Request<pb::GetSnapshotRequest>,
    ) -> Result<Response<pb::Snapshot>, Status> {
        let reader = self.reader(&request)?;
        let snapshot = self.registry.snapshot(request.get_ref().version)?;
        Ok(Response::new(watch::for_reader(
            snapshot.to_pb(),
            reader.execute_tokens,
        )))
    }

    async fn update_rollout(
        &self,
        request: Request<pb::UpdateRolloutRequest>,
    ) -> Result<Response<pb::UpdateRolloutResponse>, Status> {
        let actor = self.rollout_actor(&request)?;
        let answer = self.change_rollout(request.into_inner(), actor).await?;
        Ok(Response::new(answer))
    }

    async fn list_rollouts(
        &self,
        request: Request<pb::ListRolloutsRequest>,
    ) -> Result<Response<pb::ListRolloutsResponse>, Status> {
        self.reader(&request)?;
        let tool = request.get_ref().tool.trim();
        let snapshot = self.registry.current();
        let rollouts: Vec<pb::RolloutStatus> = snapshot
            .rollouts()
            .filter(|r| tool.is_empty() || r.tool == tool)
            .map(|r| crate::rollouts::status(&snapshot, r))
            .collect();
        if !tool.is_empty() && rollouts.is_empty() {
            let none = crate::rollouts::RolloutError::NoRollout(tool.to_owned());
            return Err(RegistryError::from(none).into());
        }
        Ok(Response::new(pb::ListRolloutsResponse {
            rollouts,
            snapshot_version: snapshot.version(),
        }))
    }

    type WatchSnapshotsStream = SnapshotStream;

    /// Served by [`RegistryRoutes`] from shared frames; this is the same
    /// stream decoded again, for a server built from the bare generated type.
    async fn watch_snapshots(
        &self,
        request: Request<pb::WatchSnapshotsRequest>,
    ) -> Result<Response<Self::WatchSnapshotsStream>, Status> {
        let frames = self.frames(request).await?;
        let messages = frames.map(|frame| frame.and_then(|frame| watch::unframed(&frame)));
        Ok(Response::new(messages.boxed()))
    }
}

impl RegistryService {
    /// What `request` is answered with: the snapshots it asks for, as
    /// frames shared with every other watcher.
    async fn frames(
        &self,
        request: Request<pb::WatchSnapshotsRequest>,
    ) -> Result<FrameStream, Status> {
        let reader = self.reader(&request)?;
        let request = request.get_ref();
        let current = self.registry.current();
        let held =
            if request.deltas && request.after_version > 0 && request.epoch == current.epoch() {
                self.registry
                    .snapshot_once_reached(request.after_version, CATCH_UP_WAIT)
                    .await
            } else {
                None
            };
        self.registry.watch_opened(held.is_some());
        let framer = watch::Framer {
            encodings: self.encodings.clone(),
            execute_tokens: reader.execute_tokens,
        };
        let receiver = self.registry.subscribe();
        let frames = match held {
            Some(held) => framer.deltas_from(receiver, held),
            None => framer.after_version(receiver, request.after_version, request.deltas),
        };
        Ok(match reader.until {
            Some(until) => toolmesh_transport::ends_when_token_expires(frames, until).boxed(),
            None => frames,
        })
    }
}

/// `toolmesh.v1.Registry` as served: every method by the generated server
/// except `WatchSnapshots`, whose streams send frames shared among them.
#[derive(Clone)]
pub struct RegistryRoutes {
    service: RegistryService,
    server: pb::registry_server::RegistryServer<RegistryService>,
}

impl std::fmt::Debug for RegistryRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryRoutes").finish_non_exhaustive()
    }
}

impl tonic::server::NamedService for RegistryRoutes {
    const NAME: &'static str =
        <pb::registry_server::RegistryServer<RegistryService> as tonic::server::NamedService>::NAME;
}

impl<B> tonic::codegen::Service<tonic::codegen::http::Request<B>> for RegistryRoutes
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = tonic::codegen::http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: tonic::codegen::http::Request<B>) -> Self::Future {
        if request.uri().path() == watch::WATCH_SNAPSHOTS {
            let service = self.service.clone();
            Box::pin(async move { Ok(watch::serve(service, request).await) })
        } else {
            self.server.call(request)
        }
    }
}
