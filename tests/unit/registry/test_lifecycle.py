"""The call lifecycle: one listener interface told every stage of every call.

A listener written here, knowing nothing but :class:`CallListener`, sees each stage of a
native call and of a run_code sub-call, in the pipeline's order, without any change to
the pipeline; registration checks names, returns the undo, and a failing listener never
fails a call.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import pytest

from dsh_jupyter import (
    Accept,
    Approval,
    Ask,
    ToolCall,
    ToolExecution,
    ToolRegistry,
    ToolRunContext,
    define_tool,
)
from dsh_jupyter.errors import RegistrationError
from dsh_jupyter.registry.execution import TraceValue
from dsh_jupyter.registry.lifecycle import STAGES, CallListener, CallRun, Section
from dsh_jupyter.registry.policy import PreDecision
from dsh_jupyter.registry.results import ToolResult
from dsh_jupyter.testing import InProcessRuntime


class Counting(CallListener):
    """Records every stage it is told, per call, and what it saw of the run then."""

    def __init__(self) -> None:
        self.stages: dict[str, list[str]] = {}
        self.runs: dict[str, CallRun] = {}

    def _saw(self, run: CallRun, stage: str) -> None:
        self.stages.setdefault(run.call_id, []).append(stage)
        self.runs[run.call_id] = run

    def on_call_start(self, run: CallRun) -> None:
        assert run.result is None and run.started > 0
        self._saw(run, "on_call_start")

    def around_policy(self, run: CallRun) -> Section | None:
        return self._section(run, "around_policy")

    def on_decision(self, run: CallRun, decision: PreDecision) -> None:
        self._saw(run, "on_decision")

    def on_approval_request(self, run: CallRun, reason: str | None) -> None:
        self._saw(run, "on_approval_request")

    def on_approval(self, run: CallRun, approval: Approval) -> None:
        self._saw(run, "on_approval")

    def on_guards(self, run: CallRun, checked: int, stopped_by: str | None) -> None:
        self._saw(run, "on_guards")

    def on_dispatch_start(self, run: CallRun) -> None:
        self._saw(run, "on_dispatch_start")

    def on_trace_attributes(self, run: CallRun, attributes: Mapping[str, TraceValue]) -> None:
        self._saw(run, "on_trace_attributes")

    def on_dispatch_end(self, run: CallRun, result: ToolResult) -> None:
        self._saw(run, "on_dispatch_end")

    def around_post(self, run: CallRun) -> Section | None:
        return self._section(run, "around_post")

    def on_post_decision(self, run: CallRun, kind: str) -> None:
        self._saw(run, "on_post_decision")

    def on_call_end(self, run: CallRun) -> None:
        assert run.result is not None and run.ended is not None
        self._saw(run, "on_call_end")

    def _section(self, run: CallRun, stage: str) -> Section:
        @asynccontextmanager
        async def section() -> AsyncIterator[None]:
            self._saw(run, stage)
            yield
            self._saw(run, f"/{stage}")

        return section()


EVERY_STAGE = ["on_call_start", "around_policy", "on_decision", "on_approval_request",
               "on_approval", "on_guards", "/around_policy", "on_dispatch_start",
               "on_trace_attributes", "on_dispatch_end", "around_post", "on_post_decision",
               "/around_post", "on_call_end"]


class Yes:
    async def request(self, execution: ToolExecution, reason: str | None) -> Approval:
        return Approval(approved=True, answered_by="test")


def registry_with_every_stage(**options: Any) -> ToolRegistry:
    """A tool whose call meets every stage: an Ask that is approved, a guard, a body
    recording a trace attribute, a post-execute decision."""
    registry = ToolRegistry(approval=Yes(), **options)

    async def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.set_trace_attributes({"test.seen": True})
        return "ok"

    registry.register(define_tool(name="t", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=body, is_concurrency_safe=lambda a: True))
    registry.on_pre_execute(lambda e, d: Ask("check") if e.name == "t" else None)
    registry.guard(lambda e: None)
    registry.on_post_execute(lambda e, r: Accept() if e.name == "t" else None)
    return registry


def test_the_stages_are_the_interface() -> None:
    assert [s for s in EVERY_STAGE if not s.startswith("/")] == list(STAGES)


async def test_a_listener_sees_every_stage_of_a_native_call() -> None:
    registry = registry_with_every_stage()
    counting = Counting()
    registry.listen(counting)
    result = await registry.execute(ToolCall(call_id="c1", name="t", arguments={}))
    assert not result.is_error
    assert counting.stages == {"c1": EVERY_STAGE}
    run = counting.runs["c1"]
    assert run.result is result and not run.cancelled and run.parent is None
    assert run.definition is registry.get("t") and run.arguments == {}
    assert run.started <= (run.ended or 0)


async def test_a_listener_sees_every_stage_of_a_sub_call() -> None:
    registry = registry_with_every_stage(mode="code", code_runtime=InProcessRuntime())
    counting = Counting()
    registry.listen(counting)
    result = await registry.execute(ToolCall(
        call_id="r1", name="run_code",
        arguments={"code": "return await tools.t({})", "description": "call t"}))
    assert not result.is_error, result
    assert counting.stages["r1:code:1"] == EVERY_STAGE
    # run_code's own call: no approval asked, no post decision; its body records the
    # run's facts, since a listener takes trace attributes.
    assert counting.stages["r1"] == [
        "on_call_start", "around_policy", "on_decision", "on_guards", "/around_policy",
        "on_dispatch_start", "on_trace_attributes", "on_dispatch_end", "around_post",
        "/around_post", "on_call_end"]
    sub, run_code = counting.runs["r1:code:1"], counting.runs["r1"]
    assert sub.parent is run_code and sub.is_sub_call and sub.execution.parent is run_code.token


async def test_watches_selects_top_level_calls_or_sub_calls() -> None:
    registry = registry_with_every_stage(mode="code", code_runtime=InProcessRuntime())

    class Top(Counting):
        watches = "top-level"

    class Sub(Counting):
        watches = "sub-calls"

    top, sub = Top(), Sub()
    registry.listen(top)
    registry.listen(sub)
    await registry.execute(ToolCall(
        call_id="r1", name="run_code",
        arguments={"code": "await tools.t({})\nawait tools.t({})", "description": "two"}))
    assert list(top.stages) == ["r1"]
    assert list(sub.stages) == ["r1:code:1", "r1:code:2"]


async def test_a_call_that_fails_before_its_policy_is_told_start_and_end() -> None:
    registry = registry_with_every_stage()
    counting = Counting()
    registry.listen(counting)
    await registry.execute(ToolCall(call_id="c1", name="nope"))
    await registry.execute(ToolCall(call_id="c2", name="t", arguments=[1]))
    assert counting.stages == {"c1": ["on_call_start", "on_call_end"],
                               "c2": ["on_call_start", "on_call_end"]}
    assert counting.runs["c1"].definition is None
    assert counting.runs["c1"].result is not None
    assert counting.runs["c1"].result.error is not None
    assert counting.runs["c1"].result.error.code == "UNKNOWN_TOOL"


async def test_registration_checks_names_and_returns_the_undo() -> None:
    registry = registry_with_every_stage()

    class Typo(CallListener):
        def on_call_ended(self, run: CallRun) -> None:
            return None

    with pytest.raises(RegistrationError, match="on_call_ended is not a stage"):
        registry.listen(Typo())

    class Nothing(CallListener):
        pass

    with pytest.raises(RegistrationError, match="implements no stage"):
        registry.listen(Nothing())

    class Everywhere(Counting):
        watches = "everywhere"  # type: ignore[assignment]

    with pytest.raises(RegistrationError, match="watches='everywhere'"):
        registry.listen(Everywhere())
    counting = Counting()
    undo = registry.listen(counting)
    assert repr(undo) == "<undo: listener Counting>"
    await registry.execute(ToolCall(call_id="c1", name="t"))
    undo()
    undo()  # again: nothing happens
    await registry.execute(ToolCall(call_id="c2", name="t"))
    assert list(counting.stages) == ["c1"]


async def test_listeners_are_told_in_order_first_ones_first() -> None:
    registry = registry_with_every_stage()
    order: list[str] = []

    class Named(CallListener):
        def __init__(self, name: str) -> None:
            self.name = name

        def on_call_start(self, run: CallRun) -> None:
            order.append(self.name)

    registry.listen(Named("a"))
    registry.listen(Named("b"), first=True)
    registry.listen(Named("c"))
    await registry.execute(ToolCall(call_id="c1", name="t"))
    assert order == ["b", "a", "c"]


async def test_a_failing_listener_never_fails_a_call(caplog: pytest.LogCaptureFixture) -> None:
    registry = registry_with_every_stage()

    class Broken(CallListener):
        def on_call_start(self, run: CallRun) -> None:
            raise RuntimeError("listener bug")

        def around_policy(self, run: CallRun) -> Section | None:
            raise RuntimeError("section bug")

        def on_call_end(self, run: CallRun) -> None:
            raise RuntimeError("listener bug at the end")

    registry.listen(Broken())
    counting = Counting()
    registry.listen(counting)
    result = await registry.execute(ToolCall(call_id="c1", name="t"))
    assert not result.is_error
    assert counting.stages["c1"] == EVERY_STAGE
    assert "listener bug" in caplog.text and "section bug" in caplog.text


@pytest.mark.parametrize("where", ["making", "entering"])
async def test_a_lone_failing_section_never_fails_a_call(
        where: str, caplog: pytest.LogCaptureFixture) -> None:
    # One section is the common case (Code Mode's ordering alone), run without an exit
    # stack: a section that breaks is contained there too, and the stage runs once.
    registry = registry_with_every_stage()

    class BrokenEnter:
        async def __aenter__(self) -> None:
            raise RuntimeError("section bug")

        async def __aexit__(self, *exc: object) -> None:
            raise AssertionError("never entered, never exited")

    class Lone(CallListener):
        def around_post(self, run: CallRun) -> Section | None:
            if where == "making":
                raise RuntimeError("section bug")
            return BrokenEnter()

    registry.listen(Lone())
    result = await registry.execute(ToolCall(call_id="c1", name="t"))
    assert not result.is_error
    assert "section bug" in caplog.text


async def test_a_listener_removed_mid_call_still_sees_that_call_end() -> None:
    registry = ToolRegistry()
    started = asyncio.Event()
    release = asyncio.Event()

    async def body(args: Any, ctx: ToolRunContext) -> str:
        started.set()
        await release.wait()
        return "ok"

    registry.register(define_tool(name="slow", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=body))
    counting = Counting()
    undo = registry.listen(counting)
    task = asyncio.create_task(registry.execute(ToolCall(call_id="c1", name="slow")))
    await started.wait()
    undo()
    release.set()
    await task
    assert counting.stages["c1"][-1] == "on_call_end"


async def test_a_cancelled_call_ends_with_cancelled_set() -> None:
    registry = ToolRegistry()
    started = asyncio.Event()

    async def body(args: Any, ctx: ToolRunContext) -> str:
        started.set()
        await asyncio.sleep(30)
        return "never"

    registry.register(define_tool(name="slow", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=body))
    counting = Counting()
    registry.listen(counting)
    task = asyncio.create_task(registry.execute(ToolCall(call_id="c1", name="slow")))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    run = counting.runs["c1"]
    assert run.cancelled and run.result is not None and run.result.error is not None
    assert run.result.error.code == "ABORTED"
    # Cancelled in the body: the dispatch never ended, the call did.
    assert counting.stages["c1"][-2:] == ["on_dispatch_start", "on_call_end"]
