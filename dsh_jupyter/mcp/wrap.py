"""``dsh-jupyter serve-mcp --wrap``: any MCP server's tools, served again in Code Mode.

::

    dsh-jupyter serve-mcp --wrap -- npx -y @modelcontextprotocol/server-filesystem /data
    dsh-jupyter serve-mcp --wrap-url http://127.0.0.1:9000/mcp --mode discovery

:func:`open_wrapped` connects to the one server (:func:`~dsh_jupyter.mcp.connect_mcp`:
a command spoken to over stdio, or a streamable-HTTP URL) and registers its tools in a
registry of their own; ``serve-mcp`` serves that registry, so every call, and every call a
``run_code`` program makes, goes through the pipeline: validation, the ``--policy`` rules,
approvals by elicitation, events. The server lives exactly as long as the serving: it is
started before anything is served and stopped (its whole process tree) when serving
stops; when it goes away first, serving stops too (:meth:`Wrapped.wait_gone`).

A wrapped command inherits this process's whole environment and working directory, as it
would if the client had started it itself: the variables a client's configuration sets
for ``serve-mcp`` (a token, say) reach the server. Its stderr is kept apart from the
protocol and quoted when it fails to start or goes away.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from ..codemode.registry import ToolRegistry
from .connect import connect_mcp
from .connection import McpConnection

__all__ = ["Wrapped", "open_wrapped"]


@dataclass(frozen=True, slots=True)
class Wrapped:
    """A wrapped server's tools (``registry``) and the connection that registered them."""

    registry: ToolRegistry
    connection: McpConnection

    async def wait_gone(self) -> str:
        """Wait until the wrapped server is gone; why, with the end of its stderr."""
        return await self.connection.wait_gone()


@asynccontextmanager
async def open_wrapped(*, stdio: Sequence[str] | None = None, url: str | None = None,
                       headers: Mapping[str, str] | None = None,
                       connect_timeout: float = 30.0) -> AsyncIterator[Wrapped]:
    """Connect to one MCP server (``stdio=[command, *args]`` or ``url=``) and yield its
    tools in a new registry, for the length of the block.

    Raises :class:`~dsh_jupyter.errors.McpConnectError` when the server cannot be started,
    reached or listed (the message ends with the tail of a command's stderr).
    """
    registry = ToolRegistry()
    env = _inherited_environment() if stdio is not None else None
    async with connect_mcp(registry, stdio=stdio, url=url, env=env, headers=headers,
                           connect_timeout=connect_timeout) as connection:
        yield Wrapped(registry, connection)


def _inherited_environment() -> dict[str, str]:
    """This process's environment but exported shell functions (``()``-values), which the
    SDK drops from its own default environment for safety."""
    return {key: value for key, value in os.environ.items() if not value.startswith("()")}
