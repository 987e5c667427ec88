"""An upstream MCP server for the gateway tests, built with the official Python SDK.

Serves Streamable HTTP on 127.0.0.1 (a free port) and prints its URL on the first line
of stdout. Its destructive tool counts its executions, which the tests read back with
the `executions` tool (or `--stdio` to serve over stdio instead). `--tls DIR` serves
https with a certificate for 127.0.0.1 signed by a fresh test CA, written to DIR/ca.pem.
"""

import asyncio
import base64
import hashlib
import os
import socket
import sys

from typing import Annotated

import uvicorn
from pydantic import BaseModel
from mcp.server.mcpserver import Audio, Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp_types import ElicitRequestURLParams, SamplingMessage, TextContent, ToolAnnotations

server = MCPServer("hitl-test-upstream", version="1.0.0")

# A 1x1 PNG and a WAV of eight silent samples, for the media tool.
RED_PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
)
SILENCE = base64.b64decode("UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAAAAAAAAAAAAAAAAAAAA")
executions: dict[str, int] = {}


@server.tool(title="Echo", annotations=ToolAnnotations(readOnlyHint=True))
def echo(text: str) -> str:
    """Returns the text it is given."""
    return text


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def digest(text: str) -> str:
    """The SHA-256 of the text, in hex (so a test sees a secret arrived, not the secret)."""
    return hashlib.sha256(text.encode()).hexdigest()


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def drop_partition(partition: str, database: str) -> str:
    """Drops a partition of a database (counts its executions)."""
    executions["drop_partition"] = executions.get("drop_partition", 0) + 1
    return f"dropped {partition} on {database}"


# Receipts already used (their `jti`), and the last one received, for the tests.
seen_receipts: set[str] = set()
last_receipt: dict[str, str] = {}


def check_receipt(ctx: Context, tool: str, arguments: dict) -> dict:
    """Refuses the call unless it carries hitl's approval receipt for these very
    arguments, signed by the key of hitl's JWKS (`--receipt-jwks FILE`, read at each
    call), for this upstream (`--receipt-audience`), unexpired and never used before."""
    import json

    import jwt

    token = (ctx.request_context.meta or {}).get("io.hitl/approval")
    if not token:
        raise ToolError("refused: no approval receipt")
    last_receipt["token"] = token
    jwks_file = sys.argv[sys.argv.index("--receipt-jwks") + 1]
    audience = sys.argv[sys.argv.index("--receipt-audience") + 1]
    with open(jwks_file) as f:
        keys = jwt.PyJWKSet.from_json(f.read())
    kid = jwt.get_unverified_header(token).get("kid")
    key = next((k for k in keys.keys if k.key_id == kid), None)
    if key is None:
        raise ToolError("refused: the receipt's key is not hitl's")
    try:
        claims = jwt.decode(token, key, algorithms=["EdDSA"], audience=audience,
                            options={"require": ["exp", "iat", "jti"]})
    except jwt.InvalidTokenError as error:
        raise ToolError(f"refused: {error}")
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if claims.get("tool") != tool or claims.get("args_sha256") != hashlib.sha256(canonical.encode()).hexdigest():
        raise ToolError("refused: the receipt is for another call")
    if claims["jti"] in seen_receipts:
        raise ToolError("refused: the receipt was used before")
    seen_receipts.add(claims["jti"])
    return claims


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def verified_drop(partition: str, database: str, ctx: Context) -> str:
    """Drops a partition only with hitl's approval receipt for it (counts executions)."""
    claims = check_receipt(ctx, "verified_drop", {"partition": partition, "database": database})
    executions["verified_drop"] = executions.get("verified_drop", 0) + 1
    scope = f" (covered: {claims['scope']})" if claims.get("scope") else ""
    return f"dropped {partition} on {database}, approved by {', '.join(claims['approvers'])}{scope}"


@server.tool()
def receipt_seen() -> str:
    """The last approval receipt a call carried (for the tests to send it again)."""
    return last_receipt.get("token", "")


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def release(service: str, version: str) -> str:
    """Releases a version of a service to production (counts its executions)."""
    executions["release"] = executions.get("release", 0) + 1
    return f"Released {service} v{version} to production."


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


authorized: set[str] = set()


@server.tool()
def connect_drive(account: str) -> str:
    """Connects a drive account: its first call asks the user to authorize it on a page
    (`-32042`, URL elicitation required, 2025-11-25); the next one connects it."""
    if account not in authorized:
        authorized.add(account)
        page = ElicitRequestURLParams(
            message=f"Authorize access to the drive of {account}",
            url=f"https://example.com/oauth/drive?account={account}",
            elicitation_id=f"drive-{account}",
        )
        raise UrlElicitationRequiredError([page])
    executions["connect_drive"] = executions.get("connect_drive", 0) + 1
    return f"connected {account}"


@server.tool(name="executions")
def count_executions(tool: str) -> int:
    """How many times a destructive tool ran."""
    return executions.get(tool, 0)


@server.tool()
async def count(steps: int, ctx: Context) -> str:
    """Counts to `steps`, reporting progress at each step."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step * 10, steps * 10, f"step {step} of {steps}")
    return f"counted to {steps}"


@server.tool()
async def summarize(text: str, ctx: Context) -> str:
    """Asks the client's model for a summary (2025-era sampling, mid-call)."""
    message = SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarize: {text}"))
    result = await ctx.session.create_message([message], max_tokens=50, related_request_id=ctx.request_id)
    return f"summary: {result.content.text}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def traceparent(ctx: Context) -> str:
    """The W3C traceparent header this call came with ("" without one)."""
    return (ctx.headers or {}).get("traceparent", "")


@server.tool()
async def where(ctx: Context) -> str:
    """Lists the client's roots (2025-era roots/list, sent on the session's own stream)."""
    result = await ctx.session.list_roots()
    return ", ".join(str(root.uri) for root in result.roots)


@server.tool()
def media() -> list:
    """Returns text, an image and a sound."""
    return ["a picture and a sound", Image(data=RED_PIXEL, format="png"), Audio(data=SILENCE, format="wav")]


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Adds a tool called `name` and says the tool list changed."""

    def added() -> str:
        return f"I am {name}"

    server.add_tool(added, name=name, description="Added at run time.")
    # 2026-07-28 listeners hear it on their subscriptions/listen streams; a 2025-era
    # session (HTTP or stdio) on its own stream.
    for notify in (ctx.notify_tools_changed, lambda: ctx.session.send_tool_list_changed()):
        try:
            await notify()
        except Exception as error:  # the other era's way
            print(f"grow: {error!r}", file=sys.stderr)
    return f"added {name}"


@server.tool()
def crash() -> str:
    """Exits the server process at once (for restart tests)."""
    os._exit(3)


# Per-session state, for the tests of one upstream session per caller: a note kept by
# the session it was written in, and the sessions clients ended (HTTP DELETE).
notes: dict[str, str] = {}
ended_sessions: list[str] = []


def session_of(ctx: Context) -> str:
    return (ctx.headers or {}).get("mcp-session-id", "")


@server.tool()
def session_id(ctx: Context) -> str:
    """The Mcp-Session-Id this call came in ("" without one)."""
    return session_of(ctx)


@server.tool()
def remember(note: str, ctx: Context) -> str:
    """Keeps a note in this session."""
    notes[session_of(ctx)] = note
    return "remembered"


@server.tool()
def recall(ctx: Context) -> str:
    """The note kept in this session ("" when none)."""
    return notes.get(session_of(ctx), "")


@server.tool()
def ended() -> str:
    """The sessions clients ended with an HTTP DELETE, comma-separated."""
    return ",".join(ended_sessions)


def recording_deletes(app):
    """`app`, noting each session a client ends (DELETE with its Mcp-Session-Id)."""

    async def wrapped(scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "DELETE":
            headers = dict(scope.get("headers") or [])
            ended_sessions.append(headers.get(b"mcp-session-id", b"").decode())
        await app(scope, receive, send)

    return wrapped


@server.tool()
def big(megabytes: int) -> str:
    """Answers with a text of `megabytes` MiB (for response size limits)."""
    return "x" * (megabytes * 1024 * 1024)


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with the reason as the tool error."""
    raise ToolError(reason)


def certificates(folder: str) -> tuple[str, str]:
    """A test CA (written to `folder`/ca.pem) and a key and certificate for 127.0.0.1
    it signed: their paths."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def issue(subject: str, key, issuer: x509.Name, signer, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hitl test CA")])
    ca = issue("hitl test CA", ca_key, ca_name, ca_key, True)
    leaf = issue("127.0.0.1", key, ca_name, ca_key, False)
    paths = {name: os.path.join(folder, name) for name in ("ca.pem", "cert.pem", "key.pem")}
    pem = serialization.Encoding.PEM
    with open(paths["ca.pem"], "wb") as out:
        out.write(ca.public_bytes(pem))
    with open(paths["cert.pem"], "wb") as out:
        out.write(leaf.public_bytes(pem))
    with open(paths["key.pem"], "wb") as out:
        out.write(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return paths["cert.pem"], paths["key.pem"]


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
    app = recording_deletes(server.streamable_http_app(json_response="--json" in sys.argv))
    scheme, tls = "http", {}
    if "--tls" in sys.argv:
        cert, key = certificates(sys.argv[sys.argv.index("--tls") + 1])
        scheme, tls = "https", {"ssl_certfile": cert, "ssl_keyfile": key}
    config = uvicorn.Config(app, log_level="warning", lifespan="on", **tls)
    print(f"{scheme}://127.0.0.1:{port}/mcp", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
