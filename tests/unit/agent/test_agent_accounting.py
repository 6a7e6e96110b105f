"""Pure units: token estimates, run totals, the schedule plan, history handling."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_jupyter import ToolCall, ToolRegistry, ToolResult, define_tool
from dsh_jupyter.agent import (
    RequestAccounting,
    RunAccounting,
    ScriptedModel,
    estimate_tokens,
    run_agent,
)
from dsh_jupyter.agent.scheduling import plan
from dsh_jupyter.registry.results import failure

pytestmark = pytest.mark.timeout(30)


def request(step: int, **kw: Any) -> RequestAccounting:
    sizes: dict[str, Any] = dict(sections=(), system_bytes=40, tool_schema_bytes=100,
                                 sdk_bytes=0, tool_result_bytes=9, context_bytes=0,
                                 request_bytes=200)
    sizes.update(kw)
    return RequestAccounting(step=step, **sizes)


def test_token_estimate_is_bytes_over_four_rounded_up() -> None:
    assert [estimate_tokens(n) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    one = request(1)
    assert (one.system_tokens, one.request_tokens, one.tool_result_tokens) == (10, 50, 3)


def test_run_totals() -> None:
    run = RunAccounting(requests=(request(1, prompt_tokens=10, model_seconds=0.5),
                                  request(2, prompt_tokens=20, model_seconds=0.25)))
    assert run.request_bytes == 400 and run.tool_result_bytes == 18
    assert run.tool_definition_bytes == 200 and run.model_seconds == 0.75
    assert run.prompt_tokens == 30 and run.completion_tokens is None
    assert RunAccounting().prompt_tokens is None


def test_plan_groups_consecutive_parallel_calls() -> None:
    registry = ToolRegistry()
    for name, safe in (("read", True), ("write", False)):
        registry.register(define_tool(
            name=name, parameters={"type": "object"},
            output={"schema": {"type": "null"}, "render": lambda a, v: ""},
            execute=lambda a, c: None, is_concurrency_safe=(lambda a: True) if safe else None))

    def call(name: str) -> ToolCall:
        return ToolCall(call_id=name, name=name)

    items: list[ToolCall | ToolResult] = [
        call("read"), call("read"), failure("bad json"), call("read"), call("write"),
        call("write"), call("nope"), call("read")]
    assert plan(registry, items) == [[0, 1, 3], [4], [5], [6], [7]]
    assert plan(registry, []) == []


async def test_history_continues_a_conversation() -> None:
    registry = ToolRegistry()
    first = await run_agent(registry, ScriptedModel([{"content": "4"}]), "2 + 2?")
    model = ScriptedModel([{"content": "8"}])
    second = await run_agent(registry, model, "and doubled?", history=first.messages)
    sent = model.requests[0].messages
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert [m["content"] for m in sent[1:]] == ["2 + 2?", "4", "and doubled?"]
    assert second.answer == "8"


async def test_a_run_that_raises_still_reports_its_end() -> None:
    class Broken:
        name = "broken"

        async def complete(self, request: Any, *, signal: Any) -> Any:
            raise RuntimeError("adapter bug")

    registry = ToolRegistry()
    events: list[dict[str, Any]] = []
    registry.on_event(lambda e: events.append(dict(e)))
    with pytest.raises(RuntimeError, match="adapter bug"):
        await run_agent(registry, Broken(), "go")
    end = events[-1]
    assert end["kind"] == "agent/run-end" and end["stop"] == "raised"
    assert end["error"] == {"message": "RuntimeError: adapter bug", "code": None}
