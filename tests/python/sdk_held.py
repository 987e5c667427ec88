"""A call approved by someone else, minutes later, through the official MCP Python SDK
with its default settings (at most 10 input_required rounds, its default timeouts).

Usage: python sdk_held.py http://127.0.0.1:PORT/mcp TOKEN PARTITION

Calls `db.drop_partition` of PARTITION (reviewed by group:sre on hitl's pages) as the token's user,
accepting the URL question each time it is asked, with a progress callback. Prints one
JSON line: whether the result is an error, its text, the questions asked, the progress
messages heard.
"""

import asyncio
import json
import sys
import time

import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

URL, TOKEN, PARTITION = sys.argv[1], sys.argv[2], sys.argv[3]
asked = []
heard = []


START = time.monotonic()


async def asker(context, params):
    print(f"asked at {time.monotonic() - START:.1f}s", file=sys.stderr)
    asked.append(getattr(params, "url", None))
    return types.ElicitResult(action="accept")


async def progress(value, total, message):
    print(f"progress {value} {message!r} at {time.monotonic() - START:.1f}s", file=sys.stderr)
    heard.append(message)


async def main():
    # The SDK's own HTTP client (its default timeouts), with the bearer token.
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    transport = streamable_http_client(URL, http_client=http)
    async with Client(transport, mode="2026-07-28", elicitation_callback=asker) as client:
        result = await client.call_tool(
            "db.drop_partition", {"partition": PARTITION, "database": "orders"}, progress_callback=progress
        )
    text = result.content[0].text if result.content else ""
    print(json.dumps({"is_error": bool(result.is_error), "text": text, "asked": asked, "heard": heard}))


try:
    asyncio.run(main())
finally:
    print(f"ended at {time.monotonic() - START:.1f}s", file=sys.stderr)
