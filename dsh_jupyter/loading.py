"""Tools named ``MODULE:ATTR``, as the CLI's ``--tools`` and exported notebooks name them:
import the module, take the attribute, call it if it is a function, enter it if it is an
async context manager. A spec that names nothing usable raises :class:`ToolsSpecError`
saying what it named instead (the CLI prints it and exits)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from .errors import RegistrationError
from .registry import AgentScope, ToolRegistry

__all__ = ["ToolsSpecError", "load_registry", "load_tools", "open_registry", "open_tools"]


class ToolsSpecError(RegistrationError):
    """A ``MODULE:ATTR`` spec that names no registry or scope (the message says what)."""


def load_registry(spec: str) -> ToolRegistry:
    """Import ``MODULE:ATTR``; ATTR may be a registry or a function returning one."""
    target = _import_target(spec)
    if callable(target) and not isinstance(target, ToolRegistry):
        target = target()
    if not isinstance(target, ToolRegistry):
        raise ToolsSpecError(f"{spec!r} is a {type(target).__name__}, not a ToolRegistry")
    return target


def load_tools(spec: str) -> ToolRegistry | AgentScope:
    """Import ``MODULE:ATTR``: a registry or an agent scope, or a function returning one."""
    target = _import_target(spec)
    if callable(target) and not isinstance(target, ToolRegistry | AgentScope):
        target = target()
    return _tools(spec, target, "is")


@asynccontextmanager
async def open_tools(spec: str) -> AsyncIterator[ToolRegistry | AgentScope]:
    """``MODULE:ATTR`` as a registry or scope for the length of the block. ATTR may be a
    registry or an agent scope, a function returning one, or an async context manager
    yielding one (or a function returning such a manager, e.g. an
    ``@asynccontextmanager`` function): that is how a registry with MCP tools is given,
    since its connections live inside ``async with``::

        @asynccontextmanager
        async def tools():
            registry = ToolRegistry()
            async with connect_mcp(registry, stdio=["mcp-server-time"]):
                yield registry
    """
    target = _import_target(spec)
    if callable(target) and not isinstance(target, ToolRegistry | AgentScope):
        target = target()
    if isinstance(target, AbstractAsyncContextManager):
        async with target as entered:
            yield _tools(spec, entered, "yields")
    else:
        yield _tools(spec, target, "is")


@asynccontextmanager
async def open_registry(spec: str) -> AsyncIterator[ToolRegistry]:
    """:func:`open_tools` where only a registry will do."""
    async with open_tools(spec) as tools:
        if not isinstance(tools, ToolRegistry):
            raise ToolsSpecError(f"{spec!r} is an AgentScope; name its registry and pass "
                                 f"--scope {tools.name}")
        yield tools


def _tools(spec: str, value: object, verb: str) -> ToolRegistry | AgentScope:
    if not isinstance(value, ToolRegistry | AgentScope):
        raise ToolsSpecError(f"{spec!r} {verb} a {type(value).__name__}, not a ToolRegistry or "
                             "an AgentScope (or an async context manager yielding one)")
    return value


def _import_target(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ToolsSpecError(f"--tools expects MODULE:ATTR, got {spec!r}")
    sys.path.insert(0, str(Path.cwd()))
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ToolsSpecError(f"cannot load {spec!r}: {exc}") from None
