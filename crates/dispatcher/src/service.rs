//! The `toolmesh.v1.Dispatcher` gRPC front door: identifies the caller,
//! hands the call to the pipeline, and turns refusals into statuses.

use crate::{CallRequest, Dispatcher, Refusal};
use std::pin::Pin;
use tokio_stream::{Stream, StreamExt, wrappers::ReceiverStream};
use tonic::{Request, Response, Status};
use toolmesh::pb::{
    InvokeEvent, InvokeRequest, InvokeResponse, ListToolsRequest, ListToolsResponse, ToolFormat,
    dispatcher_server,
};

/// The events of one `InvokeStream`, as tonic sends them.
type Events = Pin<Box<dyn Stream<Item = Result<InvokeEvent, Status>> + Send>>;

/// gRPC adapter over a [`Dispatcher`].
#[derive(Clone)]
pub struct DispatcherService {
    pub(crate) dispatcher: Dispatcher,
}

#[tonic::async_trait]
impl dispatcher_server::Dispatcher for DispatcherService {
    async fn list_tools(
        &self,
        request: Request<ListToolsRequest>,
    ) -> Result<Response<ListToolsResponse>, Status> {
        let who = self.dispatcher.caller(&request)?;
        let request = request.into_inner();
        let format = ToolFormat::try_from(request.format)
            .map_err(|_| Refusal::UnknownFormat(request.format))?;
        let session = crate::call::session(&request.context);
        let listing =
            self.dispatcher
                .list_tools_in(&who, session, request.snapshot_version, format)?;
        Ok(Response::new(std::sync::Arc::unwrap_or_clone(listing)))
    }

    async fn invoke(
        &self,
        request: Request<InvokeRequest>,
    ) -> Result<Response<InvokeResponse>, Status> {
        let call = self.call_request(request)?;
        Ok(Response::new(self.dispatcher.call(call).await?))
    }

    type InvokeStreamStream = Events;

    async fn invoke_stream(
        &self,
        request: Request<InvokeRequest>,
    ) -> Result<Response<Events>, Status> {
        let call = self.call_request(request)?.streamed();
        let events = self.dispatcher.call(call).await?;
        Ok(Response::new(Box::pin(ReceiverStream::new(events).map(Ok))))
    }
}

impl DispatcherService {
    /// The call `request` asks for: its caller, their deadline and trace.
    fn call_request(
        &self,
        request: Request<InvokeRequest>,
    ) -> Result<CallRequest<'static>, Status> {
        let timeout = toolmesh_transport::request_timeout(request.metadata());
        let who = self.dispatcher.caller(&request)?;
        let parent = toolmesh_telemetry::trace::extract(request.metadata());
        Ok(CallRequest::new(request.into_inner())
            .owned_caller(who)
            .timeout(timeout)
            .trace(parent))
    }
}
