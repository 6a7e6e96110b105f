"""Calling MCP tools through the registry pipeline: values, failures, schemas outside the
subset, cancellation, tools/list_changed and a dead server (stdio and streamable HTTP)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/integration/mcp folder

from mcp_support import SERVER, call, eventually, other_tasks, server_saw, stdio_server_pids

from dsh_jupyter import AbortController, ToolRegistry, enforce_timeouts
from dsh_jupyter.mcp import UNVALIDATED_NOTE, connect_mcp
from dsh_jupyter.testing import InProcessRuntime

pytestmark = pytest.mark.timeout(60)


async def test_structured_content_is_the_canonical_value(transport: dict[str, Any]) -> None:
    registry = ToolRegistry()
    async with connect_mcp(registry, **transport):
        result = await call(registry, "point", {"x": 1, "y": 2})
        definition = registry.get("point")
    assert not result.is_error, result
    assert result.value == {"x": 1, "y": 2}
    assert result.text == '{\n  "x": 1,\n  "y": 2\n}'
    assert definition is not None
    assert definition.output.schema["required"] == ["x", "y"]  # the server's output schema


async def test_without_an_output_schema_the_value_is_the_text(transport: dict[str, Any]) -> None:
    registry = ToolRegistry()
    async with connect_mcp(registry, **transport):
        result = await call(registry, "greet", {"name": "Ada"})
        definition = registry.get("greet")
    assert result.value == "hello Ada" and result.text == "hello Ada"
    assert definition is not None and definition.output.schema == {"type": "string"}


async def test_a_server_reported_error_is_a_failure(transport: dict[str, Any]) -> None:
    registry = ToolRegistry()
    async with connect_mcp(registry, **transport):
        result = await call(registry, "fail", {"why": "the disk is full"})
    assert result.error is not None and result.error.code == "MCP_ERROR"
    assert result.error.message.startswith(
        "MCP server 'test-server' tool 'fail' reported an error: ")
    assert result.error.message.endswith("the disk is full")  # the server's own text


async def test_a_protocol_error_is_a_failure(transport: dict[str, Any]) -> None:
    registry = ToolRegistry()
    async with connect_mcp(registry, **transport):
        result = await call(registry, "reject")
    assert result.error is not None and result.error.code == "MCP_ERROR"
    assert result.error.message == ("MCP server 'test-server' rejected the call to 'reject' "
                                    "(error -32602): this request is malformed")


async def test_refresh_picks_up_unannounced_changes(transport: dict[str, Any]) -> None:
    registry = ToolRegistry()
    async with connect_mcp(registry, **transport) as server:
        await call(registry, "set_extra", {"present": True, "announce": False})
        assert registry.get("extra") is None
        await server.refresh()
        assert registry.get("extra") is not None and "extra" in server.tools


async def test_arguments_inside_the_subset_are_validated_before_the_call(
        transport: dict[str, Any]) -> None:
    registry = ToolRegistry()
    async with connect_mcp(registry, **transport):
        result = await call(registry, "greet", {"name": 7})
    assert result.error is not None and result.error.code == "INVALID_ARGS"
    assert '"name" must be a string' in result.error.message


async def test_an_optional_argument_is_validated_as_x_or_none(
        transport: dict[str, Any]) -> None:
    registry = ToolRegistry()
    async with connect_mcp(registry, **transport):
        history = registry.get("history")
        assert history is not None and history.validator is not None
        assert '"anyOf"' in json.dumps(history.parameters)  # the server's schema, as written
        assert not history.description.endswith(UNVALIDATED_NOTE)
        wrong_since = await call(registry, "history", {"since": 5})
        wrong_count = await call(registry, "history", {"max_count": "ten", "since": None})
        unknown_type = await call(registry, "history", {"since": ["monday"]})
        none = await call(registry, "history", {"since": None})
        some = await call(registry, "history", {"max_count": 2, "since": "monday"})
    for failed in (wrong_since, wrong_count, unknown_type):
        assert failed.error is not None and failed.error.code == "INVALID_ARGS", failed
    assert wrong_since.error is not None and '"since" must be a string' in (
        wrong_since.error.message)
    assert none.value == "10 entries since None"
    assert some.value == "2 entries since monday"


async def test_value_bounds_are_left_to_the_server_and_the_rest_is_checked(
        transport: dict[str, Any]) -> None:
    registry = ToolRegistry()
    async with connect_mcp(registry, **transport):
        clamp = registry.get("clamp")
        assert clamp is not None and clamp.validator is not None
        assert '"maximum": 10' in json.dumps(clamp.parameters)  # the raw schema is kept
        ok = await call(registry, "clamp", {"value": 3, "unit": "m"})
        not_a_number = await call(registry, "clamp", {"value": "3"})
        out_of_bounds = await call(registry, "clamp", {"value": 11})
    assert ok.value == "value 3m"
    assert not_a_number.error is not None and not_a_number.error.code == "INVALID_ARGS"
    assert out_of_bounds.error is not None and out_of_bounds.error.code == "MCP_ERROR"
    assert "less than or equal to 10" in out_of_bounds.error.message  # the server's check


async def test_a_schema_outside_the_subset_is_left_to_the_server(
        transport: dict[str, Any]) -> None:
    registry = ToolRegistry(mode="both", code_runtime=InProcessRuntime())
    async with connect_mcp(registry, **transport):
        place, count = registry.get("place"), registry.get("count")
        assert place is not None and count is not None
        assert place.validator is None  # $ref: registered anyway, unvalidated here
        assert '"$ref"' in json.dumps(place.parameters)  # the raw schema is kept
        assert place.description.endswith(UNVALIDATED_NOTE)
        sdk = registry.prompt().section("tools:sdk")
        assert sdk is not None
        assert "    unit: NotRequired[str | None]\n" in sdk.text  # Optional[str], not Any
        # an output schema outside the subset is loosened into it, so the SDK still types it
        assert "class CountOutput(TypedDict):\n    result: int\n" in sdk.text
        ok = await call(registry, "place", {"at": {"x": 1, "y": 2}})
        rejected = await call(registry, "place", {"at": {"x": "one", "y": 2}})
        assert "minimum" not in json.dumps(count.output.schema)  # the bound is dropped
        counted = await call(registry, "count", {"n": 5})
    assert ok.value == "(1, 2)"
    assert rejected.error is not None and rejected.error.code == "MCP_ERROR"  # the server's
    assert counted.value == {"result": 5}


async def test_cancellation_reaches_the_server(transport: dict[str, Any]) -> None:
    registry = ToolRegistry()
    async with connect_mcp(registry, **transport):
        controller = AbortController()
        started = time.monotonic()
        pending = asyncio.ensure_future(call(registry, "slow", {"seconds": 30, "tag": "s1"},
                                             signal=controller.signal))
        await eventually(lambda: server_saw(registry, "start s1"))
        controller.abort("user pressed stop")
        result = await pending
        assert result.error is not None and result.error.code == "ABORTED"
        assert time.monotonic() - started < 15
        await eventually(lambda: server_saw(registry, "cancelled s1"))
    assert other_tasks() == set()


async def test_a_registry_timeout_cancels_the_server_call(transport: dict[str, Any]) -> None:
    registry = ToolRegistry()
    registry.on_execute(enforce_timeouts(default_ms=500))
    async with connect_mcp(registry, **transport):
        result = await call(registry, "slow", {"seconds": 30, "tag": "t1"})
        assert result.error is not None and result.error.code == "TOOL_TIMEOUT"
        await eventually(lambda: server_saw(registry, "cancelled t1"))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_list_changed_updates_the_registry(transport: dict[str, Any], mode: str) -> None:
    registry = ToolRegistry()
    changes: list[tuple[str, tuple[str, ...]]] = []
    registry.on_change(lambda change: changes.append((change.kind, change.names)))
    async with connect_mcp(registry, prefix="t_", client_options={"mode": mode},
                           **transport) as server:
        assert server.client.protocol_version == ("2025-11-25" if mode == "legacy"
                                                  else "2026-07-28")
        assert registry.get("t_extra") is None
        await call(registry, "t_set_extra", {"present": True})
        await eventually(lambda: registry.get("t_extra") is not None)
        assert ("register", ("t_extra",)) in changes
        shouted = await call(registry, "t_extra", {"text": "hi"})
        assert shouted.value == "HI"

        await call(registry, "t_set_extra", {"present": True, "description": "Louder."})
        await eventually(lambda: getattr(registry.get("t_extra"), "description", "") == "Louder.")

        await call(registry, "t_set_extra", {"present": False})
        await eventually(lambda: registry.get("t_extra") is None)
        assert "t_extra" not in server.tools
    assert registry.visible() == {}


async def test_a_stdio_server_that_exits_between_calls_is_noticed_at_once() -> None:
    registry = ToolRegistry()
    async with connect_mcp(registry, stdio=[sys.executable, str(SERVER)]) as server:
        (pid,) = stdio_server_pids()
        os.kill(pid, signal.SIGKILL)  # no call in flight: only the closed stdout tells
        reason = await asyncio.wait_for(server.wait_gone(), 15)
        shown = repr(server)
        later = await call(registry, "greet", {"name": "Ada"})
    assert reason == "MCP server 'test-server' is gone (the server closed the connection)"
    assert shown == "<McpConnection 'test-server' gone tools=14>"
    assert later.error is not None and later.error.code == "MCP_SERVER_GONE"
    assert other_tasks() == set()


async def test_a_dead_server_fails_calls_clearly(transport: dict[str, Any]) -> None:
    registry = ToolRegistry()
    async with connect_mcp(registry, **transport) as server:
        died = await call(registry, "die")
        assert died.error is not None and died.error.code in ("MCP_SERVER_GONE", "MCP_ERROR")
        later = await call(registry, "greet", {"name": "Ada"})
        assert later.error is not None and later.error.code == "MCP_SERVER_GONE"
        assert later.error.message.startswith("MCP server 'test-server' is gone")
        if "stdio" in transport:  # the server's last words are quoted
            assert "dying on request" in later.error.message
        assert "greet" in server.tools  # still registered: the model learns why calls fail
    assert registry.visible() == {}
    assert other_tasks() == set()


async def test_the_pipeline_runs_for_mcp_tools(transport: dict[str, Any]) -> None:
    registry = ToolRegistry()
    seen: list[str] = []
    registry.on_pre_execute(lambda execution, decision: seen.append(execution.name))
    registry.guard(lambda execution: "no greeting Bob" if execution.arguments.get("name") == "Bob"
                   else None)
    async with connect_mcp(registry, **transport):
        denied = await call(registry, "greet", {"name": "Bob"})
        allowed = await call(registry, "greet", {"name": "Ada"})
    assert denied.error is not None and denied.error.code == "DENIED"
    assert allowed.value == "hello Ada"
    assert seen == ["greet", "greet"]
