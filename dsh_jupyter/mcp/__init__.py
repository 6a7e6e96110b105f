"""MCP servers as tool sources.

``connect_mcp(registry, stdio=[...])`` or ``connect_mcp(registry, url=...)`` connects
to a Model Context Protocol server and registers its tools for the life of an
``async with`` block; ``serve_mcp(registry)`` serves a registry's tools to MCP clients
(``dsh-jupyter serve-mcp``); see ``docs/mcp.md``. Importing this package does not import
the MCP SDK: that happens when a connection is entered.
"""

from .adapt import UNVALIDATED_NOTE, ConcurrencySafe
from .connect import connect_mcp
from .connection import McpConnectError, McpConnection
from .serve import McpService, serve_mcp

__all__ = ["UNVALIDATED_NOTE", "ConcurrencySafe", "McpConnectError", "McpConnection",
           "McpService", "connect_mcp", "serve_mcp"]
