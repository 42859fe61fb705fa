"""The official Python MCP client at toolmesh's MCP door as an OAuth client:
it reads the door's protected-resource metadata (RFC 9728) and calls with
bearer tokens an identity provider minted for the door's URL (RFC 8707).

Run by tests/oidc.rs (test `oauth_mcp_client`) with MCP_URL, ISSUER and the
tokens FULL (scopes tools:read and tools:call), READ (tools:read only),
NONE (no scope) and ELSEWHERE (for another audience). Prints "PASS <check>"
per check; any failure raises, so the exit status is non-zero.
"""

import asyncio
import os

import httpx2 as httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL = os.environ["MCP_URL"]
ISSUER = os.environ["ISSUER"]
HEADERS = {"Accept": "application/json, text/event-stream"}


def passed(check):
    print(f"PASS {check}", flush=True)


def client(token):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return Client(streamable_http_client(URL, http_client=http), cache=None)


def rpc(method, params=None):
    message = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        message["params"] = params
    return message


async def main():
    base = URL.rsplit("/mcp", 1)[0]
    async with httpx.AsyncClient(timeout=30) as raw:
        # Discovery, as an OAuth client does it after a 401.
        refused = await raw.post(URL, json=rpc("tools/list"), headers=HEADERS)
        assert refused.status_code == 401, refused
        challenge = refused.headers["www-authenticate"]
        metadata_url = challenge.split('resource_metadata="', 1)[1].split('"', 1)[0]
        assert metadata_url == f"{base}/.well-known/oauth-protected-resource/mcp", challenge
        metadata = (await raw.get(metadata_url)).json()
        assert metadata["resource"] == URL, metadata
        assert metadata["authorization_servers"] == [ISSUER], metadata
        assert metadata["scopes_supported"] == ["tools:call", "tools:read"], metadata
        passed("metadata")

        # A token minted for another service is refused as invalid.
        elsewhere = await raw.post(
            URL,
            json=rpc("tools/list"),
            headers={**HEADERS, "Authorization": f"Bearer {os.environ['ELSEWHERE']}"},
        )
        assert elsewhere.status_code == 401, elsewhere
        assert 'error="invalid_token"' in elsewhere.headers["www-authenticate"], elsewhere.headers
        assert "not issued for this mesh" in elsewhere.json()["error_description"], elsewhere.text
        passed("wrong audience")

        # Without the scope an action needs: 403 with a scope challenge.
        for token, method, params, scope in [
            ("NONE", "tools/list", None, "tools:read"),
            ("READ", "tools/call", {"name": "acc_echo", "arguments": {"message": "x"}}, "tools:call"),
        ]:
            answer = await raw.post(
                URL,
                json=rpc(method, params),
                headers={**HEADERS, "Authorization": f"Bearer {os.environ[token]}"},
            )
            assert answer.status_code == 403, (token, answer.status_code, answer.text)
            header = answer.headers["www-authenticate"]
            assert 'error="insufficient_scope"' in header and f'scope="{scope}"' in header, header
            error = answer.json()["error"]
            assert answer.json()["id"] == 1 and f'"{scope}"' in error["message"], answer.text
            assert error["data"] == {"error": "insufficient_scope", "scope": scope}, answer.text
        passed("insufficient scope")

    # The official client with the full token lists and calls.
    async with client(os.environ["FULL"]) as full:
        names = [t.name for t in (await full.list_tools()).tools]
        assert "acc_echo" in names, names
        echoed = await full.call_tool("acc_echo", {"message": "oauth"})
        assert not echoed.is_error and "oauth" in echoed.content[0].text, echoed
        passed("full token lists and calls")

    # A read-only token lists with the official client.
    async with client(os.environ["READ"]) as read:
        names = [t.name for t in (await read.list_tools()).tools]
        assert "acc_echo" in names, names
        passed("read token lists")


asyncio.run(main())
