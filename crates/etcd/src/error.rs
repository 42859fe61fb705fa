//! What can go wrong talking to etcd.
use tonic::{Code, Status};

/// Why an etcd request did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EtcdError {
    /// No endpoint answered (down, unreachable, no leader, timed out).
    #[error(
        "etcd cannot be reached at {endpoints} ({last}); check that a quorum of etcd members runs and that --store names their client URLs"
    )]
    Unavailable {
        /// Every endpoint tried.
        endpoints: String,
        /// The last endpoint's error.
        last: String,
    },
    /// A watch asked for history etcd has compacted away.
    #[error(
        "etcd compacted its history up to revision {compacted}; read the whole prefix again and watch from its revision"
    )]
    Compacted {
        /// The oldest revision etcd still holds.
        compacted: i64,
    },
    /// etcd answered with an error that retrying elsewhere does not cure.
    #[error("etcd refused the request: {0}")]
    Refused(String),
    /// A watch stream ended or was cancelled by the server.
    #[error("etcd watch ended ({0}); watch again from the last revision seen")]
    WatchEnded(String),
    /// The `--store` value is not an etcd URL list.
    #[error(
        "store {0:?} is not etcd://host:port[,host:port…] (for example etcd://10.0.0.5:2379,10.0.0.6:2379)"
    )]
    BadUrl(String),
}

impl EtcdError {
    /// Whether the request may succeed later (etcd away, no leader).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            EtcdError::Unavailable { .. } | EtcdError::WatchEnded(_)
        )
    }
}

/// Whether a status means "try another endpoint" (down, no leader, timed out).
pub(crate) fn is_unavailable(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
    )
}
