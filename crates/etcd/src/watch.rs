//! A watch over a key prefix: events grouped by revision, compaction and
//! lost leaders reported as errors so the watcher can resync.

use crate::auth::Call;
use crate::error::{EtcdError, is_unavailable};
use crate::pb::{self, mvccpb, watch_client::WatchClient};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tonic::metadata::MetadataValue;

/// One watch response: events (in revision order) and the revision the
/// watcher has now seen everything up to.
#[derive(Debug, Clone, Default)]
pub struct WatchBatch {
    /// The events, oldest first.
    pub events: Vec<mvccpb::Event>,
    /// The store's revision when etcd sent this batch.
    pub revision: i64,
}

/// An open watch. Dropping it cancels the watch.
#[derive(Debug)]
pub struct WatchStream {
    responses: tonic::Streaming<pb::WatchResponse>,
    /// Keeps the request half open; carries progress requests.
    requests: mpsc::Sender<pb::WatchRequest>,
}

impl WatchStream {
    /// Opens a watch on `call`'s endpoint (with its token) and waits until
    /// etcd has created it.
    pub(crate) async fn open(
        call: Call,
        create: pb::WatchCreateRequest,
    ) -> Result<Result<WatchStream, EtcdError>, Status> {
        let (tx, rx) = mpsc::channel(1);
        let request = pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)),
        };
        tx.send(request)
            .await
            .map_err(|_| Status::internal("watch request channel closed"))?;
        let mut request = call.request(ReceiverStream::new(rx));
        request
            .metadata_mut()
            .insert("hasleader", MetadataValue::from_static("true"));
        let mut responses = WatchClient::new(call.channel)
            .max_decoding_message_size(64 * 1024 * 1024)
            .watch(request)
            .await?
            .into_inner();
        let Some(first) = responses.message().await? else {
            return Err(Status::unavailable(
                "watch stream ended before it was created",
            ));
        };
        if first.compact_revision > 0 {
            return Ok(Err(EtcdError::Compacted {
                compacted: first.compact_revision,
            }));
        }
        if first.canceled && first.cancel_reason.contains("permission denied") {
            // How etcd refuses a watch whose token is invalid or whose user
            // may not read the prefix: a refusal, not an ended watch.
            return Err(Status::permission_denied(first.cancel_reason));
        }
        if first.canceled {
            return Ok(Err(EtcdError::WatchEnded(first.cancel_reason)));
        }
        Ok(Ok(WatchStream {
            responses,
            requests: tx,
        }))
    }

    /// Asks etcd for a progress notification: a batch with no events whose
    /// revision every change to the watched keys up to it was sent before.
    /// A request already waiting to be sent counts as this one.
    pub fn request_progress(&self) {
        let request = pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::ProgressRequest(
                pb::WatchProgressRequest {},
            )),
        };
        let _ = self.requests.try_send(request);
    }

    /// The next batch of events (or progress notification).
    pub async fn next(&mut self) -> Result<WatchBatch, EtcdError> {
        let mut batch = WatchBatch::default();
        loop {
            let response = match self.responses.message().await {
                Ok(Some(response)) => response,
                Ok(None) => return Err(EtcdError::WatchEnded("stream closed".to_owned())),
                Err(status) if is_unavailable(&status) => {
                    return Err(EtcdError::WatchEnded(status.message().to_owned()));
                }
                Err(status) => return Err(EtcdError::WatchEnded(status.to_string())),
            };
            if response.compact_revision > 0 {
                return Err(EtcdError::Compacted {
                    compacted: response.compact_revision,
                });
            }
            if response.canceled {
                return Err(EtcdError::WatchEnded(response.cancel_reason));
            }
            batch.revision = response.header.map_or(batch.revision, |h| h.revision);
            batch.events.extend(response.events);
            if !response.fragment {
                return Ok(batch);
            }
        }
    }
}
