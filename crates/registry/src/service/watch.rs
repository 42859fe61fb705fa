//! `WatchSnapshots` from shared encodings: each snapshot, and each delta between two, is encoded once however many followers it goes to, and every stream sends those same bytes.
//!
//! A registry with a hundred followers lagging through a cold start held one
//! encoded copy of every message per follower (tonic encodes each stream's
//! messages into that stream's own buffer, kept until the follower reads it):
//! at 3,000 executors that was gigabytes. Here a message is a [`Frame`], an
//! already length-prefixed gRPC message that every stream sending it shares,
//! written to the connection without another copy. The request is still
//! decoded by tonic; only the answer's frames are put together here.

use super::RegistryService;
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{Stream, StreamExt, stream};
use http_body::Frame as BodyFrame;
use prost::Message;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::watch;
use tonic::codec::{Codec, Streaming};
use tonic::codegen::StdError;
use tonic::metadata::MetadataMap;
use tonic::{Request, Status};
use toolmesh::Snapshot;
use toolmesh::pb;
use toolmesh_transport::{MAX_CALL_MESSAGE_BYTES, MAX_SNAPSHOT_MESSAGE_BYTES};

/// The method's path, as the contract names it.
pub(crate) const WATCH_SNAPSHOTS: &str = "/toolmesh.v1.Registry/WatchSnapshots";

/// One `WatchSnapshots` message as gRPC frames it on the wire: shared by
/// every stream that sends it.
pub(crate) type Frame = Bytes;

/// The messages of one `WatchSnapshots` stream, framed.
pub(crate) type FrameStream = Pin<Box<dyn Stream<Item = Result<Frame, Status>> + Send>>;

/// A gRPC message's prefix: one flag byte (0: not compressed) and the
/// message's length, four bytes big-endian.
const PREFIX: usize = 5;

/// How many encoded messages are kept for streams still to send them: the
/// newest few (followers in step all want the newest; one far behind
/// encodes its own catch-up).
const KEPT: usize = 16;

/// Which message: a snapshot whole, or the delta to it from `base`, with or
/// without executors' call tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    epoch: Arc<str>,
    version: u64,
    base: Option<u64>,
    execute_tokens: bool,
}

/// A message encoded at most once, by the first stream that needs it.
type Cell = Arc<OnceLock<Result<Frame, Status>>>;

/// The newest encoded messages, shared by a registry's watch streams.
#[derive(Default)]
pub(crate) struct SharedEncodings {
    recent: Mutex<VecDeque<(Key, Cell)>>,
}

impl std::fmt::Debug for SharedEncodings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedEncodings").finish_non_exhaustive()
    }
}

impl SharedEncodings {
    /// `snapshot` framed: whole, or as the delta from `base`; encoded
    /// here unless another stream already did.
    fn frame(
        &self,
        snapshot: &Snapshot,
        base: Option<&Snapshot>,
        execute_tokens: bool,
    ) -> Result<Frame, Status> {
        let key = Key {
            epoch: Arc::from(snapshot.epoch()),
            version: snapshot.version(),
            base: base.map(Snapshot::version),
            execute_tokens,
        };
        let cell = self.cell(key);
        cell.get_or_init(|| {
            let message = match base {
                Some(base) => snapshot.delta_pb(base),
                None => snapshot.to_pb(),
            };
            framed(&for_reader(message, execute_tokens))
        })
        .clone()
    }

    /// The cell for `key`, made (and the oldest forgotten) when new.
    fn cell(&self, key: Key) -> Cell {
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, cell)) = recent.iter().find(|(held, _)| *held == key) {
            return cell.clone();
        }
        if recent.len() >= KEPT {
            recent.pop_front();
        }
        let cell = Cell::default();
        recent.push_back((key, cell.clone()));
        cell
    }
}

/// A snapshot as a reader may see it: executors' call tokens only for
/// dispatchers (an operator must not be able to call past the dispatcher).
pub(crate) fn for_reader(mut snapshot: pb::Snapshot, execute_tokens: bool) -> pb::Snapshot {
    if !execute_tokens {
        for instance in snapshot
            .tools
            .iter_mut()
            .flat_map(|e| e.instances.iter_mut())
        {
            instance.execute_token.clear();
        }
    }
    snapshot
}

/// `message` as one gRPC length-prefixed message; one over the mesh's
/// snapshot limit is refused as tonic refuses it.
fn framed(message: &pb::Snapshot) -> Result<Frame, Status> {
    let len = message.encoded_len();
    let Some(prefix_len) = u32::try_from(len)
        .ok()
        .filter(|_| len <= MAX_SNAPSHOT_MESSAGE_BYTES)
    else {
        return Err(Status::out_of_range(format!(
            "snapshot {} encodes to {len} bytes, over the mesh's limit of \
             {MAX_SNAPSHOT_MESSAGE_BYTES}: follow with deltas (WatchSnapshots with \
             `deltas` set) so that each message holds only what changed",
            message.version
        )));
    };
    let mut buf = BytesMut::with_capacity(PREFIX + len);
    buf.put_u8(0);
    buf.put_u32(prefix_len);
    message.encode_raw(&mut buf);
    Ok(buf.freeze())
}

/// A frame's message, decoded again (for callers of the generated trait
/// method, which sends messages rather than frames).
pub(crate) fn unframed(frame: &Frame) -> Result<pb::Snapshot, Status> {
    pb::Snapshot::decode(frame.get(PREFIX..).unwrap_or_default())
        .map_err(|error| Status::internal(format!("a snapshot frame did not decode: {error}")))
}

/// Where a reader's stream gets its messages.
#[derive(Clone)]
pub(crate) struct Framer {
    pub(crate) encodings: Arc<SharedEncodings>,
    /// Whether the reader sees executors' call tokens.
    pub(crate) execute_tokens: bool,
}

impl Framer {
    fn whole(&self, snapshot: &Snapshot) -> Result<Frame, Status> {
        self.encodings.frame(snapshot, None, self.execute_tokens)
    }

    fn delta(&self, snapshot: &Snapshot, base: &Snapshot) -> Result<Frame, Status> {
        self.encodings
            .frame(snapshot, Some(base), self.execute_tokens)
    }

    /// For a watcher that holds `held` (same epoch): a delta to the newest
    /// at once when it is newer, then a delta for each newer one — no full
    /// snapshot, so a dispatcher that fails over to another replica does
    /// not resync.
    pub(crate) fn deltas_from(
        self,
        mut receiver: watch::Receiver<Arc<Snapshot>>,
        held: Arc<Snapshot>,
    ) -> FrameStream {
        let current = receiver.borrow_and_update().clone();
        let first = (current.version() > held.version()).then(|| self.delta(&current, &held));
        let last = if first.is_some() { current } else { held };
        stream::iter(first)
            .chain(self.newer(receiver, last, true))
            .boxed()
    }

    /// The newest snapshot at once when the watcher has not seen it, then
    /// each newer one as it is published (intermediates may be skipped
    /// under bursts, the newest never is). An `after_version` ahead of ours
    /// can only come from an earlier registry lifetime, so it also gets the
    /// newest at once (its epoch tells the watcher). With `deltas`, every
    /// message after the first full one holds only what changed since the
    /// previous message. Ends when the client goes away.
    pub(crate) fn after_version(
        self,
        mut receiver: watch::Receiver<Arc<Snapshot>>,
        after_version: u64,
        deltas: bool,
    ) -> FrameStream {
        let current = receiver.borrow_and_update().clone();
        let unseen = after_version == 0 || current.version() != after_version;
        let first = unseen.then(|| self.whole(&current));
        // A delta needs a base the watcher holds: only once a full one was sent.
        let deltas = deltas && unseen;
        stream::iter(first)
            .chain(self.newer(receiver, current, deltas))
            .boxed()
    }

    /// Each snapshot newer than `last` as it is published: a delta from
    /// the previous message with `deltas`, else whole.
    fn newer(
        self,
        receiver: watch::Receiver<Arc<Snapshot>>,
        last: Arc<Snapshot>,
        deltas: bool,
    ) -> impl Stream<Item = Result<Frame, Status>> + Send {
        stream::unfold((receiver, last), move |(mut receiver, last)| {
            let framer = self.clone();
            async move {
                loop {
                    receiver.changed().await.ok()?;
                    let snapshot = receiver.borrow_and_update().clone();
                    if snapshot.version() > last.version() {
                        let frame = if deltas {
                            framer.delta(&snapshot, &last)
                        } else {
                            framer.whole(&snapshot)
                        };
                        return Some((frame, (receiver, snapshot)));
                    }
                }
            }
        })
    }
}

/// Answers one `WatchSnapshots` call arriving as HTTP: the request message
/// decoded by tonic, the answer the shared frames, then the call's status in
/// the trailers (a refusal before any message is a trailers-only answer,
/// as tonic sends it).
pub(crate) async fn serve<B>(
    service: RegistryService,
    request: tonic::codegen::http::Request<B>,
) -> tonic::codegen::http::Response<tonic::body::Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    let frames = match decoded(request).await {
        Ok(request) => service.frames(request).await,
        Err(status) => Err(status),
    };
    match frames {
        Ok(frames) => streamed(frames),
        Err(status) => status.into_http(),
    }
}

/// The call's request message with its metadata and extensions (the peer's
/// certificate among them), as tonic hands it to a generated method.
async fn decoded<B>(
    request: tonic::codegen::http::Request<B>,
) -> Result<Request<pb::WatchSnapshotsRequest>, Status>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    let (parts, body) = request.into_parts();
    let mut codec = tonic_prost::ProstCodec::<pb::Snapshot, pb::WatchSnapshotsRequest>::default();
    let mut messages =
        Streaming::new_request(codec.decoder(), body, None, Some(MAX_CALL_MESSAGE_BYTES));
    let message = messages
        .message()
        .await?
        .ok_or_else(|| Status::invalid_argument("WatchSnapshots needs its request message"))?;
    Ok(Request::from_parts(
        MetadataMap::from_headers(parts.headers),
        parts.extensions,
        message,
    ))
}

/// A gRPC answer whose body is `frames` as they come, then the status.
fn streamed(frames: FrameStream) -> tonic::codegen::http::Response<tonic::body::Body> {
    let end = stream::once(async { Err(Status::ok("")) });
    let body = frames.chain(end).scan(false, |ended, item| {
        let frame = match item {
            _ if *ended => None,
            Ok(frame) => Some(BodyFrame::data(frame)),
            Err(status) => {
                *ended = true;
                Some(BodyFrame::trailers(trailers(&status)))
            }
        };
        std::future::ready(frame.map(Ok::<_, Infallible>))
    });
    let mut response = tonic::codegen::http::Response::new(tonic::body::Body::new(
        http_body_util::StreamBody::new(body),
    ));
    response.headers_mut().insert(
        tonic::codegen::http::header::CONTENT_TYPE,
        tonic::codegen::http::HeaderValue::from_static("application/grpc"),
    );
    response
}

/// `status` as trailers; one whose message cannot be a header keeps its
/// code and says so.
fn trailers(status: &Status) -> tonic::codegen::http::HeaderMap {
    let mut trailers = tonic::codegen::http::HeaderMap::new();
    if let Err(unsent) = status.add_header(&mut trailers) {
        trailers.clear();
        let plain = Status::new(status.code(), "the stream ended with an error");
        let _ = plain.add_header(&mut trailers);
        tracing::debug!(%unsent, "a watch's status could not be sent as trailers");
    }
    trailers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::tests::{request, spec};
    use crate::{OpenGate, Registry, RegistryConfig};

    async fn registry_with(tools: &[&str]) -> Registry {
        let config = RegistryConfig {
            watch_health: false,
            ..RegistryConfig::default()
        };
        let registry = Registry::open(config, Arc::new(OpenGate)).unwrap();
        for (n, tool) in tools.iter().enumerate() {
            let mut registration = request(&format!("ex-{n}"), vec![spec(tool, "1.0.0")]);
            registration.execute_token = format!("secret-{n}");
            registry.register(registration, "").await.unwrap();
        }
        registry
    }

    /// Every stream that sends the same message sends the same bytes: the
    /// message is encoded once, and the frame decodes to the wire form.
    #[tokio::test]
    async fn a_message_is_encoded_once_for_every_stream_that_sends_it() {
        let registry = registry_with(&["a", "b"]).await;
        let encodings = SharedEncodings::default();
        let older = registry.snapshot(1).unwrap();
        let newest = registry.current();

        let first = encodings.frame(&newest, None, true).unwrap();
        let again = encodings.frame(&newest, None, true).unwrap();
        assert_eq!(first.as_ptr(), again.as_ptr(), "shared, not encoded twice");
        assert_eq!(unframed(&first).unwrap(), newest.to_pb());

        let delta = encodings.frame(&newest, Some(&older), true).unwrap();
        assert_eq!(unframed(&delta).unwrap(), newest.delta_pb(&older));
        assert_ne!(delta.as_ptr(), first.as_ptr());
    }

    /// A reader who may not see executors' call tokens gets its own
    /// encoding, without them; a dispatcher's keeps them.
    #[tokio::test]
    async fn call_tokens_are_encoded_only_for_readers_who_see_them() {
        let registry = registry_with(&["a"]).await;
        let encodings = SharedEncodings::default();
        let newest = registry.current();
        let token = |frame: &Frame| {
            let snapshot = unframed(frame).unwrap();
            snapshot.tools[0].instances[0].execute_token.clone()
        };
        let dispatcher = encodings.frame(&newest, None, true).unwrap();
        let operator = encodings.frame(&newest, None, false).unwrap();
        assert_eq!(token(&dispatcher), "secret-0");
        assert_eq!(token(&operator), "");
    }

    /// Only the newest few messages are kept: an old one is encoded again
    /// when a stream asks for it (streams still sending it keep theirs).
    #[tokio::test]
    async fn only_the_newest_messages_are_kept() {
        let names: Vec<String> = (0..=KEPT).map(|n| format!("t{n}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let registry = registry_with(&names).await;
        let encodings = SharedEncodings::default();
        let first = encodings
            .frame(&registry.snapshot(1).unwrap(), None, true)
            .unwrap();
        for version in 2..=(KEPT as u64 + 1) {
            encodings
                .frame(&registry.snapshot(version).unwrap(), None, true)
                .unwrap();
        }
        let again = encodings
            .frame(&registry.snapshot(1).unwrap(), None, true)
            .unwrap();
        assert_ne!(
            first.as_ptr(),
            again.as_ptr(),
            "forgotten, then encoded again"
        );
        assert_eq!(first, again, "the same message");
    }
}
