"""Failures that must be right and fast: deep values, a closed comm, cancellation at any
point of a kernel's start. Each through ``run_code`` on a real runtime."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from reliability_support import Harness, code_registry, echo_body, json_tool, returned_by, run_code

from dsh_jupyter import ToolRunContext, define_tool
from dsh_jupyter.kernel.run.workspace import SEED_HOME

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120)]

DEEP_VALUE = """\
value = []
for _ in range({depth}):
    value = [value]
return value
"""


@pytest.mark.parametrize("depth", [1_000, 200_000])
async def test_a_deeply_nested_value_is_invalid_output(harness: Harness, depth: int) -> None:
    """A return value nested past the limit fails as invalid-output with one readable line
    (no internal traceback, no colour codes), and quickly."""
    registry, log = await harness.registry(wall_seconds=30)
    started = time.perf_counter()
    result = await run_code(registry, DEEP_VALUE.format(depth=depth))
    assert time.perf_counter() - started < 10
    assert result.error is not None
    message = result.error.message
    assert message.startswith("code run failed (invalid-output): the program's return value "
                              "is not lossless JSON: it is nested more than 500 levels deep")
    assert "\n" not in message and "\x1b" not in message and "Traceback" not in message
    log.settlement()
    assert not await harness.finish()


async def test_deeply_nested_arguments_fail_the_call_not_the_host(harness: Harness) -> None:
    """Arguments past the depth limit raise in the program (which may catch it); the tools
    keep working."""
    registry, _ = await harness.registry(json_tool("echo", echo_body))
    program = """\
args = {"x": 1}
for _ in range(100_000):
    args = {"x": args}
try:
    await tools.echo(args)
except ToolCallError as error:
    problem = str(error)
return [problem, await tools.echo({"still": "fine"})]
"""
    result = await run_code(registry, program)
    assert result.error is None, result.error
    problem, echoed = returned_by(result)
    assert "nested more than 500 levels deep" in problem
    assert echoed == {"still": "fine"}
    assert not await harness.finish()


async def test_cancelling_during_kernel_start_leaves_nothing(harness: Harness) -> None:
    """60 runs cancelled at spread-out moments of their kernel's start (workspace, fork,
    namespaces, readiness, injection): after each, once the runtime's background cleanups
    are done, no workspace, process or task is left; then the runtime still works."""
    runtime = await harness.runtime(pool_size=0)
    assert runtime._directory is not None
    directory = runtime._directory
    registry, _ = code_registry(runtime)
    await run_code(registry, "return 1", call_id="warm")  # the fork server is up
    leftovers = []
    for attempt in range(60):
        task = asyncio.ensure_future(run_code(registry, "return 1", call_id=f"c{attempt}"))
        if attempt < 30:  # step through the first await points one loop turn at a time
            for _ in range(attempt):
                await asyncio.sleep(0)
        else:  # then 0 to 116 ms in: forking, namespaces, readiness, injection
            await asyncio.sleep((attempt - 30) * 0.004)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        while runtime._cleanups:
            await asyncio.wait(set(runtime._cleanups))
        # The seed home lives as long as the runtime; workspaces must be gone.
        leftovers += [p.name for p in directory.iterdir() if p.name != SEED_HOME]
    assert leftovers == []
    ok = await run_code(registry, "return 'still works'", call_id="after")
    assert ok.error is None and returned_by(ok) == "still works"
    assert not await harness.finish()


async def test_closing_a_runtime_right_after_opening_it_leaves_nothing(harness: Harness) -> None:
    """A runtime closed while its pool is still starting kernels (20 times)."""
    for _ in range(20):
        runtime = await harness.runtime(pool_size=2)
        await runtime.aclose()
    assert list(harness.root.iterdir()) == []
    assert not await harness.finish()


async def test_a_closed_tools_comm_ends_the_run(harness: Harness) -> None:
    """A program that closes its tools comm cannot be answered or report a result: the run
    ends at once as kernel-exit, not at its wall budget."""
    calls: list[object] = []

    async def record(args: object, _ctx: ToolRunContext) -> object:
        calls.append(args)
        return args

    registry, log = await harness.registry(json_tool("echo", record), wall_seconds=60)
    program = """\
import gc, comm.base_comm
[tools_comm] = [c for c in gc.get_objects() if isinstance(c, comm.base_comm.BaseComm)
                and c.target_name == "dsh_jupyter.tools"]
tools_comm.close()
return await tools.echo({"after": "close"})
"""
    started = time.perf_counter()
    result = await run_code(registry, program)
    elapsed = time.perf_counter() - started
    assert result.error is not None
    assert result.error.message.startswith("code run failed (kernel-exit): the program closed "
                                           "its tools channel")
    assert elapsed < 5, elapsed
    assert calls == []
    log.settlement()
    assert not await harness.finish()


async def test_a_tool_value_too_deep_to_send_fails_the_call(harness: Harness) -> None:
    """A tool whose value is nested too deeply for the wire: the program gets a
    ToolCallError at once, instead of waiting for a reply until its wall budget."""

    async def deep(_args: object, _ctx: ToolRunContext) -> object:
        value: list[object] = []
        for _ in range(100_000):
            value = [value]
        return value

    tool = define_tool(name="deep", description="a value 100,000 levels deep",
                       parameters={"type": "object"},
                       output={"schema": {}, "render": lambda _args, _value: "deep"},
                       execute=deep)
    registry, log = await harness.registry(tool, wall_seconds=60)
    program = """\
try:
    await tools.deep({})
except ToolCallError as error:
    return str(error)
"""
    started = time.perf_counter()
    result = await run_code(registry, program)
    assert time.perf_counter() - started < 10
    assert result.error is None, result.error
    assert "nested more than 500 levels deep" in returned_by(result)
    log.settlement()
    assert not await harness.finish()
