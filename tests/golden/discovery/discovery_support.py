"""A large, realistic tool catalog for discovery tests and ``bench/sdk.py``, built
deterministically from committed schemas:

- the 20 realistic tools of ``tests/golden/sdk/realistic.tools.json``, unprefixed;
- the tools of two npm MCP servers (``mcp_servers.tools.json``, captured from the real
  servers at the versions it records), under ``fs_`` and ``demo_`` as ``connect_mcp``'s
  ``prefix`` would register them;
- then copies of all of those under the prefixes of further imagined servers, in a fixed
  order, until the catalog has ``count`` tools.

``large_catalog(n)`` is the first ``n`` tools of that sequence, so a smaller catalog is
part of every larger one.
"""

from __future__ import annotations

import json
from pathlib import Path

from dsh_jupyter.codemode.sdk_python import SdkTool

HERE = Path(__file__).parent
REALISTIC = HERE.parent / "sdk" / "realistic.tools.json"
MCP_SERVERS = HERE / "mcp_servers.tools.json"
SERVER_PREFIXES = {"@modelcontextprotocol/server-filesystem": "fs_",
                   "@modelcontextprotocol/server-everything": "demo_"}
MORE_PREFIXES = ("github_", "jira_", "slack_", "notion_", "gdrive_", "postgres_", "sentry_",
                 "k8s_", "s3_", "linear_", "zendesk_", "stripe_")


def _sources() -> list[tuple[str, SdkTool]]:
    """``(prefix, tool)``: the 20 realistic tools, then each server's under its prefix."""
    tools = [("", SdkTool(**tool))
             for tool in json.loads(REALISTIC.read_text(encoding="utf-8"))]
    servers = json.loads(MCP_SERVERS.read_text(encoding="utf-8"))["servers"]
    for server in sorted(servers, key=lambda s: SERVER_PREFIXES[s["package"]]):
        tools += [(SERVER_PREFIXES[server["package"]],
                   SdkTool(name=tool["name"], description=tool["description"],
                           parameters=tool["inputSchema"], output=tool.get("outputSchema", {})))
                  for tool in server["tools"]]
    return tools


def base_tools() -> list[SdkTool]:
    """The 20 realistic tools, then each server's tools under its prefix (47 in all)."""
    return [_renamed(tool, prefix + tool.name) for prefix, tool in _sources()]


def large_catalog(count: int) -> list[SdkTool]:
    """``count`` tools with unique names: the base tools, then copies under more prefixes
    (each imagined server takes the next 23 base tools by their own names, cycling, and
    skips a name it already has)."""
    sources = _sources()
    tools = base_tools()[:count]
    names = {tool.name for tool in tools}
    position = 0
    for prefix in MORE_PREFIXES * (count // len(sources) + 1):
        for _ in range(23):
            if len(tools) >= count:
                return tools
            tool = sources[position % len(sources)][1]
            position += 1
            if prefix + tool.name not in names:
                names.add(prefix + tool.name)
                tools.append(_renamed(tool, prefix + tool.name))
    return tools


def _renamed(tool: SdkTool, name: str) -> SdkTool:
    return SdkTool(name=name, description=tool.description, parameters=tool.parameters,
                   output=tool.output)
