"""Test helpers. :class:`InProcessRuntime` runs programs in *this* process.

It is **not a sandbox**: the program shares the host's interpreter, memory and
permissions. It exists so Code Mode's rules (scheduling, events, rendering,
failures) can be unit-tested in milliseconds; real runs use
:class:`dsh_jupyter.kernel.KernelRuntime`.

It runs the kernel's own code on both ends, so a program behaves as it does in a
kernel: the in-kernel core (the package ``kernel/inkernel/``: the compiler, ``tools``, the
call protocol, frames, tracebacks) is loaded from the same source, under the same
file name, and every message goes through the host's :class:`~.kernel.run.call_server.CallServer`
as JSON, exactly as it crosses a comm. What differs is only the transport and the
process: ``print`` is captured (writes to ``sys.stdout`` are not), and a timeout or an
abort cancels the program's task instead of interrupting a kernel.

Output observers (:class:`~dsh_jupyter.runtime.OutputObserver`) are told each log
entry as it is kept. Displays are not supported: there is no kernel to format them,
so results never hold any (``display`` is whatever the host has, if anything). Names
and text come back escaped as from a kernel (``_safe_text``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import types
from typing import Any

from ._safe_text import safe_result
from .kernel.config import KernelRuntimeConfig
from .kernel.inject import inkernel_sources
from .kernel.inkernel import _loader
from .kernel.inkernel.messages import HostMessage
from .kernel.inkernel.program import SOURCE_FILENAME
from .kernel.run.call_server import CallServer, Done, done_result
from .kernel.run.displays import SafeObserver
from .kernel.run.logs import OutputLog
from .runtime import CodeRunFailure, CodeRunResult, FailureKind, RunRequest, RuntimeInfo

__all__ = ["InProcessRuntime"]


@functools.cache
def _core() -> types.ModuleType:
    """The in-kernel package, loaded from its sources under the kernel's file name (so
    tracebacks leave its frames out exactly as in a kernel). Loaded once, on first use."""
    return _loader.load("_dsh_jupyter_inkernel_inprocess", inkernel_sources(), SOURCE_FILENAME)


class _Stream:
    """A ``print`` target feeding the run's :class:`OutputLog`."""

    def __init__(self, log: OutputLog, name: str, over: asyncio.Event) -> None:
        self._log, self._name, self._over = log, name, over

    def write(self, text: str) -> int:
        self._log.write(self._name, text)
        if self._log.over_limit:
            self._over.set()
        return len(text)

    def flush(self) -> None:
        pass


class InProcessRuntime:
    """A :class:`~dsh_jupyter.runtime.CodeRuntime` for unit tests (no isolation)."""

    info = RuntimeInfo(language="python", isolation="in-process")
    language = "python"  # info's, as before RuntimeInfo
    isolation = "in-process"

    def __init__(self, *, wall_seconds: float = 600.0,
                 max_output_bytes: int = 64 * 1024 * 1024) -> None:
        self.wall_seconds = wall_seconds
        self.max_output_bytes = max_output_bytes
        self.runs = 0

    async def run(self, request: RunRequest) -> CodeRunResult:
        if not isinstance(request, RunRequest):
            raise TypeError(f"run takes a RunRequest, not {type(request).__name__}: "
                            f"runtime.run(RunRequest(program, bindings, signal))")
        program, bindings, signal = request.program, request.bindings, request.signal
        self.runs += 1
        limits = KernelRuntimeConfig()
        loop = asyncio.get_running_loop()
        observer = None if request.observer is None else SafeObserver(request.observer)
        log = OutputLog(self.max_output_bytes,
                        on_entry=None if observer is None else observer.on_log)
        outcome: asyncio.Future[Done | CodeRunFailure] = loop.create_future()
        over = asyncio.Event()

        def settle(value: Done | CodeRunFailure) -> None:
            if not outcome.done():
                outcome.set_result(value)

        def to_host(data: dict[str, Any]) -> None:  # kernel -> host, as JSON
            text = json.dumps(data, ensure_ascii=False, allow_nan=False)
            loop.call_soon(receive, json.loads(text), len(text.encode("utf-8", "replace")))

        def receive(data: object, size: int) -> None:
            done = host.receive(data, size)
            if done is not None:
                settle(done)

        def to_kernel(message: HostMessage) -> None:  # host -> kernel, as JSON
            data = json.loads(json.dumps(message, ensure_ascii=False, allow_nan=False))
            loop.call_soon(kernel.client.on_msg, {"content": {"data": data}})

        host = CallServer(bindings, to_kernel, max_pending_calls=limits.max_pending_calls,
                      max_call_bytes=limits.max_call_bytes,
                      max_value_bytes=self.max_output_bytes)
        kernel = _core().Runtime(to_host, (_Stream(log, "stdout", over),
                                           _Stream(log, "stderr", over)))
        task = asyncio.ensure_future(
            kernel.execute(sorted(bindings.names), program, self.max_output_bytes,
                       dict(request.helpers), signatures=dict(request.signatures)))
        undo = signal.add_listener(lambda reason: settle(_failure("abort", reason)))
        timer = loop.call_later(self.wall_seconds, settle, _failure(
            "timeout", f"the program passed its wall budget of {self.wall_seconds:g} s"))
        watch_output = asyncio.ensure_future(over.wait())
        watch_output.add_done_callback(lambda _: settle(_failure(
            "output-limit", log.limit_message())))
        try:
            if signal.reason is not None:
                settle(_failure("abort", signal.reason))
            result = await outcome
        finally:
            timer.cancel()
            undo()
            watch_output.cancel()
            task.cancel()  # the program's own failure is already reported; else it is stopped
            await asyncio.gather(task, return_exceptions=True)
            logs = log.finish()  # an observer sees the last partial lines before the close
            host.stop("the run ended")
            await host.drain()
        if isinstance(result, CodeRunFailure):
            return safe_result(CodeRunResult(logs=logs, failure=result))
        return safe_result(done_result(result, logs, log, self.max_output_bytes))


def _failure(kind: FailureKind, message: str) -> CodeRunFailure:
    return CodeRunFailure(kind=kind, message=message)
