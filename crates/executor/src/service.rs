//! The tonic service `toolmesh.v1.Executor`: `Execute` runs a call to its
//! result; `ExecuteStream` runs it while relaying its progress (`stream`).

use crate::ProgressHandle;
use crate::server::ExecuteService;
use crate::stream;
use std::sync::Arc;
use tonic::{Request, Response, Status};
use toolmesh::pb::{self, ExecuteRequest, ExecuteResponse};

#[tonic::async_trait]
impl pb::executor_server::Executor for ExecuteService {
    async fn execute(
        &self,
        request: Request<ExecuteRequest>,
    ) -> Result<Response<ExecuteResponse>, Status> {
        let accepted = self.accept(&request)?;
        let result = self
            .core
            .serve(request.into_inner(), accepted, ProgressHandle::default())
            .await;
        Ok(Response::new(ExecuteResponse {
            result: Some(result),
        }))
    }

    type ExecuteStreamStream = stream::Events;

    async fn execute_stream(
        &self,
        request: Request<ExecuteRequest>,
    ) -> Result<Response<stream::Events>, Status> {
        let accepted = self.accept(&request)?;
        let (events, received) = tokio::sync::mpsc::channel(stream::EVENT_BUFFER);
        tokio::spawn(stream::run(
            Arc::clone(&self.core),
            request.into_inner(),
            accepted,
            events,
        ));
        Ok(Response::new(stream::Events::new(received)))
    }
}
