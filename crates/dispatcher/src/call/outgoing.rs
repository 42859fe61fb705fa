//! An attempt's `ExecuteRequest` carrying the call's arguments where they lie: the caller's decoded request, shared, is encoded from in place, so an attempt copies the arguments once (into its frame) rather than into a message first.

use crate::executor_connection::ExecutorConnection;
use prost::DecodeError;
use prost::bytes::{Buf, BufMut};
use prost::encoding::{DecodeContext, WireType, string};
use std::sync::Arc;
use tonic::codegen::StdError;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::{GrpcMethod, Request, Response, Status, Streaming, client::Grpc};
use toolmesh::pb::{ExecuteEvent, ExecuteRequest, ExecuteResponse, InvokeRequest};

/// `ExecuteRequest.arguments`' field number in the contract.
const ARGUMENTS: u32 = 4;
/// The executor service, as the contract names it.
const SERVICE: &str = "toolmesh.v1.Executor";
const EXECUTE: &str = "/toolmesh.v1.Executor/Execute";
const EXECUTE_STREAM: &str = "/toolmesh.v1.Executor/ExecuteStream";

/// An `ExecuteRequest` on the wire: every field of `fields` (whose own
/// `arguments` stay empty) and the arguments of `call`. A decoder reads it
/// as the `ExecuteRequest` with those arguments: protobuf fields may come
/// in any order, and the arguments come last.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct OutgoingExecute {
    pub(crate) fields: ExecuteRequest,
    /// The caller's request, whose `arguments` are sent.
    pub(crate) call: Arc<InvokeRequest>,
}

impl prost::Message for OutgoingExecute {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        self.fields.encode_raw(buf);
        let arguments = &self.call.arguments;
        if !arguments.is_empty() {
            string::encode(ARGUMENTS, arguments, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        if tag == ARGUMENTS {
            let arguments = &mut Arc::make_mut(&mut self.call).arguments;
            return string::merge(wire_type, arguments, buf, ctx);
        }
        self.fields.merge_field(tag, wire_type, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        let arguments = &self.call.arguments;
        let own = if arguments.is_empty() {
            0
        } else {
            string::encoded_len(ARGUMENTS, arguments)
        };
        self.fields.encoded_len() + own
    }

    fn clear(&mut self) {
        self.fields.clear();
        Arc::make_mut(&mut self.call).arguments.clear();
    }
}

/// The executor's client for [`OutgoingExecute`] requests (what the
/// generated client does for `ExecuteRequest`).
pub(crate) struct ExecutorCalls(pub(crate) Grpc<ExecutorConnection>);

impl ExecutorCalls {
    /// `Execute`.
    pub(crate) async fn execute(
        &mut self,
        request: Request<OutgoingExecute>,
    ) -> Result<Response<ExecuteResponse>, Status> {
        let request = self.ready(request, "Execute").await?;
        let codec = tonic_prost::ProstCodec::default();
        self.0
            .unary(request, PathAndQuery::from_static(EXECUTE), codec)
            .await
    }

    /// `ExecuteStream`.
    pub(crate) async fn execute_stream(
        &mut self,
        request: Request<OutgoingExecute>,
    ) -> Result<Response<Streaming<ExecuteEvent>>, Status> {
        let request = self.ready(request, "ExecuteStream").await?;
        let codec = tonic_prost::ProstCodec::default();
        self.0
            .server_streaming(request, PathAndQuery::from_static(EXECUTE_STREAM), codec)
            .await
    }

    /// `request` marked as a call of `method`, once the connection is ready.
    async fn ready(
        &mut self,
        mut request: Request<OutgoingExecute>,
        method: &'static str,
    ) -> Result<Request<OutgoingExecute>, Status> {
        self.0.ready().await.map_err(|e| {
            Status::unknown(format!("Service was not ready: {}", StdError::from(e)))
        })?;
        request
            .extensions_mut()
            .insert(GrpcMethod::new(SERVICE, method));
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use toolmesh::pb::CallContext;

    fn execute(arguments: &str) -> ExecuteRequest {
        ExecuteRequest {
            call_id: "c-1".into(),
            tool: "t".into(),
            version: "1.0.0".into(),
            arguments: arguments.into(),
            attempt: 2,
            context: Some(CallContext {
                caller: "alice".into(),
                ..CallContext::default()
            }),
        }
    }

    fn outgoing(request: &ExecuteRequest) -> OutgoingExecute {
        OutgoingExecute {
            fields: ExecuteRequest {
                arguments: String::new(),
                ..request.clone()
            },
            call: Arc::new(InvokeRequest {
                arguments: request.arguments.clone(),
                ..InvokeRequest::default()
            }),
        }
    }

    /// What goes out decodes as the generated type's request, whatever
    /// fields are set, and is as long; it decodes back into itself.
    #[test]
    fn reads_as_the_execute_request() {
        let text = r#"{"message":"x"}"#;
        for request in [
            execute(text),
            execute(""),
            ExecuteRequest::default(),
            ExecuteRequest {
                arguments: text.into(),
                ..ExecuteRequest::default()
            },
        ] {
            let sent = outgoing(&request);
            let bytes = sent.encode_to_vec();
            assert_eq!(bytes.len(), request.encoded_len());
            assert_eq!(bytes.len(), sent.encoded_len());
            assert_eq!(ExecuteRequest::decode(&*bytes).unwrap(), request);
            assert_eq!(
                OutgoingExecute::decode(&*request.encode_to_vec()).unwrap(),
                sent
            );
        }
    }

    /// The paths are the contract's.
    #[test]
    fn paths_name_the_contracts_methods() {
        use toolmesh::pb::executor_server::SERVICE_NAME;
        assert_eq!(SERVICE, SERVICE_NAME);
        assert_eq!(EXECUTE, format!("/{SERVICE_NAME}/Execute"));
        assert_eq!(EXECUTE_STREAM, format!("/{SERVICE_NAME}/ExecuteStream"));
    }
}
