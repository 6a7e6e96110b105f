"""Where a run's kernel comes from, and where it goes after the run.

:class:`~.runtime.KernelRuntime` runs every program one way: a :class:`KernelSource`
leases it a kernel (:meth:`~KernelSource.acquire`), the kernel executes the program
(:meth:`~.live_kernel.LiveKernel.execute`, watched by ``watch``), the files it wrote are
collected, the source amends the result (:meth:`~KernelSource.finish`) and takes the
kernel back (:meth:`~KernelSource.release`). Two sources exist:

- :class:`FreshKernels`: a kernel for this run alone, through the launcher (the fork
  server, jupyter-client or a kernel gateway alike), taken from the pool when one is ready
  (``kernel.source`` ``"pool"``) or started for the run (``"cold"``). After the run it is
  closed in the background (the run already killed it) and the pool refills.
- ``stateful.StatefulSessions``: a conversation's kept kernel (``"session"``), or a fresh
  one for the session's first run; after a run that ended cleanly the session keeps it,
  after any other the session ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, Literal, Protocol

import zmq.asyncio

from ..._waiting import wait_quietly
from ...abort import AbortSignal
from ...runtime import CodeRunFailure, CodeRunResult, FailureKind, RunRequest
from ..config import KernelRuntimeConfig
from ..launch.base import KernelLauncher
from .files import OutputCollector
from .live_kernel import KernelStartError, LiveKernel
from .pool import KernelPool
from .watch import ComputeLimit

_log = logging.getLogger(__name__)

# An absolute path where a message may quote one: at its start, or after a space, a quote,
# a parenthesis or an equals sign (so a URL's "//host/path" is left alone).
_HOST_PATH = re.compile(r"(?<![^\s'\"`(=])/[^\s'\"`()\[\],;]*")

KernelOrigin = Literal["pool", "cold", "session"]
"""Where a run's kernel came from: the fact ``kernel.source``."""
Background = Callable[[Coroutine[Any, Any, None]], None]
"""The runtime's way to run cleanup that no result waits for (its ``aclose`` does)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    """A kernel handed to one run, and how the run uses it."""

    kernel: LiveKernel
    origin: KernelOrigin
    waited: float
    """Seconds the run waited for the kernel."""
    keep: bool = False
    """Whether the run keeps its names (and, ending cleanly, the kernel) for the next."""
    compute: ComputeLimit | None = None
    """A compute budget tighter than the config's (a session's remaining total)."""
    collector: OutputCollector | None = None
    """The collector of the kernel's ``outputs/``; ``None`` where the run brings its files
    back itself (a remote kernel's, through its connection)."""


class KernelSource(Protocol):
    """Leases kernels to runs. Every :meth:`acquire` that returns a :class:`Lease` is
    followed by exactly one :meth:`release` of it, after :meth:`finish` when the run
    returned a result."""

    async def acquire(self, request: RunRequest, signals: tuple[AbortSignal, ...]
                      ) -> Lease | CodeRunResult:
        """A kernel for ``request``, or the failed result of a run that cannot have one
        (``kernel-exit``: it did not start; ``abort``: a signal fired meanwhile; a
        session's own failures)."""

    def finish(self, lease: Lease, result: CodeRunResult) -> CodeRunResult:
        """The run's result as the runtime returns it; its :attr:`~CodeRunResult.facts`
        are the source's own (the runtime adds the kernel's and the budgets')."""

    def release(self, lease: Lease) -> None:
        """Take the kernel back once the run is over (also when it did not return)."""


class FreshKernels:
    """A fresh kernel for each run: see the module docstring. ``is_open``: whether the
    runtime is open (a closing one's pool does not refill)."""

    def __init__(self, config: KernelRuntimeConfig, launcher: KernelLauncher,
                 context: zmq.asyncio.Context, directory: Path, *,
                 background: Background, is_open: Callable[[], bool]) -> None:
        self.config = config
        self._launcher = launcher
        self._context = context
        self._directory = directory
        self._background = background
        self._is_open = is_open
        self.pool = KernelPool(config.pool_size, self._open) if config.pool_size else None

    async def acquire(self, request: RunRequest, signals: tuple[AbortSignal, ...]
                      ) -> Lease | CodeRunResult:
        asked = time.monotonic()
        try:
            acquired = await self._acquire(signals)
        except KernelStartError as error:
            return start_failed(str(error))
        except Exception as error:  # sockets, files, processes: the start is environmental
            return start_failed(f"the kernel failed to start: {error!r}")
        if acquired is None:
            reason = next((s.reason for s in signals if s.reason is not None), "aborted")
            return failed("abort", reason)
        kernel, pooled = acquired
        return Lease(kernel=kernel, origin="pool" if pooled else "cold",
                     waited=time.monotonic() - asked, collector=self._collector(kernel))

    def finish(self, lease: Lease, result: CodeRunResult) -> CodeRunResult:
        return result

    def release(self, lease: Lease) -> None:
        # The kernel was SIGKILLed before the run returned; reaping it and removing its
        # workspace need not delay the result (the runtime's aclose waits for them).
        self.discard(lease.kernel)
        self.refill()

    def discard(self, kernel: LiveKernel) -> None:
        """Close ``kernel`` in the background."""
        self._background(kernel.close())

    def refill(self) -> None:
        """Top the pool up: after a run, so the next start does not compete with it."""
        if self.pool is not None and self._is_open():
            self.pool.fill()

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()

    def _collector(self, kernel: LiveKernel) -> OutputCollector | None:
        if self.config.gateway is not None:
            return None  # a remote kernel's files come back through its connection
        return OutputCollector(kernel.workspace.open_root, self.config.output_limits)

    def _open(self) -> Awaitable[LiveKernel]:
        return LiveKernel.open(self._launcher, self.config, self._context, self._directory)

    async def _take_or_open(self) -> tuple[LiveKernel, bool]:
        if self.pool is not None:
            pooled = await self.pool.take()
            if pooled is not None:
                return pooled, True
        return await self._open(), False

    async def _acquire(self, signals: tuple[AbortSignal, ...]
                       ) -> tuple[LiveKernel, bool] | None:
        """A prepared kernel and whether it came from the pool, or ``None`` if a signal
        fired while it was being obtained."""
        starting = asyncio.ensure_future(self._take_or_open())
        aborted = asyncio.Event()
        waiting = asyncio.ensure_future(aborted.wait())
        undos = [s.add_listener(lambda _reason: aborted.set()) for s in signals]
        handed_out = False
        try:
            try:
                await asyncio.wait({starting, waiting}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for undo in undos:
                    undo()
                for task in (starting, waiting):
                    if not task.done():
                        task.cancel()
                await wait_quietly({starting, waiting})
            if aborted.is_set():
                return None
            acquired = starting.result()
            handed_out = True
            return acquired
        finally:
            # Aborted, or cancelled while the kernel was ready or being taken from the pool
            # (a cancel arriving as the start completes does not undo it): close it.
            if not handed_out and starting.done() and not starting.cancelled() \
                    and starting.exception() is None:
                self.discard(starting.result()[0])


def failed(kind: FailureKind, message: str) -> CodeRunResult:
    return CodeRunResult(failure=CodeRunFailure(kind=kind, message=message))


def start_failed(message: str) -> CodeRunResult:
    """A run whose kernel did not start. The host's log gets ``message`` whole; the run's
    failure (what the model reads) names each path in it by its last part only: the
    host's directories and user names are not the model's, and it cannot mend them."""
    _log.warning("a kernel did not start: %s", message)
    return failed("kernel-exit", without_host_paths(message))


def without_host_paths(text: str) -> str:
    """``text`` with each absolute path cut to its last part (``/home/ann/data.csv`` ->
    ``data.csv``)."""
    return _HOST_PATH.sub(lambda path: path.group().rstrip("/").rsplit("/", 1)[-1] or "/",
                          text)
