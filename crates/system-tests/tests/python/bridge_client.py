"""The official Python MCP client against toolmesh's MCP door, calling tools
that `toolmesh bridge mcp` brought in from other MCP servers, and those
`toolmesh bridge grpc` and `toolmesh bridge openapi` made of a gRPC service
and an HTTP API.

Run by tests/bridge.rs, bridge_grpc.rs and bridge_openapi.rs as
`python bridge_client.py SCENARIO` with MCP_URL set (and DIR for
"filesystem", EVERYTHING for "content": the command of the
server-everything the bridge runs, which this client also runs directly). Prints "PASS <check>" per check; any
failure raises, so the exit status is non-zero.
"""

import asyncio
import base64
import os
import re
import sys

import anyio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

URL = os.environ["MCP_URL"]


def passed(check):
    print(f"PASS {check}", flush=True)


def text(result):
    return result.content[0].text


async def names(client):
    tools, cursor = [], None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(t.name for t in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools


async def everything(client):
    listed = await names(client)
    assert {"echo", "get-sum", "trigger-long-running-operation"} <= set(listed), listed
    passed("listed")
    summed = await client.call_tool("get-sum", {"a": 2, "b": 3})
    assert not summed.is_error and "5" in text(summed), summed
    passed("call")
    weather = await client.call_tool("get-structured-content", {"location": "Chicago"})
    assert not weather.is_error and "temperature" in weather.structured_content, weather
    passed("structured content")
    reports = []

    async def on_progress(progress, total, message):
        reports.append((progress, total))

    done = await client.call_tool(
        "trigger-long-running-operation", {"duration": 1, "steps": 3}, progress_callback=on_progress
    )
    assert not done.is_error, done
    assert [p for p, _ in reports] == [1, 2, 3] and all(t == 3 for _, t in reports), reports
    passed("progress")


async def filesystem(client):
    root = os.environ["DIR"]
    listed = await client.call_tool("list_directory", {"path": root})
    assert not listed.is_error and "hello.txt" in text(listed), listed
    passed("call")
    missing = await client.call_tool("read_text_file", {"path": os.path.join(root, "nope.txt")})
    assert missing.is_error and text(missing).startswith("TOOL_ERROR: ") and "ENOENT" in text(missing), missing
    passed("tool error")
    target = os.path.join(root, "from-the-door.txt")
    asked = await client.call_tool("write_file", {"path": target, "content": "x"})
    assert asked.is_error and text(asked).startswith("APPROVAL_REQUIRED: "), asked
    assert not os.path.exists(target)
    passed("approval")


async def python(client):
    listed = await names(client)
    assert "greet" in listed and "secret" not in listed, listed
    try:
        await client.call_tool("secret", {})
        raise AssertionError("a hidden tool must be unknown")
    except MCPError as e:
        assert e.error.code == -32602, e.error
    passed("hidden")
    async with client.listen(tools_list_changed=True) as subscription:
        added = await client.call_tool("add_tool", {"name": "added_by_door"})
        assert not added.is_error, added
        with anyio.fail_after(20):
            async for _event in subscription:
                if "added_by_door" in await names(client):
                    break
    called = await client.call_tool("added_by_door", {"text": "hi"})
    assert not called.is_error and text(called) == "added_by_door: hi", called
    passed("list_changed")


async def grpc(client):
    """The gRPC service's methods, transcoded both ways."""
    listed = await names(client)
    assert {"Library_GetBook", "Library_AddBook", "count_topics"} <= set(listed), listed
    passed("listed")
    got = await client.call_tool("Library_GetBook", {"id": "b1"})
    assert not got.is_error, got
    book = got.structured_content
    assert book["title"] == "Dune" and book["pages"] == "9007199254740993", book
    assert book["genre"] == "GENRE_FICTION" and book["published"] == "1965-08-01T00:00:00Z", book
    passed("call")
    missing = await client.call_tool("Library_GetBook", {"id": "nope"})
    assert missing.is_error and text(missing).startswith("TOOL_ERROR: "), missing
    assert "no book with id 'nope'" in text(missing), missing
    passed("tool error")
    down = await client.call_tool("Library_Unavailable", {})
    assert down.is_error and text(down).startswith("UNAVAILABLE: "), down
    passed("system error")


async def openapi(client):
    """The HTTP API's operations: path, query and body parameters."""
    listed = await names(client)
    assert {"get_book", "list_books", "add_book"} <= set(listed), listed
    passed("listed")
    got = await client.call_tool("get_book", {"book_id": "b1"})
    assert not got.is_error and got.structured_content["title"] == "Dune", got
    by_tag = await client.call_tool("list_books", {"tag": "history", "limit": 5})
    assert not by_tag.is_error and "SPQR" in text(by_tag) and "Dune" not in text(by_tag), by_tag
    added = await client.call_tool("add_book", {"body": {"title": "Persuasion", "pages": 249}})
    assert not added.is_error and added.structured_content["title"] == "Persuasion", added
    passed("call")
    missing = await client.call_tool("get_book", {"book_id": "nope"})
    assert missing.is_error and text(missing).startswith("TOOL_ERROR: "), missing
    assert "no book with id 'nope'" in text(missing), missing
    invalid = await client.call_tool("add_book", {"body": {"title": "emma", "pages": 3}})
    assert invalid.is_error and text(invalid).startswith("TOOL_ERROR: "), invalid
    assert "capital letter" in text(invalid), invalid
    passed("tool error")
    broken = await client.call_tool("broken", {})
    assert broken.is_error and text(broken).startswith("EXECUTOR_FAILED: "), broken
    passed("system error")


# Tools of server-everything that answer with more than text.
CONTENT_CALLS = [
    ("get-tiny-image", {}),
    ("get-resource-links", {"count": 3}),
    ("get-resource-reference", {"resourceType": "Text", "resourceId": 2}),
    ("get-resource-reference", {"resourceType": "Blob", "resourceId": 1}),
    ("get-annotated-message", {"messageType": "success", "includeImage": True}),
]


def blocks(result):
    """The content blocks as JSON, the clock time server-everything writes
    into each embedded resource ("created at 4:05:06 AM") masked: two calls
    a second apart differ there and nowhere else."""
    dumped = [block.model_dump(by_alias=True, exclude_none=True, mode="json") for block in result.content]
    for block in dumped:
        resource = block.get("resource", {}) if block.get("type") == "resource" else {}
        if "text" in resource:
            resource["text"] = mask_clock(resource["text"])
        if "blob" in resource:
            text = base64.b64decode(resource["blob"]).decode()
            resource["blob"] = base64.b64encode(mask_clock(text).encode()).decode()
    return dumped


def mask_clock(text):
    return re.sub(r"created at .*$", "created at (time)", text)


async def content(client):
    """Each call's content through the door is the server's own, block for block."""
    upstream = StdioServerParameters(command=os.environ["EVERYTHING"], args=[])
    async with Client(upstream, cache=None) as direct:
        for name, args in CONTENT_CALLS:
            want = await direct.call_tool(name, args)
            got = await client.call_tool(name, args)
            assert not got.is_error, (name, got)
            assert {b["type"] for b in blocks(want)} - {"text"}, (name, "no block beyond text", blocks(want))
            assert blocks(got) == blocks(want), (name, blocks(got), blocks(want))
            passed(f"content {name}")


async def main():
    scenario = {
        "everything": everything,
        "filesystem": filesystem,
        "python": python,
        "content": content,
        "grpc": grpc,
        "openapi": openapi,
    }[sys.argv[1]]
    async with Client(URL, cache=None) as client:
        await scenario(client)


asyncio.run(main())
