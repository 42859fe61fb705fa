//! The MCP door's search mode with the official Python `mcp` client:
//! `tools/list` answers `search_tools` and `call_tool`, a search finds a
//! tool by plain words within the caller's view, `call_tool` runs it
//! through the same path as a direct call (approvals, progress, schema
//! checks, the same answer for hidden and absent names), and the stdio
//! bridge in `auto` switches by the threshold.

use std::time::Duration;
use toolmesh_mcp::{ToolSearch, ToolSearchMode};
use toolmesh_system_tests::mcp_mesh::Mesh;

/// tests/python/mcp_search_client.py against `/mcp` in search mode `on`
/// and the stdio bridge in `auto`; calls made through `call_tool` are
/// counted under the tool they ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_mode_with_the_official_python_client() {
    let mesh = Mesh::start_with(ToolSearch {
        mode: ToolSearchMode::On,
        ..ToolSearch::default()
    })
    .await;
    let passed = mesh.run_python("mcp_search_client.py").await;
    for check in [
        "two tools",
        "search by plain words",
        "call_tool runs it",
        "real tools callable by name",
        "the real tool's schema",
        "approval through call_tool",
        "progress through call_tool",
        "hidden tools cannot be probed",
        "clear errors",
        "each caller's own view",
        "auto by threshold",
    ] {
        assert!(
            passed.iter().any(|p| p == check),
            "{check} not passed: {passed:?}"
        );
    }
    let dispatcher = mesh.node.dispatcher.clone().expect("a dispatcher");
    let echo = dispatcher.recent_calls("echo", "1.0.0");
    assert!(echo.calls >= 3, "echo's calls: {}", echo.calls);
    mesh.node.stop(Duration::from_secs(1)).await.unwrap();
}
