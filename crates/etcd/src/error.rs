//! What can go wrong talking to etcd.
use tonic::{Code, Status};

/// How the password and TLS files are named to the operator: every message
/// that asks for a fix names these.
const CREDENTIALS_HINT: &str =
    "--etcd-user and the password in TOOLMESH_ETCD_PASSWORD or --etcd-password-file";

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
    /// A write named a lease etcd no longer holds (it expired or was
    /// revoked before the write arrived): grant another and write again.
    #[error(
        "etcd no longer holds the lease the write named ({0}); grant a new lease and write again"
    )]
    LeaseNotFound(String),
    /// A watch stream ended or was cancelled by the server.
    #[error("etcd watch ended ({0}); watch again from the last revision seen")]
    WatchEnded(String),
    /// The `--store` value is not an etcd URL list.
    #[error(
        "store {0:?} is not etcd://host:port[,host:port…] (for example etcd://10.0.0.5:2379,10.0.0.6:2379)"
    )]
    BadUrl(String),
    /// etcd refused the user name and password.
    #[error(
        "etcd refused the password of user {user:?} ({detail}); check {CREDENTIALS_HINT} (the user must exist in etcd: etcdctl user get {user})"
    )]
    AuthFailed {
        /// The user name tried.
        user: String,
        /// etcd's words.
        detail: String,
    },
    /// etcd has authentication on and this client gave no credentials (or
    /// a client certificate whose common name is no user with access).
    #[error("etcd requires authentication ({0}); give {CREDENTIALS_HINT}")]
    AuthRequired(String),
    /// The user is authenticated but may not touch the keys asked for.
    #[error(
        "etcd denied user {user:?} access ({detail}); grant its role readwrite on the prefix /toolmesh/ (etcdctl role grant-permission ROLE --prefix=true readwrite /toolmesh/)"
    )]
    PermissionDenied {
        /// The user name.
        user: String,
        /// etcd's words.
        detail: String,
    },
    /// TLS between this client and etcd failed.
    #[error("etcd at {endpoint}: {problem}")]
    Tls {
        /// The endpoint whose handshake failed.
        endpoint: String,
        /// What failed, and what to give to fix it.
        problem: TlsProblem,
    },
}

/// Why TLS with an etcd endpoint failed, each naming what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsProblem {
    /// The server's certificate is not signed by the CA given.
    #[error(
        "its server certificate is not trusted ({0}); give --etcd-ca the CA that signed etcd's --cert-file, for a name or IP address the --store URL uses"
    )]
    UntrustedServer(String),
    /// etcd closed the connection after the handshake: it requires a
    /// client certificate it trusts, and none was given or not one it trusts.
    #[error(
        "etcd closed the connection after the TLS handshake: it requires a client certificate ({0}); give --etcd-cert and --etcd-key, a certificate signed by etcd's --trusted-ca-file"
    )]
    ClientCertificateRefused(String),
    /// etcd speaks TLS and this client does not.
    #[error(
        "etcd serves TLS there and this client spoke plaintext ({0}); give --etcd-ca (the CA that signed etcd's --cert-file) to connect with TLS"
    )]
    ServerWantsTls(String),
    /// This client speaks TLS and etcd does not.
    #[error(
        "etcd does not serve TLS there ({0}); serve etcd with --cert-file/--key-file on https:// client URLs, or drop --etcd-ca"
    )]
    ServerWithoutTls(String),
}

impl EtcdError {
    /// Whether the request may succeed later (etcd away, no leader).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            EtcdError::Unavailable { .. } | EtcdError::WatchEnded(_)
        )
    }

    /// Whether only a change of this client's settings (TLS files, user,
    /// password) or of etcd's (users, roles) cures it.
    pub fn is_misconfigured(&self) -> bool {
        matches!(
            self,
            EtcdError::AuthFailed { .. }
                | EtcdError::AuthRequired(_)
                | EtcdError::PermissionDenied { .. }
                | EtcdError::Tls { .. }
                | EtcdError::BadUrl(_)
        )
    }

    /// The error for a status etcd answered a request with (not an
    /// unavailable endpoint): authentication and permission refusals named
    /// as such, anything else refused.
    pub(crate) fn rejected(status: &Status, user: Option<&str>) -> EtcdError {
        let detail = status.message().to_owned();
        if detail.contains("user name is empty") || detail.contains("invalid auth token") {
            return match user {
                Some(_) => EtcdError::Refused(detail),
                None => EtcdError::AuthRequired(detail),
            };
        }
        if status.code() == Code::PermissionDenied || detail.contains("permission denied") {
            return match user {
                Some(user) => EtcdError::PermissionDenied {
                    user: user.to_owned(),
                    detail,
                },
                None => EtcdError::AuthRequired(detail),
            };
        }
        // etcd's own wording (rpctypes.ErrGRPCLeaseNotFound).
        if status.code() == Code::NotFound && detail.contains("lease not found") {
            return EtcdError::LeaseNotFound(detail);
        }
        EtcdError::Refused(detail)
    }
}

/// Whether a status means "try another endpoint" (down, no leader, timed out).
pub(crate) fn is_unavailable(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
    )
}
