"""``dsh-jupyter serve-mcp``: serve a registry until the client goes away or a signal stops it.

The registry comes from ``--tools MODULE:ATTR``, or is another MCP server's tools
(``--wrap -- CMD ...``, ``--wrap-url URL``: :mod:`~dsh_jupyter.mcp.wrap`); a wrapped
server that goes away stops the serving with an error. ``--policy FILE`` adds deny and ask
rules by tool name (:mod:`~dsh_jupyter.registry.name_rules`) for the serving; ``--journal
PATH`` journals its ``run_code`` runs, so an approval survives a restart of the server
(:mod:`~dsh_jupyter.mcp.serve_journal`).

Everything it says goes to stderr, one line per thing said (log records too, without
tracebacks): on stdio, stdout carries the protocol.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import TypeAlias

from ..codemode.registry import ToolRegistry
from ..errors import DshError, McpConnectError
from ..registry.name_rules import NameRules, PolicyFileError, read_name_rules
from ..registry.scope import RESERVED_NAME, AgentScope
from .serve import TOKEN_ENV, serve_mcp
from .wrap import Wrapped

__all__ = ["Served", "run_serve"]

Served: TypeAlias = ToolRegistry | AgentScope | Wrapped
"""What ``open_target`` yields: a registry or scope, or a wrapped server's tools."""

_PREFIX = "dsh-jupyter serve-mcp"


def run_serve(open_target: Callable[[], AbstractAsyncContextManager[Served]],
              options: argparse.Namespace) -> int:
    """Serve what ``open_target()`` yields (entered for the whole serving, so one whose
    tools come from MCP servers works too) as ``options`` say (``--mode``, ``--http``,
    ``--token``, ``--allow-host``, ``--name``, ``--policy``, ``--journal``)."""
    token = options.token
    if token is not None and options.http is None:
        raise SystemExit("--token applies to --http serving")
    if options.allow_hosts and options.http is None:
        raise SystemExit("--allow-host applies to --http serving")
    if token is None and options.http is not None:
        token = os.environ.get(TOKEN_ENV) or None
    rules = None
    if options.policy is not None:
        try:
            rules = read_name_rules(options.policy)
        except PolicyFileError as exc:
            raise SystemExit(f"{_PREFIX}: {exc}") from None
    _log_one_line_to_stderr()
    try:
        return asyncio.run(_serve(open_target, options, token, rules))
    except KeyboardInterrupt:
        return 0


async def _serve(open_target: Callable[[], AbstractAsyncContextManager[Served]],
                 options: argparse.Namespace, token: str | None,
                 rules: NameRules | None) -> int:
    main = asyncio.current_task()
    assert main is not None
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, main.cancel)
    try:
        async with AsyncExitStack() as stack:
            try:
                opened = await stack.enter_async_context(open_target())
            except McpConnectError as exc:  # a wrapped server that cannot be started
                source = _wrap_option(options)
                _say_error(f"{source}: {exc}" if source else str(exc))
                return 1
            wrapped = opened if isinstance(opened, Wrapped) else None
            target = opened.registry if isinstance(opened, Wrapped) else opened
            if wrapped is not None:
                _say_wrapped(wrapped)
            if rules is not None:
                stack.callback(target.on_pre_execute(rules.hook()))
                for action, pattern in rules.unmatched(_tool_names(target)):
                    _say(f"policy file {options.policy}: {action} {pattern!r} matches none "
                         f"of the served tools")
            try:
                service = serve_mcp(target, mode=options.mode, http=options.http, token=token,
                                    allow_hosts=options.allow_hosts, name=options.name,
                                    journal=options.journal)
            except DshError as exc:
                raise SystemExit(f"serve-mcp: {exc}") from None
            generated = options.http is not None and token is None and service.token is not None
            async with service:
                if options.journal is not None:
                    _say(f"journaling run_code runs to {options.journal}")
                if service.url is not None:
                    if generated:
                        _say(f"bearer token (send 'Authorization: Bearer <token>'): "
                             f"{service.token}")
                    _say(f"serving MCP (mode {service.mode}) at {service.url}")
                else:
                    _say(f"serving MCP (mode {service.mode}) on stdio")
                if wrapped is None:
                    await service.wait()
                    return 0
                gone = await _first(service.wait(), wrapped.wait_gone())
                if gone is not None:
                    _say_error(f"the wrapped {gone}")
                    return 1
    except asyncio.CancelledError:
        return 0
    except DshError as exc:
        _say_error(str(exc))
        return 1
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
    return 0


async def _first(served: Coroutine[object, object, None],
                 gone: Coroutine[object, object, str]) -> str | None:
    """``None`` when ``served`` ends first, else what ``gone`` returned; the other is
    cancelled and awaited."""
    serving, going = asyncio.ensure_future(served), asyncio.ensure_future(gone)
    try:
        await asyncio.wait({serving, going}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (serving, going):
            task.cancel()
        await asyncio.wait({serving, going})
    if serving.done() and not serving.cancelled():
        serving.result()  # raises what stopped the transport, as service.wait() would
        return None
    return going.result()


def _wrap_option(options: argparse.Namespace) -> str | None:
    """``--wrap`` or ``--wrap-url`` when serving a wrapped server, else ``None``."""
    if getattr(options, "wrap", False):
        return "--wrap"
    return "--wrap-url" if getattr(options, "wrap_url", None) else None


def _tool_names(target: ToolRegistry | AgentScope) -> list[str]:
    registry = target if isinstance(target, ToolRegistry) else target._registry
    assert isinstance(registry, ToolRegistry)
    scope = target if isinstance(target, AgentScope) else None
    return [name for name in registry.visible(scope) if name != RESERVED_NAME]


def _say_wrapped(wrapped: Wrapped) -> None:
    connection = wrapped.connection
    count = len(connection.tools)
    _say(f"wrapping MCP server {connection.name!r}: {count} tool{'s' * (count != 1)}")
    for name, reason in connection.skipped.items():
        _say(f"not serving {name!r}: {reason}")


def _say(message: str) -> None:
    print(f"{_PREFIX}: {message}", file=sys.stderr, flush=True)


def _say_error(message: str) -> None:
    """``error: <first line>``; the lines after it (a server's stderr) indented below."""
    first, *rest = message.splitlines() or [""]
    _say(f"error: {first}")
    for line in rest:
        print(f"    {line}", file=sys.stderr, flush=True)


class _OneLine(logging.Formatter):
    """``<prefix>: <logger>: <message>``, and an exception as its type and the first line of
    its message, not a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{_PREFIX}: {record.name}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            first = (str(exc).strip().splitlines() or [""])[0].strip()[:200]
            text += f" ({type(exc).__name__}{': ' + first if first else ''})"
        return text.replace("\n", " | ")


def _log_one_line_to_stderr() -> None:
    """Warnings and errors of any logger (the SDK's too) as one line each on stderr, unless
    logging is configured already."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    handler.setLevel(logging.WARNING)
    root.addHandler(handler)
