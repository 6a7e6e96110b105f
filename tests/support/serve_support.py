"""The registry the serve tests serve (``--tools serve_support:served_registry``), and helpers
that start ``dsh-jupyter serve-mcp`` as a child process.

Tools record what they see in the file named by ``DSH_TEST_SERVE_LOG`` (one line per fact),
so a test observes the server's side (a signal that aborted) without reaching into it.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from dsh_jupyter import Ask, Deny, ToolRegistry, ToolRunContext, define_tool
from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.registry.execution import ToolExecution
from dsh_jupyter.registry.policy import PreDecision
from dsh_jupyter.registry.results import Content

if TYPE_CHECKING:
    from mcp.types import ElicitRequestParams, ElicitResult

HERE = Path(__file__).resolve().parent
LOG_ENV = "DSH_TEST_SERVE_LOG"
# A 1x1 PNG.
PIXEL = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000001e221bc330000000049454e44ae426082")).decode()


def _record(fact: str) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(fact + "\n")


class Forecast(BaseModel):
    city: str
    high_c: float


def served_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @registry.tool
    async def forecast(city: str) -> Forecast:
        """Tomorrow's forecast for a city."""
        _record(f"forecast {city}")
        return Forecast(city=city, high_c={"Oslo": 14.5, "Rome": 24.0}.get(city, 20.0))

    @registry.tool
    async def slow(tag: str, ctx: ToolRunContext) -> str:
        """Wait until aborted (records the abort reason)."""
        _record(f"start {tag}")
        try:
            await ctx.signal.run(asyncio.sleep(60))
        finally:
            _record(f"signal {tag}: {ctx.signal.reason}")
        return "done"

    @registry.tool
    async def sleepy(tag: str) -> str:
        """Sleep 30 s without looking at the signal (records start, cancel and finish)."""
        _record(f"start {tag}")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            _record(f"cancelled {tag}")
            raise
        _record(f"finish {tag}")
        return "slept"

    @registry.tool
    async def broken() -> str:
        """Always raises (a bug in the tool, not a ToolError)."""
        raise RuntimeError("the disk is on fire")

    @registry.tool
    async def delete_file(path: str) -> str:
        """Delete a file (asks for approval first)."""
        _record(f"deleted {path}")
        return f"deleted {path}"

    @registry.tool
    async def read_secret() -> str:
        """Never allowed."""
        return "the secret"

    async def picture(args: Any, ctx: ToolRunContext) -> str:
        return PIXEL

    def show(args: JsonValue, value: JsonValue) -> Content:
        return ({"type": "text", "text": "a pixel"},
                {"type": "image", "data": str(value), "mime_type": "image/png"})

    registry.register(define_tool(
        name="picture", description="A one-pixel PNG.",
        parameters={"type": "object", "properties": {}, "additionalProperties": False},
        output={"schema": {"type": "string"}, "render": show}, execute=picture))

    def policy(execution: ToolExecution, decision: PreDecision) -> PreDecision | None:
        if execution.name == "delete_file":
            return Ask(f"deleting {execution.arguments['path']} cannot be undone")
        if execution.name == "read_secret":
            return Deny("secrets stay secret")
        return None

    registry.on_pre_execute(policy)
    return registry


def served_scope() -> Any:
    registry = served_registry()
    scope = registry.scope("analyst")
    scope.restrict(allow=["add", "forecast"])
    return scope


def serve_command(*options: str, tools: str = "serve_support:served_registry") -> list[str]:
    return serve_mcp_command("--tools", tools, *options)


def interruptible(command: Sequence[str]) -> list[str]:
    """``command`` with SIGINT at its default, as a program in a terminal's foreground has
    it, for a test that interrupts it. A shell's background job (how a CI runner may start
    the tests) inherits SIGINT ignored, so that Ctrl-C leaves it alone, and a server that
    respects that does not stop. A shim resets it and execs the command (same process)."""
    shim = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
            "os.execv(sys.argv[1], sys.argv[1:])")
    return [sys.executable, "-c", shim, *command]


def serve_mcp_command(*options: str) -> list[str]:
    """``dsh-jupyter serve-mcp OPTIONS`` (this interpreter's)."""
    return [sys.executable, "-m", "dsh_jupyter.cli", "serve-mcp", *options]


def wrap_command(server: Sequence[str], *options: str) -> list[str]:
    """``dsh-jupyter serve-mcp OPTIONS --wrap -- SERVER...``."""
    return serve_mcp_command(*options, "--wrap", "--", *server)


def command_params(command: Sequence[str], *, env: dict[str, str] | None = None) -> Any:
    """``StdioServerParameters`` running ``command`` with this environment plus ``env``."""
    from mcp import StdioServerParameters

    return StdioServerParameters(command=command[0], args=list(command[1:]),
                                 env={**os.environ, **(env or {})})


def wrap_params(server: Sequence[str], *options: str, env: dict[str, str] | None = None) -> Any:
    """``StdioServerParameters`` starting ``serve-mcp`` wrapping the stdio ``server``."""
    return command_params(wrap_command(server, *options), env=env)


def serve_env(log: Path) -> dict[str, str]:
    env = dict(os.environ)
    env[LOG_ENV] = str(log)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    return env


class HttpServe:
    """``dsh-jupyter serve-mcp --http`` as a child process; ``url`` and ``token`` (if printed)
    come from its stderr. With ``new_session`` it leads a process group of its own (a test
    can kill the group), and its stderr goes to ``log`` with the suffix ``stderr_suffix``."""

    def __init__(self, log: Path, *options: str, env: dict[str, str] | None = None,
                 new_session: bool = False, stderr_suffix: str = ".stderr") -> None:
        self._stderr_path = log.with_suffix(stderr_suffix)
        self._stderr = self._stderr_path.open("w+")
        self.process = subprocess.Popen(serve_command(*options), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=self._stderr,
                                        env=env or serve_env(log), cwd=HERE, text=True,
                                        start_new_session=new_session)
        self.url = ""
        self.token: str | None = None
        self._wait_ready()

    def _wait_ready(self, seconds: float = 60.0) -> None:
        import time

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            text = self._stderr_path.read_text()
            for line in text.splitlines():
                if " at http://" in line:
                    self.url = line.rsplit(" at ", 1)[1].strip()
                if "bearer token" in line:
                    self.token = line.rsplit(": ", 1)[1].strip()
            if self.url and (self.token or "bearer token" not in text):
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"serve-mcp exited {self.process.returncode}: {text}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"serve-mcp did not start: {self._stderr_path.read_text()}")

    @property
    def stderr(self) -> str:
        return self._stderr_path.read_text()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._stderr.close()
        return self.process.returncode


@contextmanager
def http_serve(log: Path, *options: str) -> Iterator[HttpServe]:
    server = HttpServe(log, *options)
    try:
        yield server
    finally:
        server.stop()


async def browser_posts(url: str, *, host: str, origin: str | None = None,
                        token: str | None = None) -> tuple[int, int]:
    """The status codes of what a web page's script can POST to ``url`` when its browser
    says ``Host: host`` and ``Origin: origin``, as after DNS rebinding (the page's own name
    now resolving to the server): a 2026-era ``tools/call`` of ``forecast`` (one request;
    the city is ``host``, so a served fact ``forecast <host>`` shows that it ran) and a
    handshake-era ``initialize``. ``token``, if given, is sent as a bearer token."""
    import httpx2

    headers = {"accept": "application/json, text/event-stream", "host": host}
    if origin is not None:
        headers["origin"] = origin
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "page", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "forecast", "arguments": {"city": host}, "_meta": meta}}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "page", "version": "1"}}}
    async with httpx2.AsyncClient(timeout=30.0) as http:
        called = await http.post(url, json=call, headers={
            **headers, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call",
            "mcp-name": "forecast"})
        initialized = await http.post(url, json=initialize, headers=headers)
    return called.status_code, initialized.status_code


def stdio_params(log: Path, *options: str, tools: str = "serve_support:served_registry") -> Any:
    """``StdioServerParameters`` starting ``dsh-jupyter serve-mcp`` with ``options``."""
    from mcp import StdioServerParameters

    command = serve_command(*options, tools=tools)
    return StdioServerParameters(command=command[0], args=command[1:], env=serve_env(log),
                                 cwd=str(HERE))


@asynccontextmanager
async def http_client(url: str, **client: Any) -> AsyncIterator[Any]:
    """The official MCP client (``mcp.Client``) on streamable HTTP at ``url``."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(30.0, read=120.0)
    async with (httpx2.AsyncClient(timeout=timeout) as http,
                Client(streamable_http_client(url, http_client=http), **client) as session):
        yield session


@asynccontextmanager
async def served_client(transport: str, log: Path, *options: str,
                        **client: Any) -> AsyncIterator[Any]:
    """The official MCP client connected to ``serve-mcp`` (started with ``options``) over
    ``transport``: ``"stdio"``, or ``"http"`` on 127.0.0.1."""
    from mcp import Client, stdio_client

    if transport == "stdio":
        async with Client(stdio_client(stdio_params(log, *options)), **client) as session:
            yield session
        return
    with http_serve(log, "--http", "127.0.0.1:0", *options) as server:
        async with http_client(server.url, **client) as session:
            yield session


def served_facts(log: Path) -> list[str]:
    """What the served tools recorded so far."""
    return log.read_text().splitlines() if log.exists() else []


class Answers:
    """An elicitation callback answering from a list, recording each question."""

    def __init__(self, *actions: str) -> None:
        self.actions = list(actions)
        self.questions: list[str] = []

    async def __call__(self, context: Any, params: ElicitRequestParams) -> ElicitResult:
        from mcp.types import ElicitResult

        self.questions.append(params.message)
        return ElicitResult(action=self.actions.pop(0))  # type: ignore[arg-type]
