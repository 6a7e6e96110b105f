"""A small MCP server the tests start: ``python server.py`` serves stdio; ``--http`` serves
streamable HTTP on a free 127.0.0.1 port, printed as the first line of stdout.

It records what it sees (calls in flight, their peak, cancellations) and reports it through
its own ``stats`` tool, so tests observe the server over the protocol itself.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from typing import Annotated

from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import INVALID_PARAMS, ToolAnnotations
from pydantic import BaseModel, Field

server = MCPServer("test-server")
READ_ONLY = ToolAnnotations(read_only_hint=True)


class Point(BaseModel):
    x: int
    y: int


class Stats(BaseModel):
    peak: int
    events: list[str]


class _State:
    active = 0
    peak = 0
    events: list[str] = []  # noqa: RUF012 - one server, one state


@server.tool(annotations=READ_ONLY)
def point(x: int, y: int) -> Point:
    """Make a point."""
    return Point(x=x, y=y)


@server.tool(structured_output=False)
def greet(name: str) -> str:
    """Greet someone."""
    return f"hello {name}"


@server.tool(structured_output=False)
def fail(why: str) -> str:
    """Always fails with the given reason."""
    raise ToolError(why)


@server.tool(structured_output=False)
async def slow(seconds: float, tag: str) -> str:
    """Sleep, recording whether the call was cancelled."""
    _State.events.append(f"start {tag}")
    try:
        await asyncio.sleep(seconds)
    except BaseException:
        _State.events.append(f"cancelled {tag}")
        raise
    return "done"


@server.tool(annotations=READ_ONLY)
async def nap(ms: int) -> int:
    """Sleep for ms milliseconds, recording how many naps overlap."""
    _State.active += 1
    _State.peak = max(_State.peak, _State.active)
    try:
        await asyncio.sleep(ms / 1000)
    finally:
        _State.active -= 1
    return ms


@server.tool()
def stats() -> Stats:
    """What the server has seen."""
    return Stats(peak=_State.peak, events=list(_State.events))


@server.tool(structured_output=False)
def clamp(value: Annotated[int, Field(ge=0, le=10)], unit: str | None = None) -> str:
    """Accept only 0..10 (bounds and anyOf are outside the registry's schema subset)."""
    return f"value {value}{unit or ''}"


@server.tool(structured_output=False)
def history(max_count: int = 10, since: str | None = None) -> str:
    """Recent entries (``since`` is Optional: anyOf [string, null], as pydantic writes it)."""
    return f"{max_count} entries since {since}"


@server.tool(structured_output=False)
def place(at: Point) -> str:
    """Name a point (its schema refers to $defs, outside the registry's schema subset)."""
    return f"({at.x}, {at.y})"


@server.tool()
def count(n: int) -> Annotated[int, Field(ge=0)]:
    """Return n (its output schema has a bound outside the subset)."""
    return n


def _extra(text: str) -> str:
    return text.upper()


@server.tool(structured_output=False)
async def set_extra(present: bool, ctx: Context, description: str = "Shout text.",
                    announce: bool = True) -> str:
    """Add, change or remove the tool `extra`, then announce the change (if asked to)."""
    if any(tool.name == "extra" for tool in await server.list_tools()):
        server.remove_tool("extra")
    if present:
        server.add_tool(_extra, name="extra", description=description, structured_output=False)
    if announce:
        await ctx.notify_tools_changed()  # 2026-era clients: their subscriptions/listen stream
        await ctx.session.send_tool_list_changed()  # handshake-era clients: unsolicited
    return "ok"


@server.tool(structured_output=False)
def reject() -> str:
    """Answer with a JSON-RPC error instead of a result."""
    raise MCPError(code=INVALID_PARAMS, message="this request is malformed")


@server.tool(structured_output=False)
def die() -> str:
    """Exit the server process at once."""
    print("test server: dying on request", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool(structured_output=False)
def header(name: str, ctx: Context) -> str:
    """The value of an HTTP request header ('' over stdio)."""
    return (ctx.headers or {}).get(name.lower(), "")


def serve_http() -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    if sys.argv[1:] == ["--http"]:
        serve_http()
    else:
        server.run()
