"""Durable session events and the JSON Lines log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh_jupyter import JsonlSessionWriter, ToolCall, ToolRegistry, define_tool, read_session
from dsh_jupyter.events import SessionEvent


async def test_top_level_calls_write_call_and_result_events(tmp_path: Path) -> None:
    registry = ToolRegistry()
    registry.register(define_tool(
        name="t", parameters={"type": "object"},
        output={"schema": {"type": "string"}, "render": lambda a, v: str(v),
                "presentation_meta": lambda a, v: {"n": 1}},
        execute=lambda a, c: "out"))
    log = tmp_path / "session.jsonl"
    with JsonlSessionWriter(log) as writer:
        registry.on_event(writer)
        await registry.execute(ToolCall(call_id="c1", name="t", arguments={"x": [1]}))
        await registry.execute(ToolCall(call_id="c2", name="missing"))
    events: list[Any] = read_session(log)
    assert [e["kind"] for e in events] == ["tool/call", "tool/result", "tool/call", "tool/result"]
    result = events[1]
    assert result["call_id"] == "c1" and result["arguments"] == {"x": [1]}
    assert result["content"] == [{"type": "text", "text": "out"}] and result["meta"] == {"n": 1}
    assert result["ended"] >= result["started"]
    assert events[3]["error"]["code"] == "UNKNOWN_TOOL"


def test_malformed_log_lines_are_reported(tmp_path: Path) -> None:
    log = tmp_path / "bad.jsonl"
    log.write_text('{"kind": "tool/call"}\n\n{"kind": "other"}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:4"):
        read_session(log)


async def test_failing_sink_does_not_break_execution(caplog: pytest.LogCaptureFixture) -> None:
    registry = ToolRegistry()
    registry.register(define_tool(name="t", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=lambda a, c: "x"))

    def broken(event: Any) -> None:
        raise OSError("disk full")

    registry.on_event(broken)
    result = await registry.execute(ToolCall(call_id="1", name="t"))
    assert not result.is_error and "disk full" in caplog.text


async def test_a_stopped_call_says_so_in_its_result_event() -> None:
    """A call stopped by its caller (the signal a card's Stop button aborts, or the task
    awaiting it cancelled, as Kernel > Interrupt does) is recorded as stopped, with why;
    a call that fails on its own is not."""
    import asyncio

    from dsh_jupyter.abort import AbortController
    from dsh_jupyter.testing import InProcessRuntime

    registry = ToolRegistry(mode="code", code_runtime=InProcessRuntime())
    started = asyncio.Event()

    @registry.tool
    async def wait(seconds: float) -> str:
        """Wait."""
        started.set()
        await asyncio.sleep(seconds)
        return "waited"

    events: list[Any] = []
    registry.on_event(events.append)
    poll = {"code": "while True:\n    await tools.wait({'seconds': 0.05})",
            "description": "Poll"}
    stop = AbortController()
    running = asyncio.ensure_future(registry.execute(ToolCall(
        call_id="s1", name="run_code", arguments=poll, signal=stop.signal)))
    await started.wait()
    stop.abort("stopped by the user")
    assert (await running).is_error
    started.clear()
    cancelled = asyncio.ensure_future(registry.execute(ToolCall(
        call_id="s2", name="run_code", arguments=poll)))
    await started.wait()
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    await registry.execute(ToolCall(call_id="f1", name="run_code", arguments={
        "code": "raise ValueError('no')", "description": "Fail"}))
    await registry.execute(ToolCall(call_id="ok", name="wait", arguments={"seconds": 0}))
    results = {e["call_id"]: e for e in events if e["kind"] == "tool/result"}
    assert results["s1"]["stopped"] == "stopped by the user"
    assert results["s2"]["stopped"] == "the call was cancelled"
    assert "stopped" not in results["f1"] and "stopped" not in results["ok"]


async def test_events_follow_the_sinks_attached_removed_and_attached_again() -> None:
    # The tool/* events come from a listener that is there only while a sink is (a
    # registry nobody records tells it nothing): each sink sees each call's two events
    # once, whatever came and went before.
    registry = ToolRegistry()

    @registry.tool
    async def t() -> str:
        "A tool."
        return "ok"

    def recorder(bucket: list[str]) -> Callable[[SessionEvent], None]:
        return lambda event: bucket.append(f"{event['kind']} {dict(event)['call_id']}")

    async def call(call_id: str) -> None:
        await registry.execute(ToolCall(call_id=call_id, name="t"))

    first: list[str] = []
    second: list[str] = []
    unheard = len(registry._listeners)
    await call("unheard")
    stop_first = registry.on_event(recorder(first))
    stop_second = registry.on_event(recorder(second))
    assert len(registry._listeners) == unheard + 1
    await call("both")
    stop_first()
    await call("second only")
    stop_second()
    assert len(registry._listeners) == unheard
    await call("nobody")
    stop_second()  # again: nothing
    stop_first = registry.on_event(recorder(first))
    await call("first again")
    assert first == ["tool/call both", "tool/result both",
                     "tool/call first again", "tool/result first again"]
    assert second == ["tool/call both", "tool/result both",
                      "tool/call second only", "tool/result second only"]
