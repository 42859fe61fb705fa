//! The `toolmesh.v1.Dispatcher` gRPC front door: identifies the caller,
//! hands the call to the pipeline, and turns refusals into statuses.

use crate::{CallRequest, Dispatcher, Refusal};
use std::pin::Pin;
use std::time::Duration;
use tokio_stream::{Stream, StreamExt, wrappers::ReceiverStream};
use tonic::{Request, Response, Status};
use toolmesh::Principal;
use toolmesh::pb::shared::{SharedListTools, dispatcher_server};
use toolmesh::pb::{
    InvokeEvent, InvokeRequest, InvokeResponse, ListToolsRequest, SearchToolsRequest,
    SearchToolsResponse, ToolFormat, ToolsChange, WatchToolsRequest,
};
use toolmesh_telemetry::trace::Context as TraceContext;

/// The events of one `InvokeStream`, as tonic sends them.
type Events = Pin<Box<dyn Stream<Item = Result<InvokeEvent, Status>> + Send>>;

/// The messages of one `WatchTools`, as tonic sends them.
type Changes = Pin<Box<dyn Stream<Item = Result<ToolsChange, Status>> + Send>>;

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
    ) -> Result<Response<SharedListTools>, Status> {
        let who = self.dispatcher.caller(&request)?;
        let listing = self.dispatcher.list_tools_for(&who, request.get_ref())?;
        // The page as rendered (and kept for the next caller), encoded
        // from where it lies.
        Ok(Response::new(SharedListTools(listing)))
    }

    type WatchToolsStream = Changes;

    /// Each message is worked out when tonic asks for the next one, so
    /// nothing queues for a slow caller.
    async fn watch_tools(
        &self,
        request: Request<WatchToolsRequest>,
    ) -> Result<Response<Changes>, Status> {
        let who = self.dispatcher.caller(&request)?;
        let request = request.into_inner();
        let format = ToolFormat::try_from(request.format)
            .map_err(|_| Refusal::UnknownFormat(request.format))?;
        let session = crate::call::session(&request.context);
        let watch = self.dispatcher.watch_tools(&who, session, format)?;
        let changes = watch.into_stream().map(Ok);
        // A stream outlives no token: the caller is identified again.
        Ok(Response::new(match who.expires_at() {
            Some(until) => Box::pin(toolmesh_transport::ends_when_token_expires(changes, until)),
            None => Box::pin(changes),
        }))
    }

    async fn search_tools(
        &self,
        request: Request<SearchToolsRequest>,
    ) -> Result<Response<SearchToolsResponse>, Status> {
        let who = self.dispatcher.caller(&request)?;
        let deadline = toolmesh_transport::request_timeout(request.metadata());
        let request = request.into_inner();
        let session = crate::call::session(&request.context);
        let found = self
            .dispatcher
            .search_tools(&who, session, &request, deadline)
            .await?;
        Ok(Response::new(found))
    }

    async fn invoke(
        &self,
        request: Request<InvokeRequest>,
    ) -> Result<Response<InvokeResponse>, Status> {
        let asked = self.asked(request)?;
        let call = CallRequest::new(&asked.who, asked.request)
            .timeout(asked.timeout)
            .trace(asked.parent);
        Ok(Response::new(self.dispatcher.call(call).await?))
    }

    type InvokeStreamStream = Events;

    async fn invoke_stream(
        &self,
        request: Request<InvokeRequest>,
    ) -> Result<Response<Events>, Status> {
        let asked = self.asked(request)?;
        let call = CallRequest::streamed(asked.who, asked.request)
            .timeout(asked.timeout)
            .trace(asked.parent);
        let events = self.dispatcher.call(call).await?;
        Ok(Response::new(Box::pin(ReceiverStream::new(events).map(Ok))))
    }
}

/// A call as its gRPC request asks for it.
struct Asked {
    who: Principal,
    request: InvokeRequest,
    /// The caller's deadline (`grpc-timeout`), if it sent one.
    timeout: Option<Duration>,
    /// The caller's trace (`traceparent`).
    parent: TraceContext,
}

impl DispatcherService {
    /// The call `request` asks for: its caller, their deadline and trace.
    fn asked(&self, request: Request<InvokeRequest>) -> Result<Asked, Status> {
        Ok(Asked {
            timeout: toolmesh_transport::request_timeout(request.metadata()),
            who: self.dispatcher.caller(&request)?,
            parent: toolmesh_telemetry::trace::extract(request.metadata()),
            request: request.into_inner(),
        })
    }
}
