"""hitl in front of two reference MCP servers people put behind a gateway
(`mcp-server-git` from PyPI and `@modelcontextprotocol/server-filesystem` from npm, both
over stdio), driven by the official MCP Python SDK speaking 2026-07-28.

Usage: python sdk_reference.py http://127.0.0.1:PORT/mcp REPO

Writes REPO/notes.txt (`fs.write_file`, reviewed: approved), stages it (`git.git_add`,
allowed), commits it (`git.git_commit`, reviewed: approved), tries `git.git_reset`
(denied) and reads the log (`git.git_log`). Prints one JSON line of what it saw.
"""

import asyncio
import json
import sys

import mcp_types as types
from mcp import Client

URL, REPO = sys.argv[1], sys.argv[2]
reviews = []


async def approve(context, params):
    reviews.append(params.message)
    return types.ElicitResult(action="accept", content={"decision": "approve"})


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


async def main():
    seen = {}
    async with Client(URL, mode="2026-07-28", elicitation_callback=approve) as client:
        tools = await client.list_tools()
        seen["tools"] = sorted(t.name for t in tools.tools)
        wrote = await client.call_tool("fs.write_file", {"path": f"{REPO}/notes.txt", "content": "hello from hitl\n"})
        seen["write"] = {"is_error": bool(wrote.is_error), "text": text(wrote), "structured": wrote.structured_content}
        added = await client.call_tool("git.git_add", {"repo_path": REPO, "files": ["notes.txt"]})
        seen["add"] = {"is_error": bool(added.is_error), "text": text(added)}
        committed = await client.call_tool("git.git_commit", {"repo_path": REPO, "message": "Add notes through hitl"})
        seen["commit"] = {"is_error": bool(committed.is_error), "text": text(committed)}
        try:
            reset = await client.call_tool("git.git_reset", {"repo_path": REPO})
            seen["reset"] = {"is_error": bool(reset.is_error), "text": text(reset)}
        except Exception as error:  # a refusal as a JSON-RPC error
            seen["reset"] = {"error": str(error)}
        log = await client.call_tool("git.git_log", {"repo_path": REPO, "max_count": 5})
        seen["log"] = {"is_error": bool(log.is_error), "text": text(log)}
    seen["reviews"] = reviews
    print(json.dumps(seen))


asyncio.run(main())
