//! Where the MCP handler sends listings and calls: a seam with two sides,
//! the in-process dispatcher and a dispatcher over gRPC.

use crate::BackendError;
use futures_util::{Stream, StreamExt};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use toolmesh::Principal;
use toolmesh::pb::{
    InvokeEvent, InvokeRequest, InvokeResponse, ListToolsRequest, ListToolsResponse, Progress,
    SearchToolsRequest, SearchToolsResponse, ToolFormat, invoke_event,
};
use toolmesh_dispatcher::{CallRequest, Dispatcher};
use toolmesh_telemetry::trace::Context as TraceContext;
use toolmesh_transport::PeerCertificate;

/// Each change of a caller's view of the tools, one item per change, as it
/// happens.
pub type ViewChanges = Pin<Box<dyn Stream<Item = ()> + Send>>;

/// A dispatcher as the MCP handler sees it: who is calling, their listing,
/// their calls.
pub trait Backend: Clone + Send + Sync + 'static {
    /// An identified caller, as the backend needs it to act for them.
    type Caller: Clone + Send + Sync + 'static;

    /// The caller presenting `bearer` (the token of an `Authorization`
    /// header) or, without one, `certificate` (a verified client
    /// certificate); the backend's default caller when there is neither.
    fn authenticate(
        &self,
        bearer: Option<&str>,
        certificate: Option<&PeerCertificate>,
    ) -> Result<Self::Caller, BackendError>;

    /// One page of `ListTools` for `who` in `format`: the first for an
    /// empty `page_token`, else the page it continues (the dispatcher's
    /// page size). The same `Arc` for an unchanged page lets the handler
    /// skip work it did for it already.
    fn list_tools(
        &self,
        who: &Self::Caller,
        format: ToolFormat,
        page_token: &str,
    ) -> impl Future<Output = Result<Arc<ListToolsResponse>, BackendError>> + Send;

    /// `SearchTools` for `who` (the door's `search_tools` in search mode).
    fn search_tools(
        &self,
        who: &Self::Caller,
        request: SearchToolsRequest,
    ) -> impl Future<Output = Result<SearchToolsResponse, BackendError>> + Send;

    /// `Invoke` for `who` within the client's deadline `timeout`,
    /// continuing the client's trace `parent` (from the call's `_meta`). Dropping the future cancels the call end to end.
    fn invoke(
        &self,
        who: &Self::Caller,
        request: InvokeRequest,
        timeout: Option<Duration>,
        parent: TraceContext,
    ) -> impl Future<Output = Result<InvokeResponse, BackendError>> + Send;

    /// A call for `who` that relays progress (`InvokeStream` over gRPC; in
    /// process, the call itself): each progress report of the tool goes to
    /// `progress` as it comes (output chunks do not: the result carries the
    /// whole output), then the response is the answer. Dropping the future
    /// cancels the call end to end.
    fn invoke_streamed(
        &self,
        who: &Self::Caller,
        request: InvokeRequest,
        timeout: Option<Duration>,
        parent: TraceContext,
        progress: mpsc::Sender<Progress>,
    ) -> impl Future<Output = Result<InvokeResponse, BackendError>> + Send;

    /// The changes of `who`'s view of the tools from now on, waited for
    /// rather than looked for: one item per change of their own view (a
    /// snapshot, policy reload or disable that leaves it as it was gives
    /// none). In process the dispatcher's watch; over gRPC a `WatchTools`
    /// stream. Fails when the view cannot be had now; ends when no change
    /// can come any more.
    fn view_changes(
        &self,
        who: &Self::Caller,
    ) -> impl Future<Output = Result<ViewChanges, BackendError>> + Send;

    /// The issuers whose tokens the backend accepts (the policy's
    /// `[[issuers]]`), named as authorization servers in the door's
    /// protected-resource metadata; none unless the backend knows them.
    fn authorization_servers(&self) -> Vec<String> {
        Vec::new()
    }

    /// The OAuth scopes the issuers require for listing and calling tools,
    /// named as `scopes_supported` in the metadata; none unless known.
    fn scopes_supported(&self) -> Vec<String> {
        Vec::new()
    }

    /// The scope `caller`'s token lacks for JSON-RPC `method` (`tools/list`
    /// or `tools/call`), if it lacks one; the door answers 403 then.
    fn missing_scope(&self, caller: &Self::Caller, method: &str) -> Option<String> {
        let _ = (caller, method);
        None
    }
}

impl Backend for Dispatcher {
    type Caller = Principal;

    fn authorization_servers(&self) -> Vec<String> {
        let policy = self.governance().policy();
        policy.issuers().iter().map(|i| i.issuer.clone()).collect()
    }

    fn scopes_supported(&self) -> Vec<String> {
        let policy = self.governance().policy();
        let mut scopes: Vec<String> = policy
            .issuers()
            .iter()
            .flat_map(|i| [&i.list_scope, &i.call_scope])
            .flatten()
            .cloned()
            .collect();
        scopes.sort();
        scopes.dedup();
        scopes
    }

    fn missing_scope(&self, who: &Principal, method: &str) -> Option<String> {
        match method {
            "tools/list" => who.missing_list_scope(),
            "tools/call" => who.missing_call_scope(),
            _ => None,
        }
        .map(str::to_owned)
    }

    fn authenticate(
        &self,
        bearer: Option<&str>,
        certificate: Option<&PeerCertificate>,
    ) -> Result<Principal, BackendError> {
        self.governance()
            .authenticate(bearer, certificate)
            .map_err(BackendError::from)
    }

    async fn list_tools(
        &self,
        who: &Principal,
        format: ToolFormat,
        page_token: &str,
    ) -> Result<Arc<ListToolsResponse>, BackendError> {
        let request = ListToolsRequest {
            format: format as i32,
            page_token: page_token.to_owned(),
            ..ListToolsRequest::default()
        };
        Ok(self.list_tools_for(who, &request)?)
    }

    async fn search_tools(
        &self,
        who: &Principal,
        request: SearchToolsRequest,
    ) -> Result<SearchToolsResponse, BackendError> {
        let session = toolmesh_dispatcher::session_of(&request.context);
        Ok(
            toolmesh_dispatcher::Dispatcher::search_tools(self, who, session, &request, None)
                .await?,
        )
    }

    async fn invoke(
        &self,
        who: &Principal,
        request: InvokeRequest,
        timeout: Option<Duration>,
        parent: TraceContext,
    ) -> Result<InvokeResponse, BackendError> {
        let call = CallRequest::new(who, request)
            .timeout(timeout)
            .trace(parent);
        Ok(self.call(call).await?)
    }

    async fn invoke_streamed(
        &self,
        who: &Principal,
        request: InvokeRequest,
        timeout: Option<Duration>,
        parent: TraceContext,
        progress: mpsc::Sender<Progress>,
    ) -> Result<InvokeResponse, BackendError> {
        // In this task, resolved once by the call itself: a tool that does
        // not stream progress is called by plain Execute (MCP clients send
        // a progressToken on every call).
        let call = CallRequest::new(who, request)
            .timeout(timeout)
            .trace(parent)
            .progress_to(progress);
        Ok(self.call(call).await?)
    }

    async fn view_changes(&self, who: &Principal) -> Result<ViewChanges, BackendError> {
        let watch = self.watch_tools(who, "", ToolFormat::Native)?;
        Ok(Box::pin(watch.changes_only().into_stream().map(|_| ())))
    }
}

/// Passes the progress `event` reports on to `progress`, or answers the
/// response it ends the stream with (other events are not for MCP).
pub(crate) async fn pass(
    event: InvokeEvent,
    progress: &mpsc::Sender<Progress>,
) -> Option<InvokeResponse> {
    match event.event {
        Some(invoke_event::Event::Progress(report)) => {
            // The handler stopped listening only when the call is dropped.
            let _ = progress.send(report).await;
            None
        }
        Some(invoke_event::Event::Done(response)) => Some(response),
        Some(invoke_event::Event::Chunk(_)) | None => None,
    }
}

/// A stream of events that ended before its response.
pub(crate) fn ended_without_response() -> BackendError {
    BackendError::Transport("the call's stream ended without a response".into())
}
