"""Soak: many run_code runs with tool calls, sequential and 4 at a time, on a pooled runtime.

After a warm-up the runtime's steady state is measured (once its background cleanups are
done and its pool is full), the runs go on, and the steady state is measured again: the
number of processes, workspaces, tasks, channels, file descriptors and threads must be the
same, and host memory (RSS) may grow by at most ``RSS_BOUND``. Sizes follow
``DSH_RELIABILITY_SCALE``: 30 + 20 runs by default, 1,000 + 200 at ``long``.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
from reliability_support import (
    EventLog,
    Harness,
    code_registry,
    echo_body,
    json_tool,
    run_code,
    sized,
    snapshot,
)

from dsh_jupyter import ToolRegistry, ToolRunContext
from dsh_jupyter.kernel import KernelRuntime

SEQUENTIAL = sized(default=30, short=120, long=1000)
CONCURRENT = sized(default=20, short=40, long=200)
AT_ONCE = 4
RSS_BOUND = 32 * 1024 * 1024

pytestmark = [pytest.mark.kernel, pytest.mark.soak,
              pytest.mark.timeout(sized(default=120, short=300, long=1800))]

PROGRAM = """\
a, b = await asyncio.gather(tools.echo({{"i": {i}}}), tools.echo({{"j": {i}}}))
total = await tools.add({{"x": a["i"], "y": b["j"]}})
print("run", {i})
return total
"""


async def add(args: Any, _ctx: ToolRunContext) -> int:
    return int(args["x"]) + int(args["y"])


def soak_registry(runtime: KernelRuntime) -> tuple[ToolRegistry, EventLog]:
    # ``add`` is exclusive: it waits for the parallel echoes, then runs alone.
    return code_registry(runtime, json_tool("echo", echo_body), json_tool("add", add, safe=False))


async def one_run(registry: ToolRegistry, log: EventLog, i: int) -> None:
    result = await run_code(registry, PROGRAM.format(i=i), call_id=f"run-{i}")
    assert result.value == {"logs": [f"run {i}"], "result": 2 * i}, result


async def quiesce(runtime: KernelRuntime, pool_size: int) -> None:
    """Wait until the runtime's cleanups are done and its pool is full again."""
    pool = runtime._pool
    assert pool is not None
    async with asyncio.timeout(30):
        while runtime._cleanups or pool._filling or pool.ready_count < pool_size:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    gc.collect()


def steady(harness: Harness) -> Any:
    """A snapshot where process and workspace identities are replaced by their numbers
    (pooled kernels come and go; how many there are must not change)."""
    taken = snapshot(harness.root)
    return taken, {"processes": len(taken.processes), "kernels in workspaces": len(taken.strays),
                   "workspaces": len(taken.temp_dirs), "tasks": taken.tasks,
                   "channels": taken.channels, "fds": taken.fds, "threads": taken.threads}


async def soak(harness: Harness, runs: int, at_once: int, label: str) -> None:
    runtime = await harness.runtime(pool_size=at_once)
    registry, log = soak_registry(runtime)
    warm_up = max(10, runs // 10)
    next_run = 0

    async def worker(until: int) -> None:
        nonlocal next_run
        while next_run < until:
            i, next_run = next_run, next_run + 1
            await one_run(registry, log, i)
            # Checked, then dropped: the log must not grow over the soak.
            assert log.take(f"run-{i}").settlement().started == 3

    async def run_until(until: int) -> None:
        await asyncio.gather(*(worker(until) for _ in range(at_once)))

    await run_until(warm_up)
    await quiesce(runtime, at_once)
    before, before_counts = steady(harness)
    await run_until(runs)
    await quiesce(runtime, at_once)
    after, after_counts = steady(harness)
    grown = {name: after_counts[name] - before_counts[name] for name in before_counts
             if after_counts[name] != before_counts[name]}
    rss = after.rss - before.rss
    harness.figures.add("leaks found", len(grown))
    harness.figures.notes[f"soak {label}: runs"] = runs
    harness.figures.notes[f"soak {label}: RSS after warm-up (MiB)"] = round(before.rss / 2**20, 1)
    harness.figures.notes[f"soak {label}: RSS growth after warm-up (MiB)"] = round(rss / 2**20, 2)
    assert not grown, f"steady state changed over {runs - warm_up} runs: {grown}"
    assert rss < RSS_BOUND, f"host RSS grew by {rss / 2**20:.1f} MiB"
    assert not await harness.finish()
    harness.figures.add("runs soaked", runs)


async def test_sequential_soak(harness: Harness) -> None:
    await soak(harness, SEQUENTIAL, 1, "sequential")


async def test_concurrent_soak(harness: Harness) -> None:
    await soak(harness, CONCURRENT, AT_ONCE, f"concurrent ({AT_ONCE} at a time)")
