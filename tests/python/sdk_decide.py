"""An approver deciding from their own MCP client: the official MCP Python SDK calls
hitl's `hitl_pending_approvals` and `hitl_decide_approval`, and answers the form that
restates the call (accepting and confirming it, accepting without confirming, or
declining, as MODE says).

Usage: python sdk_decide.py http://127.0.0.1:PORT/mcp TOKEN ID DECISION MODE

Prints one JSON line: the tools listed, the pending approvals' ids, what the form said,
and the decision's result.
"""

import asyncio
import json
import sys

import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

URL, TOKEN, ID, DECISION, MODE = sys.argv[1:6]
asked = []


async def asker(context, params):
    asked.append(getattr(params, "message", None))
    if MODE == "decline":
        return types.ElicitResult(action="decline")
    return types.ElicitResult(action="accept", content={"confirm": MODE == "confirm"})


async def main():
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    transport = streamable_http_client(URL, http_client=http)
    async with Client(transport, mode="2026-07-28", elicitation_callback=asker) as client:
        listed = [tool.name for tool in (await client.list_tools()).tools]
        pending = await client.call_tool("hitl_pending_approvals", {})
        ids = [a["id"] for a in (pending.structured_content or {}).get("approvals", [])]
        decided = await client.call_tool("hitl_decide_approval", {"id": ID, "decision": DECISION})
    text = decided.content[0].text if decided.content else ""
    print(json.dumps({"listed": listed, "pending": ids, "asked": asked, "text": text,
                      "is_error": bool(decided.is_error)}))


asyncio.run(main())
