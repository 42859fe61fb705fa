//! The MCP server handler: `tools/list` (the caller's projection, paged;
//! in search mode `search_tools` and `call_tool` instead), `tools/call` (one
//! Invoke; an InvokeStream whose progress becomes `notifications/progress`
//! when the request carries a `progressToken`), and `list_changed` when the
//! caller's projection changes.

use crate::result::APPROVAL_META;
use crate::search_mode::{self, DoorTool, ToolSearch, ToolSearchMode};
use crate::{Backend, BackendError};
use futures_util::StreamExt;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, Implementation, InitializeRequestParams,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProgressToken, RequestMetaObject, ServerCapabilities, ServerConfig, SubscriptionFilter, Tool,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::mpsc;
use toolmesh::pb::{
    CallContext, InvokeRequest, InvokeResponse, ListToolsResponse, Progress, ToolFormat,
};
use toolmesh_telemetry::trace::Context as TraceContext;

/// Tools per `tools/list` page: the dispatcher's ListTools page, so a
/// cursor is one dispatcher page and 100,000 tools are 100 pages.
pub const PAGE_SIZE: usize = toolmesh_dispatcher::MAX_LIST_PAGE as usize;
/// `_meta` key of `tools/call` naming the agent session (for preconditions).
pub const SESSION_META: &str = "toolmesh/session_id";
/// `_meta` key of `tools/call` giving the client's deadline for the whole
/// call, in milliseconds (a positive whole number).
pub const TIMEOUT_META: &str = "toolmesh/timeout_ms";
/// How long a client may reuse a listing (`ttlMs`); changes within it are
/// announced by `notifications/tools/list_changed` to subscribers.
const LIST_TTL_MS: u64 = 5_000;
/// Prefix of the opaque cursor, before the dispatcher's `page_token` (which
/// names the snapshot and the last tool listed, so any replica following
/// the same registry continues from it).
const CURSOR_PREFIX: &str = "page:";
/// Listings whose digest is remembered, and parsed listings kept, at most.
const PARSED_ENTRIES: usize = 64;
/// How often a stdio watch looks whether its client has gone.
const TRANSPORT_CHECK: Duration = Duration::from_secs(1);
/// Progress reports of one call waiting for their notification to go out.
const PROGRESS_BUFFER: usize = 16;

/// The MCP handler over a [`Backend`]; cheap to clone (one per request),
/// the clones sharing what was parsed.
#[derive(Clone)]
pub struct McpHandler<B> {
    backend: B,
    parsed: Arc<Mutex<Parsed>>,
    /// The transport's deadline for a call whose `_meta` gives none.
    timeout: Option<Duration>,
    /// When `tools/list` answers in search mode.
    search: ToolSearch,
}

/// The caller the HTTP layer authenticated, in the request's extensions.
#[derive(Clone)]
pub(crate) struct Authenticated<C>(pub(crate) C);

/// What was worked out of listings already, so neither a page nor a
/// `list_changed` look redoes it for a listing seen before.
#[derive(Default)]
struct Parsed {
    /// A listing's digest by its address; the `Weak` keeps the allocation,
    /// so no other listing can take the address while the entry is here.
    digests: HashMap<usize, (Weak<ListToolsResponse>, u64)>,
    /// Parsed tools by (digest, length) of the listing's text: equal
    /// listings (another snapshot, another `Arc`) share one parse.
    tools: HashMap<(u64, usize), Arc<[Tool]>>,
}

impl Parsed {
    fn lock(parsed: &Mutex<Parsed>) -> std::sync::MutexGuard<'_, Parsed> {
        parsed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<B: Backend> McpHandler<B> {
    /// A handler that lists and calls through `backend`.
    pub fn new(backend: B) -> Self {
        McpHandler {
            backend,
            parsed: Arc::default(),
            timeout: None,
            search: ToolSearch::default(),
        }
    }

    /// The handler with the door's tool search setting
    /// (`--mcp-tool-search`, `--mcp-tool-search-threshold`).
    pub fn with_tool_search(self, search: ToolSearch) -> Self {
        McpHandler { search, ..self }
    }

    /// Whether `who`'s `tools/list` answers in search mode: always with
    /// `on`, never with `off`, and with `auto` when `who` may use more
    /// tools than the threshold (counted page by page, as far as needed).
    async fn in_search_mode(&self, who: &B::Caller) -> Result<bool, BackendError> {
        match self.search.mode {
            ToolSearchMode::Off => Ok(false),
            ToolSearchMode::On => Ok(true),
            ToolSearchMode::Auto => {
                let (mut visible, mut page_token) = (0, String::new());
                loop {
                    let page = self
                        .backend
                        .list_tools(who, ToolFormat::Mcp, &page_token)
                        .await?;
                    visible += self.parsed(&page)?.len();
                    if visible > self.search.threshold {
                        return Ok(true);
                    }
                    if page.next_page_token.is_empty() {
                        return Ok(false);
                    }
                    page_token.clone_from(&page.next_page_token);
                }
            }
        }
    }

    /// The answer to the door's `search_tools`: `who`'s SearchTools, each
    /// match as `tools/list` shows it.
    async fn search_tools(
        &self,
        who: &B::Caller,
        params: &CallToolRequestParams,
        meta: &RequestMetaObject,
    ) -> Result<CallToolResponse, ErrorData> {
        let session_id = meta_text(params, meta, SESSION_META);
        let context = (!session_id.is_empty()).then(|| CallContext {
            session_id,
            ..CallContext::default()
        });
        let request = search_mode::search_request(params, context)?;
        let found = self.backend.search_tools(who, request).await?;
        Ok(search_mode::search_result(&found)?.into())
    }

    /// The handler with the transport's deadline for every call (the
    /// stdio bridge's `--timeout-ms`), for a call whose `_meta` names none.
    pub fn with_timeout(self, timeout: Option<Duration>) -> Self {
        McpHandler { timeout, ..self }
    }

    /// The caller of this request: over HTTP the one the HTTP layer
    /// authenticated (once, from the bearer token or client certificate),
    /// else the backend's default caller (stdio).
    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<B::Caller, ErrorData> {
        let Some(parts) = context.extensions.get::<http::request::Parts>() else {
            return Ok(self.backend.authenticate(None, None)?);
        };
        match parts.extensions.get::<Authenticated<B::Caller>>() {
            Some(Authenticated(who)) => Ok(who.clone()),
            None => Err(ErrorData::internal_error(
                "an HTTP request reached the MCP handler without the HTTP layer's caller",
                None,
            )),
        }
    }

    /// The digest of `listing`'s text, computed once per listing.
    fn digest(&self, listing: &Arc<ListToolsResponse>) -> u64 {
        let address = Arc::as_ptr(listing) as usize;
        if let Some((_, digest)) = Parsed::lock(&self.parsed).digests.get(&address) {
            return *digest;
        }
        let mut hasher = DefaultHasher::new();
        listing.formatted.hash(&mut hasher);
        let digest = hasher.finish();
        let mut parsed = Parsed::lock(&self.parsed);
        if parsed.digests.len() >= PARSED_ENTRIES {
            parsed
                .digests
                .retain(|_, (weak, _)| weak.strong_count() > 0);
            if parsed.digests.len() >= PARSED_ENTRIES {
                parsed.digests.clear();
            }
        }
        parsed
            .digests
            .insert(address, (Arc::downgrade(listing), digest));
        digest
    }

    /// The page of `who`'s projection `cursor` asks for (the first for
    /// none): one dispatcher page, parsed once per distinct page, whose
    /// next page's token is the next cursor.
    async fn page(
        &self,
        who: &B::Caller,
        cursor: Option<&str>,
    ) -> Result<ListToolsResult, ErrorData> {
        let page_token = match cursor {
            None => "",
            Some(cursor) => cursor.strip_prefix(CURSOR_PREFIX).ok_or_else(|| {
                ErrorData::invalid_params(
                    format!(
                        "cursor {cursor:?} was not given by this server; list again without a cursor"
                    ),
                    None,
                )
            })?,
        };
        let listing = self
            .backend
            .list_tools(who, ToolFormat::Mcp, page_token)
            .await?;
        let tools = self.parsed(&listing)?;
        let mut result = ListToolsResult::with_all_items(tools.to_vec())
            .with_ttl_ms(LIST_TTL_MS)
            .with_cache_scope(CacheScope::Private);
        if !listing.next_page_token.is_empty() {
            result.next_cursor = Some(format!("{CURSOR_PREFIX}{}", listing.next_page_token));
        }
        Ok(result)
    }

    /// The MCP tools of `listing` (one page), parsed once per distinct page.
    fn parsed(&self, listing: &Arc<ListToolsResponse>) -> Result<Arc<[Tool]>, BackendError> {
        let key = (self.digest(listing), listing.formatted.len());
        if let Some(tools) = Parsed::lock(&self.parsed).tools.get(&key) {
            return Ok(tools.clone());
        }
        let tools: Arc<[Tool]> = serde_json::from_str::<Vec<Tool>>(&listing.formatted)
            .map_err(|e| {
                BackendError::Transport(format!(
                    "the MCP tool listing is not an array of MCP tools: {e}"
                ))
            })?
            .into();
        let mut parsed = Parsed::lock(&self.parsed);
        if parsed.tools.len() >= PARSED_ENTRIES {
            parsed.tools.clear();
        }
        parsed.tools.insert(key, tools.clone());
        Ok(tools)
    }

    /// Calls `announce` at each change of `who`'s projection, as the
    /// backend tells it (no polling): only their own (a new snapshot, a
    /// policy reload or a disable that leaves their tools as they were says
    /// nothing). Ends when `stop` does, when no change can come any more,
    /// or when `announce` answers false (the listener went away).
    async fn watch<A, F>(
        &self,
        who: &B::Caller,
        stop: impl Future<Output = ()>,
        mut announce: A,
    ) -> Result<(), BackendError>
    where
        A: FnMut() -> F,
        F: Future<Output = bool>,
    {
        let mut changes = self.backend.view_changes(who).await?;
        let mut stop = std::pin::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return Ok(()),
                change = changes.next() => {
                    if change.is_none() || !announce().await {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Runs a `tools/call` within the client's `timeout`: one Invoke, or
    /// with a progress `token` an InvokeStream whose progress goes to
    /// `peer` as `notifications/progress`, every one before the result.
    async fn invoke(
        &self,
        who: &B::Caller,
        (invoke, parent): (InvokeRequest, TraceContext),
        timeout: Option<Duration>,
        token: Option<ProgressToken>,
        peer: &Peer<RoleServer>,
    ) -> Result<InvokeResponse, BackendError> {
        let Some(token) = token else {
            return self.backend.invoke(who, invoke, timeout, parent).await;
        };
        let (progress, mut reports) = mpsc::channel(PROGRESS_BUFFER);
        let call = self
            .backend
            .invoke_streamed(who, invoke, timeout, parent, progress);
        let notify = async {
            while let Some(report) = reports.recv().await {
                // A client that stops listening still gets its result.
                let _ = peer.notify_progress(notification(&token, report)).await;
            }
        };
        // The call's end drops the sender, so `notify` drains and ends.
        tokio::join!(call, notify).0
    }
}

/// The `notifications/progress` of one report (a total of 0 is unknown).
fn notification(token: &ProgressToken, report: Progress) -> ProgressNotificationParam {
    let mut param = ProgressNotificationParam::new(token.clone(), report.progress);
    if report.total > 0.0 {
        param = param.with_total(report.total);
    }
    if !report.message.is_empty() {
        param = param.with_message(report.message);
    }
    param
}

/// The `progressToken` of a `tools/call`, from the request's `_meta`
/// (rmcp's copy in the context, or the params' own).
fn progress_token(
    params: &CallToolRequestParams,
    meta: &RequestMetaObject,
) -> Option<ProgressToken> {
    meta.get_progress_token().or_else(|| {
        params
            .meta
            .as_ref()
            .and_then(RequestMetaObject::get_progress_token)
    })
}

/// The value under `key` in the request's `_meta` (rmcp hands it over in
/// the context, `meta`; the params' own copy is read too).
fn meta_value<'a>(
    params: &'a CallToolRequestParams,
    meta: &'a RequestMetaObject,
    key: &str,
) -> Option<&'a Value> {
    [Some(meta), params.meta.as_ref()]
        .into_iter()
        .flatten()
        .find_map(|meta| meta.get(key))
}

/// A string under `key` in the request's `_meta`, or empty.
fn meta_text(params: &CallToolRequestParams, meta: &RequestMetaObject, key: &str) -> String {
    meta_value(params, meta, key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The client's deadline for a `tools/call`, from its `_meta`
/// ([`TIMEOUT_META`]), if it gives one.
fn meta_timeout(
    params: &CallToolRequestParams,
    meta: &RequestMetaObject,
) -> Result<Option<Duration>, ErrorData> {
    let Some(value) = meta_value(params, meta, TIMEOUT_META) else {
        return Ok(None);
    };
    match value.as_u64().filter(|ms| *ms > 0) {
        Some(ms) => Ok(Some(Duration::from_millis(ms))),
        None => Err(ErrorData::invalid_params(
            format!(
                "_meta.{TIMEOUT_META} is {value}; give the call's deadline as a positive whole number of milliseconds, or leave it out"
            ),
            None,
        )),
    }
}

/// The Invoke for a `tools/call`, and the client's trace context from its
/// `_meta` (`traceparent`, `tracestate`) for the dispatcher to continue.
fn invocation(
    params: &CallToolRequestParams,
    meta: &RequestMetaObject,
) -> (InvokeRequest, TraceContext) {
    let arguments = params
        .arguments
        .clone()
        .map_or_else(|| "{}".to_owned(), |a| Value::Object(a).to_string());
    let traceparent = meta_text(params, meta, "traceparent");
    let tracestate = meta_text(params, meta, "tracestate");
    let parent = toolmesh_telemetry::trace::extract_pairs(
        [
            ("traceparent", traceparent.as_str()),
            ("tracestate", tracestate.as_str()),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty()),
    );
    let invoke = InvokeRequest {
        tool: params.name.to_string(),
        arguments,
        approval_id: meta_text(params, meta, APPROVAL_META),
        context: Some(CallContext {
            session_id: meta_text(params, meta, SESSION_META),
            // The client's trace id, not its header; with tracing on the
            // dispatcher sets the id of the trace it continues (this one).
            trace_id: toolmesh_telemetry::trace::trace_id_of(&traceparent).unwrap_or_default(),
            ..CallContext::default()
        }),
        ..InvokeRequest::default()
    };
    (invoke, parent)
}

impl<B: Backend> ServerHandler for McpHandler<B> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("toolmesh", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Tools served by toolmesh. A result with isError says what was wrong and how to fix it; \
             APPROVAL_REQUIRED names an approval id to send back in _meta.toolmesh/approval_id.",
        )
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let who = self.caller(&context)?;
        let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
        if cursor.is_none() && self.in_search_mode(&who).await? {
            return Ok(
                ListToolsResult::with_all_items(search_mode::door_tools().to_vec())
                    .with_ttl_ms(LIST_TTL_MS)
                    .with_cache_scope(CacheScope::Private),
            );
        }
        self.page(&who, cursor).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let who = self.caller(&context)?;
        // In search mode `call_tool` is the direct call of the tool it
        // names, from here on the same in every step.
        let request = match self.search.door_tool(&request.name) {
            Some(DoorTool::Search) => {
                return self.search_tools(&who, &request, &context.meta).await;
            }
            Some(DoorTool::Call) => search_mode::unwrapped(&request)?,
            None => request,
        };
        let call = invocation(&request, &context.meta);
        let timeout = meta_timeout(&request, &context.meta)?.or(self.timeout);
        let token = progress_token(&request, &context.meta);
        // Closing the request's stream cancels `ct`; dropping the call's
        // future resets the executor's stream, so the tool sees it too.
        let response = tokio::select! {
            response = self.invoke(&who, call, timeout, token, &context.peer) => response?,
            () = context.ct.cancelled() => {
                // A client that hangs up cancels its call: no one to answer.
                tracing::debug!(tool = %request.name, "MCP call cancelled by its client");
                return Err(ErrorData::internal_error("the call was cancelled by the client", None));
            }
        };
        Ok(crate::result::call_result(&request.name, response)?.into())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    /// Announces each change of the subscriber's projection until the
    /// subscription ends (see [`McpHandler::watch`]).
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let who = self.caller(context.request_context())?;
        let sink = context.sink();
        self.watch(&who, context.cancelled(), || async {
            sink.notify_tool_list_changed().await.is_ok()
        })
        .await?;
        Ok(())
    }

    /// Before 2026-07-28 there is no subscription: a client that
    /// initialized over stdio (a connection that stays open) is told of
    /// each change of its projection unasked, as `listChanged` promises.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if context.extensions.get::<http::request::Parts>().is_some() {
            return; // stateless HTTP: no stream to tell it on
        }
        let Ok(who) = self.backend.authenticate(None, None) else {
            return; // the first call says why
        };
        let (handler, peer) = (self.clone(), context.peer);
        tokio::spawn(async move {
            // A local look (rmcp offers nothing to wait on), not a request.
            let closed = async {
                while !peer.is_transport_closed() {
                    tokio::time::sleep(TRANSPORT_CHECK).await;
                }
            };
            let _ = handler
                .watch(&who, closed, || async {
                    peer.notify_tool_list_changed().await.is_ok()
                })
                .await;
        });
    }

    /// The `initialize` answer; over HTTP without `listChanged`: the door is
    /// stateless (no stream a change could be told on before 2026-07-28,
    /// whose clients subscribe instead and learn it from `server/discover`).
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let mut answer = self.negotiate_initialize(&request)?;
        if context.extensions.get::<http::request::Parts>().is_some()
            && let Some(tools) = answer.capabilities.tools.as_mut()
        {
            tools.list_changed = None;
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools(n: usize) -> Vec<Tool> {
        (0..n)
            .map(|i| {
                serde_json::from_value(
                    json!({"name": format!("t{i:05}"), "inputSchema": {"type": "object"}}),
                )
                .unwrap()
            })
            .collect()
    }

    /// A backend that answers fixed pages; a page token is the page's
    /// index.
    #[derive(Clone)]
    struct Fixed(Arc<Mutex<Vec<Arc<ListToolsResponse>>>>);

    impl Fixed {
        fn new(pages: Vec<Arc<ListToolsResponse>>) -> Self {
            Fixed(Arc::new(Mutex::new(pages)))
        }

        fn set(&self, pages: Vec<Arc<ListToolsResponse>>) {
            *self.0.lock().unwrap() = pages;
        }
    }

    impl Backend for Fixed {
        type Caller = ();
        fn authenticate(
            &self,
            _: Option<&str>,
            _: Option<&toolmesh_transport::PeerCertificate>,
        ) -> Result<(), BackendError> {
            Ok(())
        }
        async fn list_tools(
            &self,
            _: &(),
            _: ToolFormat,
            page_token: &str,
        ) -> Result<Arc<ListToolsResponse>, BackendError> {
            let at = match page_token {
                "" => Some(0),
                token => token.parse::<usize>().ok(),
            };
            let pages = self.0.lock().unwrap();
            at.and_then(|at| pages.get(at)).cloned().ok_or_else(|| {
                BackendError::Refused(format!(
                    "page_token {page_token:?}: list again from the first page"
                ))
            })
        }
        async fn search_tools(
            &self,
            _: &(),
            _: toolmesh::pb::SearchToolsRequest,
        ) -> Result<toolmesh::pb::SearchToolsResponse, BackendError> {
            unreachable!()
        }
        async fn invoke(
            &self,
            _: &(),
            _: InvokeRequest,
            _: Option<std::time::Duration>,
            _: TraceContext,
        ) -> Result<toolmesh::pb::InvokeResponse, BackendError> {
            unreachable!()
        }
        async fn invoke_streamed(
            &self,
            _: &(),
            _: InvokeRequest,
            _: Option<std::time::Duration>,
            _: TraceContext,
            _: mpsc::Sender<Progress>,
        ) -> Result<toolmesh::pb::InvokeResponse, BackendError> {
            unreachable!()
        }
        async fn view_changes(&self, _: &()) -> Result<crate::ViewChanges, BackendError> {
            Ok(Box::pin(futures_util::stream::pending()))
        }
    }

    /// `all` in pages of `size`, each naming the next by its index.
    fn pages_of(all: &[Tool], size: usize, snapshot_version: u64) -> Vec<Arc<ListToolsResponse>> {
        let count = all.len().div_ceil(size).max(1);
        (0..count)
            .map(|at| {
                let end = ((at + 1) * size).min(all.len());
                Arc::new(ListToolsResponse {
                    snapshot_version,
                    formatted: serde_json::to_string(&all[at * size..end]).unwrap(),
                    next_page_token: if at + 1 < count {
                        (at + 1).to_string()
                    } else {
                        String::new()
                    },
                    ..ListToolsResponse::default()
                })
            })
            .collect()
    }

    /// A listing of `n` tools in one page.
    fn listing(n: usize, snapshot_version: u64) -> Vec<Arc<ListToolsResponse>> {
        pages_of(&tools(n), PAGE_SIZE, snapshot_version)
    }

    /// Pages follow each other by cursor, one dispatcher page each, with
    /// nothing lost or repeated, and the last page has no cursor; a cursor
    /// this server never gave, or one the dispatcher refuses, says to list
    /// again from the start.
    #[tokio::test]
    async fn pages_cover_everything_once() {
        let all = tools(PAGE_SIZE * 2 + 3);
        let handler = McpHandler::new(Fixed::new(pages_of(&all, PAGE_SIZE, 1)));
        let mut seen = Vec::new();
        let (mut cursor, mut pages) = (None, 0);
        loop {
            let page = handler.page(&(), cursor.as_deref()).await.unwrap();
            pages += 1;
            assert_eq!(page.ttl_ms, Some(LIST_TTL_MS));
            assert!(page.tools.len() <= PAGE_SIZE);
            seen.extend(page.tools.iter().map(|t| t.name.to_string()));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(pages, 3);
        let names: Vec<String> = all.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(seen, names);
        let bogus = handler.page(&(), Some("bogus")).await.unwrap_err();
        assert!(
            bogus.message.contains("without a cursor"),
            "{}",
            bogus.message
        );
        let refused = handler
            .page(&(), Some(&format!("{CURSOR_PREFIX}99")))
            .await
            .unwrap_err();
        assert!(
            refused.message.contains("list again from the first page"),
            "{}",
            refused.message
        );
    }

    /// The tools of the first page, parsed.
    async fn first_page(handler: &McpHandler<Fixed>) -> Arc<[Tool]> {
        let page = handler
            .backend
            .list_tools(&(), ToolFormat::Mcp, "")
            .await
            .unwrap();
        handler.parsed(&page).unwrap()
    }

    /// A page is parsed once, not per request: the same page (or an equal
    /// one from another snapshot) gives the same parsed tools, and a
    /// changed one a new digest.
    #[tokio::test]
    async fn listings_are_parsed_once() {
        let backend = Fixed::new(listing(3, 1));
        let handler = McpHandler::new(backend.clone());
        let first = first_page(&handler).await;
        let again = first_page(&handler.clone()).await;
        assert!(Arc::ptr_eq(&first, &again));
        let before = handler.digest(
            &handler
                .backend
                .list_tools(&(), ToolFormat::Mcp, "")
                .await
                .unwrap(),
        );
        backend.set(listing(3, 2));
        let equal = first_page(&handler).await;
        assert!(Arc::ptr_eq(&first, &equal), "same tools, another snapshot");
        assert_eq!(
            before,
            handler.digest(
                &handler
                    .backend
                    .list_tools(&(), ToolFormat::Mcp, "")
                    .await
                    .unwrap()
            )
        );
        backend.set(listing(4, 3));
        assert_eq!(first_page(&handler).await.len(), 4);
        assert_ne!(
            before,
            handler.digest(
                &handler
                    .backend
                    .list_tools(&(), ToolFormat::Mcp, "")
                    .await
                    .unwrap()
            )
        );
    }

    /// `auto` answers in search mode exactly when the caller may use more
    /// tools than the threshold, counting every page; `on` and `off`
    /// whatever the count.
    #[tokio::test]
    async fn auto_search_mode_follows_the_threshold() {
        let mode_for = |mode, threshold, pages| async move {
            McpHandler::new(Fixed::new(pages))
                .with_tool_search(ToolSearch { mode, threshold })
                .in_search_mode(&())
                .await
                .unwrap()
        };
        let auto = ToolSearchMode::Auto;
        assert!(!mode_for(auto, 40, listing(40, 1)).await);
        assert!(mode_for(auto, 40, listing(41, 1)).await);
        assert!(!mode_for(auto, 5, pages_of(&tools(5), 2, 1)).await);
        assert!(
            mode_for(auto, 5, pages_of(&tools(6), 2, 1)).await,
            "on a later page"
        );
        assert!(mode_for(ToolSearchMode::On, 40, listing(1, 1)).await);
        assert!(!mode_for(ToolSearchMode::Off, 0, listing(1_000, 1)).await);
    }

    /// A call's `_meta.traceparent` reaches the Invoke as the trace id it
    /// names (never the raw header); a malformed one as none.
    #[test]
    fn trace_context_comes_from_meta() {
        let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let params: CallToolRequestParams = serde_json::from_value(json!({
            "name": "t",
            "_meta": {"traceparent": traceparent, "toolmesh/session_id": "s1"},
        }))
        .unwrap();
        let (invoke, _) = invocation(&params, &RequestMetaObject::default());
        let context = invoke.context.unwrap();
        assert_eq!(context.trace_id, "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(context.session_id, "s1");
        let bad: CallToolRequestParams =
            serde_json::from_value(json!({"name": "t", "_meta": {"traceparent": "nonsense"}}))
                .unwrap();
        let (invoke, _) = invocation(&bad, &RequestMetaObject::default());
        assert_eq!(invoke.context.unwrap().trace_id, "");
    }

    /// A call's deadline is read from `_meta` in whole milliseconds; none
    /// is none, and anything but a positive whole number is refused.
    #[test]
    fn deadline_comes_from_meta() {
        let with = |meta: Value| -> CallToolRequestParams {
            serde_json::from_value(json!({"name": "t", "_meta": meta})).unwrap()
        };
        let none = RequestMetaObject::default();
        assert_eq!(
            meta_timeout(&with(json!({TIMEOUT_META: 1500})), &none).unwrap(),
            Some(std::time::Duration::from_millis(1500))
        );
        assert_eq!(meta_timeout(&with(json!({})), &none).unwrap(), None);
        for bad in [json!("1500"), json!(0), json!(1.5), json!(-1)] {
            let refused = meta_timeout(&with(json!({TIMEOUT_META: bad})), &none).unwrap_err();
            assert!(
                refused.message.contains("positive whole number"),
                "{}",
                refused.message
            );
        }
    }
}
