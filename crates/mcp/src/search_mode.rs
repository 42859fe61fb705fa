//! The door's search mode: `tools/list` answers two tools, `search_tools`
//! (the caller's SearchTools, each match as `tools/list` shows it) and
//! `call_tool` (any tool by name, through the same path as a direct call),
//! so a client with thousands of tools loads two definitions.

use rmcp::ErrorData;
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use serde_json::{Map, Value, json};
use std::str::FromStr;
use std::sync::{Arc, OnceLock};
use toolmesh::pb::{SearchToolsRequest, SearchToolsResponse, ToolFormat};
use toolmesh::spec::{CALL_TOOL, SEARCH_TOOL};

/// Visible tools past which `auto` answers in search mode, unless the
/// operator sets `--mcp-tool-search-threshold`: model vendors report tool
/// choice degrading past 30 to 50 tools.
pub const DEFAULT_SEARCH_THRESHOLD: usize = 40;

/// When the door answers `tools/list` in search mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolSearchMode {
    /// Never: `tools/list` lists every tool the caller may use.
    #[default]
    Off,
    /// Always.
    On,
    /// When the caller may use more tools than the threshold.
    Auto,
}

/// `ToolSearchMode` from `auto`, `on` or `off`.
impl FromStr for ToolSearchMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "off" => Ok(ToolSearchMode::Off),
            "on" => Ok(ToolSearchMode::On),
            "auto" => Ok(ToolSearchMode::Auto),
            other => Err(format!("{other:?}: give auto, on or off")),
        }
    }
}

/// The door's tool search setting: the mode, and for `auto` the number of
/// visible tools past which it answers in search mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolSearch {
    /// Off, on, or by the caller's count of visible tools.
    pub mode: ToolSearchMode,
    /// For `auto`: search mode when the caller may use more tools than this.
    pub threshold: usize,
}

impl Default for ToolSearch {
    fn default() -> Self {
        ToolSearch {
            mode: ToolSearchMode::Off,
            threshold: DEFAULT_SEARCH_THRESHOLD,
        }
    }
}

/// One of the door's own tools a `tools/call` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DoorTool {
    Search,
    Call,
}

impl ToolSearch {
    /// The door tool `name` is, when search mode may be on (not `off`).
    pub(crate) fn door_tool(&self, name: &str) -> Option<DoorTool> {
        if self.mode == ToolSearchMode::Off {
            return None;
        }
        match name {
            SEARCH_TOOL => Some(DoorTool::Search),
            CALL_TOOL => Some(DoorTool::Call),
            _ => None,
        }
    }
}

/// `search_tools` and `call_tool`, as `tools/list` shows them.
pub(crate) fn door_tools() -> Arc<[Tool]> {
    static TOOLS: OnceLock<Arc<[Tool]>> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            let tools = json!([
                {
                    "name": SEARCH_TOOL,
                    "title": "Search tools",
                    "description": format!(
                        "{} Then run a tool it names with {CALL_TOOL}.",
                        toolmesh_dispatcher::SEARCH_TOOL_DESCRIPTION
                    ),
                    "inputSchema": toolmesh_dispatcher::search_tool_schema(),
                    "annotations": {"title": "Search tools", "readOnlyHint": true, "destructiveHint": false, "idempotentHint": true}
                },
                {
                    "name": CALL_TOOL,
                    "title": "Call tool",
                    "description": "Runs a tool search_tools found, by its name, with arguments that satisfy its input schema.",
                    "inputSchema": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string", "description": "The tool's name, as search_tools gave it."},
                            "arguments": {"type": "object", "description": "The tool's arguments (its input schema)."}
                        },
                        "required": ["name"]
                    },
                    "annotations": {"title": "Call tool", "readOnlyHint": false, "destructiveHint": true, "idempotentHint": false}
                }
            ]);
            serde_json::from_value::<Vec<Tool>>(tools)
                .expect("the door's tools are MCP tools")
                .into()
        })
        .clone()
}

/// The SearchTools a `search_tools` call asks for (matches in the MCP
/// shape), or invalid params saying what is wrong.
pub(crate) fn search_request(
    params: &CallToolRequestParams,
    context: Option<toolmesh::pb::CallContext>,
) -> Result<SearchToolsRequest, ErrorData> {
    let arguments = params.arguments.clone().unwrap_or_default();
    let request = toolmesh_dispatcher::search_tool_request(&arguments, ToolFormat::Mcp)
        .map_err(|why| ErrorData::invalid_params(format!("{SEARCH_TOOL}: {why}"), None))?;
    Ok(SearchToolsRequest { context, ..request })
}

/// The answer to `search_tools`: `{"tools": [...]}` as structured content
/// and as text, each tool as `tools/list` shows it.
pub(crate) fn search_result(found: &SearchToolsResponse) -> Result<CallToolResult, ErrorData> {
    let tools: Vec<Value> = serde_json::from_str(&found.formatted).map_err(|e| {
        ErrorData::internal_error(
            format!("the dispatcher's matches are not an array of MCP tools: {e}"),
            None,
        )
    })?;
    Ok(CallToolResult::structured(json!({ "tools": tools })))
}

/// The direct call a `call_tool` call stands for: the tool it names with
/// its arguments, and the same `_meta` (progress token, approval id,
/// session, deadline, trace).
pub(crate) fn unwrapped(
    params: &CallToolRequestParams,
) -> Result<CallToolRequestParams, ErrorData> {
    let invalid = |why: String| ErrorData::invalid_params(format!("{CALL_TOOL}: {why}"), None);
    let arguments = params.arguments.clone().unwrap_or_default();
    let name = match arguments.get("name") {
        Some(Value::String(name)) if !name.is_empty() => name.clone(),
        _ => {
            return Err(invalid(format!(
                "\"name\" is required: the name of a tool {SEARCH_TOOL} found"
            )));
        }
    };
    if name == CALL_TOOL {
        return Err(invalid(format!(
            "name the tool to run, not {CALL_TOOL} itself"
        )));
    }
    let tool_arguments = match arguments.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(tool_arguments)) => tool_arguments.clone(),
        Some(other) => {
            return Err(invalid(format!(
                "\"arguments\" must be a JSON object of {name:?}'s arguments, not {other}"
            )));
        }
    };
    let mut direct = params.clone();
    direct.name = name.into();
    direct.arguments = Some(tool_arguments);
    Ok(direct)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(arguments: Value) -> CallToolRequestParams {
        serde_json::from_value(json!({
            "name": CALL_TOOL,
            "arguments": arguments,
            "_meta": {"toolmesh/approval_id": "a-1", "progressToken": 7},
        }))
        .unwrap()
    }

    /// `call_tool` becomes the direct call of the tool it names, `_meta`
    /// kept; without a name, with arguments that are not an object, or
    /// naming itself, it says what to give.
    #[test]
    fn call_tool_unwraps_to_the_named_tool() {
        let direct = unwrapped(&params(
            json!({"name": "refund", "arguments": {"order": 7}}),
        ))
        .unwrap();
        assert_eq!(direct.name, "refund");
        assert_eq!(direct.arguments.unwrap()["order"], 7);
        let meta = direct.meta.unwrap();
        assert_eq!(meta.get("toolmesh/approval_id"), Some(&json!("a-1")));
        assert!(meta.get_progress_token().is_some());
        let bare = unwrapped(&params(json!({"name": "refund"}))).unwrap();
        assert_eq!(bare.arguments, Some(Map::new()));
        for (bad, says) in [
            (json!({}), "\"name\" is required"),
            (json!({"name": ""}), "\"name\" is required"),
            (
                json!({"name": "refund", "arguments": [1]}),
                "must be a JSON object",
            ),
            (
                json!({"name": "refund", "arguments": "{}"}),
                "must be a JSON object",
            ),
            (json!({"name": CALL_TOOL}), "not call_tool itself"),
        ] {
            let refused = unwrapped(&params(bad.clone())).unwrap_err();
            assert!(refused.message.contains(says), "{bad}: {}", refused.message);
        }
    }

    /// `search_tools` asks for MCP-shaped matches; a missing query, a bad
    /// limit or bad tags say what to give.
    #[test]
    fn search_tools_arguments() {
        let asked = |arguments: Value| {
            search_request(
                &serde_json::from_value(json!({"name": SEARCH_TOOL, "arguments": arguments}))
                    .unwrap(),
                None,
            )
        };
        let request =
            asked(json!({"query": "refund an order", "limit": 3, "tags": ["billing"]})).unwrap();
        assert_eq!(request.query, "refund an order");
        assert_eq!(request.limit, 3);
        assert_eq!(request.tags, ["billing"]);
        assert_eq!(request.format, ToolFormat::Mcp as i32);
        for bad in [
            json!({}),
            json!({"query": 1}),
            json!({"query": "x", "limit": -1}),
            json!({"query": "x", "tags": "a"}),
        ] {
            assert!(asked(bad.clone()).is_err(), "{bad}");
        }
    }

    /// The door tools answer only when search mode may be on.
    #[test]
    fn door_tools_only_in_search_mode() {
        let off = ToolSearch::default();
        assert_eq!(off.door_tool(SEARCH_TOOL), None);
        for mode in [ToolSearchMode::On, ToolSearchMode::Auto] {
            let search = ToolSearch { mode, ..off };
            assert_eq!(search.door_tool(SEARCH_TOOL), Some(DoorTool::Search));
            assert_eq!(search.door_tool(CALL_TOOL), Some(DoorTool::Call));
            assert_eq!(search.door_tool("refund"), None);
        }
        let names: Vec<String> = door_tools().iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, [SEARCH_TOOL, CALL_TOOL]);
    }
}
