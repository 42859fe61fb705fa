//! The MCP front door: every tool a caller may use, to any MCP client, over
//! Streamable HTTP (`/mcp`, stateless) or stdio, through the dispatcher's
//! one call pipeline.
//!
//! One handler ([`McpHandler`]) does the MCP mapping; it is generic over a
//! [`Backend`]: the in-process [`Dispatcher`](toolmesh_dispatcher::Dispatcher)
//! behind `--mcp-listen`, or a dispatcher reached over gRPC ([`GrpcBackend`])
//! behind the stdio bridge `toolmesh mcp`. Neither runs any stage of a call
//! itself: listing is `ListTools` in the `MCP` format, calling is `Invoke`.
#![forbid(unsafe_code)]

mod backend;
mod drain;
mod error;
mod grpc;
mod handler;
mod http;
mod http_wire;
mod repeated_keys;
mod result;
mod rmcp_noise;
mod search_mode;
mod stdio_gate;

pub use backend::{Backend, ViewChanges};
pub use drain::Drain;
pub use error::BackendError;
pub use grpc::GrpcBackend;
pub use handler::{McpHandler, PAGE_SIZE, SESSION_META, TIMEOUT_META};
pub use http::{McpHttpConfig, router};
pub use result::APPROVAL_META;
pub use rmcp_noise::QuietRmcp;
pub use search_mode::{DEFAULT_SEARCH_THRESHOLD, ToolSearch, ToolSearchMode};

/// Serves `handler` on stdin/stdout until the client closes them.
pub async fn serve_stdio<B: Backend>(handler: McpHandler<B>) -> Result<(), BackendError> {
    use rmcp::ServiceExt;
    let running = handler
        .serve(stdio_gate::gated(tokio::io::stdin(), tokio::io::stdout()))
        .await
        .map_err(|e| match e {
            rmcp::service::ServerInitializeError::ConnectionClosed(_) => BackendError::StdinClosed,
            e => BackendError::Transport(e.to_string()),
        })?;
    running
        .waiting()
        .await
        .map_err(|e| BackendError::Transport(e.to_string()))?;
    Ok(())
}
