"""The `choose_region` tool on the official Python SDK (`mcp` 2.3.0 `MCPServer`), written
the way its documentation shows a tool that asks the user (`Resolve(Elicit)`): one text
question, `{response: string}`, then `{"region": ...}`. Stateless Streamable HTTP with
JSON responses on 127.0.0.1 (a free port); prints its URL on the first line of stdout.
A peer of hitl in `cargo xtask bench --peers`.
"""

import asyncio
import socket
from typing import Annotated

import uvicorn
from pydantic import BaseModel
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve

server = MCPServer("choose-region-peer", version="1.0.0")


class Answer(BaseModel):
    response: str


def ask_region() -> Elicit[Answer]:
    return Elicit("Which region should the service deploy to?", Answer)


@server.tool()
def choose_region(answer: Annotated[Answer, Resolve(ask_region)]) -> dict:
    """Asks where to deploy, then says so."""
    return {"region": answer.response}


async def main() -> None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    app = server.streamable_http_app(json_response=True, stateless_http=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(f"http://127.0.0.1:{port}/mcp", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
