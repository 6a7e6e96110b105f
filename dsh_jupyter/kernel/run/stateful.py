"""Stateful sessions: one kept kernel per conversation, opt-in.

``KernelRuntimeConfig(stateful=StatefulConfig(...))`` makes a :class:`~.runtime.KernelRuntime`
run the programs of one *session key* (the request says it:
:attr:`~dsh_jupyter.runtime.RunRequest.session`; Code Mode keys a run by its agent scope) on
one kernel, so what a program defines at top level is there for the next. A run without a key
still gets a fresh kernel.

:class:`StatefulSessions` is the runtime's kernel source for keyed runs (see ``sources``).
Rules (``docs/stateful-runs.md`` says them for users):

- A session's first run takes a kernel as any run does (the pool, else a cold start;
  confined alike); later runs of the session reuse it, one at a time (a second run of the
  same session waits for the first). The kernel is never returned to the pool and never
  serves another key.
- A run that does not end cleanly (timeout, abort, output or call limit, a dead kernel)
  kills the kernel as a fresh run's would: the session ends, the failure says its state is
  lost, and the key's next run starts a new kernel (``session.new``). A kernel found dead
  between runs fails that run the same way.
- :meth:`StatefulSessions.reset` ends a session at once (a run in flight fails as
  ``kernel-exit``); a session idle for ``idle_seconds`` ends by itself; closing the runtime
  ends them all.
- Budgets: each run has the config's; a session has ``max_runs`` and
  ``total_compute_seconds`` (CPU of the kernel's process tree since the session's first
  run, between runs too). A run over either fails ``session-limit`` before it starts; a
  run that passes the compute total fails ``timeout`` and ends the session.
- At most ``max_sessions`` are open; a new key past that fails ``session-limit``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterable
from typing import Final

from ..._waiting import wait_quietly
from ...abort import AbortSignal
from ...runtime import CodeRunFailure, CodeRunResult, RunFact, RunRequest
from ..launch import proctree
from ..stateful_config import StatefulConfig
from .files import OutputCollector
from .live_kernel import LiveKernel
from .sources import FreshKernels, KernelOrigin, Lease, failed
from .watch import ComputeLimit

STATE_LOST: Final = ("this conversation's kernel was stopped, so the variables and imports of "
                     "its earlier runs are lost: the next run starts a fresh kernel")
RESET: Final = "the session was reset"
EXPIRED: Final = "the session was idle too long"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SessionInfo:
    """What :attr:`~.runtime.KernelRuntime.sessions` says of one open session."""

    key: str
    runs: int
    """Runs its kernel has served."""
    running: bool
    compute_seconds: float
    """CPU its kernel's process tree used since the session's first run (local kernels)."""
    idle_seconds: float
    """Since its last run ended (0 while one runs)."""


class _Session:
    __slots__ = ("collector", "cpu_base", "ended", "kernel", "key", "last_used", "lock", "runs",
                 "timer")

    def __init__(self, key: str) -> None:
        self.key = key
        self.kernel: LiveKernel | None = None
        self.runs = 0
        self.lock = asyncio.Lock()
        self.last_used = time.monotonic()
        self.timer: asyncio.TimerHandle | None = None
        self.cpu_base: float | None = None
        self.ended: str | None = None  # why, once ended
        self.collector: OutputCollector | None = None  # outputs/ new or changed per run

    def compute_used(self) -> float:
        root = self.kernel.process.root_pid if self.kernel is not None else None
        if root is None or self.cpu_base is None:
            return 0.0
        return max(0.0, proctree.tree_cpu_seconds(root) - self.cpu_base)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _SessionLease(Lease):
    """A session's kernel, leased to one of its runs (which holds the session's lock)."""

    session: _Session
    new: bool


class StatefulSessions:
    """The open sessions of one runtime: the :class:`~.sources.KernelSource` of keyed runs.
    A session's first kernel comes from ``fresh``."""

    def __init__(self, config: StatefulConfig, fresh: FreshKernels, *,
                 run_compute_seconds: float) -> None:
        self.config = config
        self._fresh = fresh
        self._run_compute = run_compute_seconds
        self._open: dict[str, _Session] = {}

    @property
    def info(self) -> tuple[SessionInfo, ...]:
        now = time.monotonic()
        return tuple(SessionInfo(key=s.key, runs=s.runs, running=s.lock.locked(),
                                 compute_seconds=round(s.compute_used(), 3),
                                 idle_seconds=0.0 if s.lock.locked()
                                 else round(now - s.last_used, 3))
                     for _, s in sorted(self._open.items()))

    async def acquire(self, request: RunRequest, signals: tuple[AbortSignal, ...]
                      ) -> Lease | CodeRunResult:
        """The request's session's kernel (opening the session when needed), its lock held
        until :meth:`release`."""
        key = request.session
        assert key is not None, "a stateless run has no session to run in"
        while True:
            session = self._open.get(key)
            if session is None:
                if len(self._open) >= self.config.max_sessions:
                    return failed("session-limit", (
                        f"{len(self._open)} stateful sessions are open, the limit "
                        f"(max_sessions={self.config.max_sessions}): reset one or wait until "
                        "one is idle for "
                        f"{self.config.idle_seconds:g} s"))
                session = self._open[key] = _Session(key)
            if not await _lock(session.lock, signals):
                if session.kernel is None and not session.lock.locked():
                    self._end(session, "its first run was aborted")  # no empty entry stays
                return failed("abort", next((s.reason for s in signals if s.reason),
                                            "aborted"))
            if session.ended is None:
                break
            session.lock.release()  # reset while this run waited: take the key's new one
        try:
            leased = await self._lease(session, request, signals)
        except BaseException:
            self._unlock(session)
            raise
        if isinstance(leased, CodeRunResult):
            self._unlock(session)
        return leased

    async def _lease(self, session: _Session, request: RunRequest,
                     signals: tuple[AbortSignal, ...]) -> Lease | CodeRunResult:
        if session.timer is not None:
            session.timer.cancel()
            session.timer = None
        problem = self._over_budget(session)
        if problem is not None:
            return failed("session-limit", problem)
        asked = time.monotonic()
        kernel = session.kernel
        new = kernel is None
        origin: KernelOrigin = "session"
        if kernel is None:
            fresh = await self._fresh.acquire(request, signals)
            if isinstance(fresh, CodeRunResult):
                self._end(session, "its kernel did not start")
                return fresh
            kernel = fresh.kernel
            if session.ended is not None:  # reset while the kernel started
                self._fresh.release(fresh)
                return failed("abort", f"{session.ended} before the program started")
            session.kernel, origin = kernel, fresh.origin
            session.collector = fresh.collector
            root = kernel.process.root_pid
            session.cpu_base = proctree.tree_cpu_seconds(root) if root is not None else None
        elif not await kernel.process.is_alive():
            reason = kernel.process.exit_reason()
            self._close(self._end(session, reason))
            return failed("kernel-exit", f"{reason} since the last run; {STATE_LOST}")
        else:
            await kernel.connection.ready_iopub()  # what arrived between runs is no run's
        waited = time.monotonic() - asked
        session.runs += 1
        return _SessionLease(kernel=kernel, origin=origin, waited=waited, keep=True,
                             compute=self._compute_limit(session),
                             collector=session.collector, session=session, new=new)

    def finish(self, lease: Lease, result: CodeRunResult) -> CodeRunResult:
        """The session's facts; a run that did not leave the kernel :attr:`reusable
        <.live_kernel.LiveKernel.reusable>` (or whose session was reset meanwhile) ends the
        session, and its result says the state is lost."""
        assert isinstance(lease, _SessionLease)
        session = lease.session
        facts: dict[str, RunFact] = {
            "session.run_index": session.runs, "session.new": lease.new,
            "session.compute_seconds": round(session.compute_used(), 3)}
        if not lease.kernel.reusable or session.ended is not None:
            ended = session.ended
            self._end(session, "its run did not end cleanly")
            self._close(lease.kernel)
            result = _lost(result, ended)
        return dataclasses.replace(result, facts=facts)

    def release(self, lease: Lease) -> None:
        assert isinstance(lease, _SessionLease)
        self._unlock(lease.session)
        self._fresh.refill()

    def _unlock(self, session: _Session) -> None:
        session.lock.release()
        if session.ended is None:
            session.last_used = time.monotonic()
            self._arm(session)

    def _over_budget(self, session: _Session) -> str | None:
        config = self.config
        if config.max_runs is not None and session.runs >= config.max_runs:
            return (f"this conversation's kernel has served its {config.max_runs} runs "
                    "(max_runs): ask the user to reset the session, which clears its variables")
        total = config.total_compute_seconds
        if total is not None and session.compute_used() >= total:
            return (f"this conversation's kernel has used its total compute budget of {total:g} s "
                    "of CPU time: ask the user to reset the session, which clears its variables")
        return None

    def _compute_limit(self, session: _Session) -> ComputeLimit | None:
        total = self.config.total_compute_seconds
        if total is None:
            return None
        left = total - session.compute_used()
        if left >= self._run_compute:
            return None
        return ComputeLimit(max(left, 0.0), (
            f"the program passed what was left of this session's total compute budget of "
            f"{total:g} s of CPU time"))

    def _arm(self, session: _Session) -> None:
        loop = asyncio.get_running_loop()
        session.timer = loop.call_later(self.config.idle_seconds, self._expire, session)

    def _expire(self, session: _Session) -> None:
        session.timer = None
        if session.ended is None and not session.lock.locked():
            self._close(self._end(session, EXPIRED))

    def _end(self, session: _Session, why: str) -> LiveKernel | None:
        """Forget ``session``; its kernel, if it had one and was not ended yet. Closing the
        kernel is the caller's: a run in flight closes its own when it returns."""
        if session.ended is not None:
            return None
        session.ended = why
        if session.timer is not None:
            session.timer.cancel()
            session.timer = None
        if self._open.get(session.key) is session:
            del self._open[session.key]
        kernel, session.kernel = session.kernel, None
        return kernel

    def _close(self, kernel: LiveKernel | None) -> None:
        if kernel is not None:
            self._fresh.discard(kernel)

    async def reset(self, key: str) -> bool:
        """End ``key``'s session, if open, and wait until its kernel is killed (a run in
        flight then fails ``kernel-exit`` and closes it). Whether one was open."""
        session = self._open.get(key)
        if session is None:
            return False
        running = session.lock.locked()
        kernel = self._end(session, RESET)
        if kernel is not None:
            work = kernel.process.kill() if running else kernel.close()
            await wait_quietly({asyncio.ensure_future(work)})
        return True

    def end_all(self) -> Iterable[LiveKernel]:
        """End every session (the runtime is closing); their kernels, to close."""
        kernels = [self._end(session, "the runtime closed")
                   for session in list(self._open.values()) if not session.lock.locked()]
        return [kernel for kernel in kernels if kernel is not None]


async def _lock(lock: asyncio.Lock, signals: tuple[AbortSignal, ...]) -> bool:
    """Acquire ``lock`` unless a signal fires first (then ``False``, not holding it)."""
    if any(signal.reason is not None for signal in signals):
        return False
    if not lock.locked():
        await lock.acquire()
        return True
    aborted = asyncio.Event()
    undos = [signal.add_listener(lambda _reason: aborted.set()) for signal in signals]
    acquiring = asyncio.ensure_future(lock.acquire())
    waiting = asyncio.ensure_future(aborted.wait())
    try:
        await asyncio.wait({acquiring, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for undo in undos:
            undo()
        waiting.cancel()
        if not acquiring.done():
            acquiring.cancel()
        await wait_quietly({acquiring, waiting})
    held = acquiring.done() and not acquiring.cancelled() and acquiring.exception() is None
    if held and aborted.is_set():
        lock.release()
        return False
    return held


def _lost(result: CodeRunResult, ended: str | None) -> CodeRunResult:
    """A run that ended its session: its failure says the state is lost."""
    failure = result.failure
    if failure is None:  # a result, but the kernel did not go quiet after it: say so now,
        # or the next program would meet a NameError with no reason given
        note = f"(dsh-jupyter: the kernel did not go idle after this run; {STATE_LOST})"
        return dataclasses.replace(result, logs=(*result.logs, note))
    message = failure.message
    if ended == RESET and failure.kind == "kernel-exit":
        message = f"{RESET} while the program ran"
    return dataclasses.replace(result, failure=CodeRunFailure(
        kind=failure.kind, message=f"{message}; {STATE_LOST}"))


