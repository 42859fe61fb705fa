//! One bridged call: `tools/call` on the upstream session, its progress relayed to the caller, `notifications/cancelled` when the caller goes away, and the answer as a toolmesh result or error.

use crate::client::BridgeClient;
use arc_swap::ArcSwapOption;
use rmcp::Peer;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ContentBlock,
    ServerResult,
};
use rmcp::service::{PeerRequestOptions, RoleClient, ServiceError};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::{Notify, mpsc};
use toolmesh::content;
use toolmesh::pb::ContentPart;
use toolmesh_executor::{CallCx, JsonTool, ToolFailure, ToolOutput};
use tracing::debug;

/// Progress reports of one call waiting to be relayed.
const PROGRESS_BUFFER: usize = 16;

/// The bridge's line to the upstream, shared by every bridged tool and the
/// supervisor that keeps it up.
pub(crate) struct Link {
    /// How messages name the upstream.
    pub(crate) server: String,
    /// The open session; none while the upstream is down or restarting.
    pub(crate) peer: ArcSwapOption<Peer<RoleClient>>,
    /// Progress routes and the list_changed signal.
    pub(crate) client: BridgeClient,
    /// Raised when a call saw the session fail, so the supervisor checks it
    /// at once rather than at its next probe.
    pub(crate) suspect: Notify,
}

impl Link {
    pub(crate) fn new(server: String, client: BridgeClient) -> Self {
        Link {
            server,
            peer: ArcSwapOption::empty(),
            client,
            suspect: Notify::new(),
        }
    }
}

/// One upstream tool as the executor serves it.
pub(crate) struct UpstreamTool {
    /// Its upstream name (what `tools/call` names).
    pub(crate) name: String,
    pub(crate) link: Arc<Link>,
}

impl JsonTool for UpstreamTool {
    async fn call(&self, arguments: Value, cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        let link = &self.link;
        let Some(peer) = link.peer.load_full() else {
            return Err(ToolFailure::unavailable(format!(
                "the MCP server {} is not connected right now (the bridge is reconnecting to it); try again shortly",
                link.server
            )));
        };
        let mut params = CallToolRequestParams::new(self.name.clone());
        params.arguments = match arguments {
            Value::Object(map) => Some(map),
            _ => None,
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let mut handle = match peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => handle,
            // The request never left: safe for the dispatcher to try elsewhere.
            Err(e) => {
                link.suspect.notify_one();
                return Err(ToolFailure::unavailable(format!(
                    "the MCP server {} could not be sent the call ({e}); the bridge is checking it, try again shortly",
                    link.server
                )));
            }
        };
        let (reports, mut received) = mpsc::channel(PROGRESS_BUFFER);
        let _route = link.client.route(handle.progress_token.clone(), reports);
        // The upstream's answer, or none when the call was cancelled.
        let waited = loop {
            tokio::select! {
                biased;
                answer = &mut handle.rx => break Some(answer),
                Some(report) = received.recv() => {
                    let total = report.total;
                    cx.progress().report(report.progress, total, report.message).await;
                }
                () = cx.cancelled() => break None,
            }
        };
        // Reports read before the answer are queued already: pass them on.
        while let Ok(report) = received.try_recv() {
            cx.progress()
                .report(report.progress, report.total, report.message)
                .await;
        }
        let answer = match waited {
            Some(answer) => answer,
            None => {
                debug!(tool = cx.tool(), upstream = %link.server, "call cancelled; telling the upstream");
                let _ = handle
                    .cancel(Some("the caller went away or its deadline passed".into()))
                    .await;
                // The caller is gone: nobody reads this.
                return Err(ToolFailure::new("the call was cancelled"));
            }
        };
        match answer {
            Ok(Ok(ServerResult::CallToolResult(result))) => outcome(result),
            Ok(Ok(ServerResult::EmptyResult(_))) => Ok(ToolOutput::text("")),
            Ok(Ok(other)) => Err(ToolFailure::executor_failed(format!(
                "the MCP server {} answered tools/call of {} with a {} result, which the bridge cannot pass on (it asked for input or started a task)",
                link.server,
                self.name,
                result_kind(&other)
            ))),
            Ok(Err(ServiceError::McpError(error))) => Err(ToolFailure::executor_failed(format!(
                "the MCP server {} refused tools/call of {}: JSON-RPC error {}: {}",
                link.server, self.name, error.code.0, error.message
            ))),
            Ok(Err(error)) => {
                link.suspect.notify_one();
                Err(lost(&link.server, &self.name, &error.to_string()))
            }
            Err(_) => {
                link.suspect.notify_one();
                Err(lost(&link.server, &self.name, "the session closed"))
            }
        }
    }
}

/// The session broke after the call was sent: it may or may not have run.
fn lost(server: &str, tool: &str, why: &str) -> ToolFailure {
    ToolFailure::executor_failed(format!(
        "the MCP server {server} went away while running {tool} ({why}); the call may or may not have taken effect"
    ))
}

/// The name of a `tools/call` answer the bridge does not pass on.
fn result_kind(result: &ServerResult) -> &'static str {
    match result {
        ServerResult::InputRequiredResult(_) => "input_required",
        ServerResult::CreateTaskResult(_) => "task",
        _ => "non-tool",
    }
}

/// A `tools/call` result as toolmesh's: `isError` is a tool error with the
/// upstream's text; otherwise text alone is `output`, content with more
/// than text (images, audio, resource links, embedded resources) is carried
/// block by block as the result's parts (`output` then describes each), and
/// `structuredContent` is `data` (the text is the data's JSON when there is
/// no content).
pub(crate) fn outcome(result: CallToolResult) -> Result<ToolOutput, ToolFailure> {
    let parts: Vec<ContentPart> = result.content.iter().map(part_of).collect();
    let text = content::text_of(&parts);
    if result.is_error == Some(true) {
        let message = if text.is_empty() {
            "the tool reported an error without a message".to_owned()
        } else {
            text
        };
        return Err(ToolFailure::new(message));
    }
    let data = result.structured_content.filter(|v| !v.is_null());
    let output = if content::only_text(&parts) {
        match &data {
            Some(data) if text.is_empty() => return Ok(ToolOutput::json(data)),
            _ => ToolOutput::text(text),
        }
    } else {
        ToolOutput::from_parts(parts)
    };
    Ok(match data {
        Some(data) => output.with_data(data),
        None => output,
    })
}

/// One MCP content block as a part; a block the mesh cannot carry (data
/// that is not base64, a type tool results do not have) is a text part
/// saying so, so the rest of the answer still arrives.
fn part_of(block: &ContentBlock) -> ContentPart {
    let mapped = serde_json::to_value(block)
        .map_err(|e| e.to_string())
        .and_then(|json| content::from_mcp(&json).map_err(|e| e.to_string()));
    mapped.unwrap_or_else(|why| content::text(format!("[the MCP server sent {why}]")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Text and structured content pass through; structured alone becomes
    /// the text too; isError is a tool error with the upstream's text;
    /// images are carried as parts, not flattened to text.
    #[test]
    fn results_map_to_outputs_and_failures() {
        let mut both = CallToolResult::success(vec![ContentBlock::text("sunny")]);
        both.structured_content = Some(json!({"temp": 21}));
        let output = outcome(both).unwrap();
        assert_eq!(output.output(), "sunny");
        assert_eq!(output.data(), r#"{"temp":21}"#);

        let mut data_only = CallToolResult::success(vec![]);
        data_only.structured_content = Some(json!({"n": 1}));
        let output = outcome(data_only).unwrap();
        assert_eq!(
            (output.output(), output.data()),
            (r#"{"n":1}"#, r#"{"n":1}"#)
        );

        let failed = CallToolResult::error(vec![ContentBlock::text("ENOENT: no such file")]);
        let failure = outcome(failed).unwrap_err();
        assert_eq!(failure.message(), "ENOENT: no such file");
        assert!(!failure.is_retryable());

        let mixed = CallToolResult::success(vec![
            ContentBlock::text("a picture:"),
            ContentBlock::image("aGVsbG8=", "image/png"),
        ]);
        let mixed = outcome(mixed).unwrap();
        assert_eq!(mixed.output(), "");
        let parts = mixed.parts();
        assert_eq!(
            content::text_of(parts),
            "a picture:\n[image image/png, 5 bytes]"
        );
        assert_eq!(
            content::to_mcp(&parts[1]),
            Some(json!({"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}))
        );
        let broken = outcome(CallToolResult::success(vec![ContentBlock::image(
            "%%",
            "image/png",
        )]));
        let broken = broken.unwrap();
        assert!(
            broken.output().contains("not base64"),
            "{}",
            broken.output()
        );
    }
}
