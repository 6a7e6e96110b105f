"""``connect_mcp``: the entry point, and the checks on its options."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..codemode.registry import ToolRegistry
from ..errors import RegistrationError
from ..registry.scope import AgentScope
from .adapt import ConcurrencySafe
from .connection import McpConnection

__all__ = ["connect_mcp"]

_CLIENT_OWNED = frozenset({"message_handler"})


def connect_mcp(
    target: ToolRegistry | AgentScope,
    *,
    stdio: Sequence[str] | None = None,
    url: str | None = None,
    prefix: str = "",
    concurrency_safe: ConcurrencySafe = False,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    headers: Mapping[str, str] | None = None,
    connect_timeout: float = 30.0,
    client_options: Mapping[str, Any] | None = None,
) -> McpConnection:
    """Connect to an MCP server and register its tools in ``target`` (a registry or scope).

    Give exactly one of ``stdio`` (a command to start, e.g. ``["npx", "server"]``, with
    optional ``env`` and ``cwd``) or ``url`` (a streamable-HTTP endpoint, with optional
    ``headers``). Use as ``async with connect_mcp(...) as server:``; the tools are
    registered as ``prefix + name`` until the block ends, and ``tools/list_changed``
    notifications keep them current. ``concurrency_safe`` opts tools into overlapping
    Code Mode calls: ``"read-only-hint"`` trusts the server's ``readOnlyHint``.
    ``client_options`` are passed to :class:`mcp.Client` (e.g. ``mode="legacy"``,
    ``elicitation_callback``). Needs the ``mcp`` package (``pip install dsh-jupyter[mcp]``).
    """
    _check_options(target, stdio, url, prefix, env, cwd, headers, connect_timeout,
                   client_options)
    return McpConnection(target, stdio=stdio, url=url, prefix=prefix,
                         concurrency_safe=concurrency_safe, env=env, cwd=cwd, headers=headers,
                         connect_timeout=connect_timeout, client_options=client_options)


def _check_options(target: object, stdio: Sequence[str] | None, url: str | None, prefix: object,
                   env: Mapping[str, str] | None, cwd: object, headers: Mapping[str, str] | None,
                   connect_timeout: object, client_options: Mapping[str, Any] | None) -> None:
    if not isinstance(target, ToolRegistry | AgentScope):
        raise RegistrationError(f"connect_mcp registers into a ToolRegistry or an AgentScope, "
                                f"not {type(target).__name__}")
    if (stdio is None) == (url is None):
        raise RegistrationError("connect_mcp needs exactly one of stdio=[command, *args] "
                                "or url='http://host:port/mcp'")
    if stdio is not None and (isinstance(stdio, str) or not stdio
                              or not all(isinstance(part, str) for part in stdio)):
        raise RegistrationError(f"stdio must be a non-empty list of strings (the command and its "
                                f"arguments), e.g. [sys.executable, 'server.py'], got {stdio!r}")
    if url is not None and (not isinstance(url, str)
                            or not url.startswith(("http://", "https://"))):
        raise RegistrationError(f"url must be an http(s) URL of a streamable-HTTP endpoint, "
                                f"got {url!r}")
    if stdio is not None and headers is not None:
        raise RegistrationError("headers apply to url= connections; a stdio server takes env=")
    if url is not None and (env is not None or cwd is not None):
        raise RegistrationError("env and cwd apply to stdio= servers, not url= connections")
    if not isinstance(prefix, str):
        raise RegistrationError(f"prefix must be a string, got {prefix!r}")
    if (isinstance(connect_timeout, bool) or not isinstance(connect_timeout, int | float)
            or not connect_timeout > 0):
        raise RegistrationError(f"connect_timeout must be a positive number of seconds, "
                                f"got {connect_timeout!r}")
    owned = _CLIENT_OWNED & set(client_options or {})
    if owned:
        raise RegistrationError(f"client_options may not set {sorted(owned)}: the connection "
                                "uses it to follow tools/list_changed")
