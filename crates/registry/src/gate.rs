//! Who may register and who may switch tools off: the registry asks a
//! [`Gate`] with the caller's bearer token and stays free of any one policy
//! format.

pub use toolmesh::AccessError;

/// Decides identities at the registry's edge.
pub trait Gate: Send + Sync + 'static {
    /// The owner an executor registers as, from its bearer token (the
    /// `authorization` header without `Bearer `). `Err` says how to
    /// authenticate.
    fn executor_owner(&self, bearer: Option<&str>) -> Result<String, AccessError>;

    /// The owner an executor registers as when it sent no token but
    /// presented a verified mTLS client certificate; `None` when the
    /// certificate identifies no one (the token path then decides).
    fn executor_owner_by_certificate(
        &self,
        _certificate: &toolmesh_transport::PeerCertificate,
    ) -> Option<Result<String, AccessError>> {
        None
    }

    /// The principal allowed to disable and enable tools. `Err` says why not.
    fn admin(&self, bearer: Option<&str>) -> Result<String, AccessError>;

    /// Who may read snapshots (GetSnapshot, WatchSnapshots), by bearer
    /// token or verified client certificate, and whether it sees the
    /// tokens executors accept calls with. `Err` says why not.
    fn snapshot_reader(
        &self,
        bearer: Option<&str>,
        certificate: Option<&toolmesh_transport::PeerCertificate>,
    ) -> Result<SnapshotReader, AccessError>;
}

/// A caller allowed to read snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotReader {
    /// Who reads.
    pub name: String,
    /// Whether it sees executors' call tokens (dispatchers do).
    pub execute_tokens: bool,
    /// When its credential expires: a watch it opened ends then.
    pub until: Option<std::time::SystemTime>,
}

/// No authentication: every executor registers as the empty owner (no
/// ownership is enforced) and every caller is an admin and may follow
/// snapshots. For development.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenGate;

impl Gate for OpenGate {
    fn executor_owner(&self, _bearer: Option<&str>) -> Result<String, AccessError> {
        Ok(String::new())
    }

    fn admin(&self, _bearer: Option<&str>) -> Result<String, AccessError> {
        Ok("anonymous".to_owned())
    }

    fn snapshot_reader(
        &self,
        _bearer: Option<&str>,
        _certificate: Option<&toolmesh_transport::PeerCertificate>,
    ) -> Result<SnapshotReader, AccessError> {
        Ok(SnapshotReader {
            name: "anonymous".to_owned(),
            execute_tokens: true,
            until: None,
        })
    }
}
