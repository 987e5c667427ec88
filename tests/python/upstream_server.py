"""An upstream MCP server for the gateway tests, built with the official Python SDK.

Serves Streamable HTTP on 127.0.0.1 (a free port) and prints its URL on the first line
of stdout. Its destructive tool counts its executions, which the tests read back with
the `executions` tool (or `--stdio` to serve over stdio instead).
"""

import asyncio
import os
import socket
import sys

from typing import Annotated

import uvicorn
from pydantic import BaseModel
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp_types import ToolAnnotations

server = MCPServer("hitl-test-upstream", version="1.0.0")
executions: dict[str, int] = {}


@server.tool(title="Echo", annotations=ToolAnnotations(readOnlyHint=True))
def echo(text: str) -> str:
    """Returns the text it is given."""
    return text


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def drop_partition(partition: str, database: str) -> str:
    """Drops a partition of a database (counts its executions)."""
    executions["drop_partition"] = executions.get("drop_partition", 0) + 1
    return f"dropped {partition} on {database}"


@server.tool()
async def slow_drop(partition: str, seconds: float) -> str:
    """Drops a partition slowly: counted when it starts, done after `seconds`."""
    executions["slow_drop"] = executions.get("slow_drop", 0) + 1
    await asyncio.sleep(seconds)
    return f"dropped {partition} slowly"


class Confirmation(BaseModel):
    confirm: bool


def ask_confirmation(table: str) -> Elicit[Confirmation]:
    return Elicit(f"Really truncate {table}?", Confirmation)


@server.tool()
def truncate(table: str, confirmation: Annotated[Confirmation, Resolve(ask_confirmation)]) -> str:
    """Truncates a table after the user confirms (the upstream asks, 2026-07-28 rounds)."""
    if not confirmation.confirm:
        return f"kept {table}"
    executions["truncate"] = executions.get("truncate", 0) + 1
    return f"truncated {table}"


@server.tool(name="executions")
def count_executions(tool: str) -> int:
    """How many times a destructive tool ran."""
    return executions.get(tool, 0)


@server.tool()
def crash() -> str:
    """Exits the server process at once (for restart tests)."""
    os._exit(3)


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with the reason as the tool error."""
    raise ToolError(reason)


async def main() -> None:
    if "--stdio" in sys.argv:
        await server.run_stdio_async()
        return
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 0
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    port = sock.getsockname()[1]
    app = server.streamable_http_app(json_response="--json" in sys.argv)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(f"http://127.0.0.1:{port}/mcp", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
