"""MCP tools in Code Mode: they appear in the SDK, run_code programs call them like any other
tool, and read-only hints let independent calls overlap once the user opts in."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/integration/mcp folder

from mcp_support import call

from dsh_jupyter import ToolRegistry
from dsh_jupyter.mcp import connect_mcp
from dsh_jupyter.testing import InProcessRuntime

pytestmark = pytest.mark.timeout(60)

PARALLEL_NAPS = """
first, second = await asyncio.gather(tools.nap({"ms": 400}), tools.nap({"ms": 400}))
point = await tools.point({"x": first["result"], "y": second["result"]})
stats = await tools.stats()
print("naps done")
return {"point": point, "peak": stats["peak"]}
"""


async def run_code(registry: ToolRegistry, code: str) -> Any:
    return await call(registry, "run_code", {"code": code, "description": "test program"})


async def test_read_only_tools_overlap_when_the_user_opts_in(transport: dict[str, Any]) -> None:
    registry = ToolRegistry(mode="code", code_runtime=InProcessRuntime())
    async with connect_mcp(registry, concurrency_safe="read-only-hint", **transport):
        sdk = registry.prompt().section("tools:sdk")
        assert sdk is not None and "async def nap(self, args: NapArgs) -> NapOutput:" in sdk.text
        result = await run_code(registry, PARALLEL_NAPS)
    assert not result.is_error, result
    assert result.value == {"logs": ["naps done"],
                            "result": {"point": {"x": 400, "y": 400},
                                       "peak": 2}}  # the server saw both naps at once


async def test_without_opting_in_mcp_calls_run_one_at_a_time(transport: dict[str, Any]) -> None:
    registry = ToolRegistry(mode="code", code_runtime=InProcessRuntime())
    async with connect_mcp(registry, **transport):
        result = await run_code(registry, PARALLEL_NAPS.replace('"ms": 400', '"ms": 100'))
    assert not result.is_error, result
    assert result.value["result"]["peak"] == 1


async def test_a_failing_mcp_call_raises_inside_the_program(transport: dict[str, Any]) -> None:
    registry = ToolRegistry(mode="code", code_runtime=InProcessRuntime())
    async with connect_mcp(registry, prefix="srv_", **transport):
        result = await run_code(registry, """
try:
    await tools.srv_fail({"why": "no such file"})
except ToolCallError as error:
    return [error.tool_name, error.message.endswith("no such file")]
""")
    assert result.value == {"logs": [], "result": ["srv_fail", True]}


def test_a_custom_policy_decides_per_tool() -> None:
    from mcp.types import Tool

    from dsh_jupyter.mcp.adapt import is_concurrency_safe

    tool = Tool(name="nap", input_schema={"type": "object"})
    assert is_concurrency_safe(tool, lambda t: t.name == "nap")
    assert not is_concurrency_safe(tool, "read-only-hint")  # no annotations at all
    assert is_concurrency_safe(tool, True) and not is_concurrency_safe(tool, False)


@pytest.mark.kernel
async def test_a_kernel_program_calls_mcp_tools() -> None:
    import sys

    from mcp_support import SERVER

    from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig

    async with KernelRuntime(KernelRuntimeConfig(pool_size=0)) as runtime:
        registry = ToolRegistry(mode="code", code_runtime=runtime)
        async with connect_mcp(registry, stdio=[sys.executable, str(SERVER)],
                               concurrency_safe="read-only-hint"):
            result = await run_code(registry, PARALLEL_NAPS)
    assert not result.is_error, result
    assert result.value["result"]["peak"] == 2
