"""``serve_mcp``: a registry (or one agent scope) as an MCP server, over stdio or HTTP.

::

    async with serve_mcp(registry, http="127.0.0.1:8765") as service:
        print(service.url)       # http://127.0.0.1:8765/mcp
        await service.wait()     # until the block is cancelled (stdio: until stdin closes)

The lifetime is the ``async with`` block. Entering it applies ``mode`` (restored on exit),
opens a :class:`~dsh_jupyter.kernel.KernelRuntime` when a code mode needs one and the
registry has none, opens and attaches the ``journal`` when one is given, attaches the
per-server approval service (elicitation, see :mod:`~dsh_jupyter.mcp.serve_calls`) and
starts the transport. Leaving it stops the transport, aborts the calls still running and
awaits them, and undoes all of that.

The calls are :mod:`~dsh_jupyter.mcp.serve_calls`, the tool list and results
:mod:`~dsh_jupyter.mcp.serve_tools`, HTTP :mod:`~dsh_jupyter.mcp.serve_http`, what a
journal adds :mod:`~dsh_jupyter.mcp.serve_journal`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, cast

from ..codemode.registry import ToolRegistry
from ..durable.sqlite import SqliteJournalStore
from ..durable.store import JournalStore
from ..errors import RegistrationError
from ..registry.policy import ApprovalService
from ..registry.scope import MODES, AgentScope, PresentationMode
from .serve_http import allowed_host, needs_token

if TYPE_CHECKING:
    from mcp.server import Server

    from .serve_calls import ServedCalls
    from .serve_http import HttpTransport
    from .serve_journal import ServedJournal

__all__ = ["McpService", "serve_mcp"]

_log = logging.getLogger(__name__)

TOKEN_ENV = "DSH_MCP_TOKEN"
"""Environment variable ``dsh-jupyter serve-mcp --http`` reads the bearer token from."""


def serve_mcp(
    target: ToolRegistry | AgentScope,
    *,
    mode: PresentationMode | None = None,
    http: str | None = None,
    token: str | None = None,
    allow_hosts: Sequence[str] = (),
    name: str = "dsh-jupyter",
    approval_fallback: ApprovalService | None = None,
    answer_timeout: float = 600.0,
    journal: JournalStore | str | os.PathLike[str] | None = None,
) -> McpService:
    """Serve the tools ``target`` (a registry, or an agent scope) presents, as an MCP server.

    Use as ``async with serve_mcp(...) as service: await service.wait()``. Without
    ``http`` it speaks MCP on this process's stdin and stdout (what an MCP client that
    starts the server as a command expects); with ``http="HOST:PORT"`` it serves
    streamable HTTP at ``http://HOST:PORT/mcp`` (``http="PORT"`` binds 127.0.0.1; port 0
    picks a free port: ``service.url``). Bound to any address but 127.0.0.1, ::1 or
    localhost (127.0.0.2, 0.0.0.0, a LAN address) it requires
    ``Authorization: Bearer <token>`` and generates ``token`` when none is given
    (``service.token``); on those three a given token is required too. A request's ``Host``
    (and a browser's ``Origin``) must name the address it reached with the port served, or
    one of ``allow_hosts`` (names, such as the one a reverse proxy forwards): this stops DNS
    rebinding (421 for a Host, 403 for an Origin).

    ``mode`` overrides the presentation while serving (``"native"``, ``"code"``,
    ``"both"`` or ``"discovery"``). Every call runs through the registry's pipeline; an
    ``Ask`` becomes an elicitation when the client supports it, else ``approval_fallback``
    (default: the registry's own ``approval``) answers, or the call is denied.
    ``answer_timeout`` bounds how long a call waits for a 2026-era client to come back with
    an answer.

    ``journal`` (a path, or a :class:`~dsh_jupyter.durable.JournalStore`; a registry made
    with ``journal=`` is served with its own) journals every ``run_code`` run while
    serving, so an approval survives a restart: the ``requestState`` of a journaled run is
    ``<run_id>.<mac>``, signed with the journal's secret, and a retry carrying it after
    a restart (or after ``answer_timeout``, which leaves the run ``waiting`` in the
    journal) resumes the run with the retry's answer, or returns its recorded result
    when it has ended (docs/approvals-durable.md).
    Needs the ``mcp`` extra.
    """
    if not isinstance(target, ToolRegistry | AgentScope):
        raise RegistrationError(f"serve_mcp serves a ToolRegistry or an AgentScope, "
                                f"not {type(target).__name__}")
    if mode is not None and mode not in MODES:
        raise RegistrationError(f"mode={mode!r}: expected one of {', '.join(MODES)}")
    host, port = _parse_http(http) if http is not None else ("", 0)
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise RegistrationError("token must be a non-empty string")
    if token is not None and http is None:
        raise RegistrationError("token applies to http= serving; stdio has no network peer")
    if isinstance(allow_hosts, str):
        raise RegistrationError(f"allow_hosts is a list of names, got {allow_hosts!r}")
    if allow_hosts and http is None:
        raise RegistrationError("allow_hosts applies to http= serving")
    hosts = tuple(allowed_host(name) for name in allow_hosts)
    if http is not None and token is None and needs_token(host):
        token = secrets.token_urlsafe(32)
    if not answer_timeout > 0:
        raise RegistrationError(f"answer_timeout must be a positive number of seconds, "
                                f"got {answer_timeout!r}")
    registry = target if isinstance(target, ToolRegistry) else target._registry
    if journal is not None and isinstance(registry, ToolRegistry) \
            and registry.journal is not None:
        raise RegistrationError("the registry has a journal already (ToolRegistry(journal="
                                "...)): serve it without journal=, it is served with its own")
    return McpService(target, mode=mode, host=host if http is not None else None, port=port,
                      token=token, allow_hosts=hosts, name=name,
                      approval_fallback=approval_fallback, answer_timeout=answer_timeout,
                      journal=journal)


class McpService:
    """A registry being served over MCP; build it with :func:`serve_mcp`."""

    def __init__(self, target: ToolRegistry | AgentScope, *, mode: PresentationMode | None,
                 host: str | None, port: int, token: str | None,
                 allow_hosts: tuple[str, ...], name: str,
                 approval_fallback: ApprovalService | None, answer_timeout: float,
                 journal: JournalStore | str | os.PathLike[str] | None = None) -> None:
        self._scope = target if isinstance(target, AgentScope) else None
        registry = target._registry
        assert isinstance(registry, ToolRegistry)
        self._registry: ToolRegistry = registry
        self._mode = mode
        self._host = host
        self._port = port
        self._allow_hosts = allow_hosts
        self.token = token
        """The bearer token HTTP requests must carry, or ``None`` (stdio, or 127.0.0.1, ::1
        or localhost without a token)."""
        self._name = name
        self._fallback = approval_fallback
        self._answer_timeout = answer_timeout
        self._journal = journal
        self._stack: AsyncExitStack | None = None
        self._transport: asyncio.Task[None] | None = None
        self._http: HttpTransport | None = None
        self.url: str | None = None
        """``http://HOST:PORT/mcp`` once entered with ``http=``; ``None`` for stdio."""

    def __repr__(self) -> str:
        where = self.url or ("stdio" if self._host is None else f"{self._host}:{self._port}")
        return f"<McpService {self._name!r} {where}>"

    @property
    def mode(self) -> PresentationMode:
        """The presentation being served."""
        return self._registry.mode_for(self._scope)

    async def __aenter__(self) -> Self:
        if self._stack is not None:
            raise RegistrationError("an McpService can be entered only once; call serve_mcp "
                                    "again")
        from .serve_calls import ElicitingApproval, ServedCalls

        # Unwinds in reverse: calls aborted and awaited, transport stopped, list changes no
        # longer announced, approval and event sink detached, runtime closed, journal
        # detached and closed, mode restored.
        stack = self._stack = AsyncExitStack()
        try:
            self._apply_mode(stack)
            served_journal = await self._open_journal(stack)
            await self._open_runtime(stack)
            calls = ServedCalls(self._registry, self._scope, answer_timeout=self._answer_timeout,
                                journal=served_journal)
            stack.callback(self._registry.on_event(calls.on_event))
            previous = self._registry.approval
            self._registry.approval = ElicitingApproval(
                calls, self._fallback if self._fallback is not None else previous)
            stack.callback(setattr, self._registry, "approval", previous)
            changes = ListChanges()
            stack.push_async_callback(changes.aclose)
            stack.callback(self._registry.on_change(changes.changed))
            server = self._server(calls, changes)
            if self._host is None:
                self._transport = asyncio.create_task(self._serve_stdio(server),
                                                      name="mcp stdio server")
            else:
                await self._start_http(server)
            stack.push_async_callback(self._stop_transport)
            stack.push_async_callback(calls.aclose)
        except BaseException:
            await stack.aclose()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._stack is not None:
            await self._stack.aclose()

    async def wait(self) -> None:
        """Wait until the transport ends: stdin closed (stdio), or the server stopped."""
        if self._transport is None:
            raise RegistrationError("enter the service first: async with serve_mcp(...)")
        await asyncio.shield(self._transport)

    # Setting up ------------------------------------------------------------------------
    def _apply_mode(self, stack: AsyncExitStack) -> None:
        mode = self._mode
        if mode is None or mode == self._registry.mode_for(self._scope):
            return
        scope = self._scope
        if scope is None:
            registry, previous = self._registry, self._registry.mode
            registry.mode = mode
            stack.callback(setattr, registry, "mode", previous)
            return
        if scope._mode is not None:
            raise RegistrationError(
                f"scope {scope.name!r} presents as {scope._mode!r} (its present_as); serve it "
                f"without mode=, or undo that present_as first")
        stack.callback(scope.present_as(mode))

    async def _open_journal(self, stack: AsyncExitStack) -> ServedJournal | None:
        """Attach ``journal=`` (a path is opened now, so a bad file fails the start), and
        read the secret of the registry's journal, if it has one."""
        from .serve_journal import ServedJournal, served_secret

        journal = self._journal
        if isinstance(journal, str | os.PathLike):
            journal = await stack.enter_async_context(SqliteJournalStore(journal))
        if journal is not None:
            stack.callback(self._registry.attach_journal(journal))
        store = self._registry.journal
        if store is None:
            return None
        return ServedJournal(store, await served_secret(store))

    async def _open_runtime(self, stack: AsyncExitStack) -> None:
        if self._registry.mode_for(self._scope) == "native" or self._registry.code_runtime:
            return
        from ..kernel import KernelRuntime

        runtime = await stack.enter_async_context(KernelRuntime())
        self._registry.code_runtime = runtime
        stack.callback(setattr, self._registry, "code_runtime", None)

    def _server(self, calls: ServedCalls, changes: ListChanges) -> Server[Any]:
        from mcp.server import Server
        from mcp.server.subscriptions import ListenHandler
        from mcp.types import ListToolsResult, PaginatedRequestParams

        from .serve_tools import any_json_output, instructions, served_tools

        registry, scope = self._registry, self._scope

        async def list_tools(ctx: Any, _params: PaginatedRequestParams | None
                             ) -> ListToolsResult:
            any_json = any_json_output(ctx.protocol_version)
            return ListToolsResult(tools=served_tools(registry, scope, any_json=any_json))

        return Server(self._name, version=_version(),
                      instructions=instructions(registry, scope),
                      on_list_tools=list_tools, on_call_tool=calls.call_tool,
                      on_subscriptions_listen=ListenHandler(changes.bus))

    # Transports ------------------------------------------------------------------------
    async def _serve_stdio(self, server: Server[Any]) -> None:
        from mcp.server.stdio import stdio_server

        from .serve_stdin import claimed_stdin

        with claimed_stdin() as stdin:  # stopping must not wait for the client's next line
            async with stdio_server(stdin=cast(Any, stdin)) as (read, write):
                await server.run(read, write, server.create_initialization_options())

    async def _start_http(self, server: Server[Any]) -> None:
        from mcp.server.transport_security import TransportSecuritySettings

        from .serve_http import HttpTransport

        assert self._host is not None
        # HttpTransport checks Host and Origin for every bind; the SDK's own check knows only
        # 127.0.0.1, localhost and ::1 and would refuse the allowed names.
        unchecked = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        app = server.streamable_http_app(host=self._host, transport_security=unchecked)
        http = HttpTransport(app, self._host, self._port, self.token, self._allow_hosts)
        self.url = http.url
        self._transport = await http.start()
        self._http = http

    async def _stop_transport(self) -> None:
        task = self._transport
        if task is None or task.done():
            return
        if self._http is not None:
            self._http.stop()
        else:
            task.cancel()
        cancelled = False
        while not task.done():
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:
                cancelled = True
                task.cancel()
        if not task.cancelled() and task.exception() is not None:
            _log.warning("the MCP transport stopped with an error: %r", task.exception())
        if cancelled:
            raise asyncio.CancelledError


class ListChanges:
    """Announces registry changes as ``tools/list_changed`` to 2026-era clients listening
    (``subscriptions/listen``); one announcement per burst of changes."""

    def __init__(self) -> None:
        from mcp.server.subscriptions import InMemorySubscriptionBus

        self.bus = InMemorySubscriptionBus()
        self._task: asyncio.Task[None] | None = None

    def changed(self, _change: object) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._announce())

    async def _announce(self) -> None:
        from mcp.server.subscriptions import ToolsListChanged

        await asyncio.sleep(0)  # the rest of a burst (register several tools) lands first
        await self.bus.publish(ToolsListChanged())

    async def aclose(self) -> None:
        if self._task is not None:
            await asyncio.wait({self._task})


def _parse_http(http: object) -> tuple[str, int]:
    """``"HOST:PORT"``, ``":PORT"`` or ``"PORT"`` (both on 127.0.0.1); IPv6 as ``[::1]:PORT``."""
    if not isinstance(http, str):
        raise RegistrationError(f"http must be 'HOST:PORT', got {http!r}")
    host, _, port = http.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or int(port) > 65535:
        raise RegistrationError(f"http must be 'HOST:PORT' or 'PORT' (port 0 picks a free "
                                f"one; the host defaults to 127.0.0.1), got {http!r}")
    return host, int(port)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dsh-jupyter")
    except PackageNotFoundError:
        return ""
