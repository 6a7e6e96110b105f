"""Floods against the host, from real programs through ``run_code``: replies the program
never reads, output floods from several runs at once, a huge return value.

What must hold is asserted (outcomes, bounds on what is kept, innocent runs unharmed);
how fast, and how long the host's event loop stalls, is measured by
``bench/security.py`` (performance targets live in benchmarks, not in tests).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kernel_support import REPLY_FLOOD
from reliability_support import Harness, code_registry, echo_body, json_tool, returned_by, run_code

from dsh_jupyter import ToolRunContext
from dsh_jupyter.kernel.run.logs import OutputBudget

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120)]

INNOCENT = """\
answers = [await tools.echo({"i": i}) for i in range(10)]
return [answer["i"] for answer in answers]
"""


async def test_replies_a_program_never_reads(harness: Harness) -> None:
    """100,000 calls fired without reading their replies: the run fails with call-limit
    long before its wall budget; a run of another runtime meanwhile is answered."""
    flooding = asyncio.Event()

    async def under_way(_args: Any, _ctx: ToolRunContext) -> None:
        flooding.set()

    flooded, _ = await harness.registry(json_tool("echo", echo_body),
                                        json_tool("flooding", under_way), wall_seconds=60)
    innocent, _ = await harness.registry(json_tool("echo", echo_body))
    flood = asyncio.ensure_future(run_code(flooded, REPLY_FLOOD, call_id="flood"))
    await flooding.wait()  # the flood starts as this returns, before the innocent run
    calm = await run_code(innocent, INNOCENT, call_id="innocent")
    result = await flood
    assert calm.error is None and returned_by(calm) == list(range(10))
    assert result.error is not None
    assert result.error.message.startswith("code run failed (call-limit): the program sent "
                                           "tool calls faster than it read their replies")
    assert not await harness.finish()


FLOOD = "line = 'x' * 10_000\nfor _ in range(10_000):\n    print(line)"  # 100 MB


async def test_output_floods_share_one_budget(harness: Harness,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Four runs flooding 100 MB each at once, on a runtime whose runs may hold 2 MiB
    together (each may keep 4 MiB): every run ends as output-limit, and what the runs
    in flight held together never passed the shared budget (a result handed over
    returns its share). With room in the budget, a run gets its whole cap."""
    cap, shared = 4 * 1024 * 1024, 2 * 1024 * 1024
    runtime = await harness.runtime(pool_size=4, max_output_bytes=cap,
                                    max_buffered_output_bytes=shared)
    peak = [0]
    take = OutputBudget.take

    def watched_take(budget: OutputBudget, size: int) -> bool:
        taken = take(budget, size)
        peak[0] = max(peak[0], budget.used)
        return taken

    monkeypatch.setattr(OutputBudget, "take", watched_take)
    registry, log = code_registry(runtime)
    results = await asyncio.gather(*(run_code(registry, FLOOD, call_id=f"flood{n}")
                                     for n in range(4)))
    for result in results:
        assert result.error is not None
        assert result.error.message.startswith("code run failed (output-limit): the output of "
                                               "the runs in flight passed the runtime's "
                                               "2097152 byte budget")
    assert shared * 0.9 < peak[0] <= shared
    log.settlement()
    roomy, _ = await harness.registry(max_output_bytes=cap)  # the default 16 MiB budget
    alone = await run_code(roomy, FLOOD, call_id="alone")
    assert alone.error is not None
    assert "the program's output passed the 4194304 byte limit" in alone.error.message
    assert len(alone.error.message.encode()) > cap * 0.9
    assert not await harness.finish()


async def test_one_line_floods_keep_nothing_unbounded(harness: Harness) -> None:
    """Four programs printing one 100 MB line each: a line is charged as it arrives, so
    each run ends long before the line does, and nothing of it is kept."""
    runtime = await harness.runtime(pool_size=4)
    registry, _ = code_registry(runtime)
    results = await asyncio.gather(*(run_code(registry, "print('x' * 100_000_000)",
                                              call_id=f"line{n}") for n in range(4)))
    for result in results:
        assert result.error is not None and "(output-limit)" in result.error.message
        assert "Captured output" not in result.error.message
    assert not await harness.finish()


async def test_a_huge_value_comes_back_whole(harness: Harness) -> None:
    """A 10 MB value of five million elements arrives (as frames) and is the result."""
    registry, log = await harness.registry(wall_seconds=120)
    result = await run_code(registry, "return [7] * 5_000_000")
    assert result.error is None, result.error
    value = returned_by(result)
    assert len(value) == 5_000_000 and value[0] == value[-1] == 7
    log.settlement()
    assert not await harness.finish()
