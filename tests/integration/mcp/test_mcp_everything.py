"""The MCP client against ``@modelcontextprotocol/server-everything`` from npm (a server
nobody here wrote), over stdio and streamable HTTP: schemas with a root ``$schema`` are
validated, content keeps its type, progress is surfaced, task-only tools are skipped."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/integration/mcp folder

from mcp_support import call, everything

from dsh_jupyter import ToolCall, ToolRegistry
from dsh_jupyter._images import check_image
from dsh_jupyter.events import SessionEvent
from dsh_jupyter.mcp import UNVALIDATED_NOTE, connect_mcp
from dsh_jupyter.testing import InProcessRuntime

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
        not_a_number = await call(registry, "get-resource-links", {"count": "two"})
    assert echo is not None and echo.validator is not None
    assert UNVALIDATED_NOTE not in echo.description
    assert "$schema" not in echo.parameters
    assert bad.error is not None and bad.error.code == "INVALID_ARGS", bad
    assert '"message" must be a string' in bad.error.message
    assert good.value == "Echo: hi"
    # the bounds are left to the server, the rest is checked before the call
    assert bounded is not None and bounded.validator is not None
    assert UNVALIDATED_NOTE not in bounded.description
    assert not_a_number.error is not None and not_a_number.error.code == "INVALID_ARGS"


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


async def test_an_image_is_an_image_block_with_its_annotations(server: dict[str, Any]) -> None:
    registry = ToolRegistry()
    async with connect_mcp(registry, **server):
        result = await call(registry, "get-annotated-message",
                            {"messageType": "success", "includeImage": True})
        plain = await call(registry, "get-tiny-image")
    assert not result.is_error, result
    text, image = result.content
    assert text == {"type": "text", "text": "Operation completed successfully",
                    "annotations": {"audience": ["user"], "priority": 0.7}}
    assert image["type"] == "image" and image["mime_type"] == "image/png"
    assert check_image("image/png", image["data"]) is not None
    assert image["annotations"] == {"audience": ["user"], "priority": 0.5}
    # The canonical value (what a program gets) stays text, with the image named in it.
    assert isinstance(result.value, str)
    assert result.value.startswith("Operation completed successfully\n[image image/png ")
    assert [block["type"] for block in plain.content] == ["text", "image", "text"]


async def test_resource_links_and_embedded_resources_keep_what_they_say(
        server: dict[str, Any]) -> None:
    registry = ToolRegistry()
    async with connect_mcp(registry, **server):
        links = await call(registry, "get-resource-links", {"count": 2})
        embedded = await call(registry, "get-resource-reference",
                              {"resourceType": "Text", "resourceId": 2})
        blob = await call(registry, "get-resource-reference",
                          {"resourceType": "Blob", "resourceId": 1})
    assert not links.is_error and isinstance(links.value, str), links
    assert ('[resource link demo://resource/dynamic/text/2 | name "Text Resource 2" | '
            'description "Resource 2: plaintext resource" | type text/plain]') in links.value
    assert links.text == links.value
    assert isinstance(embedded.value, str)
    assert ("[resource demo://resource/dynamic/text/2 | type text/plain]\n"
            "Resource 2: This is a plaintext resource") in embedded.value
    assert isinstance(blob.value, str)
    assert "[resource demo://resource/dynamic/blob/1 | " in blob.value
    assert "| size 57 B | binary, not attached]" in blob.value


async def test_progress_is_requested_and_reported_as_events(server: dict[str, Any]) -> None:
    registry = ToolRegistry()
    events: list[SessionEvent] = []
    registry.on_event(events.append)
    async with connect_mcp(registry, **server):
        result = await call(registry, "trigger-long-running-operation",
                            {"duration": 0.3, "steps": 3})
    assert not result.is_error, result
    progress = [event for event in events if event["kind"] == "tool/progress"]
    assert [(e["call_id"], e["name"], e["progress"], e["total"]) for e in progress] == [
        ("call-trigger-long-running-operation", "trigger-long-running-operation", p, 3)
        for p in (1, 2, 3)]
    kinds = [event["kind"] for event in events]
    assert kinds.index("tool/call") < kinds.index("tool/progress")
    assert kinds.index("tool/result") > len(kinds) - 2  # progress came before the result


async def test_progress_of_a_sub_call_reaches_the_registry_of_a_scope(
        server: dict[str, Any]) -> None:
    registry = ToolRegistry(mode="code", code_runtime=InProcessRuntime())
    scope = registry.scope("worker")
    events: list[SessionEvent] = []
    registry.on_event(events.append)
    async with connect_mcp(scope, **server):
        result = await registry.execute(ToolCall(
            call_id="run-1", name="run_code", agent=scope, arguments={
                "description": "wait", "code": 'return await tools["trigger-long-running-'
                                              'operation"]({"duration": 0.2, "steps": 2})'}))
    assert not result.is_error, result
    starts = [e for e in events if e["kind"] == "tool/code-dispatch-start"]
    progress = [e for e in events if e["kind"] == "tool/progress"]
    assert [(e["call_id"], e["progress"]) for e in progress] == [
        (starts[0]["call_id"], 1), (starts[0]["call_id"], 2)]


MCP_TOOLS_MODULE = """
from contextlib import asynccontextmanager

from dsh_jupyter import ToolRegistry
from dsh_jupyter.mcp import connect_mcp


@asynccontextmanager
async def registry():
    tools = ToolRegistry()
    async with connect_mcp(tools, **{options!r}):
        yield tools
"""


def test_the_sdk_command_enters_an_async_context_manager(server: dict[str, Any],
                                                         tmp_path: Path) -> None:
    (tmp_path / "mcp_tools.py").write_text(MCP_TOOLS_MODULE.format(options=server))
    done = subprocess.run([sys.executable, "-m", "dsh_jupyter.cli", "sdk", "--tools",
                           "mcp_tools:registry"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=80)
    assert done.returncode == 0, done.stderr
    assert "    async def echo(self, args: EchoArgs) -> str:\n" in done.stdout
    assert "class EchoArgs(TypedDict):\n    message: str  # Message to echo\n" in done.stdout
    assert UNVALIDATED_NOTE.splitlines()[0][:40] not in done.stdout  # every tool checked
    assert "simulate-research-query" not in done.stdout
