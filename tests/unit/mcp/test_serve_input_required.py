"""The 2026-07-28 approval round, driven by hand: a call that needs an approval answers
with an ``InputRequiredResult`` (an elicitation and a ``requestState``) while the pipeline
waits; the retry carrying the answer finishes the same call; a client that never comes
back has its call aborted after ``answer_timeout``, and its state is refused after."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/unit/mcp folder

from mcp import Client, MCPError
from mcp.types import ElicitRequest, ElicitResult, InputRequiredResult, TextContent
from mcp_support import eventually
from serve_support import served_registry

from dsh_jupyter.events import SessionEvent
from dsh_jupyter.mcp import serve_mcp

pytestmark = pytest.mark.timeout(60)


async def never_called(context: Any, params: Any) -> ElicitResult:
    raise AssertionError("the test answers by hand")


async def test_the_retry_answers_and_finishes_the_same_call() -> None:
    registry = served_registry()
    async with (serve_mcp(registry, http="127.0.0.1:0") as service,
                Client(str(service.url), elicitation_callback=never_called) as client):
        first = await client.session.call_tool("delete_file", {"path": "a.txt"},
                                               allow_input_required=True)
        assert isinstance(first, InputRequiredResult) and first.input_requests
        [(key, request)] = first.input_requests.items()
        assert isinstance(request, ElicitRequest)
        assert request.params.message.startswith('Allow the tool call delete_file({"path"')
        done = await client.session.call_tool(
            "delete_file", {"path": "a.txt"}, request_state=first.request_state,
            input_responses={key: ElicitResult(action="accept", content={"approve": True})})
    block = done.content[0]
    assert isinstance(block, TextContent) and block.text == "deleted a.txt"


async def test_a_client_that_never_answers_has_its_call_aborted() -> None:
    registry = served_registry()
    results: list[SessionEvent] = []
    registry.on_event(lambda event: results.append(event)
                      if event["kind"] == "tool/result" else None)
    async with (serve_mcp(registry, http="127.0.0.1:0", answer_timeout=0.3) as service,
                Client(str(service.url), elicitation_callback=never_called) as client):
        first = await client.session.call_tool("delete_file", {"path": "a.txt"},
                                               allow_input_required=True)
        assert isinstance(first, InputRequiredResult)
        await eventually(lambda: bool(results))
        with pytest.raises(MCPError, match="unknown or expired requestState"):
            await client.session.call_tool("delete_file", {"path": "a.txt"},
                                           request_state=first.request_state,
                                           input_responses={})
    [result] = results
    assert result["kind"] == "tool/result" and result["is_error"]
    assert result["content"][0]["text"] == (
        "Error: deleting a.txt cannot be undone (not answered: the call was stopped: "
        "the MCP client did not answer within 0.3 s)")
