"""The official Python MCP client against the MCP door in search mode.

Run by tests/mcp_search.rs, which starts the mesh with `/mcp` in search
mode `on` and answers "APPROVE <id>" on stdin (it grants the approval).
Prints "PASS <check>" per check; any failure raises, so the exit status is
non-zero.
"""

import asyncio
import json
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
DOOR_TOOLS = ["search_tools", "call_tool"]


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


def text(result):
    return result.content[0].text


def tool_error(result, code):
    """The text of an isError result, checked to read `CODE: ...` and carry the code."""
    assert result.is_error and text(result).startswith(f"{code}: "), result
    assert result.structured_content["code"] == code, result.structured_content
    return text(result)


async def refusal(c, name, arguments):
    """The JSON-RPC error a call must be answered with."""
    try:
        await c.call_tool(name, arguments)
    except MCPError as e:
        return e.error
    raise AssertionError(f"{name} {arguments} must be a JSON-RPC error")


async def search(c, query, **more):
    """The names search_tools finds, best first, checked to come as tools/list shows them."""
    found = await c.call_tool("search_tools", {"query": query, **more})
    assert not found.is_error, found
    assert json.loads(text(found)) == found.structured_content, "the same JSON as text"
    tools = found.structured_content["tools"]
    for tool in tools:
        assert {"name", "description", "inputSchema", "annotations"} <= tool.keys(), tool
    return [t["name"] for t in tools], tools


async def main():
    async with client(AGENT) as agent:
        listed = await agent.list_tools()
        assert [t.name for t in listed.tools] == DOOR_TOOLS and listed.next_cursor is None, listed
        passed("two tools")

        names, tools = await search(agent, "answer the text I am given", limit=5)
        assert names[0] == "echo" and len(names) <= 5, names
        assert tools[0]["inputSchema"]["required"] == ["text"], tools[0]
        assert tools[0]["annotations"]["readOnlyHint"] is True, tools[0]
        passed("search by plain words")

        ok = await agent.call_tool("call_tool", {"name": "echo", "arguments": {"text": "hi"}})
        assert not ok.is_error and ok.structured_content == {"text": "hi"}, ok
        passed("call_tool runs it")

        direct = await agent.call_tool("echo", {"text": "direct"})
        assert not direct.is_error and direct.structured_content == {"text": "direct"}, direct
        passed("real tools callable by name")

        invalid = await agent.call_tool("call_tool", {"name": "echo", "arguments": {"text": 5}})
        assert "/text" in tool_error(invalid, "INVALID_ARGUMENTS")
        passed("the real tool's schema")

        names, _ = await search(agent, "wipe everything irreversibly")
        assert names[0] == "wipe", names
        asked = await agent.call_tool("call_tool", {"name": "wipe"})
        tool_error(asked, "APPROVAL_REQUIRED")
        approval = asked.structured_content["approval_id"]
        assert await ask(f"APPROVE {approval}") == "ok"
        done = await agent.call_tool("call_tool", {"name": "wipe"}, meta={"toolmesh/approval_id": approval})
        assert not done.is_error and text(done) == "wiped", done
        passed("approval through call_tool")

        reports = []

        async def on_progress(progress, total, message):
            reports.append((progress, total, message))

        stepped = await agent.call_tool(
            "call_tool", {"name": "steps", "arguments": {"n": 3}}, progress_callback=on_progress)
        assert not stepped.is_error and text(stepped) == "3 steps", stepped
        assert reports == [(i, 3, f"step {i} of 3") for i in (1, 2, 3)], reports
        passed("progress through call_tool")

        names, _ = await search(agent, "only admins see this")
        assert "secret" not in names, names
        hidden = await refusal(agent, "call_tool", {"name": "secret"})
        absent = await refusal(agent, "call_tool", {"name": "zzzzzz"})
        direct_hidden = await refusal(agent, "secret", {})
        assert hidden.code == absent.code == -32602, (hidden, absent)
        assert hidden.message.replace("secret", "NAME") == absent.message.replace("zzzzzz", "NAME"), (hidden, absent)
        assert hidden.message == direct_hidden.message, (hidden, direct_hidden)
        passed("hidden tools cannot be probed")

        no_name = await refusal(agent, "call_tool", {"arguments": {"text": "hi"}})
        assert no_name.code == -32602 and '"name" is required' in no_name.message, no_name
        not_object = await refusal(agent, "call_tool", {"name": "echo", "arguments": "text=hi"})
        assert not_object.code == -32602 and "must be a JSON object" in not_object.message, not_object
        no_query = await refusal(agent, "search_tools", {"limit": 3})
        assert no_query.code == -32602 and '"query" is required' in no_query.message, no_query
        passed("clear errors")

    async with client(ADMIN) as admin:
        names, _ = await search(admin, "only admins see this")
        assert names[0] == "secret", names
        passed("each caller's own view")

    # The stdio bridge in `auto`: the agent may use BULK + VISIBLE tools.
    visible = BULK + VISIBLE
    for threshold, search_mode in [(visible, False), (visible - 1, True)]:
        bridge = StdioServerParameters(
            command=os.environ["TOOLMESH"],
            args=["mcp", "--server", os.environ["TOOLMESH_GRPC"], "--token", AGENT,
                  "--mcp-tool-search", "auto", "--mcp-tool-search-threshold", str(threshold)])
        async with Client(bridge, cache=None) as stdio:
            page = await stdio.list_tools()
            names = [t.name for t in page.tools]
            if search_mode:
                assert names == DOOR_TOOLS and page.next_cursor is None, names
                found, _ = await search(stdio, "answer the text I am given")
                assert found[0] == "echo", found
                ok = await stdio.call_tool("call_tool", {"name": "echo", "arguments": {"text": "bridged"}})
                assert not ok.is_error and ok.structured_content == {"text": "bridged"}, ok
            else:
                tools = page.tools
                cursor = page.next_cursor
                while cursor is not None:
                    page = await stdio.list_tools(cursor=cursor)
                    tools, cursor = tools + page.tools, page.next_cursor
                names = [t.name for t in tools]
                assert len(names) == visible and "echo" in names and "search_tools" not in names, len(names)
    passed("auto by threshold")


asyncio.run(main())
