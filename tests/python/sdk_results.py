"""Results SDK clients accept (#29): reviewed tools of the real filesystem server, whose
tools declare an `outputSchema`, called through hitl by the official Python SDK's
`Client` and by fastmcp's `Client` (both on 2026-07-28), each answering the review
question with a decision.

Usage: python sdk_results.py http://127.0.0.1:PORT/mcp <allowed folder>
Prints one JSON line per call: {"client", "case", "is_error", "structured", "text"}, or
{"client", "case", "exception"} when the client raised.
"""

import asyncio
import json
import os
import sys

import fastmcp
import mcp_types as types
from fastmcp.client.elicitation import ElicitResult as FastElicitResult
from mcp import Client

URL, FOLDER = sys.argv[1], sys.argv[2]

# What the reviewer answers, by case: the review form's fields.
CASES = {
    "respond_json": {"decision": "respond", "message": json.dumps({"content": "from the reviewer"})},
    "respond_text": {"decision": "respond", "message": "the file is not there"},
    "reject": {"decision": "reject", "message": "not this file"},
    "approve": {"decision": "approve"},
}


def calls():
    """(case, tool, arguments) in order: the write is approved, then the read is
    answered for the tool, refused, and approved (reading what was written)."""
    path = os.path.join(FOLDER, "note.txt")
    read = ("fs.read_text_file", {"path": path})
    return [
        ("approve", "fs.write_file", {"path": path, "content": "written through hitl"}),
        ("respond_json", *read),
        ("respond_text", *read),
        ("reject", *read),
        ("approve", *read),
    ]


def line(client, case, result):
    text = result.content[0].text if result.content else None
    structured = getattr(result, "structured_content", None)
    return {"client": client, "case": case, "is_error": bool(result.is_error), "structured": structured, "text": text}


async def with_sdk():
    for case, tool, arguments in calls():
        async def asker(context, params, case=case):
            return types.ElicitResult(action="accept", content=CASES[case])

        try:
            async with Client(URL, mode="2026-07-28", elicitation_callback=asker) as client:
                await client.list_tools()
                result = await client.call_tool(tool, arguments)
            print(json.dumps(line("mcp", case, result)), flush=True)
        except Exception as error:  # noqa: BLE001 - what the client raised is the finding
            print(json.dumps({"client": "mcp", "case": case, "exception": repr(error)}), flush=True)


async def with_fastmcp():
    for case, tool, arguments in calls():
        async def handler(message, response_type, params, context, case=case):
            return FastElicitResult(action="accept", content=CASES[case])

        try:
            async with fastmcp.Client(URL, elicitation_handler=handler, mode="2026-07-28") as client:
                await client.list_tools()
                result = await client.call_tool(tool, arguments, raise_on_error=False)
            structured = result.structured_content
            text = result.content[0].text if result.content else None
            out = {"client": "fastmcp", "case": case, "is_error": bool(result.is_error), "structured": structured,
                   "text": text}
            print(json.dumps(out), flush=True)
        except Exception as error:  # noqa: BLE001
            print(json.dumps({"client": "fastmcp", "case": case, "exception": repr(error)}), flush=True)


asyncio.run(with_sdk())
asyncio.run(with_fastmcp())
