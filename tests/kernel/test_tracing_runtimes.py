"""OpenTelemetry spans of run_code programs on both runtimes (the in-process one and a
real kernel): sub-calls parented to the run's span, the kernel's facts and the failure kind
recorded, a cancelled run ending every span as an error. The tests that need no kernel are
in tests/unit/registry/test_tracing.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from opentelemetry.trace import StatusCode
from tracing_support import Traces, attrs, echo, error_of, run_code

from dsh_jupyter import ToolRegistry, ToolRunContext, define_tool
from dsh_jupyter.kernel import InProcessRuntime, KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.runtime import CodeRuntime


@pytest.fixture
def traces() -> Traces:
    return Traces()


@pytest.fixture(params=["in-process", pytest.param("kernel", marks=pytest.mark.kernel)])
async def code_runtime(request: pytest.FixtureRequest) -> AsyncIterator[CodeRuntime]:
    """The same span tree on the in-process runtime and on a real kernel."""
    if request.param == "in-process":
        yield InProcessRuntime()
        return
    async with KernelRuntime(KernelRuntimeConfig(pool_size=1)) as runtime:
        yield runtime


# --- run_code and its sub-calls -----------------------------------------------------------


async def test_parallel_sub_calls_are_children_of_the_run_code_span(
        traces: Traces, code_runtime: CodeRuntime) -> None:
    registry = ToolRegistry(mode="code", code_runtime=code_runtime)
    registry.register(echo(delay=0.2, safe=True))
    registry.instrument(traces.provider)
    result = await registry.execute(run_code(
        "a, b = await asyncio.gather(tools.echo({'text': 'a'}), tools.echo({'text': 'b'}))\n"
        "return a + b"))
    assert not result.is_error, result
    (run,) = traces.named("execute_tool run_code")
    subs = sorted(traces.named("execute_tool echo"),
                  key=lambda s: str(attrs(s)["gen_ai.tool.call.id"]))
    assert len(traces.spans) == 3
    assert run.parent is None and run.context is not None
    facts = {key: value for key, value in attrs(run).items() if key.startswith("dsh.kernel.")}
    assert {key: value for key, value in attrs(run).items() if key not in facts} == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "run_code",
        "gen_ai.tool.call.id": "r1", "dsh.run_code.description": "two echoes",
        "dsh.pre_execute.decision": "allow", "dsh.result.bytes": len("ab"),  # rendered raw
        "dsh.run_code.sub_calls": 2, "dsh.run_code.log_lines": 0, "dsh.run_code.displays": 0,
        "dsh.budget.max_parallel_sub_calls": 10,
        **({} if isinstance(code_runtime, InProcessRuntime) else {
            "dsh.budget.wall_seconds": 600.0, "dsh.budget.compute_seconds": 60.0,
            "dsh.budget.max_output_bytes": 64 * 1024 * 1024})}
    if isinstance(code_runtime, KernelRuntime):
        wait_ms = facts.pop("dsh.kernel.wait_ms")
        assert isinstance(wait_ms, float) and wait_ms >= 0
        assert facts == {"dsh.kernel.source": "pool", "dsh.kernel.launcher": "fork",
                         "dsh.kernel.confined": code_runtime.confined}
    else:
        assert facts == {}
    for n, sub in enumerate(subs, start=1):
        assert sub.parent is not None and sub.context is not None
        assert sub.parent.span_id == run.context.span_id
        assert sub.context.trace_id == run.context.trace_id
        assert attrs(sub) == {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "echo",
            "gen_ai.tool.call.id": f"r1:code:{n}", "dsh.pre_execute.decision": "allow",
            "dsh.result.bytes": 1}
        assert sub.status.status_code == StatusCode.UNSET
    first, second = subs
    assert first.start_time is not None and first.end_time is not None
    assert second.start_time is not None and second.end_time is not None
    assert first.start_time < second.end_time and second.start_time < first.end_time  # overlap
    assert run.start_time is not None and run.end_time is not None
    assert run.start_time <= first.start_time and max(first.end_time,
                                                      second.end_time) <= run.end_time


@pytest.mark.kernel
async def test_a_cold_kernel_and_the_failure_kind_are_recorded(traces: Traces) -> None:
    config = KernelRuntimeConfig(pool_size=0, launcher="stock", wall_seconds=30,
                                 max_output_bytes=10_000)
    async with KernelRuntime(config) as runtime:
        registry = ToolRegistry(mode="code", code_runtime=runtime, max_parallel_sub_calls=3)
        registry.register(echo())
        registry.instrument(traces.provider)
        result = await registry.execute(run_code(
            "print('one')\nprint('two')\nawait tools.echo({'text': 'x'})\n"
            "raise ValueError('no')"))
    assert result.error is not None and result.error.code == "CODE_RUN_FAILED"
    (run,) = traces.named("execute_tool run_code")
    recorded = attrs(run)
    assert error_of(run) == (StatusCode.ERROR, "CODE_RUN_FAILED")
    assert recorded["dsh.run_code.failure"] == "exception"
    assert recorded["dsh.kernel.source"] == "cold"
    assert recorded["dsh.kernel.launcher"] == "stock"
    assert recorded["dsh.kernel.confined"] is runtime.confined
    # A cold start waits for the kernel: far longer than taking one from a pool.
    assert isinstance(recorded["dsh.kernel.wait_ms"], float)
    assert recorded["dsh.kernel.wait_ms"] > 50
    assert (recorded["dsh.budget.wall_seconds"], recorded["dsh.budget.max_output_bytes"],
            recorded["dsh.budget.max_parallel_sub_calls"]) == (30, 10_000, 3)
    assert (recorded["dsh.run_code.sub_calls"], recorded["dsh.run_code.log_lines"]) == (1, 2)


async def test_a_cancelled_run_ends_every_span_as_an_error(
        traces: Traces, code_runtime: CodeRuntime) -> None:
    registry = ToolRegistry(mode="code", code_runtime=code_runtime)
    running = 0
    both_running = asyncio.Event()

    async def slow(args: Any, ctx: ToolRunContext) -> str:
        nonlocal running
        running += 1
        if running == 2:
            both_running.set()
        await ctx.signal.wait()
        return "x"

    registry.register(define_tool(name="slow", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=slow, is_concurrency_safe=lambda a: True))
    registry.instrument(traces.provider)
    task = asyncio.create_task(registry.execute(run_code(
        "await asyncio.gather(tools.slow({}), tools.slow({}))")))
    await both_running.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (run,) = traces.named("execute_tool run_code")
    subs = traces.named("execute_tool slow")
    assert error_of(run) == (StatusCode.ERROR, "CODE_RUN_FAILED")
    assert len(subs) == 2
    for sub in subs:
        assert error_of(sub) == (StatusCode.ERROR, "ABORTED")
        assert sub.parent is not None and run.context is not None
        assert sub.parent.span_id == run.context.span_id
        assert sub.end_time is not None and run.end_time is not None
        assert sub.end_time <= run.end_time
