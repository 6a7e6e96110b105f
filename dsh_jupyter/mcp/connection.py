"""A connection to one MCP server whose tools live in a registry layer while it is open.

::

    async with connect_mcp(registry, stdio=["python", "server.py"], prefix="files_") as server:
        ...   # the server's tools are registered as files_<name>

The SDK's client runs in a task this connection owns, so a transport that
crashes (a dead HTTP server) ends that task, never the caller's: calls then
fail with ``MCP_SERVER_GONE``. Leaving the block unregisters the tools, stops
the client (and a stdio server's process) and awaits the task.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Self, cast

from ..codemode.registry import ToolRegistry
from ..errors import DshError, McpConnectError, RegistrationError, ToolError
from ..events import ToolProgressEvent
from ..json_value import JsonObject, JsonValue, thaw
from ..registry.definition import Body
from ..registry.execution import ToolRunContext
from ..registry.scope import AgentScope, Undo
from .adapt import ConcurrencySafe, result_value, tool_definition
from .content import RichContent, mcp_content
from .transport_end import watch_end

if TYPE_CHECKING:
    import anyio.abc
    from mcp import Client
    from mcp.client.session import IncomingMessage
    from mcp.shared.dispatcher import ProgressFnT
    from mcp.types import CallToolResult, Tool

__all__ = ["McpConnectError", "McpConnection"]

_log = logging.getLogger(__name__)
_MAX_PAGES = 1000  # a server whose tools/list cursor never ends cannot hang a refresh
_STDERR_TAIL = 800  # characters of a stdio server's stderr quoted in failure messages


@dataclass(frozen=True, slots=True)
class _Registered:
    listing: JsonValue  # the tool as the server listed it, to notice changes
    undo: Undo


class McpConnection:
    """One MCP server's tools in a registry layer; build it with
    :func:`~dsh_jupyter.mcp.connect_mcp`, which checks the options."""

    def __init__(self, target: ToolRegistry | AgentScope, *, stdio: Sequence[str] | None,
                 url: str | None, prefix: str, concurrency_safe: ConcurrencySafe,
                 env: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None,
                 headers: Mapping[str, str] | None, connect_timeout: float,
                 client_options: Mapping[str, Any] | None) -> None:
        self._target = target
        self._stdio = tuple(stdio) if stdio is not None else None
        self._url = url
        self._prefix = prefix
        self._concurrency_safe = concurrency_safe
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._headers = dict(headers) if headers is not None else None
        self._connect_timeout = connect_timeout
        self._client_options = dict(client_options or {})
        self._tools: dict[str, _Registered] = {}
        self._skipped: dict[str, str] = {}
        self._rich = RichContent()
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._ended = asyncio.Event()  # a stdio server's output ended (transport_end)
        self._dirty = asyncio.Event()
        self._lock = asyncio.Lock()
        self._gone: str | None = None
        self._closing = False
        self._stderr: IO[str] | None = None
        self._server_name: str | None = None

    def __repr__(self) -> str:
        state = ("closed" if self._closing else "gone" if self._gone
                 else "open" if self._client else "not entered")
        skipped = f" skipped={len(self._skipped)}" if self._skipped else ""
        return f"<McpConnection {self.name!r} {state} tools={len(self._tools)}{skipped}>"

    @property
    def name(self) -> str:
        """The server's own name once connected, else its command or URL."""
        if self._server_name:
            return self._server_name
        return os.path.basename(self._stdio[0]) if self._stdio else str(self._url)

    @property
    def tools(self) -> tuple[str, ...]:
        """The registry names of this server's tools, sorted."""
        return tuple(sorted(self._tools))

    @property
    def skipped(self) -> Mapping[str, str]:
        """The server's tools that are not registered, by their MCP name, with the reason:
        tools whose ``execution.taskSupport`` is ``"required"`` (they run only as MCP tasks,
        which this client does not drive, so every plain call would fail with -32601)."""
        return dict(self._skipped)

    @property
    def client(self) -> Client:
        """The SDK client, for what the registry does not cover (resources, prompts)."""
        if self._client is None:
            raise McpConnectError(self._gone_message())
        return self._client

    # Lifetime ---------------------------------------------------------------------------
    async def __aenter__(self) -> Self:
        if self._owner is not None:
            raise RegistrationError("an MCP connection can be entered only once; "
                                    "call connect_mcp(...) again for a new connection")
        _load_sdk()
        if self._stdio is not None:
            # Kept for failure messages; closed by _shutdown, which every exit path runs.
            self._stderr = tempfile.TemporaryFile(  # noqa: SIM115
                "w+", encoding="utf-8", errors="replace")
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._owner = asyncio.create_task(self._own(ready), name=f"mcp client {self.name}")
        try:
            async with asyncio.timeout(self._connect_timeout):
                await ready
                await self._refresh(strict=True)
        except TimeoutError:
            await self._shutdown()
            raise McpConnectError(
                f"MCP server {self.name!r} did not answer within {self._connect_timeout:g} s"
                + self._stderr_tail()) from None
        except (DshError, asyncio.CancelledError):
            await self._shutdown()
            raise
        except Exception as exc:  # listing the tools failed
            await self._shutdown()
            raise McpConnectError(f"could not list the tools of MCP server {self.name!r}: "
                                  f"{_describe(exc)}") from None
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self._shutdown()

    async def _shutdown(self) -> None:
        """Unregister every tool, stop the client and await its task, even when cancelled."""
        self._closing = True  # a refresh still in flight must not register anything now
        for registered in self._tools.values():
            registered.undo()
        self._tools.clear()
        self._stop.set()
        owner, cancelled = self._owner, False
        if owner is not None and self._client is None and not owner.done():
            owner.cancel()  # still connecting: nothing to stop gracefully
        while owner is not None and not owner.done():
            try:
                await asyncio.wait({owner})  # unlike shield(), never raises the owner's outcome
            except asyncio.CancelledError:
                cancelled = True
        if self._stderr is not None:
            self._stderr.close()
        if cancelled:
            raise asyncio.CancelledError

    async def _own(self, ready: asyncio.Future[None]) -> None:
        """The task that owns the SDK client: connect, listen for changes, wait for stop."""
        import anyio

        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(await self._open(stack))
                if client.server_info is not None and client.server_info.name:
                    self._server_name = client.server_info.name
                async with anyio.create_task_group() as group:
                    await group.start(self._listen, client)
                    group.start_soon(self._refresh_loop)
                    self._client = client
                    ready.set_result(None)
                    await _first_set(self._stop, self._ended)
                    group.cancel_scope.cancel()
                if not self._stop.is_set():  # the server went away between calls
                    self._gone = "the server closed the connection"
                    _log.warning("MCP server %r is gone: %s", self.name, self._gone)
        except Exception as exc:
            reason = _describe(exc)
            if not ready.done():
                ready.set_exception(McpConnectError(
                    f"could not connect to MCP server {self.name!r}: {reason}"
                    + self._stderr_tail()))
            elif not self._stop.is_set():
                _log.warning("MCP server %r is gone: %s", self.name, reason)
            self._gone = reason
        finally:
            self._client = None
            self._gone = self._gone or "the connection was closed"
            if not ready.done():  # cancelled while connecting: the caller has stopped waiting
                ready.cancel()

    async def _open(self, stack: AsyncExitStack) -> Client:
        from mcp import Client, StdioServerParameters, stdio_client

        options: dict[str, Any] = {"cache": None, **self._client_options,
                                   "message_handler": self._on_message}
        if self._stdio is not None:
            params = StdioServerParameters(command=self._stdio[0], args=list(self._stdio[1:]),
                                           env=self._env,
                                           cwd=None if self._cwd is None else os.fspath(self._cwd))
            assert self._stderr is not None
            transport = stdio_client(params, errlog=cast(Any, self._stderr))
            return Client(watch_end(transport, self._ended), **options)
        assert self._url is not None
        if self._headers is None:
            return Client(self._url, **options)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = await stack.enter_async_context(httpx2.AsyncClient(
            headers=self._headers, timeout=httpx2.Timeout(30.0, read=300.0)))
        return Client(streamable_http_client(self._url, http_client=http), **options)

    async def wait_gone(self) -> str:
        """Wait until the server is gone (a stdio server exited, an HTTP endpoint failed)
        or the connection closed; why, ending with the tail of a stdio server's stderr."""
        if self._owner is None:
            raise RegistrationError("enter the connection first: async with connect_mcp(...)")
        await asyncio.wait({self._owner})  # never raises the owner's outcome
        return self._gone_message()

    # Tool list changes ----------------------------------------------------------------------
    async def _on_message(self, message: IncomingMessage) -> None:
        # Handshake-era servers push notifications/tools/list_changed unsolicited.
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self._dirty.set()

    async def _listen(self, client: Client, *,
                      task_status: anyio.abc.TaskStatus[None]) -> None:
        """On 2026-era connections, ask for change events (they are opt-in there)."""
        capability = client.server_capabilities.tools
        started = False
        try:
            if capability is not None and capability.list_changed:
                async with client.listen(tools_list_changed=True) as events:
                    task_status.started()
                    started = True
                    async for _event in events:
                        self._dirty.set()
        except Exception as exc:  # an older protocol, or the server went away
            _log.debug("not listening for tool changes on %r: %s", self.name, _describe(exc))
        finally:
            if not started:
                task_status.started()

    async def _refresh_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self._refresh(strict=False)
            except Exception as exc:
                _log.warning("could not refresh the tools of MCP server %r: %s", self.name,
                             _describe(exc))

    async def refresh(self) -> None:
        """List the server's tools now and update the registry (added, removed, changed).

        Raises :class:`RegistrationError` naming every tool that could not be registered
        (the others are applied), :class:`McpConnectError` if the server is gone.
        """
        await self._refresh(strict=True)

    async def _refresh(self, *, strict: bool) -> None:
        async with self._lock:
            listed = await self._list_tools()
            problems = self._apply(listed)
        if problems and strict:
            raise RegistrationError("; ".join(problems))
        for problem in problems:
            _log.warning("MCP server %r: %s", self.name, problem)

    async def _list_tools(self) -> list[Tool]:
        client = self.client
        tools: list[Tool] = []
        if client.server_capabilities.tools is None:  # a server of resources or prompts only
            return tools
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    def _apply(self, listed: list[Tool]) -> list[str]:
        if self._closing:
            return []
        skipped = {tool.name: _TASK_ONLY for tool in listed if _task_only(tool)}
        for name in skipped.keys() - self._skipped.keys():
            _log.info("MCP server %r: not registering tool %r: %s", self.name, name, _TASK_ONLY)
        self._skipped = skipped
        wanted = {self._prefix + tool.name: tool for tool in listed if tool.name not in skipped}
        for name in [name for name in self._tools if name not in wanted]:
            self._tools.pop(name).undo()
        problems: list[str] = []
        for name, tool in wanted.items():
            listing = cast(JsonValue, tool.model_dump(mode="json", by_alias=True,
                                                     exclude_none=True))
            current = self._tools.get(name)
            if current is not None and current.listing == listing:
                continue
            if current is not None:
                self._tools.pop(name).undo()
            try:
                definition = tool_definition(
                    tool, name=name, execute=self._body(tool),
                    concurrency_safe=self._concurrency_safe,
                    finalize_content=self._rich.finalize)
                undo = self._target.register(definition)
            except RegistrationError as exc:
                problems.append(exc.message)
                continue
            self._tools[name] = _Registered(listing, undo)
        return problems

    # Calls ----------------------------------------------------------------------------------
    def _body(self, tool: Tool) -> Body:
        mcp_name, structured = tool.name, tool.output_schema is not None

        async def execute(args: JsonObject, ctx: ToolRunContext) -> JsonValue:
            result = await self._call(mcp_name, args, ctx)
            content = mcp_content(result.content)
            value = result_value(result, structured=structured, content=content,
                                 what=f"MCP server {self.name!r} tool {mcp_name!r}")
            if not structured:
                self._rich.keep(ctx.token, content)
            return value

        return execute

    async def _call(self, mcp_name: str, args: JsonObject,
                    ctx: ToolRunContext) -> CallToolResult:
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        client = self._client
        if client is None:
            raise ToolError(self._gone_message(), code="MCP_SERVER_GONE")
        ctx.signal.raise_if_aborted()
        arguments = cast(dict[str, Any], thaw(args))
        try:
            # An abort cancels the request task; the SDK then tells the server
            # (notifications/cancelled, or closing the request's HTTP stream).
            # A progress callback makes the SDK send a progress token with the request.
            return await ctx.signal.run(client.call_tool(
                mcp_name, arguments, progress_callback=self._progress_reporter(ctx)))
        except DshError:
            raise
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                raise ToolError(self._gone_message(exc.message), code="MCP_SERVER_GONE") from None
            raise ToolError(f"MCP server {self.name!r} rejected the call to {mcp_name!r} "
                            f"(error {exc.code}): {exc.message}", code="MCP_ERROR") from None
        except Exception as exc:
            raise ToolError(f"calling {mcp_name!r} on MCP server {self.name!r} failed: "
                            f"{_describe(exc)}", code="MCP_ERROR") from None

    def _progress_reporter(self, ctx: ToolRunContext) -> ProgressFnT:
        registry = _registry_of(self._target)

        async def report(progress: float, total: float | None, message: str | None) -> None:
            registry.emit(ToolProgressEvent(
                kind="tool/progress", call_id=ctx.call_id, name=ctx.name, progress=progress,
                total=total, message=message, time=time.time()))

        return report

    def _gone_message(self, reason: str | None = None) -> str:
        why = reason or self._gone or "not connected"
        return f"MCP server {self.name!r} is gone ({why})" + self._stderr_tail()

    def _stderr_tail(self) -> str:
        """The end of a stdio server's stderr, read without moving the shared offset."""
        stream = self._stderr
        if stream is None or stream.closed:
            return ""
        fd = stream.fileno()
        size = os.fstat(fd).st_size
        data = os.pread(fd, _STDERR_TAIL, max(0, size - _STDERR_TAIL))
        text = data.decode("utf-8", "replace").strip()
        return f"; its stderr ends with:\n{text}" if text else ""


async def _first_set(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


def _registry_of(target: ToolRegistry | AgentScope) -> ToolRegistry:
    """The registry whose event sinks hear about ``target``'s calls."""
    if isinstance(target, ToolRegistry):
        return target
    owner = target._registry  # a scope's owner is its registry
    assert isinstance(owner, ToolRegistry)
    return owner


_TASK_ONLY = ("its execution.taskSupport is 'required': it runs only as an MCP task, "
              "which this client does not drive")


def _task_only(tool: Tool) -> bool:
    execution = getattr(tool, "execution", None)
    return getattr(execution, "task_support", None) == "required"


def _load_sdk() -> None:
    try:
        from mcp import Client  # noqa: F401 - a name, so a stray namespace "mcp" does not pass
    except ImportError:
        raise McpConnectError("MCP servers need the MCP SDK: pip install 'dsh-jupyter[mcp]' "
                              "(or pip install mcp)") from None


def _describe(exc: BaseException) -> str:
    """The first real failure inside (nested) exception groups, as ``Type: message``."""
    while isinstance(exc, BaseExceptionGroup):
        leaves = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = (leaves or list(exc.exceptions))[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
