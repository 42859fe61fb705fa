//! The `toolmesh.v1.Dispatcher` gRPC service: the edge where requests are
//! admitted (or shed) and refusals become gRPC statuses.

use crate::Dispatcher;
use tonic::{Request, Response, Status};
use toolmesh::pb::{
    InvokeRequest, InvokeResponse, ListToolsRequest, ListToolsResponse, ToolFormat,
    dispatcher_server,
};

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
        let who = self.dispatcher.governance().authenticate(&request)?;
        let request = request.into_inner();
        let format = ToolFormat::try_from(request.format).map_err(|_| {
            Status::invalid_argument(format!(
                "format {} is unknown; use TOOL_FORMAT_NATIVE or TOOL_FORMAT_OPENAI",
                request.format
            ))
        })?;
        self.dispatcher
            .list_tools_for(&who, request.snapshot_version, format)
            .map(Response::new)
    }

    async fn invoke(
        &self,
        request: Request<InvokeRequest>,
    ) -> Result<Response<InvokeResponse>, Status> {
        let timeout = toolmesh::grpc::request_timeout(request.metadata());
        let who = self.dispatcher.governance().authenticate(&request)?;
        self.dispatcher
            .invoke_as(&who, request.into_inner(), timeout)
            .await
            .map(Response::new)
    }
}
