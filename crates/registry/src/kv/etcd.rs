//! The etcd backend of the key-value seam, over the generated client.

use super::{Batch, Compare, Entry, Event, Kv, KvError, LeaseId, Op, Outcome, Txn, Watch};
use std::time::Duration;
use toolmesh_etcd::pb::mvccpb::event::EventType;
use toolmesh_etcd::pb::{self, compare, request_op::Request};
use toolmesh_etcd::{Client, EtcdError, WatchStream};

/// Keys in an etcd cluster. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct EtcdKv {
    client: Client,
    /// A key this client may read (its user may be confined to a prefix):
    /// what a read of the revision asks for.
    probe: Vec<u8>,
}

impl EtcdKv {
    /// The backend over `client`, reading the revision at `probe`.
    pub(crate) fn new(client: Client, probe: Vec<u8>) -> EtcdKv {
        EtcdKv { client, probe }
    }
}

fn entry(kv: pb::mvccpb::KeyValue) -> Entry {
    Entry {
        key: kv.key,
        value: kv.value,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        lease: kv.lease,
    }
}

/// The etcd compare for one of ours.
fn compare_of(compare: Compare) -> pb::Compare {
    let (key, target, union) = match compare {
        Compare::Revision(key, 0) => (
            key,
            compare::CompareTarget::Create,
            compare::TargetUnion::CreateRevision(0),
        ),
        Compare::Revision(key, revision) => (
            key,
            compare::CompareTarget::Mod,
            compare::TargetUnion::ModRevision(revision),
        ),
        Compare::Value(key, value) => (
            key,
            compare::CompareTarget::Value,
            compare::TargetUnion::Value(value),
        ),
    };
    pb::Compare {
        result: compare::CompareResult::Equal as i32,
        target: target as i32,
        key,
        target_union: Some(union),
        range_end: vec![],
    }
}

/// The etcd request for one of our writes.
fn request_of(op: Op) -> pb::RequestOp {
    let request = match op {
        Op::Put { key, value, lease } => Request::RequestPut(pb::PutRequest {
            key,
            value,
            lease,
            ..Default::default()
        }),
        Op::Delete { key } => Request::RequestDeleteRange(pb::DeleteRangeRequest {
            key,
            ..Default::default()
        }),
    };
    pb::RequestOp {
        request: Some(request),
    }
}

/// Keys one range request reads: a page of definitions stays a few MiB.
const RANGE_PAGE_KEYS: i64 = 1_000;

#[tonic::async_trait]
impl Kv for EtcdKv {
    async fn get(&self, key: &[u8]) -> Result<Option<Entry>, KvError> {
        Ok(self.client.get(key).await?.map(entry))
    }

    async fn range(&self, prefix: &[u8], keys_only: bool) -> Result<(Vec<Entry>, i64), KvError> {
        // Page by page, every page read at the first one's revision: one
        // consistent read, however many keys (a registry of 100,000
        // definitions is over 100 MiB, past what one message may carry).
        let end = toolmesh_etcd::prefix_end(prefix);
        let mut from = prefix.to_vec();
        let mut revision = 0;
        let mut entries = Vec::new();
        loop {
            let response = self
                .client
                .range(pb::RangeRequest {
                    key: from.clone(),
                    range_end: end.clone(),
                    keys_only,
                    limit: RANGE_PAGE_KEYS,
                    revision,
                    ..Default::default()
                })
                .await?;
            if revision == 0 {
                revision = response.header.map_or(0, |h| h.revision);
            }
            if let Some(last) = response.kvs.last() {
                // The next page starts just after the last key read.
                from = last.key.clone();
                from.push(0);
            }
            entries.extend(response.kvs.into_iter().map(entry));
            if !response.more {
                return Ok((entries, revision));
            }
        }
    }

    async fn revision(&self) -> Result<i64, KvError> {
        // A linearizable count of one key: the cluster's revision now.
        let response = self
            .client
            .range(pb::RangeRequest {
                key: self.probe.clone(),
                count_only: true,
                ..Default::default()
            })
            .await?;
        Ok(response.header.map_or(0, |h| h.revision))
    }

    async fn watch(&self, prefix: &[u8], from: i64) -> Result<Box<dyn Watch>, KvError> {
        match self.client.watch_prefix(prefix, from).await {
            Ok(stream) => Ok(Box::new(EtcdWatch { stream })),
            Err(error) => Err(watch_error(error)),
        }
    }

    async fn txn(&self, txn: Txn) -> Result<Outcome, KvError> {
        // The lease a refusal for a lost lease is about (a transaction
        // writes under one lease at most).
        let lease = txn.success.iter().find_map(|op| match op {
            Op::Put { lease, .. } if *lease != 0 => Some(*lease),
            _ => None,
        });
        let response = self
            .client
            .txn(pb::TxnRequest {
                compare: txn.compare.into_iter().map(compare_of).collect(),
                success: txn.success.into_iter().map(request_of).collect(),
                failure: vec![],
            })
            .await
            .map_err(|error| match (error, lease) {
                (EtcdError::LeaseNotFound(_), Some(lease)) => KvError::LeaseGone(lease),
                (error, _) => KvError::Etcd(error),
            })?;
        Ok(Outcome {
            succeeded: response.succeeded,
            revision: response.header.map_or(0, |h| h.revision),
        })
    }

    async fn grant(&self, ttl: Duration) -> Result<(LeaseId, Duration), KvError> {
        let secs = i64::try_from(ttl.as_millis().div_ceil(1000).max(1)).unwrap_or(i64::MAX);
        let (lease, granted) = self.client.grant(secs).await?;
        Ok((
            lease,
            Duration::from_secs(u64::try_from(granted).unwrap_or(0)),
        ))
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<Option<Duration>, KvError> {
        let ttl = self.client.keep_alive(lease).await?;
        Ok(u64::try_from(ttl)
            .ok()
            .filter(|secs| *secs > 0)
            .map(Duration::from_secs))
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), KvError> {
        Ok(self.client.revoke(lease).await?)
    }
}

/// A watch on etcd.
struct EtcdWatch {
    stream: WatchStream,
}

/// Compaction is the caller's to handle (a full read); the rest is etcd's.
fn watch_error(error: EtcdError) -> KvError {
    match error {
        EtcdError::Compacted { compacted } => KvError::Compacted { compacted },
        error => KvError::Etcd(error),
    }
}

#[tonic::async_trait]
impl Watch for EtcdWatch {
    async fn next(&mut self) -> Result<Batch, KvError> {
        let batch = self.stream.next().await.map_err(watch_error)?;
        let events = batch
            .events
            .into_iter()
            .filter_map(|event| {
                let kv = event.kv?;
                Some(if event.r#type == EventType::Delete as i32 {
                    Event::Delete {
                        key: kv.key,
                        revision: kv.mod_revision,
                    }
                } else {
                    Event::Put(entry(kv))
                })
            })
            .collect();
        Ok(Batch {
            events,
            revision: batch.revision,
        })
    }

    fn request_progress(&self) {
        self.stream.request_progress();
    }
}
