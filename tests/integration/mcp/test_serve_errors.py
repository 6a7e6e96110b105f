"""A failed served call says why in ``_meta["dsh-jupyter/error"]``, with a code for every
failure: a tool that raises (a bug, not a ``ToolError``) too. The official MCP client, over
stdio and HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/integration/mcp folder

from mcp.types import TextContent
from serve_support import served_client

from dsh_jupyter.mcp.serve_tools import ERROR_META_KEY

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_tool_that_raises_has_an_error_code(tmp_path: Path, transport: str) -> None:
    async with served_client(transport, tmp_path / "facts") as client:
        raised = await client.call_tool("broken", {})
        denied = await client.call_tool("read_secret", {})
    assert raised.is_error
    block = raised.content[0]
    assert isinstance(block, TextContent)
    assert block.text == "Error: RuntimeError: the disk is on fire"
    assert raised.meta is not None
    assert raised.meta[ERROR_META_KEY] == {"code": "TOOL_ERROR",
                                           "message": "RuntimeError: the disk is on fire"}
    assert denied.meta is not None and denied.meta[ERROR_META_KEY]["code"] == "DENIED"
