//! A dispatcher reached over gRPC, for the stdio bridge (`toolmesh mcp`):
//! the dispatcher authenticates the bridge's token itself.

use crate::backend::{ended_without_response, pass};
use crate::{Backend, BackendError, ViewChanges};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::Streaming;
use tonic::transport::Channel;
use toolmesh::pb::{
    InvokeRequest, InvokeResponse, ListToolsRequest, ListToolsResponse, Progress,
    SearchToolsRequest, SearchToolsResponse, ToolFormat, ToolSpec, ToolsChange, WatchToolsRequest,
    dispatcher_client::DispatcherClient,
};
use toolmesh_transport::{MAX_SNAPSHOT_MESSAGE_BYTES, PeerCertificate};

/// A `WatchTools` stream that broke is opened again after a random wait
/// below this (full jitter, so bridges cut off together come back spread
/// out), doubling on each failure up to [`MAX_RECONNECT`].
const FIRST_RECONNECT: Duration = Duration::from_millis(200);
/// The longest wait before opening `WatchTools` again.
const MAX_RECONNECT: Duration = Duration::from_secs(5);

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

    /// Opens `WatchTools` for `who` and reads it up to the message that
    /// completes their view: the stream, and the view.
    async fn synced_view(
        &self,
        who: &Option<String>,
    ) -> Result<(Streaming<ToolsChange>, View), BackendError> {
        let request = WatchToolsRequest {
            format: ToolFormat::Native as i32,
            ..WatchToolsRequest::default()
        };
        let mut client = self.client.clone();
        let mut stream = client
            .watch_tools(self.request(who, request))
            .await?
            .into_inner();
        let mut view = View::default();
        loop {
            let Some(part) = stream.message().await? else {
                return Err(BackendError::Transport(
                    "WatchTools ended before the caller's view was sent whole".into(),
                ));
            };
            view.apply(&part);
            if part.synced {
                return Ok((stream, view));
            }
        }
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

    async fn view_changes(&self, who: &Option<String>) -> Result<ViewChanges, BackendError> {
        let (stream, view) = self.synced_view(who).await?;
        let following = Following {
            backend: self.clone(),
            who: who.clone(),
            stream,
            view,
        };
        Ok(Box::pin(futures_util::stream::unfold(
            following,
            |mut following| async move {
                following.next_change().await;
                Some(((), following))
            },
        )))
    }
}

/// A caller's view of the tools as `WatchTools` sent it, by name.
#[derive(Debug, Default, PartialEq)]
struct View(BTreeMap<String, ToolSpec>);

impl View {
    /// Takes in one message of the stream.
    fn apply(&mut self, change: &ToolsChange) {
        for spec in &change.tools {
            self.0.insert(spec.name.clone(), spec.clone());
        }
        for name in &change.removed {
            self.0.remove(name);
        }
    }
}

/// A caller's `WatchTools` stream, opened again whenever it breaks.
struct Following {
    backend: GrpcBackend,
    who: Option<String>,
    stream: Streaming<ToolsChange>,
    /// What the stream has sent so far: a stream opened again is compared
    /// with it, since a change may have happened while it was down.
    view: View,
}

impl Following {
    /// Returns at the next change of the caller's view.
    async fn next_change(&mut self) {
        loop {
            match self.stream.message().await {
                Ok(Some(change)) => {
                    self.view.apply(&change);
                    if !change.tools.is_empty() || !change.removed.is_empty() {
                        return;
                    }
                }
                Ok(None) => {
                    tracing::debug!("WatchTools ended; opening it again");
                    if self.reconnect().await {
                        return;
                    }
                }
                Err(status) => {
                    tracing::debug!(%status, "WatchTools broke; opening it again");
                    if self.reconnect().await {
                        return;
                    }
                }
            }
        }
    }

    /// Opens the stream again, waiting a jittered, growing time before each
    /// try; whether the view it sends differs from the one held (maybe a
    /// change was missed while it was down).
    async fn reconnect(&mut self) -> bool {
        let mut ceiling = FIRST_RECONNECT;
        loop {
            tokio::time::sleep(ceiling.mul_f64(rand::random::<f64>())).await;
            match self.backend.synced_view(&self.who).await {
                Ok((stream, view)) => {
                    self.stream = stream;
                    let changed = view != self.view;
                    self.view = view;
                    return changed;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "WatchTools could not be opened again");
                    ceiling = (ceiling * 2).min(MAX_RECONNECT);
                }
            }
        }
    }
}
