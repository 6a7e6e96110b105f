"""dsh-jupyter's MCP client connected to dsh-jupyter's MCP server: every call crosses two
pipelines (the client registry's, then the served registry's). Also ``serve_mcp`` used in
process: a tool registered while serving reaches the client (``tools/list_changed``), and
what serving changes on the registry is undone after."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/integration/mcp folder

from mcp_support import call, eventually
from serve_support import HERE, LOG_ENV, serve_command, served_facts, served_registry

from dsh_jupyter import AbortController, Deny, ToolRegistry, ToolRunContext
from dsh_jupyter.errors import RegistrationError
from dsh_jupyter.mcp import connect_mcp, serve_mcp
from dsh_jupyter.testing import InProcessRuntime

pytestmark = pytest.mark.timeout(120)


async def test_a_call_crosses_both_pipelines_over_stdio(tmp_path: Path) -> None:
    facts = tmp_path / "facts"
    client = ToolRegistry(mode="both", code_runtime=InProcessRuntime())
    client.on_pre_execute(lambda execution, decision: Deny("not from here")
                          if execution.name == "served_forecast" else None)
    async with connect_mcp(client, stdio=serve_command(), prefix="served_",
                           env={LOG_ENV: str(facts), "PYTHONPATH": str(HERE)}, cwd=HERE):
        added = await call(client, "served_add", {"a": 20, "b": 22})
        denied_here = await call(client, "served_forecast", {"city": "Oslo"})
        denied_there = await call(client, "served_read_secret")
        asked_there = await call(client, "served_delete_file", {"path": "x"})
        program = await call(client, "run_code", {
            "description": "sum twice",
            "code": "a = await tools.served_add({'a': 1, 'b': 2})\n"
                    "return await tools.served_add({'a': a, 'b': a})"})
    assert added.value == 42
    assert denied_here.error is not None and denied_here.error.code == "DENIED"
    assert denied_there.error is not None and denied_there.error.code == "MCP_ERROR"
    assert denied_there.error.message.endswith("Error: secrets stay secret")
    assert asked_there.error is not None
    assert "rejected by policy 'deny': the MCP client cannot answer elicitations" in (
        asked_there.error.message)
    assert program.value == {"logs": [], "result": 6}
    assert served_facts(facts) == []


async def test_serve_mcp_in_process_over_http_with_a_token() -> None:
    served = served_registry()
    started, stopped = asyncio.Event(), asyncio.Event()
    reasons: list[str | None] = []

    @served.tool
    async def wait(ctx: ToolRunContext) -> str:
        """Wait until aborted."""
        started.set()
        try:
            await ctx.signal.run(asyncio.sleep(60))
        finally:
            reasons.append(ctx.signal.reason)
            stopped.set()
        return "done"

    client = ToolRegistry()
    async with serve_mcp(served, http="127.0.0.1:0", token="s3cret", mode="both") as service:
        assert service.url is not None and service.mode == "both"
        runtime_while_serving = served.code_runtime
        assert served.mode_for() == "both" and runtime_while_serving is not None
        async with connect_mcp(client, url=service.url, prefix="remote_",
                               headers={"Authorization": "Bearer s3cret"}) as connection:
            assert "remote_run_code" in connection.tools
            forecast = await call(client, "remote_forecast", {"city": "Rome"})
            program = await call(client, "remote_run_code", {
                "description": "add", "code": "return await tools.add({'a': 2, 'b': 3})"})
            controller = AbortController()
            waiting = asyncio.create_task(call(client, "remote_wait", signal=controller.signal))
            await asyncio.wait_for(started.wait(), 30)
            controller.abort("stop")
            aborted = await waiting
            await asyncio.wait_for(stopped.wait(), 30)

            @served.tool
            async def later() -> str:
                """Registered while serving."""
                return "new"

            await eventually(lambda: "remote_later" in connection.tools)  # tools/list_changed
            assert (await call(client, "remote_later")).value == "new"
    assert forecast.value == {"city": "Rome", "high_c": 24.0}
    assert program.value == {"logs": [], "result": 5}  # on a real kernel, in the server
    assert aborted.error is not None and aborted.error.code == "ABORTED"
    assert reasons == ["cancelled by the MCP client"]  # the served tool saw its signal abort
    # Leaving the block undid what serving changed.
    assert served.mode_for() == "native"
    assert served.code_runtime is None and served.approval is None


async def test_serve_mcp_checks_its_options() -> None:
    registry = served_registry()
    with pytest.raises(RegistrationError, match="HOST:PORT"):
        serve_mcp(registry, http="localhost:http")
    assert repr(serve_mcp(registry, http="8765")) == "<McpService 'dsh-jupyter' 127.0.0.1:8765>"
    with pytest.raises(RegistrationError, match="token applies to http"):
        serve_mcp(registry, token="t")
    with pytest.raises(RegistrationError, match="mode="):
        serve_mcp(registry, mode="fancy")  # type: ignore[arg-type]
    assert serve_mcp(registry, http="0.0.0.0:0").token  # generated off loopback
    assert serve_mcp(registry, http="127.0.0.1:0").token is None
    scope = registry.scope("a")
    scope.present_as("code")
    with pytest.raises(RegistrationError, match="presents as 'code'"):
        async with serve_mcp(scope, mode="native", http="127.0.0.1:0"):
            pass
