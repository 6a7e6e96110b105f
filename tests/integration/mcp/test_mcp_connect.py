"""Connecting to a real MCP server: registration, prefixes, scopes, lifetime and
connection failures (the test server over stdio and streamable HTTP)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/integration/mcp folder

from mcp_support import SERVER, call, other_tasks, pids_running, stdio_server_pids

from dsh_jupyter import ToolRegistry, define_tool
from dsh_jupyter.errors import RegistrationError
from dsh_jupyter.mcp import McpConnectError, connect_mcp

pytestmark = pytest.mark.timeout(60)

SERVER_TOOLS = {"clamp", "count", "die", "fail", "greet", "header", "history", "nap", "place",
                "point", "reject", "set_extra", "slow", "stats"}


async def test_registers_every_tool_and_unregisters_on_exit(transport: dict[str, Any]) -> None:
    registry = ToolRegistry()
    changes: list[str] = []
    registry.on_change(lambda change: changes.append(change.kind))
    async with connect_mcp(registry, prefix="t_", **transport) as server:
        assert server.name == "test-server"
        assert set(server.tools) == {f"t_{name}" for name in SERVER_TOOLS}
        assert set(registry.visible()) == set(server.tools)
        point = registry.get("t_point")
        assert point is not None and point.description == "Make a point."
        assert point.parameters["required"] == ["x", "y"]
        assert point.validator is not None  # inside the subset: validated before the call
        if "stdio" in transport:
            assert len(stdio_server_pids()) == 1
    assert registry.visible() == {}
    assert changes.count("register") == changes.count("unregister") == len(SERVER_TOOLS)
    assert stdio_server_pids() == []
    assert other_tasks() == set()  # no client, listener or refresher task outlives the block
    with pytest.raises(McpConnectError, match="gone"):
        _ = server.client


async def test_tools_register_in_an_agent_scope(transport: dict[str, Any]) -> None:
    registry = ToolRegistry()
    agent = registry.scope("agent")
    async with connect_mcp(agent, **transport):
        assert registry.get("greet", agent) is not None
        assert registry.get("greet") is None  # not global
    assert registry.get("greet", agent) is None


async def test_a_name_collision_fails_the_connection_and_rolls_back() -> None:
    registry = ToolRegistry()
    registry.register(define_tool(name="greet", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=lambda args, ctx: "mine"))
    with pytest.raises(RegistrationError, match="'greet' is already registered"):
        async with connect_mcp(registry, stdio=[sys.executable, str(SERVER)]):
            pytest.fail("the block must not run")
    assert set(registry.visible()) == {"greet"}
    assert stdio_server_pids() == []
    async with connect_mcp(registry, stdio=[sys.executable, str(SERVER)], prefix="srv_"):
        assert {"greet", "srv_greet"} <= set(registry.visible())


async def test_a_command_that_is_not_a_server_fails_with_its_stderr() -> None:
    script = "import sys; print('no MCP here, sorry', file=sys.stderr)"
    with pytest.raises(McpConnectError, match="no MCP here, sorry") as caught:
        async with connect_mcp(ToolRegistry(), stdio=[sys.executable, "-c", script]):
            pass
    assert caught.value.code == "MCP_CONNECT_FAILED"
    assert other_tasks() == set()


async def test_a_missing_command_fails_clearly() -> None:
    with pytest.raises(McpConnectError, match=r"could not connect.*no-such-mcp-server"):
        async with connect_mcp(ToolRegistry(), stdio=["no-such-mcp-server"]):
            pass


async def test_a_silent_server_times_out_and_is_stopped() -> None:
    script = "import time; time.sleep(60)  # silent test server"
    with pytest.raises(McpConnectError, match=r"did not answer within 0\.5 s"):
        async with connect_mcp(ToolRegistry(), stdio=[sys.executable, "-c", script],
                               connect_timeout=0.5):
            pass
    assert other_tasks() == set()
    assert pids_running(script) == []


async def test_an_unreachable_url_fails_clearly() -> None:
    with pytest.raises(McpConnectError, match="could not connect"):
        async with connect_mcp(ToolRegistry(), url="http://127.0.0.1:9/mcp", connect_timeout=10):
            pass
    assert other_tasks() == set()


async def test_headers_reach_an_http_server(http_server: Any) -> None:
    registry = ToolRegistry()
    async with connect_mcp(registry, url=http_server.url, headers={"X-Test-Token": "s3cret"}):
        result = await call(registry, "header", {"name": "X-Test-Token"})
    assert result.value == "s3cret"


@pytest.mark.parametrize(("options", "message"), [
    ({}, "exactly one of stdio"),
    ({"stdio": ["x"], "url": "http://h/mcp"}, "exactly one of stdio"),
    ({"stdio": "python server.py"}, "non-empty list of strings"),
    ({"stdio": []}, "non-empty list of strings"),
    ({"url": "127.0.0.1:80/mcp"}, "http"),
    ({"url": "http://h/mcp", "env": {"A": "1"}}, "env and cwd apply to stdio"),
    ({"stdio": ["x"], "headers": {"A": "1"}}, "headers apply to url"),
    ({"stdio": ["x"], "connect_timeout": 0}, "connect_timeout"),
    ({"stdio": ["x"], "client_options": {"message_handler": None}}, "message_handler"),
])
def test_bad_options_are_rejected_at_once(options: dict[str, Any], message: str) -> None:
    with pytest.raises(RegistrationError, match=message):
        connect_mcp(ToolRegistry(), **options)


def test_the_target_must_be_a_registry_or_scope() -> None:
    with pytest.raises(RegistrationError, match="ToolRegistry or an AgentScope"):
        connect_mcp(object(), stdio=["x"])  # type: ignore[arg-type]


async def test_a_connection_is_entered_once(transport: dict[str, Any]) -> None:
    connection = connect_mcp(ToolRegistry(), **transport)
    async with connection:
        with pytest.raises(RegistrationError, match="entered only once"):
            await connection.__aenter__()
