//! A dispatcher reached over gRPC, for the stdio bridge (`toolmesh mcp`):
//! the dispatcher authenticates the bridge's token itself.

use crate::backend::{ended_without_response, pass};
use crate::{Backend, BackendError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::transport::Channel;
use toolmesh::pb::{
    InvokeRequest, InvokeResponse, ListToolsRequest, ListToolsResponse, Progress,
    SearchToolsRequest, SearchToolsResponse, ToolFormat, dispatcher_client::DispatcherClient,
};
use toolmesh_transport::{MAX_SNAPSHOT_MESSAGE_BYTES, PeerCertificate};

/// A dispatcher at the other end of a gRPC channel.
#[derive(Clone)]
pub struct GrpcBackend {
    client: DispatcherClient<Channel>,
    token: Option<String>,
}

impl GrpcBackend {
    /// Talks to the dispatcher on `channel`, as the caller holding `token`
    /// (none: the anonymous caller, where the policy admits one).
    pub fn new(channel: Channel, token: Option<String>) -> Self {
        GrpcBackend {
            client: DispatcherClient::new(channel)
                .max_decoding_message_size(MAX_SNAPSHOT_MESSAGE_BYTES),
            token: token.filter(|t| !t.is_empty()),
        }
    }

    /// An Invoke as `who` within `timeout`, continuing the MCP client's
    /// trace `parent`.
    fn call(
        &self,
        who: &Option<String>,
        request: InvokeRequest,
        timeout: Option<Duration>,
        parent: &toolmesh_telemetry::trace::Context,
    ) -> tonic::Request<InvokeRequest> {
        let mut request = self.request(who, request);
        toolmesh_telemetry::trace::inject_context(parent, request.metadata_mut());
        if let Some(timeout) = timeout {
            request.set_timeout(timeout);
        }
        request
    }

    fn request<T>(&self, who: &Option<String>, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = who {
            // A token no header can carry is sent as none; the dispatcher
            // then says what is missing.
            toolmesh_transport::set_bearer(request.metadata_mut(), token);
        }
        request
    }
}

impl Backend for GrpcBackend {
    /// The token to send: the client's own over HTTP, else the bridge's.
    type Caller = Option<String>;

    /// A client certificate is not passed on: the dispatcher sees the
    /// bridge's connection, not the client's.
    fn authenticate(
        &self,
        bearer: Option<&str>,
        _certificate: Option<&PeerCertificate>,
    ) -> Result<Option<String>, BackendError> {
        Ok(bearer
            .and_then(toolmesh_transport::bearer_token)
            .map(str::to_owned)
            .or_else(|| self.token.clone()))
    }

    async fn list_tools(
        &self,
        who: &Option<String>,
        format: ToolFormat,
        page_token: &str,
    ) -> Result<Arc<ListToolsResponse>, BackendError> {
        let request = ListToolsRequest {
            format: format as i32,
            page_token: page_token.to_owned(),
            ..ListToolsRequest::default()
        };
        let mut client = self.client.clone();
        Ok(Arc::new(
            client
                .list_tools(self.request(who, request))
                .await?
                .into_inner(),
        ))
    }

    async fn search_tools(
        &self,
        who: &Option<String>,
        request: SearchToolsRequest,
    ) -> Result<SearchToolsResponse, BackendError> {
        let mut client = self.client.clone();
        Ok(client
            .search_tools(self.request(who, request))
            .await?
            .into_inner())
    }

    async fn invoke(
        &self,
        who: &Option<String>,
        request: InvokeRequest,
        timeout: Option<Duration>,
        parent: toolmesh_telemetry::trace::Context,
    ) -> Result<InvokeResponse, BackendError> {
        let request = self.call(who, request, timeout, &parent);
        let mut client = self.client.clone();
        Ok(client.invoke(request).await?.into_inner())
    }

    async fn invoke_streamed(
        &self,
        who: &Option<String>,
        request: InvokeRequest,
        timeout: Option<Duration>,
        parent: toolmesh_telemetry::trace::Context,
        progress: mpsc::Sender<Progress>,
    ) -> Result<InvokeResponse, BackendError> {
        let request = self.call(who, request, timeout, &parent);
        let mut client = self.client.clone();
        let mut events = client.invoke_stream(request).await?.into_inner();
        while let Some(event) = events.message().await? {
            if let Some(response) = pass(event, &progress).await {
                return Ok(response);
            }
        }
        Err(ended_without_response())
    }

    fn watch_interval(&self) -> Duration {
        Duration::from_secs(1)
    }
}
