"""A pool of started, never-used kernels, each handed out for exactly one run.

Kernels in the pool are ready and have the runtime injected (the tools comm is
open); only the program cell, with this run's binding names, is left to send.
The pool refills in the background after every run. Before a kernel is handed
out it is checked to be alive and *pristine*: a kernel that published anything
since it was prepared was reached by someone other than the host (its sockets
are private to the host's user, and a confined program cannot see them; an
unconfined one could) and is discarded, never handed out. If kernels keep
failing to start, the pool stops refilling until the next hand-out (so a broken
kernelspec cannot spin).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from ..._waiting import wait_quietly
from .live_kernel import KernelStartError, LiveKernel

_log = logging.getLogger(__name__)

Opener = Callable[[], Awaitable[LiveKernel]]


class KernelPool:
    """Keeps up to ``size`` prepared kernels. :meth:`close` kills them all."""

    def __init__(self, size: int, open_kernel: Opener) -> None:
        self._size = size
        self._open = open_kernel
        self._ready: list[LiveKernel] = []
        self._filling: set[asyncio.Task[None]] = set()
        self._closed = False
        self._failures = 0

    @property
    def ready_count(self) -> int:
        return len(self._ready)

    def fill(self) -> None:
        """Start background starts until ready + starting kernels reach the pool size."""
        if self._closed or self._failures >= 3:
            return
        while len(self._ready) + len(self._filling) < self._size:
            task = asyncio.create_task(self._add_one())
            self._filling.add(task)
            task.add_done_callback(self._filling.discard)

    async def _add_one(self) -> None:
        try:
            kernel = await self._open()
        except KernelStartError as error:
            self._failures += 1
            _log.warning("could not start a pooled kernel: %s", error)
            return
        self._failures = 0
        if self._closed:
            await kernel.close()
        else:
            self._ready.append(kernel)

    async def take(self) -> LiveKernel | None:
        """A live, unused kernel from the pool (oldest first), or ``None``. Does not refill:
        the owner calls :meth:`fill` once the run is over, so starting the next kernel does
        not compete with the run for the CPU."""
        self._failures = 0
        if not self._ready and self._filling:
            # A start is already under way (right after entry, say): it is ahead of a new one.
            await asyncio.wait(set(self._filling), return_when=asyncio.FIRST_COMPLETED)
        kernel: LiveKernel | None = None
        while self._ready:
            candidate = self._ready.pop(0)
            if not await candidate.process.is_alive():
                await candidate.close()
            elif not await candidate.pristine():
                _log.warning("discarded a pooled kernel that saw traffic other than the "
                             "host's: something else reached its sockets")
                await candidate.close()
            else:
                kernel = candidate
                break
        return kernel

    async def wait_filled(self) -> None:
        """Wait for the starts in progress (used by tests and benchmarks)."""
        while self._filling:
            await wait_quietly(set(self._filling))

    async def close(self) -> None:
        self._closed = True
        for task in list(self._filling):
            task.cancel()
        await wait_quietly(set(self._filling))
        ready, self._ready = self._ready, []
        for kernel in ready:
            with contextlib.suppress(Exception):
                await kernel.close()
