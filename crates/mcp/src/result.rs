//! An `InvokeResponse` as MCP shows it: a tool result (text plus
//! `structuredContent`, or `isError` with `CODE: message`), or, for a name
//! the caller cannot use, a JSON-RPC invalid-params error.

use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::{Value, json};
use toolmesh::pb::{ErrorCode, InvokeResponse, ToolError, ToolResult};
use toolmesh::{ErrorCodeExt, ToolErrorExt};

/// `_meta` key of `tools/call` carrying a granted approval's id.
pub const APPROVAL_META: &str = "toolmesh/approval_id";

/// The MCP answer to a call of `tool` that came back as `response`.
pub(crate) fn call_result(
    tool: &str,
    response: InvokeResponse,
) -> Result<CallToolResult, ErrorData> {
    let Some(result) = response.result else {
        return Err(ErrorData::internal_error(
            format!("the dispatcher answered the call of {tool:?} without a result; call again"),
            None,
        ));
    };
    let mut meta = MetaObject::new();
    meta.insert("toolmesh/call_id".into(), json!(response.call_id));
    if !response.tool_version.is_empty() {
        meta.insert("toolmesh/version".into(), json!(response.tool_version));
    }
    if let Some(deprecated) = result.metadata.get(toolmesh::error::DEPRECATED_METADATA) {
        meta.insert("toolmesh/deprecated".into(), json!(deprecated));
    }
    let mut answer = match &result.error {
        Some(error) if error.code != ErrorCode::Unspecified as i32 => failure(tool, error)?,
        _ => success(&result),
    };
    answer.meta = Some(meta);
    Ok(answer)
}

/// The result's content parts as their MCP content blocks, in order, when
/// it has parts; else its text (`output`, else the data itself). The data
/// goes as `structuredContent` when it is a JSON object (the dispatcher has
/// already checked it against the output schema).
fn success(result: &ToolResult) -> CallToolResult {
    let data: Option<Value> = serde_json::from_str(&result.data).ok();
    // A part this build cannot render (a newer kind) leaves the text, which
    // describes every part, rather than content with a hole in it.
    let blocks: Option<Vec<ContentBlock>> = result
        .parts
        .iter()
        .map(|part| {
            toolmesh::content::to_mcp(part).and_then(|block| serde_json::from_value(block).ok())
        })
        .collect();
    let content = match blocks {
        Some(blocks) if !blocks.is_empty() => blocks,
        _ if result.output.is_empty() => vec![ContentBlock::text(result.data.clone())],
        _ => vec![ContentBlock::text(result.output.clone())],
    };
    let mut answer = CallToolResult::success(content);
    answer.structured_content = data.filter(Value::is_object);
    answer
}

/// A tool outcome the model reads (`isError`), or, when the name is one the
/// caller cannot use, invalid params — worded the same for a name that does
/// not exist and one the caller may not see, so hidden names stay hidden.
fn failure(tool: &str, error: &ToolError) -> Result<CallToolResult, ErrorData> {
    let code = error.error_code();
    match code {
        ErrorCode::NotFound => return Err(ErrorData::invalid_params(error.message.clone(), None)),
        ErrorCode::PermissionDenied => {
            return Err(ErrorData::invalid_params(
                // A dispatcher answers a hidden name as an unknown one;
                // worded the same here for any that still says PERMISSION_DENIED.
                format!("no tool named {tool:?}; list the tools to see what exists"),
                None,
            ));
        }
        _ => {}
    }
    let mut text = format!("{}: {}", code.short_name(), error.message);
    if code == ErrorCode::ApprovalRequired {
        text.push_str(&format!(
            ". From MCP, call again with the same arguments and `_meta: {{\"{APPROVAL_META}\": \"{}\"}}` once it is approved",
            error.approval_id
        ));
    }
    let mut answer = CallToolResult::error(vec![ContentBlock::text(text)]);
    answer.structured_content = Some(json!({
        "code": code.short_name(),
        "retryable": error.retryable,
        "retry_after_ms": error.retry_after_ms,
        "approval_id": error.approval_id,
    }));
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(result: ToolResult) -> InvokeResponse {
        InvokeResponse {
            result: Some(result),
            call_id: "c-1".into(),
            tool_version: "1.0.0".into(),
            ..InvokeResponse::default()
        }
    }

    fn error(code: ErrorCode, message: &str) -> ToolResult {
        ToolResult {
            error: Some(ToolError {
                code: code as i32,
                message: message.into(),
                approval_id: "a-7".into(),
                ..ToolError::default()
            }),
            ..ToolResult::default()
        }
    }

    /// Parts reach MCP as their content blocks, in order, unchanged.
    #[test]
    fn parts_are_content_blocks() {
        let image =
            serde_json::json!({"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"});
        let link = serde_json::json!({"type": "resource_link", "uri": "file:///a", "name": "a"});
        let parts = vec![
            toolmesh::content::text("look:"),
            toolmesh::content::from_mcp(&image).unwrap(),
            toolmesh::content::from_mcp(&link).unwrap(),
        ];
        let answer = call_result(
            "t",
            response(ToolResult {
                output: toolmesh::content::text_of(&parts),
                parts,
                ..ToolResult::default()
            }),
        )
        .unwrap();
        let content = serde_json::to_value(&answer.content).unwrap();
        assert_eq!(
            content,
            serde_json::json!([{"type": "text", "text": "look:"}, image, link])
        );
    }

    /// Success: the output as text and the data as structuredContent.
    #[test]
    fn success_carries_text_and_structure() {
        let answer = call_result(
            "t",
            response(ToolResult {
                output: "2 hits".into(),
                data: r#"{"hits":2}"#.into(),
                ..ToolResult::default()
            }),
        )
        .unwrap();
        assert_eq!(answer.is_error, Some(false));
        assert_eq!(answer.structured_content, Some(json!({"hits": 2})));
        assert_eq!(
            answer.meta.unwrap().get("toolmesh/call_id"),
            Some(&json!("c-1"))
        );
    }

    /// A tool error is an isError result with `CODE: message` and the
    /// structured fields; an approval says how to call again from MCP.
    #[test]
    fn tool_errors_are_results() {
        let answer = call_result("t", response(error(ErrorCode::ApprovalRequired, "ask"))).unwrap();
        assert_eq!(answer.is_error, Some(true));
        let text = serde_json::to_string(&answer.content).unwrap();
        assert!(text.contains("APPROVAL_REQUIRED: ask"), "{text}");
        assert!(text.contains(APPROVAL_META), "{text}");
        assert_eq!(answer.structured_content.unwrap()["approval_id"], "a-7");
    }

    /// Unknown and hidden names are invalid params, and a hidden name reads
    /// like an unknown one (nothing about its version or the policy).
    #[test]
    fn unknown_and_hidden_names_are_invalid_params() {
        let unknown = call_result(
            "serch",
            response(error(
                ErrorCode::NotFound,
                "no tool named \"serch\"; did you mean \"search\"?",
            )),
        )
        .unwrap_err();
        assert!(unknown.message.contains("did you mean"));
        let hidden = call_result(
            "secret",
            response(error(
                ErrorCode::PermissionDenied,
                "you may not use secret@1.0.0: role",
            )),
        )
        .unwrap_err();
        assert!(!hidden.message.contains("1.0.0") && !hidden.message.contains("role"));
        assert_eq!(hidden.code, unknown.code);
    }
}
