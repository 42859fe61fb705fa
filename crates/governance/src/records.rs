//! The records every dispatcher of a mesh shares (approval tickets, session facts), kept by the registry: the [`RecordStore`] seam, its gRPC client ([`RemoteRecords`]), the in-memory store ([`MemoryRecords`]), and the retry-on-conflict loop the rules run in.

mod memory;

pub use memory::MemoryRecords;

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tonic::transport::Channel;
use toolmesh::pb::{self, shared_records_client::SharedRecordsClient};

/// How long one request may wait for the registry.
const TIMEOUT: Duration = Duration::from_secs(3);
/// How often an operation is tried again after losing a race.
const MAX_RACES: usize = 8;

/// Why the shared records could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordsError {
    /// The registry did not answer, or refused (its status, in words).
    #[error("{0}")]
    Unavailable(String),
    /// Other dispatchers kept changing the same records.
    #[error("{0} changed under several concurrent calls; call again")]
    Contended(&'static str),
}

impl From<tonic::Status> for RecordsError {
    fn from(status: tonic::Status) -> Self {
        RecordsError::Unavailable(format!("{:?}: {}", status.code(), status.message()))
    }
}

/// The registry's shared records: read under a prefix, write one if
/// nobody changed it since it was read, remove one. Over gRPC
/// ([`RemoteRecords`]), in the registry's own process (a `serve`
/// node), or in this process alone ([`MemoryRecords`]).
#[tonic::async_trait]
pub trait RecordStore: Send + Sync + 'static {
    /// Every live record under `prefix`, without values when `keys_only`.
    async fn list(
        &self,
        prefix: &str,
        keys_only: bool,
    ) -> Result<Vec<pb::SharedRecord>, RecordsError>;
    /// Writes `record` if its revision is still `record.revision` (0: it
    /// must not exist), expiring after `ttl`; false when another writer
    /// changed it first.
    async fn compare_and_put(
        &self,
        record: pb::SharedRecord,
        ttl: Duration,
    ) -> Result<bool, RecordsError>;
    /// Removes the record under `key`.
    async fn delete(&self, key: &str) -> Result<(), RecordsError>;
}

/// The registry's shared records, reached over gRPC.
#[derive(Debug, Clone)]
pub struct RemoteRecords {
    client: SharedRecordsClient<Channel>,
    token: Option<toolmesh_transport::Credential>,
}

impl RemoteRecords {
    /// A relay to the registry behind `channel`, authenticated with
    /// `token` (the dispatcher's registry token).
    pub fn new(channel: Channel, token: Option<toolmesh_transport::Credential>) -> Self {
        RemoteRecords {
            client: SharedRecordsClient::new(channel),
            token,
        }
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(TIMEOUT);
        toolmesh_transport::attach_credential(self.token.as_ref(), request.metadata_mut());
        request
    }
}

#[tonic::async_trait]
impl RecordStore for RemoteRecords {
    async fn list(
        &self,
        prefix: &str,
        keys_only: bool,
    ) -> Result<Vec<pb::SharedRecord>, RecordsError> {
        let request = self.request(pb::ListSharedRecordsRequest {
            prefix: prefix.to_owned(),
            keys_only,
        });
        Ok(self
            .client
            .clone()
            .list(request)
            .await?
            .into_inner()
            .records)
    }

    async fn compare_and_put(
        &self,
        record: pb::SharedRecord,
        ttl: Duration,
    ) -> Result<bool, RecordsError> {
        let request = self.request(pb::CompareAndPutRequest {
            record: Some(record),
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        });
        Ok(self
            .client
            .clone()
            .compare_and_put(request)
            .await?
            .into_inner()
            .ok)
    }

    async fn delete(&self, key: &str) -> Result<(), RecordsError> {
        let request = self.request(pb::DeleteSharedRecordRequest {
            key: key.to_owned(),
        });
        self.client.clone().delete(request).await?;
        Ok(())
    }
}

/// `time` as shared records hold it: milliseconds since the Unix epoch
/// (another process cannot read an `Instant`).
pub fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Runs `attempt` (read the records, apply a rule, write back with a
/// compare on revisions) until its writes land: `Some` answer. `None`
/// means another writer came first, so it runs again on fresh records, up
/// to a few times; then `what` is [`RecordsError::Contended`].
pub async fn until_written<T, F, A>(what: &'static str, mut attempt: A) -> Result<T, RecordsError>
where
    A: FnMut() -> F,
    F: Future<Output = Result<Option<T>, RecordsError>>,
{
    for _ in 0..MAX_RACES {
        if let Some(answer) = attempt().await? {
            return Ok(answer);
        }
    }
    Err(RecordsError::Contended(what))
}
