"""The official Python MCP client against toolmesh's MCP door.

Run by tests/mcp.rs (test `official_python_client`), which starts
the mesh and answers on stdin: "APPROVE <id>" (it grants the approval) and
"AWAIT <event>" (it waits for the executor to report the event). Prints
"PASS <check>" per check; any failure raises, so the exit status is non-zero.
"""

import asyncio
import os
import sys

import anyio
import httpx2 as httpx
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

URL = os.environ["MCP_URL"]
AGENT = os.environ["AGENT_TOKEN"]
ADMIN = os.environ["ADMIN_TOKEN"]
BULK = int(os.environ["BULK"])
VISIBLE = int(os.environ["VISIBLE"])


def passed(check):
    print(f"PASS {check}", flush=True)


async def ask(line):
    """Asks the Rust side to act; its one-line answer."""
    print(line, flush=True)
    answer = await anyio.to_thread.run_sync(sys.stdin.readline)
    return answer.strip()


def client(token):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return Client(streamable_http_client(URL, http_client=http), cache=None)


async def list_all(c):
    tools, pages, cursor = [], 0, None
    while True:
        page = await c.list_tools(cursor=cursor)
        pages += 1
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools, pages


def text(result):
    return result.content[0].text


def tool_error(result, code):
    """The text of an isError result, checked to read `CODE: ...` and carry the code."""
    assert result.is_error and text(result).startswith(f"{code}: "), result
    assert result.structured_content["code"] == code, result.structured_content
    return text(result)


async def main():
    # No token: the policy admits no anonymous caller.
    async with httpx.AsyncClient() as raw:
        answer = await raw.post(URL, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                headers={"Accept": "application/json, text/event-stream"})
        assert answer.status_code == 401, answer
        assert "resource_metadata=" in answer.headers["www-authenticate"], answer.headers
        passed("401 without token")

    async with client(AGENT) as agent, client(ADMIN) as admin:
        tools, pages = await list_all(agent)
        names = [t.name for t in tools]
        assert "secret" not in names and "echo" in names, names[:10]
        assert "secret" in [t.name for t in (await list_all(admin))[0]]
        passed("projection")
        assert len(names) == BULK + VISIBLE and pages > 1 and names == sorted(names), (len(names), pages)
        passed("pagination")

        ok = await agent.call_tool("echo", {"text": "hi"})
        assert not ok.is_error and ok.structured_content == {"text": "hi"}, ok
        passed("call success")

        broken = await agent.call_tool("liar", {"text": "x"})
        assert "at /text" in tool_error(broken, "EXECUTOR_FAILED")
        passed("tool error")

        invalid = await agent.call_tool("echo", {"text": 5})
        assert "/text" in tool_error(invalid, "INVALID_ARGUMENTS")
        passed("invalid arguments")

        try:
            await agent.call_tool("ecoh", {})
            raise AssertionError("an unknown name must be a JSON-RPC error")
        except MCPError as e:
            assert e.error.code == -32602 and 'did you mean "echo"' in e.error.message, e.error
        passed("unknown name")
        try:
            await agent.call_tool("secret", {})
            raise AssertionError("a hidden name must be a JSON-RPC error")
        except MCPError as e:
            hidden = e.error
        try:
            await agent.call_tool("zzzzzz", {})
            raise AssertionError("an unknown name must be a JSON-RPC error")
        except MCPError as e:
            absent = e.error
        # Word for word what a name that does not exist gets.
        assert hidden.code == absent.code == -32602, (hidden, absent)
        assert hidden.message.replace("secret", "NAME") == absent.message.replace("zzzzzz", "NAME"), (hidden, absent)
        passed("hidden name")

        asked = await agent.call_tool("wipe", {})
        tool_error(asked, "APPROVAL_REQUIRED")
        approval = asked.structured_content["approval_id"]
        assert await ask(f"APPROVE {approval}") == "ok"
        done = await agent.call_tool("wipe", {}, meta={"toolmesh/approval_id": approval})
        assert not done.is_error and text(done) == "wiped", done
        passed("approval")

        async with anyio.create_task_group() as group:
            group.start_soon(agent.call_tool, "wait", {})
            assert await ask("AWAIT wait_started") == "ok"
            group.cancel_scope.cancel()
        assert await ask("AWAIT wait_cancelled") == "ok"
        passed("cancellation")

        reports = []

        async def on_progress(progress, total, message):
            reports.append((progress, total, message))

        stepped = await agent.call_tool("steps", {"n": 3}, progress_callback=on_progress)
        assert not stepped.is_error and text(stepped) == "3 steps", stepped
        assert reports == [(i, 3, f"step {i} of 3") for i in (1, 2, 3)], reports
        passed("progress")

    async with client(AGENT) as agent:
        async with agent.listen(tools_list_changed=True) as subscription:
            # The admin switches a tool the agent sees off, over gRPC.
            proc = await asyncio.create_subprocess_exec(
                os.environ["TOOLMESH"], "disable", "echo", "--reason", "python test",
                "--server", os.environ["TOOLMESH_GRPC"], "--token", ADMIN)
            assert await proc.wait() == 0
            with anyio.fail_after(10):
                async for _event in subscription:
                    break
        passed("list_changed")

    bridge = StdioServerParameters(
        command=os.environ["TOOLMESH"],
        args=["mcp", "--server", os.environ["TOOLMESH_GRPC"], "--token", AGENT])
    async with Client(bridge, cache=None) as stdio:
        tools, _ = await list_all(stdio)
        assert "liar" in [t.name for t in tools]
        ok = await stdio.call_tool("liar", {"text": "x"})
        assert ok.is_error, ok
        passed("stdio bridge")


asyncio.run(main())
