"""How long the event loop was kept from running: a lag monitor for tests and benchmarks.

A task sleeps ``interval`` in a loop and records how late each wake-up was; a late
wake-up means some callback held the loop meanwhile. Standard library only, so a
benchmark can import it too (put ``tests/kernel`` on ``sys.path``)::

    async with LoopLag() as lag:
        await work()
    print(f"longest stall {lag.worst * 1000:.0f} ms, {lag.stalled:.1f} s stalled in all")
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType


class LoopLag:
    """Samples the running loop's lag while the ``async with`` block runs.

    ``worst`` is the longest single overshoot (seconds); ``stalled`` sums the overshoots
    of at least ``stall_seconds``; ``samples`` counts wake-ups."""

    def __init__(self, interval: float = 0.005, stall_seconds: float = 0.02) -> None:
        self.interval = interval
        self.stall_seconds = stall_seconds
        self.worst = 0.0
        self.stalled = 0.0
        self.samples = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopLag:
        self._task = asyncio.create_task(self._sample())
        await asyncio.sleep(0)  # the first sample starts now, not at the block's first await
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _sample(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            expected = loop.time() + self.interval
            await asyncio.sleep(self.interval)
            late = loop.time() - expected
            self.samples += 1
            self.worst = max(self.worst, late)
            if late >= self.stall_seconds:
                self.stalled += late

    def describe(self) -> str:
        return (f"longest event-loop stall {self.worst * 1000:.1f} ms; "
                f"{self.stalled:.2f} s in stalls of {self.stall_seconds * 1000:.0f} ms or more "
                f"({self.samples} samples)")
