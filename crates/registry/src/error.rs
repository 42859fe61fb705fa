//! What can go wrong in the registry, and its one mapping to a gRPC status.

use crate::gate::AccessError;

/// Why a registry operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// `RegisterRequest.executor_id` is empty.
    #[error("executor_id is empty: give each executor process a unique, stable id")]
    EmptyExecutorId,
    /// `RegisterRequest.endpoint` is not `host:port`.
    #[error(
        "endpoint {0:?} is not host:port (for example 10.0.0.7:7070 or [::1]:7070): give the address of the executor's toolmesh.v1.Executor service"
    )]
    InvalidEndpoint(String),
    /// `RegisterRequest.execute_token` cannot be sent as a header.
    #[error(
        "execute_token must be printable ASCII without spaces, at most {limit} bytes: use for example 64 random hex digits"
    )]
    InvalidExecuteToken {
        /// The length limit.
        limit: usize,
    },
    /// `RegisterRequest.endpoint` is well formed but no dispatcher can dial
    /// it (a wildcard address or port 0: the executor registered what it
    /// bound instead of an address it is reachable on).
    #[error("endpoint {endpoint:?} cannot be reached by dispatchers: {reason}; {hint}", hint = toolmesh_transport::ADVERTISE_HINT)]
    UnroutableEndpoint {
        /// The endpoint as registered.
        endpoint: String,
        /// Why it cannot be dialled.
        reason: toolmesh_transport::Unroutable,
    },
    /// A heartbeat or deregistration named no lease.
    #[error("lease_id is empty: pass the lease_id that Register returned")]
    EmptyLeaseId,
    /// The lease does not exist (expired, deregistered, replaced, or granted
    /// by an earlier registry process).
    #[error("lease {0} is unknown (the registry may have restarted): register again")]
    UnknownLease(String),
    /// The lease granted to a registration expired before the registration
    /// was answered (the write outlasted a short lease).
    #[error(
        "the registration took longer than its lease of {ttl_ms} ms, which expired before the answer: register again with a longer lease_ttl_ms"
    )]
    LeaseOutlived {
        /// The lease granted, in milliseconds.
        ttl_ms: u64,
    },
    /// A tool is disabled without saying why.
    #[error("say why the tool is disabled: callers and operators read the reason")]
    NoReason,
    /// No tool by that name is known.
    #[error("no tool named {0:?} is known to the registry")]
    UnknownTool(String),
    /// The snapshot asked for is not (or no longer, or not yet) held.
    #[error("{0}; ask for 0 to get the newest")]
    SnapshotNotHeld(#[from] toolmesh::NotHeld),
    /// One registration lists more tools than allowed.
    #[error(
        "this registration lists {count} tools; the limit is {limit} per executor: split it over several executors"
    )]
    TooManyTools {
        /// Tools listed.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// The gate refused an executor's registration (UNAUTHENTICATED, whether
    /// the caller is unknown or lacks the right to register).
    #[error(transparent)]
    RegistrationRefused(AccessError),
    /// The gate refused an operator's switch (PERMISSION_DENIED, whether
    /// the caller is unknown or lacks the right).
    #[error(transparent)]
    SwitchRefused(AccessError),
    /// The executor id is held by a live registration of another owner.
    #[error(
        "executor id {id:?} is registered by another owner: executor ids are bound to the identity that registered them while their lease lives; give this executor a unique id"
    )]
    ExecutorIdTaken {
        /// The id asked for.
        id: String,
    },
    /// One owner has as many live executors as it may.
    #[error(
        "{owner} already has {limit} live executors registered, the most one owner may have: deregister some (or let their leases expire) or ask an operator to raise the limit"
    )]
    TooManyExecutors {
        /// The owner.
        owner: String,
        /// The limit.
        limit: usize,
    },
    /// A heartbeat or deregistration for a lease another owner holds.
    #[error(
        "lease {0} was granted to another owner: heartbeat and deregister with the token (or certificate) you registered with"
    )]
    NotYourLease(String),
    /// The gate refused a snapshot read.
    #[error(transparent)]
    ReadRefused(AccessError),
    /// The state file in the data directory could not be used.
    #[error("registry state file {path}: {problem}")]
    State {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong and what to do.
        problem: String,
    },
    /// The store (etcd) cannot take the change now; the previous state
    /// stands.
    #[error(
        "the registry's store cannot take changes now: {0}; the last snapshot keeps serving: retry in a few seconds (a registered executor keeps its registration)"
    )]
    StoreUnavailable(String),
    /// The store answered something the registry cannot use.
    #[error("the registry's store refused the change: {0}; report this to the operator")]
    StoreRefused(String),
    /// The `--store` value cannot be used.
    #[error("{0}")]
    BadStore(String),
    /// A shared record the registry cannot keep.
    #[error("{0}; send what toolmesh_governance::RemoteRecords sends")]
    BadSharedRecord(String),
    /// The gate refused access to the shared records (only dispatchers
    /// may read or write them).
    #[error(transparent)]
    SharedRefused(AccessError),
    /// Concurrent writers kept changing one shared record.
    #[error("{0} changed under several concurrent calls; call again")]
    Contended(&'static str),
    /// A task inside the registry failed.
    #[error("{0}; try again")]
    Internal(String),
    /// A rollout request the rules refuse.
    #[error(transparent)]
    Rollout(#[from] crate::rollouts::RolloutError),
}

impl From<toolmesh_etcd::EtcdError> for RegistryError {
    fn from(error: toolmesh_etcd::EtcdError) -> Self {
        if error.is_unavailable() {
            RegistryError::StoreUnavailable(error.to_string())
        } else {
            RegistryError::StoreRefused(error.to_string())
        }
    }
}

impl From<crate::durable::StateFileError> for RegistryError {
    fn from(error: crate::durable::StateFileError) -> Self {
        RegistryError::State {
            path: error.path,
            problem: error.problem,
        }
    }
}

impl From<crate::kv::KvError> for RegistryError {
    fn from(error: crate::kv::KvError) -> Self {
        match error {
            crate::kv::KvError::Etcd(error) => error.into(),
            crate::kv::KvError::Durable(error) => error.into(),
            other @ (crate::kv::KvError::LeaseGone(_) | crate::kv::KvError::Compacted { .. }) => {
                RegistryError::Internal(other.to_string())
            }
        }
    }
}

impl From<RegistryError> for tonic::Status {
    fn from(error: RegistryError) -> Self {
        let message = error.to_string();
        match error {
            RegistryError::EmptyExecutorId
            | RegistryError::InvalidEndpoint(_)
            | RegistryError::UnroutableEndpoint { .. }
            | RegistryError::EmptyLeaseId
            | RegistryError::InvalidExecuteToken { .. }
            | RegistryError::TooManyTools { .. }
            | RegistryError::NoReason
            | RegistryError::BadStore(_)
            | RegistryError::BadSharedRecord(_) => tonic::Status::invalid_argument(message),
            RegistryError::Contended(_) => tonic::Status::aborted(message),
            RegistryError::RegistrationRefused(AccessError::Unavailable(_))
            | RegistryError::SwitchRefused(AccessError::Unavailable(_))
            | RegistryError::ReadRefused(AccessError::Unavailable(_))
            | RegistryError::SharedRefused(AccessError::Unavailable(_)) => {
                tonic::Status::unavailable(message)
            }
            RegistryError::RegistrationRefused(_) => tonic::Status::unauthenticated(message),
            RegistryError::TooManyExecutors { .. } => tonic::Status::resource_exhausted(message),
            RegistryError::SwitchRefused(_)
            | RegistryError::ExecutorIdTaken { .. }
            | RegistryError::NotYourLease(_)
            | RegistryError::ReadRefused(AccessError::Forbidden(_))
            | RegistryError::SharedRefused(AccessError::Forbidden(_)) => {
                tonic::Status::permission_denied(message)
            }
            RegistryError::ReadRefused(AccessError::Unauthenticated(_))
            | RegistryError::SharedRefused(AccessError::Unauthenticated(_)) => {
                tonic::Status::unauthenticated(message)
            }
            RegistryError::State { .. }
            | RegistryError::StoreRefused(_)
            | RegistryError::Internal(_) => tonic::Status::internal(message),
            RegistryError::StoreUnavailable(_) | RegistryError::LeaseOutlived { .. } => {
                tonic::Status::unavailable(message)
            }
            RegistryError::UnknownLease(_)
            | RegistryError::UnknownTool(_)
            | RegistryError::SnapshotNotHeld(_) => tonic::Status::not_found(message),
            RegistryError::Rollout(refused) => rollout_status(&refused, message),
        }
    }
}

/// The status of a refused rollout request: malformed, missing, or not
/// possible in the rollout's state.
fn rollout_status(refused: &crate::rollouts::RolloutError, message: String) -> tonic::Status {
    use crate::rollouts::RolloutError as E;
    match refused {
        E::NoAction
        | E::BadTool(_)
        | E::CanaryNeedsVersion(_)
        | E::BadShare(_)
        | E::BadGuard(_) => tonic::Status::invalid_argument(message),
        E::UnknownTool(_) | E::NoRollout(_) => tonic::Status::not_found(message),
        E::AlreadyActive { .. }
        | E::NotActive { .. }
        | E::OtherCanary { .. }
        | E::NotNewest { .. } => tonic::Status::failed_precondition(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    /// Malformed requests are INVALID_ARGUMENT; missing things are NOT_FOUND,
    /// and the message is carried through unchanged.
    #[test]
    fn status_mapping() {
        let cases = [
            (RegistryError::EmptyExecutorId, Code::InvalidArgument),
            (
                RegistryError::InvalidEndpoint("x".into()),
                Code::InvalidArgument,
            ),
            (RegistryError::EmptyLeaseId, Code::InvalidArgument),
            (RegistryError::UnknownLease("L".into()), Code::NotFound),
            (
                RegistryError::LeaseOutlived { ttl_ms: 2000 },
                Code::Unavailable,
            ),
            (RegistryError::UnknownTool("t".into()), Code::NotFound),
            (
                RegistryError::SnapshotNotHeld(toolmesh::NotHeld {
                    version: 1,
                    oldest: 5,
                    newest: 9,
                }),
                Code::NotFound,
            ),
            (
                RegistryError::RegistrationRefused(AccessError::Forbidden("f".into())),
                Code::Unauthenticated,
            ),
            (
                RegistryError::SwitchRefused(AccessError::Unauthenticated("u".into())),
                Code::PermissionDenied,
            ),
            (
                RegistryError::BadSharedRecord("k".into()),
                Code::InvalidArgument,
            ),
            (
                RegistryError::SharedRefused(AccessError::Forbidden("f".into())),
                Code::PermissionDenied,
            ),
            (
                RegistryError::SharedRefused(AccessError::Unauthenticated("u".into())),
                Code::Unauthenticated,
            ),
        ];
        for (error, code) in cases {
            let text = error.to_string();
            let status = tonic::Status::from(error);
            assert_eq!(status.code(), code, "{text}");
            assert_eq!(status.message(), text);
        }
        assert_eq!(
            RegistryError::UnknownLease("L".into()).to_string(),
            "lease L is unknown (the registry may have restarted): register again"
        );
    }
}
