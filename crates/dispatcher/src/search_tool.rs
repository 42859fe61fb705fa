//! `search_tools`, the dispatcher's own tool: listed first in a deferred
//! listing (`ListToolsRequest.defer_loading`) and answered through Invoke
//! without an executor by running the caller's SearchTools.

use crate::call::stamp_call;
use crate::{Dispatcher, Refusal};
use serde_json::{Map, Value, json};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use toolmesh::pb::{
    ErrorCode, InvokeRequest, InvokeResponse, RiskLevel, SearchToolsRequest, ToolError, ToolFormat,
    ToolResult, ToolSpec,
};
use toolmesh::spec::SEARCH_TOOL;
use toolmesh::{Snapshot, ToolDef, ToolEntry, ToolErrorExt};
use toolmesh_audit::{AuditKind, AuditRecord};

/// The version the dispatcher's `search_tools` answers as.
const VERSION: &str = "1.0.0";

/// What `search_tools` does, as every listing describes it.
pub const SEARCH_TOOL_DESCRIPTION: &str = "Finds the tools you may call that best match what you \
     want done, best first, each with its description and input schema. Describe the task in \
     plain words.";

/// The input schema of `search_tools`: `query`, and optionally `limit` and
/// `tags`.
pub fn search_tool_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "What you want done, in plain words (1 to 1024 bytes)."
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "description": "Matches wanted (default 10, at most 50)."
            },
            "tags": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only tools carrying every one of these tags."
            }
        },
        "required": ["query"]
    })
}

/// The definition of `search_tools` as every listing shows it.
fn spec() -> ToolSpec {
    ToolSpec {
        name: SEARCH_TOOL.into(),
        version: VERSION.into(),
        description: SEARCH_TOOL_DESCRIPTION.into(),
        input_schema: search_tool_schema().to_string(),
        risk: RiskLevel::Low as i32,
        read_only: true,
        idempotent: true,
        owner: "toolmesh".into(),
        ..ToolSpec::default()
    }
}

/// `search_tools` as a listing entry (no instances: no executor runs it).
pub(crate) fn entry() -> Arc<ToolEntry> {
    static ENTRY: OnceLock<Arc<ToolEntry>> = OnceLock::new();
    ENTRY
        .get_or_init(|| {
            Arc::new(ToolEntry {
                def: Arc::new(ToolDef::new(spec()).expect("search_tools is a valid spec")),
                instances: Arc::from(Vec::new()),
                disabled: None,
            })
        })
        .clone()
}

/// Whether an Invoke names `search_tools` (bare, or at its version).
pub(crate) fn is_named(tool: &str) -> bool {
    match tool.split_once('@') {
        None => tool == SEARCH_TOOL,
        Some((name, version)) => name == SEARCH_TOOL && version == VERSION,
    }
}

/// The SearchTools that `search_tools` called with `arguments` asks for,
/// its matches in `format`, or what is wrong with the arguments.
pub fn search_tool_request(
    arguments: &Map<String, Value>,
    format: ToolFormat,
) -> Result<SearchToolsRequest, String> {
    let query = match arguments.get("query") {
        Some(Value::String(query)) => query.clone(),
        _ => return Err("\"query\" is required: what you want done, in plain words".into()),
    };
    let limit = match arguments.get("limit") {
        None | Some(Value::Null) => 0,
        Some(limit) => limit
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or("\"limit\" must be a whole number from 1 to 50")?,
    };
    let tags = match arguments.get("tags") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(tags)) => tags
            .iter()
            .map(|tag| tag.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or("\"tags\" must be an array of strings")?,
        Some(_) => return Err("\"tags\" must be an array of strings".into()),
    };
    Ok(SearchToolsRequest {
        query,
        limit,
        tags,
        format: format as i32,
        ..SearchToolsRequest::default()
    })
}

/// The SearchTools an Invoke of `search_tools` asks for, in the Anthropic
/// shape, or what is wrong with its arguments.
fn request_of(invoke: &InvokeRequest) -> Result<SearchToolsRequest, String> {
    let arguments = if invoke.arguments.trim().is_empty() {
        Map::new()
    } else {
        match serde_json::from_str::<Value>(&invoke.arguments) {
            Ok(Value::Object(arguments)) => arguments,
            _ => {
                return Err(
                    "arguments must be a JSON object such as {\"query\": \"refund an order\"}"
                        .into(),
                );
            }
        }
    };
    Ok(SearchToolsRequest {
        context: invoke.context.clone(),
        ..search_tool_request(&arguments, ToolFormat::Anthropic)?
    })
}

/// The result of a search: data `{"tools": [...]}` (each match in the
/// Anthropic shape, best first) and, as text, the matches as Anthropic
/// `tool_reference` blocks, which an agent on Anthropic's API passes back
/// as the `tool_result` content so the deferred tools they name load.
fn found(formatted: &str) -> ToolResult {
    let tools: Vec<Value> = serde_json::from_str(formatted).unwrap_or_default();
    let references: Vec<Value> = tools
        .iter()
        .filter_map(|tool| tool.get("name"))
        .map(|name| json!({"type": "tool_reference", "tool_name": name}))
        .collect();
    ToolResult {
        output: Value::Array(references).to_string(),
        data: json!({ "tools": tools }).to_string(),
        ..ToolResult::default()
    }
}

impl Dispatcher {
    /// Answers an Invoke of `search_tools` for `who`: their SearchTools
    /// in the snapshot the call pins (`pinned`; None: the newest), within
    /// the call's `deadline`, as a tool result (a bad query is
    /// INVALID_ARGUMENTS, a listing `who` may not make PERMISSION_DENIED),
    /// audited as any call is, under the name `search_tools`.
    pub(crate) async fn invoke_search_tool(
        &self,
        who: &toolmesh::Principal,
        request: &InvokeRequest,
        pinned: Option<Arc<Snapshot>>,
        deadline: Option<Duration>,
    ) -> InvokeResponse {
        let started = Instant::now();
        let call_id = crate::call::call_id(request);
        let session = crate::call::session(&request.context);
        let searched = match request_of(request) {
            Err(why) => Err(ToolError::new(ErrorCode::InvalidArguments, why)),
            Ok(search) => self
                .search_tools_at(who, session, &search, deadline, pinned)
                .await
                .map_err(refused),
        };
        let (result, snapshot_version) = match searched {
            Ok(response) => (found(&response.formatted), response.snapshot_version),
            Err(error) => (error.into_result(), 0),
        };
        self.governance().audit(|| {
            let def = &entry().def;
            let mut record =
                AuditRecord::for_def(AuditKind::Invoke, who, def, &request.arguments, None);
            let took = started.elapsed();
            stamp_call(
                &mut record,
                request,
                &call_id,
                snapshot_version,
                &result,
                took,
            );
            record
        });
        InvokeResponse {
            result: Some(result),
            call_id,
            snapshot_version,
            tool_version: VERSION.into(),
            ..InvokeResponse::default()
        }
    }
}

/// A search refused, as the tool error an agent reads.
fn refused(refusal: Refusal) -> ToolError {
    let status = tonic::Status::from(refusal);
    let code = match status.code() {
        tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => ErrorCode::PermissionDenied,
        tonic::Code::InvalidArgument => ErrorCode::InvalidArguments,
        _ => ErrorCode::Unavailable,
    };
    ToolError::new(code, status.message())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arguments read as SearchTools asks them; anything else says what to
    /// give.
    #[test]
    fn arguments_become_a_search() {
        let invoke = |arguments: &str| InvokeRequest {
            tool: SEARCH_TOOL.into(),
            arguments: arguments.into(),
            ..InvokeRequest::default()
        };
        let asked = request_of(&invoke(
            r#"{"query":"refund","limit":3,"tags":["billing"]}"#,
        ))
        .unwrap();
        assert_eq!((asked.query.as_str(), asked.limit), ("refund", 3));
        assert_eq!(asked.tags, ["billing"]);
        assert_eq!(asked.format, ToolFormat::Anthropic as i32);
        for (bad, says) in [
            ("", "\"query\" is required"),
            ("[1]", "JSON object"),
            (r#"{"query":"x","limit":-2}"#, "\"limit\""),
            (r#"{"query":"x","tags":[1]}"#, "\"tags\""),
        ] {
            let refused = request_of(&invoke(bad)).unwrap_err();
            assert!(refused.contains(says), "{bad}: {refused}");
        }
        assert!(is_named("search_tools") && is_named("search_tools@1.0.0"));
        assert!(!is_named("search_tools@2.0.0") && !is_named("search_kb"));
    }

    /// The matches come back as data and, as text, as Anthropic
    /// `tool_reference` blocks in the same order.
    #[test]
    fn matches_are_tool_references() {
        let result = found(
            r#"[{"name":"b","description":"","input_schema":{}},{"name":"a","description":"","input_schema":{}}]"#,
        );
        let references: Value = serde_json::from_str(&result.output).unwrap();
        assert_eq!(
            references,
            json!([
                {"type": "tool_reference", "tool_name": "b"},
                {"type": "tool_reference", "tool_name": "a"}
            ])
        );
        let data: Value = serde_json::from_str(&result.data).unwrap();
        assert_eq!(data["tools"][1]["name"], "a");
    }
}
