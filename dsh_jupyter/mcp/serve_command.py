"""``dsh-jupyter serve-mcp``: serve a registry until the client goes away or a signal stops it.

Everything it says goes to stderr: on stdio, stdout carries the protocol.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from ..codemode.registry import ToolRegistry
from ..errors import DshError
from ..registry.scope import AgentScope
from .serve import TOKEN_ENV, serve_mcp

__all__ = ["run_serve"]


def run_serve(open_target: Callable[[], AbstractAsyncContextManager[ToolRegistry | AgentScope]],
              options: argparse.Namespace) -> int:
    """Serve what ``open_target()`` yields (a registry or scope, entered for the whole
    serving, so one whose tools come from MCP servers works too) as ``options`` say
    (``--mode``, ``--http``, ``--token``, ``--allow-host``, ``--name``)."""
    token = options.token
    if token is not None and options.http is None:
        raise SystemExit("--token applies to --http serving")
    if options.allow_hosts and options.http is None:
        raise SystemExit("--allow-host applies to --http serving")
    if token is None and options.http is not None:
        token = os.environ.get(TOKEN_ENV) or None
    try:
        return asyncio.run(_serve(open_target, options, token))
    except KeyboardInterrupt:
        return 0


async def _serve(open_target: Callable[[], AbstractAsyncContextManager[ToolRegistry | AgentScope]],
                 options: argparse.Namespace, token: str | None) -> int:
    main = asyncio.current_task()
    assert main is not None
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, main.cancel)
    try:
        async with open_target() as target:
            try:
                service = serve_mcp(target, mode=options.mode, http=options.http, token=token,
                                    allow_hosts=options.allow_hosts, name=options.name)
            except DshError as exc:
                raise SystemExit(f"serve-mcp: {exc}") from None
            generated = options.http is not None and token is None and service.token is not None
            async with service:
                if service.url is not None:
                    if generated:
                        _say(f"bearer token (send 'Authorization: Bearer <token>'): "
                             f"{service.token}")
                    _say(f"serving MCP (mode {service.mode}) at {service.url}")
                else:
                    _say(f"serving MCP (mode {service.mode}) on stdio")
                await service.wait()
    except asyncio.CancelledError:
        return 0
    except DshError as exc:
        _say(f"error: {exc}")
        return 1
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
    return 0


def _say(message: str) -> None:
    print(f"dsh-jupyter serve-mcp: {message}", file=sys.stderr, flush=True)
