//! The MCP server handler: `tools/list` (the caller's projection, paged),
//! `tools/call` (one Invoke), and `list_changed` when the caller's
//! projection changes.

use crate::result::APPROVAL_META;
use crate::{Backend, BackendError};
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, SubscriptionFilter, Tool,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use std::hash::{DefaultHasher, Hash, Hasher};
use toolmesh::pb::{CallContext, InvokeRequest, ToolFormat};

/// Tools per `tools/list` page: 10,000 tools are 50 pages, not one 3 MiB answer.
pub const PAGE_SIZE: usize = 200;
/// `_meta` key of `tools/call` naming the agent session (for preconditions).
pub const SESSION_META: &str = "toolmesh/session_id";
/// How long a client may reuse a listing (`ttlMs`); changes within it are
/// announced by `notifications/tools/list_changed` to subscribers.
const LIST_TTL_MS: u64 = 5_000;
/// Prefix of the opaque cursor: the name of the last tool on the page
/// (listings are sorted by name, so any replica continues from it).
const CURSOR_PREFIX: &str = "after:";

/// The MCP handler over a [`Backend`]; cheap to clone (one per request).
#[derive(Clone)]
pub struct McpHandler<B> {
    backend: B,
}

impl<B: Backend> McpHandler<B> {
    /// A handler that lists and calls through `backend`.
    pub fn new(backend: B) -> Self {
        McpHandler { backend }
    }

    /// The caller of this request: the HTTP request's bearer token when it
    /// came over HTTP, else the backend's default caller (stdio).
    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<B::Caller, ErrorData> {
        let bearer = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.headers.get(http::header::AUTHORIZATION))
            .and_then(|value| value.to_str().ok());
        Ok(self.backend.authenticate(bearer)?)
    }

    /// The caller's projection in MCP shape (a JSON array sorted by name).
    async fn listing(&self, who: &B::Caller) -> Result<String, BackendError> {
        Ok(self
            .backend
            .list_tools(who, ToolFormat::Mcp)
            .await?
            .formatted)
    }

    /// The caller's projection, parsed.
    async fn projection(&self, who: &B::Caller) -> Result<Vec<Value>, BackendError> {
        serde_json::from_str(&self.listing(who).await?).map_err(|e| {
            BackendError::Transport(format!("the MCP tool listing is not a JSON array: {e}"))
        })
    }
}

/// A digest of a rendered listing: equal listings, equal digests.
fn digest(listing: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    listing.hash(&mut hasher);
    hasher.finish()
}

/// The page of `tools` after `cursor`, and the cursor of the next page.
fn page(tools: &[Value], cursor: Option<&str>) -> Result<ListToolsResult, ErrorData> {
    let name = |tool: &Value| tool["name"].as_str().unwrap_or_default().to_owned();
    let start = match cursor {
        None => 0,
        Some(cursor) => {
            let Some(after) = cursor.strip_prefix(CURSOR_PREFIX) else {
                return Err(ErrorData::invalid_params(
                    format!(
                        "cursor {cursor:?} was not given by this server; list again without a cursor"
                    ),
                    None,
                ));
            };
            tools.partition_point(|t| name(t).as_str() <= after)
        }
    };
    let end = (start + PAGE_SIZE).min(tools.len());
    let items = tools[start..end]
        .iter()
        .map(|t| serde_json::from_value::<Tool>(t.clone()))
        .collect::<Result<Vec<Tool>, _>>()
        .map_err(|e| {
            ErrorData::internal_error(format!("a listed tool is not an MCP Tool: {e}"), None)
        })?;
    let mut result = ListToolsResult::with_all_items(items)
        .with_ttl_ms(LIST_TTL_MS)
        .with_cache_scope(CacheScope::Private);
    if end < tools.len() {
        result.next_cursor = Some(format!("{CURSOR_PREFIX}{}", name(&tools[end - 1])));
    }
    Ok(result)
}

/// A string under `key` in the request's `_meta` (rmcp hands it over in
/// the context; the params' own copy is read too), or empty.
fn meta_text(
    params: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
    key: &str,
) -> String {
    [Some(&context.meta), params.meta.as_ref()]
        .into_iter()
        .flatten()
        .find_map(|meta| meta.get(key).and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned()
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
        let tools = self.projection(&who).await?;
        page(&tools, request.as_ref().and_then(|r| r.cursor.as_deref()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let who = self.caller(&context)?;
        let arguments = request
            .arguments
            .clone()
            .map_or_else(|| "{}".to_owned(), |a| Value::Object(a).to_string());
        let invoke = InvokeRequest {
            tool: request.name.to_string(),
            arguments,
            approval_id: meta_text(&request, &context, APPROVAL_META),
            context: Some(CallContext {
                session_id: meta_text(&request, &context, SESSION_META),
                trace_id: meta_text(&request, &context, "traceparent"),
                ..CallContext::default()
            }),
            ..InvokeRequest::default()
        };
        // Closing the request's stream cancels `ct`; dropping the call's
        // future resets the executor's stream, so the tool sees it too.
        let response = tokio::select! {
            response = self.backend.invoke(&who, invoke, None) => response?,
            () = context.ct.cancelled() => {
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

    /// Compares the caller's projection now and then and announces a
    /// change: only their own (a new snapshot, a policy reload or a disable
    /// that leaves their tools as they were says nothing).
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let who = self.caller(context.request_context())?;
        let mut seen = digest(&self.listing(&who).await?);
        let mut tick = tokio::time::interval(self.backend.watch_interval());
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                _ = tick.tick() => {}
            }
            let Ok(now) = self.listing(&who).await.map(|l| digest(&l)) else {
                continue; // the dispatcher is away: look again next tick
            };
            if now != seen {
                seen = now;
                if context.sink().notify_tool_list_changed().await.is_err() {
                    return Ok(()); // the subscriber went away
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools(n: usize) -> Vec<Value> {
        (0..n)
            .map(|i| json!({"name": format!("t{i:05}"), "inputSchema": {"type": "object"}}))
            .collect()
    }

    /// Pages follow each other by cursor with nothing lost or repeated, and
    /// the last page has no cursor.
    #[test]
    fn pages_cover_everything_once() {
        let all = tools(PAGE_SIZE * 2 + 3);
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let page = page(&all, cursor.as_deref()).unwrap();
            assert_eq!(page.ttl_ms, Some(LIST_TTL_MS));
            seen.extend(page.tools.iter().map(|t| t.name.to_string()));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let names: Vec<String> = all
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(seen, names);
        assert!(
            page(&all, Some("bogus"))
                .unwrap_err()
                .message
                .contains("without a cursor")
        );
    }
}
