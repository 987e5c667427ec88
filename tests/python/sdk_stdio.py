"""The official MCP Python SDK's stdio client (`mcp.client.stdio`, through `Client` with
`StdioServerParameters`) starting `hitl serve --stdio --config F` (behind
`stdio_recorder.py`, which keeps what hitl writes on its standard output), as a
2025-11-25 client (`mode="legacy"`: the review question is pushed as
`elicitation/create`) or a 2026-07-28 one (`input_required` rounds).

Usage: python sdk_stdio.py MODE RECORD_DIR -- HITL_COMMAND...
The gateway's upstream `up` is tests/python/upstream_server.py with `up.release`
reviewed. Prints one JSON line per step: {"step", ...}.
"""

import asyncio
import json
import os
import sys

import mcp_types as types
from mcp import Client, StdioServerParameters

MODE, RECORD = sys.argv[1], sys.argv[2]
HITL = sys.argv[sys.argv.index("--") + 1 :]
RECORDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stdio_recorder.py")


def text(result):
    return result.content[0].text if result.content else None


async def main():
    decisions = []
    asked = []

    async def reviewer(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"decision": decisions.pop(0)})

    server = StdioServerParameters(command=sys.executable, args=[RECORDER, RECORD, "--", *HITL])
    async with Client(server, mode=MODE, elicitation_callback=reviewer) as client:
        tools = await client.list_tools()
        print(json.dumps({"step": "list", "tools": sorted(t.name for t in tools.tools)}), flush=True)
        echoed = await client.call_tool("up.echo", {"text": "over stdio"})
        print(json.dumps({"step": "allowed", "is_error": bool(echoed.is_error), "text": text(echoed)}), flush=True)
        for decision in ["approve", "reject"]:
            decisions.append(decision)
            result = await client.call_tool("up.release", {"service": "billing", "version": "2.0"})
            out = {"step": decision, "is_error": bool(result.is_error), "text": text(result), "asked": asked[-1:]}
            print(json.dumps(out), flush=True)
        count = await client.call_tool("up.executions", {"tool": "release"})
        print(json.dumps({"step": "executions", "text": text(count)}), flush=True)
    print(json.dumps({"step": "closed"}), flush=True)


asyncio.run(main())
