"""Executing one program on a prepared kernel and watching it until it settles.

What every run has (its output, the call server, the outcome settled once, the caller's
signals and the wall budget) is the run's :class:`~.lifecycle.RunLifecycle`; this module
adds what a kernel brings. Four watchers race to *settle* the run, and the first one wins:

- the call transport (see ``transport.calls``, the only part of the run that knows
  whether calls travel on the comm or the local socket): the kernel's ``done``
  message (result or program failure), the program closing its tools comm
  (``kernel-exit``: neither calls nor its result could reach the host any more), a
  message over the size cap, or more than ``max_pending_calls`` of the call server's
  replies waiting for the kernel to read them (``call-limit``: the program fires
  calls without reading their results);
- the iopub reader: the program cell going idle without a ``done``, or output over
  the budget;
- the watchdog (every 50 ms): compute budget (CPU of the local kernel's process
  tree, read every 250 ms), kernel death;
- the lifecycle's wall timer (``timeout``), the caller's signals (``abort``), and
  iopub being dropped for an oversized message (``output-limit``).

On ``timeout`` the kernel is interrupted and its remaining output read for a
short grace period; then (and at once for every other outcome) the kernel's
process tree is killed, the call server stops answering, and the run waits for
binding calls still in flight (see ``call_server``).

A stateful session's run (``keep=True``) spares the kernel when the program
reported its end (a result or its own exception) and its cell went idle within
:data:`IDLE_SECONDS`: :attr:`RunWatch.kept` then says the kernel may serve the
session's next run. Every other outcome kills it as above.

Output as it arrives: stream text becomes log entries (``logs``) and
``display_data`` of the program cell becomes displays (``displays``, under their
own budget), each display placed after the log entries completed before it. When
the bindings are also an :class:`~dsh_jupyter.runtime.OutputObserver`, they are told
each entry and each display kept as it arrives, the last partial lines included,
before they are closed; an observer that raises is logged (once per run) and
called again for the next output.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Coroutine, Iterable
from typing import Any, Final, Protocol

from ..._waiting import wait_quietly
from ...abort import AbortSignal
from ...runtime import CodeRunFailure, CodeRunResult, RunRequest
from ..config import KernelRuntimeConfig
from ..inject import program_cell
from ..launch import proctree
from ..launch.base import KernelProcess
from ..transport.calls import CallEvent, CallTransport, too_large
from ..transport.channels import KernelChannels
from ..transport.wire import Incoming, one_line
from .files import Collected
from .lifecycle import UNREPORTED, RunLifecycle, RunLimits, Unreported
from .logs import OutputBudget
from .remote_files import COLLECT_SECONDS, collect_remote

_log = logging.getLogger(__name__)

POLL_SECONDS: Final = 0.05
CPU_EVERY_POLLS: Final = 5
DISCONNECT_SETTLE_SECONDS: Final = 1.0  # a dying kernel drops iopub before it is reaped: under
# load that gap passed 0.2 s, and a death was reported as an oversized message
TURN_SECONDS: Final = 0.005
ABORT_QUIET_SECONDS: Final = 0.02
ABORT_OUTPUT_SECONDS: Final = 0.2
IDLE_SECONDS: Final = 1.0  # from a kept run's done message to its cell's idle status


class PreparedKernel(Protocol):
    """What a run uses of its kernel: a :class:`~.live_kernel.LiveKernel` once prepared."""

    @property
    def config(self) -> KernelRuntimeConfig: ...

    @property
    def process(self) -> KernelProcess: ...

    @property
    def connection(self) -> KernelChannels: ...

    def call_transport(self) -> CallTransport:
        """A new run's tool-call transport (the kernel is prepared)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ComputeLimit:
    """A compute budget tighter than the run's own (a stateful session's remaining total),
    and what the run's failure says when the program passes it."""

    seconds: float
    message: str


class RunWatch:
    """Runs one program on ``kernel`` (used once). ``keep``: a stateful session's run
    (see the module docstring); ``compute``: a tighter compute budget than the config's."""

    def __init__(self, kernel: PreparedKernel, request: RunRequest,
                 budget: OutputBudget | None = None, *,
                 keep: bool = False, compute: ComputeLimit | None = None) -> None:
        self._kernel = kernel
        self._config = kernel.config
        self._program = request.program
        self._keep = keep
        self._compute = compute or ComputeLimit(
            self._config.compute_seconds, f"the program passed its compute budget of "
            f"{self._config.compute_seconds:g} s of CPU time")
        self.kept = False
        """Whether the kernel is still alive and quiet after the run (``keep`` only)."""
        self._idle = asyncio.Event()
        self._names = list(request.bindings.names)
        self._helpers = dict(request.helpers)
        self._signatures = dict(request.signatures)
        self._calls = kernel.call_transport()
        self._life = RunLifecycle(request, RunLimits.of(self._config), self._calls.send,
                                  budget)
        self._cell_over = asyncio.Event()
        self._request: str | None = None
        self._error: str | None = None
        self._reader: asyncio.Task[None] | None = None
        self._dying = False
        self._iopub_seen = 0
        self._files = Collected(())

    async def watch(self, signals: Iterable[AbortSignal]) -> CodeRunResult:
        """Execute the program and watch it until it settles; its result."""
        life, config = self._life, self._config
        tasks: list[asyncio.Task[None]] = []
        try:
            with life.watching(signals, config.wall_seconds, f"the program passed its "
                               f"wall-clock budget of {config.wall_seconds:g} s"):
                if not life.settled:
                    self._request = self._kernel.connection.execute(
                        program_cell(self._names, self._program, config.max_output_bytes,
                                     self._helpers, keep=self._keep,
                                     signatures=self._signatures))
                    self._reader = asyncio.create_task(self._read())
                    tasks = [self._reader,
                             asyncio.create_task(self._watchdog()),
                             asyncio.create_task(self._watch_disconnect()),
                             asyncio.create_task(self._read_calls())]
                outcome = await life.outcome
                if isinstance(outcome, CodeRunFailure) and outcome.kind == "timeout":
                    await self._interrupt_and_drain()
                elif isinstance(outcome, CodeRunFailure) and outcome.kind == "abort":
                    await self._take_ready_output()
                elif self._keep and not isinstance(outcome, CodeRunFailure | Unreported):
                    await self._wait_idle()
        finally:
            await _quietly(self._teardown(tasks, collect=life.settled and not isinstance(
                life.outcome.result(), CodeRunFailure | Unreported)))
        return life.result(outcome, error=self._error, files=self._files)

    def _on_call(self, event: CallEvent) -> None:
        """One event of the call transport, from either reader."""
        if self._life.on_call(event):
            self._cell_over.set()

    async def _read_calls(self) -> None:
        """Events from the transport's own channel, if it has one (see ``transport.calls``)."""
        turn = _Turn()
        while (event := await self._calls.receive()) is not None:
            await turn.take()
            self._on_call(event)
            if isinstance(event, CodeRunFailure):
                return

    async def _read(self) -> None:
        connection = self._kernel.connection
        turn = _Turn()
        while True:
            message = await connection.recv_iopub()
            await turn.take()
            if message is not None:
                try:
                    self._handle(message)
                except Exception as error:  # a bug of ours must end the run, not hang it
                    _log.exception("reading the kernel's messages failed")
                    self._life.fail("kernel-exit", f"the host failed to read the kernel's "
                               f"messages ({type(error).__name__}); the run was ended")
                    return
            if self._life.check_output():
                return

    def _handle(self, message: Incoming) -> None:
        self._iopub_seen += 1
        event = self._calls.claim(message)
        if event is not None:
            self._on_call(event)
            return
        msg_type, content = message.msg_type, message.content
        if msg_type in ("comm_msg", "comm_close"):
            return  # another comm's
        if message.parent_id != self._request:
            return
        if msg_type == "stream":
            name, text = content.get("name"), content.get("text")
            if isinstance(name, str) and isinstance(text, str):
                self._life.log.write(name, text)
        elif msg_type == "display_data":
            # update_display_data and clear_output are ignored: see ``displays``.
            self._life.displays.add(content, self._life.log.entry_count)
        elif msg_type == "error":
            # The program's own exceptions come in its done message; an error of the cell
            # means the runtime in the kernel failed (or was sabotaged). IPython's coloured
            # traceback of that is ours, not the program's: one line is what it means.
            self._error = (f"the program broke the dsh-jupyter runtime in its kernel: "
                           f"{one_line(content.get('ename'))}: "
                           f"{one_line(content.get('evalue'))}")
        elif msg_type == "status" and content.get("execution_state") == "idle":
            self._cell_over.set()
            self._idle.set()
            self._life.settle(UNREPORTED)

    async def _watchdog(self) -> None:
        process = self._kernel.process
        root = process.root_pid
        cpu_start = proctree.tree_cpu_seconds(root) if root is not None else 0.0
        polls = 0
        while True:
            await asyncio.sleep(POLL_SECONDS)
            polls += 1
            if not await process.is_alive():
                await self._died()
                return
            if root is not None and polls % CPU_EVERY_POLLS == 0:
                used = proctree.tree_cpu_seconds(root) - cpu_start
                if used > self._compute.seconds:
                    self._life.fail("timeout", self._compute.message)
                    return

    async def _watch_disconnect(self) -> None:
        """iopub drops when the kernel dies or sends a message over the size cap (or, on a
        gateway, when the gateway starts dropping output: the channels say why)."""
        reason = await self._kernel.connection.wait_disconnected()
        process = self._kernel.process
        loop = asyncio.get_running_loop()
        give_up = loop.time() + DISCONNECT_SETTLE_SECONDS
        while loop.time() < give_up:
            if not await process.is_alive():
                await self._died()
                return
            await asyncio.sleep(0.01)
        self._life.log.over_limit = True
        self._life.fail("output-limit", reason or too_large(self._config.max_message_bytes))

    async def _died(self) -> None:
        """Take what the kernel sent before it died (it may have finished), then settle."""
        if self._dying or self._life.settled:
            return
        self._dying = True
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        for message in await self._kernel.connection.ready_iopub():
            self._handle(message)
        self._life.fail("kernel-exit", self._kernel.process.exit_reason())

    async def _take_ready_output(self) -> None:
        """On abort: keep what the program printed before it was stopped. The reader goes
        on until iopub has been quiet for :data:`ABORT_QUIET_SECONDS` (a socket carrier's
        call can overtake the output printed before it), at most
        :data:`ABORT_OUTPUT_SECONDS`; then what was already received is taken."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + ABORT_OUTPUT_SECONDS
        while self._reader is not None and not self._reader.done() and loop.time() < give_up:
            seen = self._iopub_seen
            await asyncio.sleep(ABORT_QUIET_SECONDS)
            if self._iopub_seen == seen:
                break
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        with contextlib.suppress(Exception):
            for message in await self._kernel.connection.ready_iopub():
                self._handle(message)

    async def _wait_idle(self) -> None:
        """A kept run: the program reported its end; its cell goes idle a moment later. A
        kernel that does not (the program's code still holds it) is not kept."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(IDLE_SECONDS):
                await self._idle.wait()
        if self._idle.is_set() and not self._dying:
            self.kept = await self._kernel.process.is_alive()

    async def _interrupt_and_drain(self) -> None:
        """Interrupt, then read output until the cell ends or the grace period passes."""
        with contextlib.suppress(Exception):
            await self._kernel.process.interrupt()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._config.interrupt_grace_seconds):
                await self._cell_over.wait()

    async def _teardown(self, tasks: list[asyncio.Task[None]], *, collect: bool = False) -> None:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        workdir = getattr(self._kernel, "remote_workdir", None)
        if collect and isinstance(workdir, str):  # a remote kernel's files, before it goes
            self._files = await collect_remote(
                self._kernel.connection, workdir, self._config.output_limits,
                min(COLLECT_SECONDS, self._config.wall_seconds))
        self._life.stop_calls()
        if not self.kept:
            await self._kernel.process.kill()
        await self._life.drain()


class _Turn:
    """A reader's share of the event loop. Awaiting a message that is already there does
    not yield, so a flood of ready messages would hold the loop (and every other run)
    for as long as it lasts: :meth:`take` yields once the reader has held it for
    :data:`TURN_SECONDS`."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._since = self._loop.time()

    async def take(self) -> None:
        if self._loop.time() - self._since >= TURN_SECONDS:
            await asyncio.sleep(0)
            self._since = self._loop.time()


async def _quietly(work: Coroutine[Any, Any, None]) -> None:
    """Run cleanup to completion even if the caller is cancelled meanwhile."""
    task = asyncio.ensure_future(work)
    await wait_quietly({task})
    task.result()
