"""toolmesh executors in Python: decorate typed functions with `@tool`, hand them to `serve`.

    import toolmesh

    @toolmesh.tool(risk="low", idempotent=True)
    def get_order(order_id: str) -> dict:
        \"\"\"Look up one order by id.\"\"\"
        ...

    toolmesh.serve(get_order, service="orders", registry="127.0.0.1:7070")

`serve` registers the tools with the registry (token from `TOOLMESH_TOKEN`),
heartbeats, registers again after a lost lease, serves grpc.health.v1,
accepts Execute calls from dispatchers only, and drains on SIGTERM.
"""

from toolmesh._context import Context
from toolmesh._serve import ServeError, serve, serve_async
from toolmesh._tls import TLS
from toolmesh._tools import Output, Risk, Tool, ToolDefinitionError, ToolError, tool

__version__ = "0.1.0"

__all__ = [
    "Context",
    "Output",
    "Risk",
    "ServeError",
    "TLS",
    "Tool",
    "ToolDefinitionError",
    "ToolError",
    "serve",
    "serve_async",
    "tool",
]
