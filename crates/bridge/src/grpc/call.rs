//! One bridged gRPC call: the JSON arguments transcoded to the request message, the method called with the call's deadline as `grpc-timeout` and the bridge's own metadata, the response answered as JSON (a server-streaming method's messages each sent on as progress and an output chunk, then answered together), and a failing status mapped to the mesh's error classes.

use prost::Message;
use prost_reflect::{DynamicMessage, MessageDescriptor, MethodDescriptor, SerializeOptions};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::Notify;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status, Streaming};
use toolmesh::schema::quote_str;
use toolmesh_executor::{CallCx, JsonTool, ToolFailure, ToolOutput};
use toolmesh_transport::Connector;

/// One unary or server-streaming method as the executor serves it.
pub(crate) struct MethodTool {
    /// The method: its request and response types.
    pub(crate) method: MethodDescriptor,
    /// `/package.Service/Method`, made once ([`method_path`]).
    pub(crate) path: PathAndQuery,
    /// The target's connection, written to from the calling task.
    pub(crate) connector: Connector,
    /// How messages name the target.
    pub(crate) target: String,
    /// Raised when a call finds the target unreachable, so the supervisor
    /// checks it at once.
    pub(crate) suspect: Arc<Notify>,
    /// Sent with every call: the bridge's own credentials.
    pub(crate) metadata: Arc<MetadataMap>,
}

/// The field a server-streaming method's answer holds its messages in.
pub(crate) const STREAMED_MESSAGES: &str = "messages";

impl JsonTool for MethodTool {
    async fn call(&self, arguments: Value, cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        let request = DynamicMessage::deserialize(self.method.input(), arguments).map_err(|e| {
            ToolFailure::new(format!(
                "the arguments do not fit {}: {e}",
                self.method.input().full_name()
            ))
        })?;
        let mut request = tonic::Request::new(request);
        *request.metadata_mut() = (*self.metadata).clone();
        if let Some(deadline) = cx.deadline() {
            request.set_timeout(deadline.saturating_duration_since(tokio::time::Instant::now()));
        }
        let mut grpc =
            tonic::client::Grpc::with_origin(self.connector.clone(), self.connector.origin());
        let codec = DynamicCodec(self.method.output());
        let called = async {
            grpc.ready()
                .await
                .map_err(|e| Status::unavailable(toolmesh::error_chain(&*e)))?;
            if self.method.is_server_streaming() {
                let stream = grpc
                    .server_streaming(request, self.path.clone(), codec)
                    .await?;
                self.gather(stream.into_inner(), &cx).await
            } else {
                let response = grpc.unary(request, self.path.clone(), codec).await?;
                Ok(self.json(&response.into_inner())?)
            }
        };
        let answered = tokio::select! {
            answered = called => answered,
            () = cx.cancelled() => return Err(ToolFailure::new("the call was cancelled")),
        };
        match answered {
            Ok(json) => Ok(ToolOutput::json(&json)),
            Err(Failed::Status(status)) => {
                if status.code() == Code::Unavailable {
                    self.suspect.notify_one();
                }
                Err(failure(&status, &self.target, self.method.full_name()))
            }
            Err(Failed::Tool(failure)) => Err(failure),
        }
    }
}

/// The HTTP/2 path a call of `method` goes to: `/package.Service/Method`.
pub(crate) fn method_path(method: &MethodDescriptor) -> PathAndQuery {
    let path = format!("/{}/{}", method.parent_service().full_name(), method.name());
    // Descriptor names are identifiers joined by dots: always a URI path.
    PathAndQuery::try_from(path).unwrap_or_else(|_| PathAndQuery::from_static("/"))
}

/// Why a call did not answer: the service's status, or a response the
/// bridge could not turn into JSON.
enum Failed {
    Status(Status),
    Tool(ToolFailure),
}

impl From<Status> for Failed {
    fn from(status: Status) -> Self {
        Failed::Status(status)
    }
}

impl From<ToolFailure> for Failed {
    fn from(failure: ToolFailure) -> Self {
        Failed::Tool(failure)
    }
}

impl MethodTool {
    /// A response message in the proto3 JSON mapping.
    fn json(&self, message: &DynamicMessage) -> Result<Value, ToolFailure> {
        message
            .serialize_with_options(serde_json::value::Serializer, &SerializeOptions::new())
            .map_err(|e| {
                ToolFailure::executor_failed(format!(
                    "the response of {} does not convert to JSON: {e}",
                    self.method.full_name()
                ))
            })
    }

    /// A server stream's messages, each sent on as it comes (a progress
    /// report counting it and its JSON as an output chunk), answered
    /// together as `{"messages": [...]}` once the stream ends.
    async fn gather(
        &self,
        mut stream: Streaming<DynamicMessage>,
        cx: &CallCx,
    ) -> Result<Value, Failed> {
        let mut messages = Vec::new();
        while let Some(message) = stream.message().await? {
            let json = self.json(&message)?;
            let count = messages.len() + 1;
            let progress = cx.progress();
            progress
                .report(count as f64, None, format!("message {count}"))
                .await;
            progress.partial(json.to_string()).await;
            messages.push(json);
        }
        Ok(json!({ STREAMED_MESSAGES: messages }))
    }
}

/// A failing status as the mesh's error: what the model can act on is a
/// tool error quoting the service's message; what is wrong beneath it is
/// UNAVAILABLE (retryable) or EXECUTOR_FAILED.
pub(crate) fn failure(status: &Status, target: &str, method: &str) -> ToolFailure {
    let said = if status.message().is_empty() {
        String::new()
    } else {
        format!(": {}", quote_str(status.message()))
    };
    let code = status.code();
    match code {
        Code::InvalidArgument
        | Code::NotFound
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::AlreadyExists => ToolFailure::new(format!("{method} answered {code:?}{said}")),
        Code::Unavailable | Code::ResourceExhausted => ToolFailure::unavailable(format!(
            "the gRPC service at {target} is unavailable ({code:?}{said}); try again shortly"
        )),
        Code::Aborted => ToolFailure::executor_failed(format!(
            "{method} was aborted by the gRPC service at {target}{said}; it may succeed if tried again"
        ))
        .retryable(),
        _ => ToolFailure::executor_failed(format!(
            "{method} failed at the gRPC service at {target} ({code:?}{said})"
        )),
    }
}

/// Encodes any [`DynamicMessage`] and decodes the response type it holds.
#[derive(Clone)]
struct DynamicCodec(MessageDescriptor);

impl Codec for DynamicCodec {
    type Encode = DynamicMessage;
    type Decode = DynamicMessage;
    type Encoder = DynamicCodec;
    type Decoder = DynamicCodec;

    fn encoder(&mut self) -> Self::Encoder {
        self.clone()
    }

    fn decoder(&mut self) -> Self::Decoder {
        self.clone()
    }
}

impl Encoder for DynamicCodec {
    type Item = DynamicMessage;
    type Error = Status;

    fn encode(&mut self, item: DynamicMessage, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding the request: {e}")))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

impl Decoder for DynamicCodec {
    type Item = DynamicMessage;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<DynamicMessage>, Status> {
        DynamicMessage::decode(self.0.clone(), src)
            .map(Some)
            .map_err(|e| Status::internal(format!("decoding the response: {e}")))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolmesh::pb::ErrorCode;

    /// Errors the model can act on are tool errors quoting the service;
    /// an unreachable service is UNAVAILABLE and retryable; the rest are
    /// the executor's failures, not retryable.
    #[test]
    fn statuses_map_to_error_classes() {
        let tool_errors = [
            Code::InvalidArgument,
            Code::NotFound,
            Code::FailedPrecondition,
            Code::OutOfRange,
            Code::AlreadyExists,
        ];
        for code in tool_errors {
            let failure = failure(&Status::new(code, "no such book"), "h:1", "lib.Library.Get");
            assert_eq!(failure.code(), ErrorCode::ToolError, "{code:?}");
            assert!(failure.message().contains("no such book"), "{failure}");
            assert!(!failure.is_retryable());
        }
        let down = failure(&Status::unavailable("connection refused"), "h:1", "m");
        assert_eq!(down.code(), ErrorCode::Unavailable);
        assert!(down.is_retryable() && down.message().contains("h:1"));
        for code in [Code::DeadlineExceeded, Code::Internal, Code::Unknown] {
            let broke = failure(&Status::new(code, "boom"), "h:1", "m");
            assert_eq!(broke.code(), ErrorCode::ExecutorFailed, "{code:?}");
            assert!(!broke.is_retryable());
        }
    }
}
