"""Capture ``tools/list`` of the npm MCP servers the discovery catalog is built from.

Run once (it needs Node and the npm registry); the output is committed as
``mcp_servers.tools.json`` so the tests and ``bench/sdk.py`` stay offline::

    python tests/golden/discovery/capture_mcp_tools.py

Each entry keeps what a registry would see of a tool: ``name``, ``description``,
``inputSchema`` and, when the server declares one, ``outputSchema``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[1] / "support"))

from npm_support import npm_bin  # noqa: E402

SERVERS = (
    ("@modelcontextprotocol/server-everything", "2026.8.31", "mcp-server-everything",
     ["stdio"]),
    ("@modelcontextprotocol/server-filesystem", "2026.8.31", "mcp-server-filesystem",
     ["{root}"]),
)


async def list_tools(binary: Path, args: list[str]) -> list[dict[str, object]]:
    params = StdioServerParameters(command=str(binary), args=args)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
    tools = []
    for tool in sorted(listed.tools, key=lambda t: t.name):
        entry: dict[str, object] = {"name": tool.name, "description": tool.description or "",
                                    "inputSchema": tool.input_schema}
        if tool.output_schema:
            entry["outputSchema"] = tool.output_schema
        tools.append(entry)
    return tools


async def main() -> None:
    servers = []
    with tempfile.TemporaryDirectory() as root:
        for package, version, executable, args in SERVERS:
            binary = npm_bin(package, version, executable)
            tools = await list_tools(binary, [a.format(root=root) for a in args])
            servers.append({"package": package, "version": version, "tools": tools})
    out = HERE / "mcp_servers.tools.json"
    out.write_text(json.dumps({"servers": servers}, indent=1, sort_keys=True) + "\n")
    print(f"{out}: {sum(len(s['tools']) for s in servers)} tools")


if __name__ == "__main__":
    asyncio.run(main())
