"""One run's lifecycle, whatever carries the program: a kernel (``watch.RunWatch``) or the
host's own interpreter (``inprocess.InProcessRuntime``).

A :class:`RunLifecycle` holds what every run has: the program's output (an
:class:`~.logs.OutputLog` and a :class:`~.displays.DisplayLog`, told to the request's
observer as they are kept), the host's :class:`~.call_server.CallServer` answering its tool
calls, and the *outcome*, settled once: the first to settle it wins. The program's ``done``
message, a failure of the carrier, the caller's signals (``abort``), the wall budget
(``timeout``) and output over its limit (``output-limit``) all settle it here; the carrier
adds its own watchers (a kernel's death, its compute budget, its idle cell).

Once settled, the owner stops the program its own way (a kernel is killed, a task is
cancelled), then :meth:`~RunLifecycle.stop_calls` (the last partial lines reach the
observer; the call server stops answering and closes the bindings) and
:meth:`~RunLifecycle.drain` (binding calls in flight return), and builds the
:class:`~dsh_jupyter.runtime.CodeRunResult` with :meth:`~RunLifecycle.result`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Final

from ...abort import AbortSignal
from ...runtime import CodeRunFailure, CodeRunResult, FailureKind, RunRequest
from ..config import KernelRuntimeConfig
from ..inkernel.messages import HostMessage
from ..transport.calls import CallEvent
from .call_server import CallServer, Done, done_result
from .displays import DisplayLog, SafeObserver
from .files import Collected
from .logs import OutputBudget, OutputLog


class Unreported:
    """The program ended without reporting its end (a kernel's cell went idle without a
    ``done`` message)."""


UNREPORTED: Final = Unreported()
Outcome = Done | CodeRunFailure | Unreported
Send = Callable[[HostMessage], "CodeRunFailure | None"]
"""How a reply reaches the program; a failure (``call-limit``) when it cannot."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunLimits:
    """The caps one run's output and calls live within."""

    max_output_bytes: int
    max_pending_calls: int
    max_call_bytes: int
    max_displays: int
    max_display_bytes: int

    @classmethod
    def of(cls, config: KernelRuntimeConfig) -> RunLimits:
        return cls(max_output_bytes=config.max_output_bytes,
                   max_pending_calls=config.max_pending_calls,
                   max_call_bytes=config.max_call_bytes, max_displays=config.max_displays,
                   max_display_bytes=config.max_display_bytes)


class RunLifecycle:
    """One run of ``request`` (see the module docstring); ``send`` carries the call
    server's replies to the program, ``budget`` is the runtime's output budget, if any."""

    def __init__(self, request: RunRequest, limits: RunLimits, send: Send,
                 budget: OutputBudget | None = None) -> None:
        self._limits = limits
        self._send = send
        observer = None if request.observer is None else SafeObserver(request.observer)
        self.log = OutputLog(limits.max_output_bytes, budget,
                             on_entry=None if observer is None else observer.on_log)
        self.displays = DisplayLog(
            max_displays=limits.max_displays, max_bytes=limits.max_display_bytes,
            budget=budget, on_display=None if observer is None else observer.on_display)
        self.server = CallServer(request.bindings, self._reply,
                                 max_pending_calls=limits.max_pending_calls,
                                 max_call_bytes=limits.max_call_bytes,
                                 max_value_bytes=limits.max_output_bytes)
        self.outcome: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()

    @property
    def settled(self) -> bool:
        return self.outcome.done()

    def settle(self, outcome: Outcome) -> None:
        if not self.outcome.done():
            self.outcome.set_result(outcome)

    def fail(self, kind: FailureKind, message: str) -> None:
        self.settle(CodeRunFailure(kind=kind, message=message))

    @contextlib.contextmanager
    def watching(self, signals: Iterable[AbortSignal], wall_seconds: float,
                 wall_message: str) -> Iterator[None]:
        """While in the block, a signal's abort and the wall budget settle the run (a
        signal that already fired settles it at once)."""
        timer = asyncio.get_running_loop().call_later(wall_seconds, self.fail, "timeout",
                                                      wall_message)
        undos = [signal.add_listener(self._on_abort) for signal in signals]
        try:
            yield
        finally:
            timer.cancel()
            for undo in undos:
                undo()

    def _on_abort(self, reason: str) -> None:
        self.settle(CodeRunFailure(kind="abort", message=reason))

    def receive(self, data: object, size: int) -> bool:
        """A message from the program for the call server (``size``: its encoded size);
        whether it was the program's ``done`` (which settles the run). After settlement
        nothing reaches the server (no new calls)."""
        if self.outcome.done():
            return False
        done = self.server.receive(data, size)
        if done is None:
            return False
        self.settle(done)
        return True

    def on_call(self, event: CallEvent) -> bool:
        """An event of the call transport (see ``transport.calls``); whether it was the
        program's ``done``."""
        if isinstance(event, CodeRunFailure):
            if event.kind == "output-limit":
                self.log.over_limit = True
            self.settle(event)
            return False
        return self.receive(event.data, event.size)

    def check_output(self) -> bool:
        """Whether the output is over its limit (which settles the run)."""
        if not self.log.over_limit:
            return False
        self.fail("output-limit", self.log.limit_message())
        return True

    def _reply(self, message: HostMessage) -> None:
        failure = self._send(message)
        if failure is not None:
            self.settle(failure)

    def stop_calls(self) -> None:
        """The program has stopped: its last partial lines reach the observer before it is
        closed, and the call server stops answering (closing the bindings)."""
        self.log.finish()
        self.server.stop("the run ended")

    async def drain(self) -> None:
        """Wait until no binding call is in flight."""
        await self.server.drain()

    def result(self, outcome: Outcome, *, error: str | None = None,
               files: Collected | None = None) -> CodeRunResult:
        """The run's result; ``error``: why an :class:`Unreported` end failed, when the
        carrier knows. The output's share of the runtime's budget is given back."""
        try:
            logs = self.log.finish()
            if isinstance(outcome, CodeRunFailure):
                result = CodeRunResult(logs=logs, failure=outcome)
            elif isinstance(outcome, Unreported):
                message = error or "the program ended without reporting a result"
                result = CodeRunResult(logs=logs, failure=CodeRunFailure(
                    kind="exception", message=message))
            else:
                result = done_result(outcome, logs, self.log, self._limits.max_output_bytes)
        finally:
            self.log.release()  # the result is the caller's now
            self.displays.release()
        if files is None and not self.displays.displays and not self.displays.dropped:
            return result
        files = files or Collected(())
        return dataclasses.replace(result, displays=self.displays.displays,
                                   displays_dropped=self.displays.dropped,
                                   files=files.files, files_omitted=files.omitted)
