//! The `toolmesh.v1.SharedRecords` gRPC service: typed records (approval tickets, session facts) over the store's shared records, for dispatchers only; the registry stores them and runs none of governance's rules.

use crate::error::RegistryError;
use crate::gate::AccessError;
use crate::registry::Registry;
use crate::service::reader;
use prost::Message;
use std::time::Duration;
use tonic::{Request, Response, Status};
use toolmesh::pb::{self, shared_record::Value};

/// Longest key kept, in bytes.
const MAX_KEY_BYTES: usize = 512;
/// Where session records live; their keys end in two digests.
const SESSION_PREFIX: &str = "session/";
/// Facts one session record may hold.
const MAX_FACTS: usize = 10_000;

/// Typed shared records in a [`Registry`]: the `SharedRecords` RPCs, and the
/// dispatcher of a `serve` node in the same process.
#[derive(Clone)]
pub struct SharedRecordsService {
    registry: Registry,
}

impl std::fmt::Debug for SharedRecordsService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRecordsService")
            .finish_non_exhaustive()
    }
}

impl SharedRecordsService {
    /// The records kept in `registry`.
    pub fn new(registry: Registry) -> Self {
        SharedRecordsService { registry }
    }

    /// As a gRPC server, with the mesh's message size limits.
    pub fn into_server(self) -> pb::shared_records_server::SharedRecordsServer<Self> {
        pb::shared_records_server::SharedRecordsServer::new(self)
            .max_decoding_message_size(toolmesh_transport::MAX_CALL_MESSAGE_BYTES)
            .max_encoding_message_size(toolmesh_transport::MAX_SNAPSHOT_MESSAGE_BYTES)
    }

    /// Every live record under `prefix`, without values when `keys_only`.
    /// A value this registry cannot read (written by an older one) is left
    /// out: its record expires with its TTL.
    pub async fn list(
        &self,
        prefix: &str,
        keys_only: bool,
    ) -> Result<Vec<pb::SharedRecord>, RegistryError> {
        if keys_only {
            let keys = self.registry.shared_keys(prefix).await?;
            return Ok(keys
                .into_iter()
                .map(|r| pb::SharedRecord {
                    key: r.key,
                    revision: r.revision,
                    value: None,
                })
                .collect());
        }
        let records = self.registry.shared_records(prefix).await?;
        Ok(records
            .into_iter()
            .filter_map(|r| {
                let value = pb::SharedRecord::decode(r.value.as_slice()).ok()?.value?;
                Some(pb::SharedRecord {
                    key: r.key,
                    revision: r.revision,
                    value: Some(value),
                })
            })
            .collect())
    }

    /// Writes `record` if its revision is still `record.revision` (0: it
    /// must not exist), expiring after `ttl`; false when another writer
    /// changed it first.
    pub async fn compare_and_put(
        &self,
        record: pb::SharedRecord,
        ttl: Duration,
    ) -> Result<bool, RegistryError> {
        check(&record, ttl)?;
        // Only the value is stored: the key and revision are the store's.
        let value = pb::SharedRecord {
            key: String::new(),
            revision: 0,
            value: record.value,
        }
        .encode_to_vec();
        self.registry
            .put_shared(&record.key, value, record.revision, ttl)
            .await
    }

    /// Removes the record under `key`.
    pub async fn delete(&self, key: &str) -> Result<(), RegistryError> {
        check_key(key)?;
        self.registry.delete_shared(key).await
    }

    /// The caller, when it is a dispatcher (it vouches for the callers the
    /// records name); anyone else is refused.
    fn dispatcher<T>(&self, request: &Request<T>) -> Result<(), RegistryError> {
        let reader = reader(&self.registry, request).map_err(|e| match e {
            RegistryError::ReadRefused(refused) => RegistryError::SharedRefused(refused),
            other => other,
        })?;
        if reader.execute_tokens {
            return Ok(());
        }
        Err(RegistryError::SharedRefused(AccessError::Forbidden(
            format!(
                "{} may not use the shared records (approvals, session facts): they are for dispatchers; call with the token of a caller that has the role \"dispatcher\"",
                reader.name
            ),
        )))
    }
}

fn bad(what: String) -> Result<(), RegistryError> {
    Err(RegistryError::BadSharedRecord(what))
}

fn check_key(key: &str) -> Result<(), RegistryError> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES || key.chars().any(char::is_control) {
        return bad(format!(
            "key {key:?} is not a record key: 1 to {MAX_KEY_BYTES} bytes without control characters"
        ));
    }
    Ok(())
}

/// Refuses what the registry cannot keep: a record without a value or a
/// TTL, and a session record that is not made of digests (the registry
/// never sees a caller, a session id or an argument).
fn check(record: &pb::SharedRecord, ttl: Duration) -> Result<(), RegistryError> {
    check_key(&record.key)?;
    if ttl.is_zero() {
        return bad("ttl_ms is 0: say how long the record lives".to_owned());
    }
    let Some(value) = &record.value else {
        return bad(format!("record {:?} has no value", record.key));
    };
    if let Value::Session(session) = value {
        let tail = record.key.strip_prefix(SESSION_PREFIX).unwrap_or_default();
        let digests = tail.split_once('/');
        if !digests.is_some_and(|(caller, id)| is_digest(caller) && is_digest(id)) {
            return bad(format!(
                "session key {:?} is not {SESSION_PREFIX}<caller digest>/<session digest>, each a lowercase hex SHA-256 digest",
                record.key
            ));
        }
        if let Some(fact) = session.facts.iter().find(|f| !is_digest(f)) {
            return bad(format!(
                "fact {fact:?} is not a lowercase hex SHA-256 digest"
            ));
        }
        if session.facts.len() > MAX_FACTS {
            return bad(format!("a session keeps at most {MAX_FACTS} facts"));
        }
    }
    Ok(())
}

fn is_digest(value: &str) -> bool {
    value.len() == 64
        && value
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[tonic::async_trait]
impl pb::shared_records_server::SharedRecords for SharedRecordsService {
    async fn list(
        &self,
        request: Request<pb::ListSharedRecordsRequest>,
    ) -> Result<Response<pb::ListSharedRecordsResponse>, Status> {
        self.dispatcher(&request)?;
        let request = request.get_ref();
        let records = SharedRecordsService::list(self, &request.prefix, request.keys_only).await?;
        Ok(Response::new(pb::ListSharedRecordsResponse { records }))
    }

    async fn compare_and_put(
        &self,
        request: Request<pb::CompareAndPutRequest>,
    ) -> Result<Response<pb::CompareAndPutResponse>, Status> {
        self.dispatcher(&request)?;
        let request = request.into_inner();
        let record = request.record.unwrap_or_default();
        let ttl = Duration::from_millis(request.ttl_ms);
        let ok = SharedRecordsService::compare_and_put(self, record, ttl).await?;
        Ok(Response::new(pb::CompareAndPutResponse { ok }))
    }

    async fn delete(
        &self,
        request: Request<pb::DeleteSharedRecordRequest>,
    ) -> Result<Response<pb::DeleteSharedRecordResponse>, Status> {
        self.dispatcher(&request)?;
        SharedRecordsService::delete(self, &request.get_ref().key).await?;
        Ok(Response::new(pb::DeleteSharedRecordResponse {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RegistryConfig;

    fn digest(n: u32) -> String {
        format!("{n:064x}")
    }

    fn records() -> SharedRecordsService {
        SharedRecordsService::new(Registry::new(RegistryConfig::default()))
    }

    fn session(key: String, facts: Vec<String>) -> pb::SharedRecord {
        pb::SharedRecord {
            key,
            revision: 0,
            value: Some(Value::Session(pb::SessionRecord {
                facts,
                written_ms: 1,
            })),
        }
    }

    /// A typed record survives the store; a write compares revisions.
    #[tokio::test]
    async fn typed_compare_and_put() {
        let records = records();
        let ttl = Duration::from_secs(60);
        let ticket = pb::SharedRecord {
            key: "approval/a-1".into(),
            revision: 0,
            value: Some(Value::Ticket(pb::ApprovalTicket {
                id: "a-1".into(),
                state: pb::ApprovalState::Pending as i32,
                ..Default::default()
            })),
        };
        assert!(records.compare_and_put(ticket.clone(), ttl).await.unwrap());
        assert!(!records.compare_and_put(ticket.clone(), ttl).await.unwrap());
        let read = records.list("approval/", false).await.unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].value, ticket.value);
        assert!(read[0].revision > 0);
        let keys = records.list("approval/", true).await.unwrap();
        assert_eq!(
            (keys[0].revision, keys[0].value.clone()),
            (read[0].revision, None)
        );
        records.delete("approval/a-1").await.unwrap();
        assert!(records.list("approval/", false).await.unwrap().is_empty());
    }

    /// What is not a digest is refused with what to send, as are a record
    /// without a value and one without a TTL.
    #[tokio::test]
    async fn refuses_what_is_not_a_digest() {
        let records = records();
        let ttl = Duration::from_secs(60);
        let key = format!("session/{}/{}", digest(1), digest(2));
        let mut facts = vec![digest(3)];
        facts.push("read_file".into());
        let error = records
            .compare_and_put(session(key.clone(), facts), ttl)
            .await
            .unwrap_err();
        assert!(error.to_string().contains("not a lowercase hex"), "{error}");
        let status = tonic::Status::from(error);
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        let error = records
            .compare_and_put(session(format!("session/bob/{}", digest(2)), vec![]), ttl)
            .await
            .unwrap_err();
        assert!(error.to_string().contains("not session/"), "{error}");
        let empty = pb::SharedRecord {
            key: key.clone(),
            ..Default::default()
        };
        assert!(records.compare_and_put(empty, ttl).await.is_err());
        assert!(
            records
                .compare_and_put(session(key, vec![digest(3)]), Duration::ZERO)
                .await
                .is_err()
        );
    }
}
