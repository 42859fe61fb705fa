"""An MCP server written with the official Python SDK (MCPServer), bridged by tests/bridge.rs.

    python mcp_server.py stdio
    python mcp_server.py http PORT    (0 picks a free port)
    python mcp_server.py https PORT   (TLS_CERT, TLS_KEY; TLS_CLIENT_CA to require a client certificate)

Over HTTP, $MODERN_ONLY makes it a server of MCP 2026-07-28 alone: it
refuses `initialize` ("refused initialize" in $EVENTS).

Over HTTP it prints "listening on 127.0.0.1:PORT" once it accepts
connections. Every event a test waits for is appended, one per line, to the
file named by $EVENTS (when set): "started PID", "slow started",
"slow cancelled", "added NAME". $EXTRA_TOOL names one more tool (say, a
name the mesh cannot carry); $PAGE_SIZE makes tools/list answer in pages
of that many.
"""

import json
import os
import socket
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import ListToolsResult, PaginatedRequestParams, ToolAnnotations

server = MCPServer(name="py-tools", version="3.1.0")


def event(line):
    path = os.environ.get("EVENTS")
    if path:
        with open(path, "a") as events:
            events.write(line + "\n")


@server.tool()
def greet(name: str) -> str:
    """Greet someone by name."""
    return f"hello, {name}"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def wipe(target: str) -> str:
    """Erase a target for good."""
    return f"wiped {target}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def secret() -> str:
    """Never to be exposed through the bridge."""
    return "the secret"


@server.tool()
def fail(why: str) -> str:
    """Fails with the reason given."""
    raise ToolError(f"failed on purpose: {why}")


@server.tool()
def broken() -> str:
    """Answers with a JSON-RPC error rather than a result."""
    raise MCPError(code=-32603, message="internal trouble")


@server.tool()
def whoami(ctx: Context) -> str:
    """What the server sees of its caller: request headers, and TOOLMESH_* variables in its environment."""
    headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
    env = {k: v for k, v in os.environ.items() if k.startswith("TOOLMESH")}
    return json.dumps({"headers": headers, "env": env, "pid": os.getpid()})


@server.tool()
async def slow(seconds: float, ctx: Context) -> str:
    """Reports progress every 0.1 s for `seconds`; records its cancellation."""
    event("slow started")
    steps = max(1, int(seconds * 10))
    try:
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step} of {steps}")
            await anyio.sleep(0.1)
    except anyio.get_cancelled_exc_class():
        event("slow cancelled")
        raise
    return f"slept {seconds}"


@server.tool()
async def die(ctx: Context) -> str:
    """Exits the whole server in the middle of the call."""
    await ctx.report_progress(1, 2, "about to die")
    os._exit(3)


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Adds a tool `name` at runtime and announces tools/list_changed."""

    def added(text: str) -> str:
        return f"{name}: {text}"

    server.add_tool(added, name=name, description=f"A tool added at runtime: {name}.")
    # 2026-07-28 clients hear of it on their subscriptions/listen streams;
    # earlier ones from the free-standing notification.
    await ctx.notify_tools_changed()
    try:
        await ctx.session.send_tool_list_changed()
    except Exception as error:  # a 2026-07-28 request has no session channel
        event(f"no list_changed channel: {error!r}")
    event(f"added {name}")
    return f"added {name}"


async def list_in_pages(ctx, params):
    """tools/list a few tools at a time ($PAGE_SIZE), the cursor an offset."""
    size = int(os.environ["PAGE_SIZE"])
    tools = await server.list_tools()
    start = int(params.cursor or 0)
    after = start + size
    return ListToolsResult(tools=tools[start:after], next_cursor=str(after) if after < len(tools) else None)


def refuse_initialize(app):
    """The app as a server that speaks only MCP 2026-07-28: `initialize`
    (the handshake of earlier revisions) is refused, naming the revision."""

    async def guarded(scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if isinstance(request, dict) and request.get("method") == "initialize":
            event("refused initialize")
            error = {
                "jsonrpc": "2.0",
                "id": request.get("id"),
                "error": {
                    "code": -32022,
                    "message": "this server speaks only MCP 2026-07-28: use server/discover",
                    "data": {"supported": ["2026-07-28"]},
                },
            }
            payload = json.dumps(error).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": payload})
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return guarded


def main():
    if os.environ.get("PAGE_SIZE"):
        server._lowlevel_server.add_request_handler("tools/list", PaginatedRequestParams, list_in_pages)
    extra = os.environ.get("EXTRA_TOOL")
    if extra:
        server.add_tool(lambda: "extra", name=extra, description=f"A tool named {extra}.")
    event(f"started {os.getpid()}")
    if sys.argv[1] == "stdio":
        server.run("stdio")
        return
    import uvicorn

    port = int(sys.argv[2])
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    app = server.streamable_http_app(host="127.0.0.1")
    if os.environ.get("MODERN_ONLY"):
        app = refuse_initialize(app)
    # `https PORT`: TLS with the certificate and key TLS_CERT and TLS_KEY name;
    # with TLS_CLIENT_CA, a client certificate that CA issued is required.
    tls = {}
    if sys.argv[1] == "https":
        tls = {"ssl_certfile": os.environ["TLS_CERT"], "ssl_keyfile": os.environ["TLS_KEY"]}
        if os.environ.get("TLS_CLIENT_CA"):
            import ssl

            tls |= {"ssl_ca_certs": os.environ["TLS_CLIENT_CA"], "ssl_cert_reqs": ssl.CERT_REQUIRED}
    config = uvicorn.Config(app, log_level="warning", **tls)
    uv = uvicorn.Server(config)

    async def serve():
        listener.listen(128)
        print(f"listening on 127.0.0.1:{listener.getsockname()[1]}", flush=True)
        await uv.serve(sockets=[listener])

    anyio.run(serve)


main()
