"""Waiting for something to happen, never for "long enough": a condition polled against a
deadline, for state that lives in another process or that nothing announces."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable


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
