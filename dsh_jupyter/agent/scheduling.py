"""Running one step's tool calls: parallel runs concurrently, exclusive is a barrier.

A maximal run of consecutive calls the registry classifies ``"parallel"``
executes concurrently, at most ``max_parallel`` at a time, started in model
order; an ``"exclusive"`` call runs alone, after everything before it has
settled and before anything after it starts. Results come back in model order
whatever order they finish in. Items that are already results (a call whose
arguments were not JSON) take no slot and do not split a group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TypeAlias

from ..registry import ToolCall, ToolRegistry, ToolResult

Planned: TypeAlias = ToolCall | ToolResult


def plan(registry: ToolRegistry, items: Sequence[Planned]) -> list[list[int]]:
    """Indexes of the calls in ``items``, grouped as they will run."""
    groups: list[list[int]] = []
    parallel: list[int] = []
    for index, item in enumerate(items):
        if not isinstance(item, ToolCall):
            continue
        if registry.execution_mode(item) == "parallel":
            parallel.append(index)
            continue
        if parallel:
            groups.append(parallel)
            parallel = []
        groups.append([index])
    if parallel:
        groups.append(parallel)
    return groups


async def execute_planned(registry: ToolRegistry, items: Sequence[Planned],
                          groups: Sequence[Sequence[int]], *,
                          max_parallel: int) -> list[ToolResult]:
    """Execute ``groups`` (from :func:`plan`) in order; results in model order.

    Cancelling the caller cancels the running calls and waits for them to settle.
    """
    results: dict[int, ToolResult] = {i: item for i, item in enumerate(items)
                                      if not isinstance(item, ToolCall)}

    async def run(index: int, limit: asyncio.Semaphore | None = None) -> None:
        call = items[index]
        assert isinstance(call, ToolCall)
        if limit is None:
            results[index] = await registry.execute(call)
            return
        async with limit:
            results[index] = await registry.execute(call)

    for group in groups:
        if len(group) == 1:
            await run(group[0])
            continue
        limit = asyncio.Semaphore(max_parallel)
        async with asyncio.TaskGroup() as tasks:
            for index in group:
                tasks.create_task(run(index, limit))
    return [results[i] for i in range(len(items))]
