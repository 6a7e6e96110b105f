"""``KernelRuntime``: each program runs in a fresh IPython kernel, used once (or, opted in
with ``KernelRuntimeConfig(stateful=...)``, in its conversation's kept kernel: see
``stateful``).

::

    async with KernelRuntime(KernelRuntimeConfig(wall_seconds=30)) as runtime:
        result = await runtime.run(
            "hits = await tools.search({'q': 'zmq'})\\nreturn len(hits)",
            FunctionBindings({"search": search_binding}),
            AbortSignal.never(),
        )

Kernels come from a fork server (``launcher="fork"``, the default for the
host's Python), from jupyter-client (``"stock"``: any kernelspec or
provisioner) or from a kernel gateway (``config.gateway``: see ``gateway``),
optionally through a pool of started, never-used kernels.

Kernels are confined by default where Linux allows it (``config.sandbox``,
see ``sandbox``); entering the runtime checks once whether it can, and warns
(or, with ``sandbox="required"``, fails) where it cannot.

Lifetime: ``async with`` makes the runtime's private directory and starts the
launcher (and the pool); leaving it disposes: runs in flight end as ``abort``
("runtime disposed") and, once they have returned, every kernel, socket, task
and temporary directory is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import warnings
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import zmq.asyncio

from ..._safe_text import safe_result
from ...abort import AbortController
from ...errors import CodeModeError
from ...runtime import CodeRunResult, RunFact, RunRequest, RuntimeInfo
from ..config import KernelRuntimeConfig
from ..confine.caps import RuntimeCgroups
from ..confine.sandbox import (
    MissingWallWarning,
    SandboxConfig,
    UnconfinedWarning,
    confinement_problem,
    unconfined_message,
)
from ..confine.walls import missing_walls, missing_walls_message
from ..launch.base import KernelLauncher
from ..launch.forkserver import ForkLauncher, fork_supported
from ..launch.stock import StockLauncher
from . import fontcache
from .logs import OutputBudget
from .pool import KernelPool
from .sources import FreshKernels, KernelSource, failed
from .stateful import SessionInfo, StatefulSessions
from .workspace import SEED_HOME, create_runtime_directory, remove_tree

DISPOSED = "runtime disposed"


class KernelRuntime:
    """A :class:`~dsh_jupyter.runtime.CodeRuntime` (language ``"python"``, isolation
    ``"kernel"``) that runs every program in a fresh kernel and destroys it afterwards;
    with ``config.stateful``, a keyed run uses its session's kept kernel instead."""

    def __init__(self, config: KernelRuntimeConfig | None = None) -> None:
        self.config = config or KernelRuntimeConfig()
        self._context: zmq.asyncio.Context | None = None
        self._launcher: KernelLauncher | None = None
        self._launcher_name = ""
        self._fresh: FreshKernels | None = None
        self._pool: KernelPool | None = None  # the fresh kernels' (tests wait on it)
        self._disposing = AbortController()
        self._runs: set[asyncio.Task[CodeRunResult]] = set()
        self._cleanups: set[asyncio.Task[None]] = set()
        self._directory: Path | None = None
        self._output_budget = OutputBudget(self.config.max_buffered_output_bytes)
        self._confinement: SandboxConfig | None = None
        self._cgroups: RuntimeCgroups | None = None
        self._state = "new"
        self._sessions: StatefulSessions | None = None

    @property
    def info(self) -> RuntimeInfo:
        """What this runtime is and supports: Python in a kernel; ``stateful`` when
        ``config.stateful`` is set (a run keyed by its session keeps its kernel for the
        session's next run; the prompt tells the model so); ``inputs``, the configured
        inputs as the program finds them below ``inputs/`` (a directory's name ends in
        ``/``); files a program writes below ``outputs/`` come back; ``remote`` with a
        gateway."""
        inputs = tuple(name + ("/" if path.is_dir() else "")
                       for name, path in self.config.input_paths.items())
        return RuntimeInfo(language="python", isolation="kernel",
                           stateful=self.config.stateful is not None, inputs=inputs, files=True,
                           remote=self.config.gateway is not None)

    @property
    def language(self) -> str:
        """``info.language`` (before :class:`~dsh_jupyter.runtime.RuntimeInfo`)."""
        return "python"

    @property
    def isolation(self) -> str:
        """``info.isolation`` (before :class:`~dsh_jupyter.runtime.RuntimeInfo`)."""
        return "kernel"

    @property
    def input_names(self) -> tuple[str, ...]:
        """``info.inputs`` (before :class:`~dsh_jupyter.runtime.RuntimeInfo`)."""
        return self.info.inputs

    @property
    def stateful(self) -> bool:
        """``info.stateful`` (before :class:`~dsh_jupyter.runtime.RuntimeInfo`)."""
        return self.info.stateful

    @property
    def sessions(self) -> tuple[SessionInfo, ...]:
        """The open stateful sessions, by key (empty when not stateful)."""
        return () if self._sessions is None else self._sessions.info

    async def reset(self, key: str) -> bool:
        """End session ``key`` (its kernel is killed: its variables are gone; a run in
        flight fails ``kernel-exit``); the key's next run starts a fresh kernel. Returns
        whether the session was open. Code Mode keys a scope's runs by
        ``scope.session_key`` (``registry.session_key`` without a scope)."""
        if not isinstance(key, str):
            raise TypeError(f"reset takes a session key (str), not {type(key).__name__}: "
                            "for an agent scope pass scope.session_key")
        if self._sessions is None:
            return False
        return await self._sessions.reset(key)

    @property
    def confined(self) -> bool:
        """Whether this runtime's kernels run confined (known once entered)."""
        return self._confinement is not None

    async def __aenter__(self) -> KernelRuntime:
        if self._state != "new":
            raise CodeModeError("a KernelRuntime can be entered once")
        self._state = "open"
        self._context = zmq.asyncio.Context()
        try:
            self._confinement = await _confinement(self.config)
            self._directory = await asyncio.to_thread(create_runtime_directory)
            if self._confinement is not None:  # confined kernels' cgroups go in these
                self._cgroups = await asyncio.to_thread(
                    RuntimeCgroups.open, self._confinement.cgroup_parent)
            if self.config.gateway is None:  # a remote kernel's HOME is the gateway's
                await self._seed_fonts(self._directory / SEED_HOME)
            if self.config.gateway is not None:
                self._launcher, self._launcher_name = _gateway_launcher(self.config), "gateway"
            elif self.config.uses_fork and fork_supported():
                self._launcher = ForkLauncher(self.config, self._directory, self._confinement,
                                              self._cgroups)
                self._launcher_name = "fork"
            else:
                self._launcher = StockLauncher(self.config, self._context, self._confinement,
                                               self._cgroups)
                self._launcher_name = "stock"
            self._fresh = FreshKernels(self.config, self._launcher, self._context,
                                       self._directory, background=self._background,
                                       is_open=lambda: self._state == "open")
            self._pool = self._fresh.pool
            if self.config.stateful is not None:
                self._sessions = StatefulSessions(self.config.stateful, self._fresh,
                                                  run_compute_seconds=self.config.compute_seconds)
            self._fresh.refill()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    async def run(self, request: RunRequest) -> CodeRunResult:
        """Run the request's program in a fresh kernel (its session's kernel, when stateful)
        with its bindings as ``tools``. Every outcome is a :class:`CodeRunResult`; raises
        :class:`CodeModeError` only when the runtime is not open."""
        if not isinstance(request, RunRequest):
            raise TypeError(f"run takes a RunRequest, not {type(request).__name__}: "
                            f"runtime.run(RunRequest(program, bindings, signal))")
        if self._state != "open":
            raise CodeModeError(f"the kernel runtime is {_STATE_WORDS[self._state]}")
        task = asyncio.ensure_future(self._run(request))
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)
        return await task

    async def _run(self, request: RunRequest) -> CodeRunResult:
        """Every result leaves through :func:`~dsh_jupyter._safe_text.safe_result`: names
        and text escaped (a large value is walked in a worker thread)."""
        result = await self._outcome(request)
        if isinstance(result.value, dict | list) and not _small(result.value):
            return await asyncio.to_thread(safe_result, result)
        return safe_result(result)

    async def _outcome(self, request: RunRequest) -> CodeRunResult:
        """The one run path: lease a kernel from the request's source, execute the program
        on it, collect the files it wrote, and give the kernel back (see ``sources``)."""
        signals = (request.signal, self._disposing.signal)
        for each in signals:
            if each.reason is not None:
                return failed("abort", each.reason)
        source = self._source(request)
        lease = await source.acquire(request, signals)
        if isinstance(lease, CodeRunResult):
            return lease
        try:
            result = await lease.kernel.execute(request, signals, self._output_budget,
                                                keep=lease.keep, compute=lease.compute)
            if lease.collector is not None and not lease.collector.empty():
                # The run is over: its files hold still (a look that finds none is
                # cheaper than the hop to a worker thread).
                collected = await asyncio.to_thread(lease.collector.collect)
                result = dataclasses.replace(result, files=collected.files,
                                             files_omitted=collected.omitted)
            finished = source.finish(lease, result)
            facts = self._facts(lease.origin, lease.waited)
            facts.update(finished.facts)
            return dataclasses.replace(finished, facts=facts)
        finally:
            source.release(lease)

    def _source(self, request: RunRequest) -> KernelSource:
        """A keyed request's session on a stateful runtime; else a fresh kernel."""
        if self._sessions is not None and request.session is not None:
            return self._sessions
        assert self._fresh is not None
        return self._fresh

    def _facts(self, source: str, waited: float) -> dict[str, RunFact]:
        """What :attr:`CodeRunResult.facts` reports about a run's kernel (``source``:
        ``"pool"``, ``"cold"``, or a stateful ``"session"``'s kept one) and budgets."""
        config = self.config
        return {"kernel.source": source,
                "kernel.launcher": self._launcher_name, "kernel.confined": self.confined,
                "kernel.wait_ms": round(waited * 1000, 1),
                "budget.wall_seconds": config.wall_seconds,
                "budget.compute_seconds": config.compute_seconds,
                "budget.max_output_bytes": config.max_output_bytes}

    async def _seed_fonts(self, seed_home: Path) -> None:
        """matplotlib's font list for every kernel's HOME (see ``fontcache``): copied
        now when the host has one (under a millisecond), else built in the background
        (no run waits for it; kernels started meanwhile do without)."""
        if not await asyncio.to_thread(fontcache.seed_font_cache, seed_home, build=False):
            self._background(_in_thread(fontcache.seed_font_cache, seed_home))

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def aclose(self) -> None:
        """Dispose: abort runs in flight ("runtime disposed"), wait for them, release all."""
        if self._state == "closed":
            return
        self._state = "closing"
        self._disposing.abort(DISPOSED)
        while self._runs:
            await asyncio.wait(self._runs)
        if self._sessions is not None:
            for kernel in self._sessions.end_all():
                self._background(kernel.close())
        while self._cleanups:
            await asyncio.wait(self._cleanups)
        if self._fresh is not None:
            await self._fresh.close()
        if self._launcher is not None:
            await self._launcher.close()
        if self._context is not None:
            with contextlib.suppress(Exception):
                self._context.destroy(linger=0)
        if self._directory is not None:
            await asyncio.to_thread(remove_tree, self._directory)
        if self._cgroups is not None:
            await asyncio.to_thread(self._cgroups.remove)
        self._state = "closed"


_STATE_WORDS = {"new": "not started (use async with)", "closing": "being disposed",
                "closed": "disposed", "open": "open"}


async def _confinement(config: KernelRuntimeConfig) -> SandboxConfig | None:
    """The sandbox kernels will get: ``config.confinement`` where this machine can confine
    kernels; otherwise ``None`` with a warning, or an error when it is required. A wall
    the machine lacks behind the namespaces (seccomp, Landlock, cgroups) is a warning too,
    and an error when the sandbox is required."""
    wanted = config.confinement
    if wanted is None or not wanted.namespaces:
        return None  # no namespaces by choice: the launchers restrict kernels (no warning)
    problem = await asyncio.to_thread(confinement_problem)
    if problem is None and config.provisioner not in (None, "local-provisioner"):
        problem = f"kernels of the provisioner {config.provisioner!r} may not run locally"
    if problem is None:
        missing = await asyncio.to_thread(missing_walls, wanted)
        if missing and wanted.required:
            raise CodeModeError(missing_walls_message(missing, required=True))
        if missing:
            warnings.warn(missing_walls_message(missing), MissingWallWarning, stacklevel=3)
        return wanted
    if wanted.required:
        raise CodeModeError(f"sandbox='required', but kernels cannot be confined here: "
                            f"{problem}")
    warnings.warn(unconfined_message(problem), UnconfinedWarning, stacklevel=3)
    return None


SMALL_VALUE_NODES: Final = 1000
SMALL_VALUE_CHARACTERS: Final = 65536
"""A value of at most :data:`SMALL_VALUE_NODES` items and :data:`SMALL_VALUE_CHARACTERS`
characters of text is escaped on the event loop (tens of microseconds); a larger one in a
worker thread, whose hop costs more than that."""


def _small(value: object) -> bool:
    """Whether the JSON ``value`` is small (see :data:`SMALL_VALUE_NODES`)."""
    nodes, characters = SMALL_VALUE_NODES, SMALL_VALUE_CHARACTERS
    stack = [value]
    while stack:
        current = stack.pop()
        if isinstance(current, str):
            characters -= len(current)
        elif isinstance(current, dict):
            nodes -= len(current)
            characters -= sum(len(key) for key in current)
            stack.extend(current.values())
        elif isinstance(current, list):
            nodes -= len(current)
            stack.extend(current)
        if nodes < 0 or characters < 0:
            return False
    return True


async def _in_thread(function: Callable[..., object], *args: object) -> None:
    await asyncio.to_thread(function, *args)


def _gateway_launcher(config: KernelRuntimeConfig) -> KernelLauncher:
    try:
        from ..launch.gateway import GatewayLauncher  # websockets is an optional dependency
    except ImportError as error:
        raise CodeModeError(f"remote kernels need the gateway extra (pip install "
                            f"'dsh-jupyter[gateway]'): {error}") from error
    return GatewayLauncher(config)


