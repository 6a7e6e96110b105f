"""The MCP client against ``@modelcontextprotocol/server-everything`` from npm (a server
nobody here wrote), over stdio and streamable HTTP: schemas with a root ``$schema`` are
validated, content keeps its type, progress is surfaced, task-only tools are skipped."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to this tests/mcp folder

from everything import everything
from mcp_support import call

from dsh_jupyter import ToolRegistry
from dsh_jupyter.mcp import UNVALIDATED_NOTE, connect_mcp

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(params=["stdio", "http"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    with everything(request.param, tmp_path / "everything.log") as options:
        yield options


async def test_a_root_dollar_schema_does_not_cost_validation(server: dict[str, Any]) -> None:
    registry = ToolRegistry()
    async with connect_mcp(registry, **server):
        echo = registry.get("echo")
        bad = await call(registry, "echo", {"message": 7})
        good = await call(registry, "echo", {"message": "hi"})
        bounded = registry.get("get-resource-links")  # minimum/maximum: outside the subset
    assert echo is not None and echo.validator is not None
    assert UNVALIDATED_NOTE not in echo.description
    assert "$schema" not in echo.parameters
    assert bad.error is not None and bad.error.code == "INVALID_ARGS", bad
    assert '"message" must be a string' in bad.error.message
    assert good.value == "Echo: hi"
    assert bounded is not None and bounded.validator is None
    assert UNVALIDATED_NOTE in bounded.description


async def test_task_only_tools_are_not_offered(server: dict[str, Any],
                                               caplog: pytest.LogCaptureFixture) -> None:
    registry = ToolRegistry()
    with caplog.at_level(logging.INFO, logger="dsh_jupyter.mcp.connection"):
        async with connect_mcp(registry, **server) as connection:
            tools, skipped, shown = connection.tools, connection.skipped, repr(connection)
    assert "simulate-research-query" not in tools and "echo" in tools
    assert list(skipped) == ["simulate-research-query"]
    assert "taskSupport is 'required'" in skipped["simulate-research-query"]
    assert "skipped=1" in shown
    assert "not registering tool 'simulate-research-query'" in caplog.text
