//! The registration loop: Register, Heartbeat every ttl/3, register again when the registry forgot us or the tool set changed, retry with backoff through outages, Deregister on drain.

use crate::backoff::Backoff;
use crate::dispatcher_only::DispatcherOnly;
use std::{
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::{sync::watch, task::JoinHandle, time::Instant};
use tokio_util::sync::CancellationToken;
use tonic::{Code, Request, Status, transport::Channel};
use toolmesh::pb::{
    DeregisterRequest, HeartbeatRequest, RegisterRequest, RegisterResponse, ToolSpec,
    registry_client::RegistryClient,
};
use toolmesh_transport::Credential;
use tracing::{debug, error, info, warn};

/// First wait after a failed registry call.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// Longest wait between registry calls during an outage.
pub const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Longest a single Register or Heartbeat may take.
const RPC_TIMEOUT: Duration = Duration::from_secs(2);
/// Shortest heartbeat period, whatever lease is granted.
const MIN_PERIOD: Duration = Duration::from_millis(10);

/// The running registration loop.
pub(crate) struct LeaseTask {
    client: RegistryClient<Channel>,
    auth: Auth,
    lease_id: Arc<Mutex<Option<String>>>,
    task: JoinHandle<()>,
    stop: CancellationToken,
    registry: String,
}

impl LeaseTask {
    /// Starts registering `request` with the registry behind `channel`,
    /// with the tools `tools` holds, registering again each time they change.
    pub(crate) fn spawn(
        channel: Channel,
        registry: String,
        request: RegisterRequest,
        tools: watch::Receiver<Vec<ToolSpec>>,
        credential: Option<Credential>,
        dispatcher_only: Option<Arc<DispatcherOnly>>,
    ) -> Self {
        let auth = Auth(credential);
        let client = RegistryClient::new(channel)
            .max_decoding_message_size(toolmesh_transport::MAX_CALL_MESSAGE_BYTES)
            .max_encoding_message_size(toolmesh_transport::MAX_CALL_MESSAGE_BYTES);
        let lease_id = Arc::new(Mutex::new(None));
        let stop = CancellationToken::new();
        let task = tokio::spawn(keep_lease(
            client.clone(),
            registry.clone(),
            request,
            tools,
            Arc::clone(&lease_id),
            stop.clone(),
            auth.clone(),
            dispatcher_only,
        ));
        LeaseTask {
            client,
            auth,
            lease_id,
            task,
            stop,
            registry,
        }
    }

    /// Stops the loop and deregisters the current lease, taking at most
    /// `limit` in all (best effort: an unreachable registry lets the lease
    /// expire). A Register already on the wire may finish first, so the
    /// lease it grants is the one deregistered.
    pub(crate) async fn stop(mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        self.stop.cancel();
        if tokio::time::timeout_at(deadline, &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
        }
        let limit = deadline.saturating_duration_since(Instant::now());
        let lease_id = self.lease_id.lock().ok().and_then(|mut id| id.take());
        let Some(lease_id) = lease_id else {
            return;
        };
        let mut request = self.auth.request(DeregisterRequest {
            lease_id: lease_id.clone(),
        });
        request.set_timeout(limit);
        match tokio::time::timeout(limit, self.client.deregister(request)).await {
            Ok(Ok(_)) => info!(registry = %self.registry, lease_id, "deregistered"),
            Ok(Err(status)) => {
                warn!(registry = %self.registry, lease_id, %status, "deregister failed; the lease will expire")
            }
            Err(_) => {
                warn!(registry = %self.registry, lease_id, "deregister timed out; the lease will expire")
            }
        }
    }
}

/// Tracks one outage of the registry: a line when it starts and each time
/// its kind changes (unreachable, refusing the token, refusing the
/// request), one notice when it ends, and the backoff in between.
struct Outage {
    registry: String,
    /// The code of the last failure; `None` while the registry answers.
    kind: Option<Code>,
    backoff: Backoff,
}

/// What an executor refused for its token must change.
const TOKEN_FIX: &str = "give the executor the token of a policy caller with the role `executor` (ServeOptions::token; `--token`, `--token-file`, TOOLMESH_TOKEN or TOOLMESH_TOKEN_FILE), or none under `toolmesh up`, whose development policy lets anyone register";

impl Outage {
    fn new(registry: String) -> Self {
        Outage {
            registry,
            kind: None,
            backoff: Backoff::new(BACKOFF_INITIAL, BACKOFF_MAX),
        }
    }

    /// Records a failure of `what`; gives the time to wait before trying
    /// again. The first failure of each kind is logged, repeats at DEBUG.
    fn failed(&mut self, what: &str, status: &Status) -> Duration {
        let code = status.code();
        if self.kind.replace(code) == Some(code) {
            debug!(registry = %self.registry, %status, "{what} failed again");
        } else if matches!(code, Code::Unauthenticated | Code::PermissionDenied) {
            error!(registry = %self.registry, %status, "{what} refused by the registry: it does not accept this executor's token; {TOKEN_FIX}; retrying with backoff");
        } else if is_transient(code) {
            warn!(registry = %self.registry, %status, "{what} failed; retrying with backoff until the registry answers");
        } else {
            error!(registry = %self.registry, %status, "{what} refused by the registry; retrying with backoff");
        }
        self.backoff.next_wait()
    }

    /// Records a success.
    fn recovered(&mut self) {
        if self.kind.take().is_some() {
            info!(registry = %self.registry, "registry reachable again");
        }
        self.backoff.reset();
    }
}

fn is_transient(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Unknown
            | Code::ResourceExhausted
            | Code::Aborted
            | Code::Internal
    )
}

/// Register, then heartbeat forever; register again whenever the registry
/// forgets the lease or the tool set changes (same executor id: the new
/// registration replaces the old one in one step).
#[allow(clippy::too_many_arguments)]
async fn keep_lease(
    mut client: RegistryClient<Channel>,
    registry: String,
    mut request: RegisterRequest,
    mut tools: watch::Receiver<Vec<ToolSpec>>,
    lease_id: Arc<Mutex<Option<String>>>,
    stop: CancellationToken,
    auth: Auth,
    dispatcher_only: Option<Arc<DispatcherOnly>>,
) {
    // Waits, unless the loop is being stopped: then the loop ends.
    let pause = |wait: Duration| {
        let stop = stop.clone();
        async move {
            tokio::select! {
                () = tokio::time::sleep(wait) => true,
                () = stop.cancelled() => false,
            }
        }
    };
    let mut outage = Outage::new(registry.clone());
    let asked = Duration::from_millis(request.lease_ttl_ms.into());
    // Once the sender is gone the set can no longer change.
    let mut watching = true;
    while !stop.is_cancelled() {
        if watching {
            request.tools = tools.borrow_and_update().clone();
        }
        let granted = match with_timeout(client.register(auth.rpc(request.clone()))).await {
            Ok(response) => {
                outage.recovered();
                report(&registry, &request, &response);
                if let Some(gate) = &dispatcher_only {
                    gate.accepted(response.execute_token_accepted);
                }
                if let Ok(mut id) = lease_id.lock() {
                    *id = Some(response.lease_id.clone());
                }
                match response.lease_ttl_ms {
                    0 => asked,
                    ms => Duration::from_millis(ms.into()),
                }
            }
            Err(status) => {
                let wait = outage.failed("register", &status);
                if !pause(wait).await {
                    return;
                }
                continue;
            }
        };
        let period = (granted / 3).max(MIN_PERIOD);
        let heartbeat = HeartbeatRequest {
            lease_id: lease_id
                .lock()
                .ok()
                .and_then(|id| id.clone())
                .unwrap_or_default(),
        };
        let mut wait = period;
        loop {
            let watched = watching;
            let tools = &mut tools;
            let changed = async move {
                if !watched {
                    return std::future::pending().await;
                }
                tools.changed().await.is_ok()
            };
            tokio::select! {
                waited = pause(wait) => if !waited {
                    return;
                },
                still = changed => {
                    if still {
                        info!(registry = %registry, executor_id = request.executor_id, "the tool set changed; registering again");
                        break;
                    }
                    watching = false;
                    continue;
                }
            }
            match with_timeout(client.heartbeat(auth.rpc(heartbeat.clone()))).await {
                Ok(_) => {
                    outage.recovered();
                    wait = period;
                }
                Err(status) if status.code() == Code::NotFound => {
                    outage.recovered();
                    info!(registry = %registry, lease_id = heartbeat.lease_id, "registry does not know our lease (it restarted or the lease expired); registering again");
                    break;
                }
                Err(status) => wait = outage.failed("heartbeat", &status),
            }
        }
    }
}

/// The executor's registration token, sent as `authorization: Bearer …`
/// on every registry call (a token file read again each time).
#[derive(Debug, Clone, Default)]
pub(crate) struct Auth(Option<Credential>);

impl Auth {
    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        toolmesh_transport::attach_credential(self.0.as_ref(), request.metadata_mut());
        request
    }

    fn rpc<T>(&self, message: T) -> Request<T> {
        let mut request = self.request(message);
        request.set_timeout(RPC_TIMEOUT);
        request
    }
}

async fn with_timeout<T>(
    call: impl Future<Output = Result<tonic::Response<T>, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(RPC_TIMEOUT, call).await {
        Ok(result) => result.map(tonic::Response::into_inner),
        Err(_) => Err(Status::deadline_exceeded(
            "the registry did not answer in time",
        )),
    }
}

/// Logs a registration, and each tool the registry refused at `error!`.
fn report(registry: &str, request: &RegisterRequest, response: &RegisterResponse) {
    for rejected in &response.rejected {
        error!(
            registry,
            tool = rejected.name,
            reason = rejected.reason,
            "registry rejected tool"
        );
    }
    info!(
        registry,
        executor_id = request.executor_id,
        lease_id = response.lease_id,
        lease_ttl_ms = response.lease_ttl_ms,
        tools = request.tools.len() - response.rejected.len().min(request.tools.len()),
        rejected = response.rejected.len(),
        snapshot_version = response.snapshot_version,
        "registered"
    );
}
