//! Tools described at runtime: a spec given as data and a handler that takes the arguments as JSON, for executors that front another system (an MCP server, a plugin host) whose tools are only known once it answers.

use crate::erased::{Arguments, CallFuture, ErasedTool, Outcome};
use crate::{CallCx, ToolFailure, ToolOutput};
use serde_json::Value;
use std::{future::Future, sync::Arc};
use toolmesh::pb::ToolSpec;

/// The handler of [`DynamicTool`]s: runs one call with its arguments as
/// JSON, already checked against the tool's `input_schema`.
///
/// One handler may serve many tools: [`CallCx::tool`] names the one called.
pub trait JsonTool: Send + Sync + 'static {
    /// Runs one call. Business errors are a [`ToolFailure`]; long-running
    /// work should watch [`CallCx::cancelled`].
    fn call(
        &self,
        arguments: Value,
        cx: CallCx,
    ) -> impl Future<Output = Result<ToolOutput, ToolFailure>> + Send;
}

/// A tool whose spec is data rather than a Rust type: add it with
/// [`Executor::dynamic_tool`](crate::Executor::dynamic_tool), or swap a
/// running executor's whole set with
/// [`ExecutorControl::replace_tools`](crate::ExecutorControl::replace_tools).
///
/// The spec is validated like a typed tool's (name, semver version,
/// description, schemas that compile); the SDK checks each call's
/// arguments against `input_schema` before the handler runs.
#[derive(Clone)]
pub struct DynamicTool {
    pub(crate) spec: ToolSpec,
    pub(crate) tool: Arc<dyn ErasedTool>,
}

impl std::fmt::Debug for DynamicTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicTool")
            .field("name", &self.spec.name)
            .field("version", &self.spec.version)
            .finish_non_exhaustive()
    }
}

impl DynamicTool {
    /// The tool `spec` describes, run by `handler`.
    pub fn new<H: JsonTool>(spec: ToolSpec, handler: Arc<H>) -> Self {
        DynamicTool {
            spec,
            tool: Arc::new(Json(handler)),
        }
    }

    /// The spec as given.
    pub fn spec(&self) -> &ToolSpec {
        &self.spec
    }
}

/// A [`JsonTool`] as the server holds it.
struct Json<H>(Arc<H>);

impl<H: JsonTool> ErasedTool for Json<H> {
    fn start(&self, args: Arguments, cx: CallCx) -> CallFuture {
        let handler = Arc::clone(&self.0);
        Box::pin(async move {
            let arguments = match args {
                Arguments::Text(text) => serde_json::from_str::<Value>(&text),
                Arguments::Tree(tree) => Ok(tree),
            };
            match arguments {
                Ok(arguments) => Outcome::Ran(handler.call(arguments, cx).await),
                Err(e) => Outcome::BadArguments(e.to_string()),
            }
        })
    }
}
