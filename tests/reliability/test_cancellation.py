"""Host-side cancellation at each point of a run, two ways: the call's abort signal, and
``Task.cancel()`` of the task awaiting ``registry.execute``.

Each point is reached for real (a marker file written by a stalling kernel, or an event set
by a hook or a tool body), then the run is stopped. It must end with the right code,
settle every started sub-call exactly once, and leave nothing behind.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from reliability_support import (
    Harness,
    install_stalling_kernel,
    json_tool,
    reached,
    run_code,
)

from dsh_jupyter import AbortController, ToolExecution, ToolRunContext
from dsh_jupyter.registry.pipeline import cancelled_call

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]


@dataclass
class Point:
    """Where a run is stopped, and what its sub-calls must have settled with."""

    program: str
    codes: dict[str, str | None]
    options: dict[str, Any] = field(default_factory=dict)


POINTS = {
    "kernel start": Point("return await tools.work({})", {}, {"stalls": "launch"}),
    "injection": Point("return await tools.work({})", {}, {"stalls": "injection"}),
    "pre-execute": Point("return await tools.gated({})",
                         {"run:code:1": "ABORTED_BEFORE_DISPATCH"}),
    "body": Point("return await tools.work({})", {"run:code:1": "ABORTED"}),
    "post-execute": Point("return await tools.checked({})", {"run:code:1": "ABORTED"}),
    # The program returned; its run ends, the sub-call it left running sees the end of the
    # run and takes a while to stop: the run is stopped while it settles.
    "settlement": Point("asyncio.ensure_future(tools.linger({}))\n"
                        "await tools.lingering({})\nreturn 'early'",
                        {"run:code:1": None, "run:code:2": "ABORTED"}),
}


class Stops:
    """Tools and hooks that report when a run reaches them, then wait for their signal."""

    def __init__(self) -> None:
        self.reached: dict[str, asyncio.Event] = {name: asyncio.Event() for name in POINTS}
        self.stopped: list[str | None] = []

    def install(self, registry: Any) -> None:
        async def wait_for_signal(point: str, signal: Any) -> None:
            self.reached[point].set()
            await signal.wait()
            self.stopped.append(signal.reason)

        async def work(_args: Any, ctx: ToolRunContext) -> str:
            await wait_for_signal("body", ctx.signal)
            return "stopped"

        async def quick(_args: Any, _ctx: ToolRunContext) -> str:
            return "done"

        async def linger(_args: Any, ctx: ToolRunContext) -> str:
            self.reached["body"].set()
            await ctx.signal.wait()  # the program returned: its run is settling
            self.stopped.append(ctx.signal.reason)
            self.reached["settlement"].set()
            await asyncio.sleep(0.5)  # cleaning up, after the run is over
            return "lingered"

        async def lingering(_args: Any, _ctx: ToolRunContext) -> bool:
            await self.reached["body"].wait()
            return True

        async def pre(execution: ToolExecution, _decision: Any) -> None:
            if execution.name == "gated":
                await wait_for_signal("pre-execute", execution.signal)

        async def post(execution: ToolExecution, _result: Any) -> None:
            if execution.name == "checked":
                await wait_for_signal("post-execute", execution.signal)

        for name, body in (("work", work), ("gated", quick), ("checked", quick),
                           ("linger", linger), ("lingering", lingering)):
            registry.register(json_tool(name, body))
        registry.on_pre_execute(pre)
        registry.on_post_execute(post)


async def start_run(harness: Harness, point: str, tmp_path: Path,
                    monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, Stops]:
    options: dict[str, Any] = {}
    stalls = POINTS[point].options.get("stalls")
    if stalls is not None:
        install_stalling_kernel(tmp_path, "dsh-rel-stall", stalls)
        monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
        options = {"kernel_name": "dsh-rel-stall"}
    registry, log = await harness.registry(**options)
    stops = Stops()
    stops.install(registry)
    return registry, log, stops


async def point_reached(harness: Harness, point: str, stops: Stops) -> None:
    if point == "kernel start":
        await reached(harness.root, "starting")
    elif point == "injection":
        await reached(harness.root, "injecting")
    else:
        async with asyncio.timeout(30):
            await stops.reached[point].wait()


@pytest.mark.parametrize("point", list(POINTS))
async def test_abort_signal(harness: Harness, point: str, tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    registry, log, stops = await start_run(harness, point, tmp_path, monkeypatch)
    controller = AbortController()
    task = asyncio.create_task(run_code(registry, POINTS[point].program,
                                        signal=controller.signal))
    await point_reached(harness, point, stops)
    controller.abort("user pressed stop")
    result = await task
    assert result.error is not None, result
    # 000: an abort replaces only a success with ABORTED (the program had returned when
    # it was stopped while settling); a run stopped midway fails as CODE_RUN_FAILED.
    code = "ABORTED" if point == "settlement" else "CODE_RUN_FAILED"
    assert result.error.code == code, result.error
    assert "user pressed stop" in result.error.message
    if code == "CODE_RUN_FAILED":
        assert result.error.message.startswith("code run failed (abort): user pressed stop")
    settlement = log.settlement()
    assert settlement.codes == POINTS[point].codes
    assert settlement.results == {"run": code}
    assert not await harness.finish()
    harness.figures.add("faults survived")


@pytest.mark.parametrize("point", list(POINTS))
async def test_task_cancel(harness: Harness, point: str, tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    registry, log, stops = await start_run(harness, point, tmp_path, monkeypatch)
    task = asyncio.create_task(run_code(registry, POINTS[point].program))
    await point_reached(harness, point, stops)
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as raised:
        await task
    # The cancellation stops the program like an abort (its result keeps what it printed)
    # and is published before it propagates; a program that had returned (stopped while
    # settling) had succeeded, which a cancellation turns into ABORTED.
    code = "ABORTED" if point == "settlement" else "CODE_RUN_FAILED"
    settlement = log.settlement()
    assert settlement.codes == POINTS[point].codes
    assert settlement.results == {"run": code}
    stopped = cancelled_call(raised.value)
    assert stopped is not None and stopped.result.error is not None
    assert stopped.result.error.code == code
    if point != "settlement":
        assert stopped.result.error.message.startswith(
            "code run failed (abort): the call was cancelled")
        assert stops.stopped == (["the call was cancelled"] if settlement.started else [])
    assert not await harness.finish()
    harness.figures.add("faults survived")


async def test_abort_before_the_run_starts(harness: Harness) -> None:
    registry, log = await harness.registry()
    Stops().install(registry)
    controller = AbortController()
    controller.abort("not now")
    result = await run_code(registry, "return await tools.work({})", signal=controller.signal)
    assert result.error is not None and result.error.code == "ABORTED_BEFORE_DISPATCH"
    assert log.settlement().started == 0
    assert not await harness.finish()
    harness.figures.add("faults survived")


async def test_cancel_before_the_run_starts(harness: Harness) -> None:
    registry, log = await harness.registry()
    Stops().install(registry)
    task = asyncio.create_task(run_code(registry, "return await tools.work({})"))
    task.cancel()  # before its first step
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log.events == []
    assert not await harness.finish()
    harness.figures.add("faults survived")
