"""Waiting for something to happen, never for "long enough": a condition polled against a
deadline, for state that lives in another process or that nothing announces."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

from dsh_jupyter.kernel.launch import proctree


async def eventually(predicate: Callable[[], Awaitable[object] | object], *,
                     seconds: float = 15.0, every: float = 0.02) -> None:
    """Poll ``predicate`` (sync or async) until it is true; ``TimeoutError`` after
    ``seconds``. Where an event can say it, wait for the event instead."""
    async with asyncio.timeout(seconds):
        while True:
            outcome = predicate()
            if inspect.isawaitable(outcome):
                outcome = await outcome
            if outcome:
                return
            await asyncio.sleep(every)


async def still_running(pids: list[int], within: float, *, every: float = 0.01) -> list[int]:
    """Those of ``pids`` still running (not gone, not zombies) after waiting up to
    ``within`` seconds for all of them to die."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        alive = [pid for pid in pids if (stat := proctree.read_stat(pid)) is not None
                 and stat.state != "Z"]
        if not alive or loop.time() > deadline:
            return alive
        await asyncio.sleep(every)
