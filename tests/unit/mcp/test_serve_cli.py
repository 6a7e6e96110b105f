"""``dsh-jupyter serve-mcp`` argument handling (no server started)."""

from __future__ import annotations

import pytest

from dsh_jupyter import AgentScope, ToolRegistry
from dsh_jupyter.cli import load_tools, main


def test_token_without_http_is_refused() -> None:
    with pytest.raises(SystemExit, match="--token applies to --http"):
        main(["serve-mcp", "--tools", "serve_support:served_registry", "--token", "t"])


def test_bad_http_address_is_explained() -> None:
    with pytest.raises(SystemExit, match="HOST:PORT"):
        main(["serve-mcp", "--tools", "serve_support:served_registry", "--http", "host:port"])


def test_allow_host_without_http_is_refused() -> None:
    with pytest.raises(SystemExit, match="--allow-host applies to --http"):
        main(["serve-mcp", "--tools", "serve_support:served_registry",
              "--allow-host", "mcp.example.com"])


def test_a_bad_allowed_host_is_explained() -> None:
    with pytest.raises(SystemExit, match=r"serve-mcp: allowed host 'mcp\.example\.com:443': "
                                         r"expected a host name or an IP address"):
        main(["serve-mcp", "--tools", "serve_support:served_registry", "--http", "0",
              "--allow-host", "mcp.example.com:443"])


def test_tools_may_name_a_registry_or_a_scope_but_nothing_else() -> None:
    scope = load_tools("serve_support:served_scope")
    assert isinstance(scope, AgentScope) and scope.name == "analyst"
    assert isinstance(load_tools("serve_support:served_registry"), ToolRegistry)
    with pytest.raises(SystemExit, match="not a ToolRegistry or an AgentScope"):
        load_tools("serve_support:PIXEL")
