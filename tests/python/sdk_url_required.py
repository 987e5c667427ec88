"""The official Python SDK as a 2025-11-25 client (`mode="legacy"`) against
`hitl serve --legacy-elicitation` with a reviewed `db.connect_drive`: it approves the
pushed review question, and the upstream then answers `-32042` (URL elicitation
required). Prints the call's result as one JSON line: {"is_error", "texts"}.

Usage: python sdk_url_required.py http://127.0.0.1:PORT/mcp
"""

import asyncio
import json
import sys

import mcp_types as types
from mcp import Client

URL = sys.argv[1]


async def approve(context, params):
    return types.ElicitResult(action="accept", content={"decision": "approve"})


async def main():
    async with Client(URL, mode="legacy", elicitation_callback=approve) as client:
        result = await client.call_tool("db.connect_drive", {"account": "joan"})
    texts = [block.text for block in result.content]
    print(json.dumps({"is_error": bool(result.is_error), "texts": texts}), flush=True)


asyncio.run(main())
