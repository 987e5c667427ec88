"""hitl behind bearer tokens, driven by the official MCP Python SDK.

Usage: python sdk_auth.py http://127.0.0.1:PORT/mcp TOKEN

With the token in `Authorization: Bearer`, the SDK completes a paused call (`greeter`
asks a name); without it, the server answers 401 and the call fails. Prints OK.
"""

import asyncio
import sys

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL, TOKEN = sys.argv[1], sys.argv[2]


async def asker(context, params):
    return types.ElicitResult(action="accept", content={"name": "Ada"})


async def greet(headers):
    http = httpx2.AsyncClient(headers=headers)
    transport = streamable_http_client(URL, http_client=http)
    async with Client(transport, mode="2026-07-28", elicitation_callback=asker) as client:
        return await client.call_tool("greeter", {})


async def main():
    result = await greet({"Authorization": f"Bearer {TOKEN}"})
    assert not result.is_error, result
    assert "Hello, Ada!" in result.content[0].text, result
    try:
        refused = await greet({})
    except Exception as error:  # the SDK raises on HTTP 401
        text = repr(error)
        assert "401" in text or "Unauthorized" in text, text
        print("without the token:", text[:200])
    else:
        raise AssertionError(f"a call without a token got {refused}")
    print("OK")


asyncio.run(main())
