"""A program that floods or cuts the tools channel ends its own run, and only its own.

Figures printed here (``pytest -s``) are for reading, not asserting: performance
targets live in the benchmarks.
"""

from __future__ import annotations

import asyncio

import pytest
from kernel_support import REPLY_FLOOD, Recorder, RuntimeFactory, run
from loop_lag import LoopLag

from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.kernel import KernelRuntime

pytestmark = pytest.mark.kernel


INNOCENT = """\
answers = []
for i in range(20):
    answers.append(await tools.echo({"i": i}))
    await asyncio.sleep(0.05)
return [answer["args"]["i"] for answer in answers]
"""

CLOSE_THE_COMM = """\
kernel = get_ipython().kernel
comm = next(c for c in kernel.comm_manager.comms.values()
            if c.target_name == "dsh_jupyter.tools")
comm.close()
return await tools.echo({"after": "close"})
"""


async def test_a_reply_flood_fails_its_run_and_spares_the_host(
        make_runtime: RuntimeFactory, recorder: Recorder) -> None:
    flooded = await make_runtime(wall_seconds=60)
    innocent = await make_runtime()
    loop = asyncio.get_running_loop()
    flooding = asyncio.Event()

    async def under_way(args: JsonValue) -> JsonValue:
        flooding.set()
        return None

    async with LoopLag() as lag:
        started = loop.time()
        flood = asyncio.create_task(run(flooded, REPLY_FLOOD, {"flooding": under_way}))
        await flooding.wait()  # the flood starts as this returns, before the innocent run
        bystander = await run(innocent, INNOCENT, {"echo": recorder.binding("echo")})
        result = await flood
        elapsed = loop.time() - started
    print(f"\nflood ended as {result.failure and result.failure.kind} after {elapsed:.1f} s; "
          f"{lag.describe()}")
    assert result.failure is not None and result.failure.kind == "call-limit", result
    assert "faster than it read their replies" in result.failure.message
    assert "more than 1024 waiting" in result.failure.message
    assert elapsed < 30  # the program's own sleep: it never got that far
    assert bystander.failure is None, bystander.failure
    assert bystander.value == list(range(20))
    assert len(recorder.calls) == 20


@pytest.mark.parametrize("carrier", ["comm", "socket"])
async def test_closing_the_tools_comm_ends_the_run(make_runtime: RuntimeFactory,
                                                   recorder: Recorder, carrier: str) -> None:
    runtime: KernelRuntime = await make_runtime(carrier=carrier)
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await run(runtime, CLOSE_THE_COMM, {"echo": recorder.binding("echo")})
    elapsed = loop.time() - started
    assert result.failure is not None and result.failure.kind == "kernel-exit", result
    assert result.failure.message == ("the program closed its tools channel: tool calls and "
                                      "its result can no longer reach the host")
    assert elapsed < 5  # not the wall budget (600 s)
    assert (await run(runtime, "return 1")).value == 1
