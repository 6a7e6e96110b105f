"""``InProcessRuntime``: programs run in *this* process, on the kernel's own code.

It is **not a sandbox**: the program shares the host's interpreter, memory and
permissions. It exists so Code Mode's rules (scheduling, events, rendering,
failures) can be checked in milliseconds (unit tests, benchmarks, evaluations whose
programs are trusted); real runs use :class:`~dsh_jupyter.kernel.KernelRuntime`.

It runs the kernel's own code on both ends, so a program behaves as it does in a
kernel: the in-kernel core (the package ``kernel/inkernel/``: the compiler, ``tools``, the
call protocol, frames, tracebacks) is loaded from the same source, under the same
file name, and the run's lifecycle is a kernel run's (:class:`~.lifecycle.RunLifecycle`:
the outcome settled once, the wall budget, aborts, the output limit, the host's
:class:`~.call_server.CallServer` stopped and drained); every message crosses between the
two ends as JSON, exactly as it crosses a comm. What differs is only the transport and
the process: ``print`` is captured (writes to ``sys.stdout`` are not), and a timeout or an
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

from ..._safe_text import safe_result
from ...runtime import CodeRunFailure, CodeRunResult, RunRequest, RuntimeInfo
from ..config import KernelRuntimeConfig
from ..inject import inkernel_sources
from ..inkernel import _loader
from ..inkernel.messages import HostMessage
from ..inkernel.program import SOURCE_FILENAME
from .lifecycle import RunLifecycle, RunLimits


@functools.cache
def _core() -> types.ModuleType:
    """The in-kernel package, loaded from its sources under the kernel's file name (so
    tracebacks leave its frames out exactly as in a kernel). Loaded once, on first use."""
    return _loader.load("_dsh_jupyter_inkernel_inprocess", inkernel_sources(), SOURCE_FILENAME)


class _Stream:
    """A ``print`` target feeding the run's output log."""

    def __init__(self, life: RunLifecycle, name: str) -> None:
        self._life, self._name = life, name

    def write(self, text: str) -> int:
        self._life.log.write(self._name, text)
        self._life.check_output()
        return len(text)

    def flush(self) -> None:
        pass


class InProcessRuntime:
    """A :class:`~dsh_jupyter.runtime.CodeRuntime` that runs programs in this process on the
    kernel's own code (no isolation: tests, benchmarks, trusted programs).

    ::

        runtime = InProcessRuntime(wall_seconds=5)
        result = await runtime.run(RunRequest("return 1 + 1", FunctionBindings({})))
    """

    info = RuntimeInfo(language="python", isolation="in-process")
    language = "python"  # info's, as before RuntimeInfo
    isolation = "in-process"

    def __init__(self, *, wall_seconds: float = 600.0,
                 max_output_bytes: int = 64 * 1024 * 1024) -> None:
        self.wall_seconds = wall_seconds
        self.max_output_bytes = max_output_bytes
        self.runs = 0
        self._limits = RunLimits.of(KernelRuntimeConfig())

    async def run(self, request: RunRequest) -> CodeRunResult:
        if not isinstance(request, RunRequest):
            raise TypeError(f"run takes a RunRequest, not {type(request).__name__}: "
                            f"runtime.run(RunRequest(program, bindings, signal))")
        self.runs += 1
        loop = asyncio.get_running_loop()

        def to_host(data: dict[str, Any]) -> None:  # kernel -> host, as JSON
            text = json.dumps(data, ensure_ascii=False, allow_nan=False)
            loop.call_soon(life.receive, json.loads(text), len(text.encode("utf-8", "replace")))

        def to_kernel(message: HostMessage) -> CodeRunFailure | None:  # host -> kernel
            data = json.loads(json.dumps(message, ensure_ascii=False, allow_nan=False))
            loop.call_soon(kernel.client.on_msg, {"content": {"data": data}})
            return None

        limits = RunLimits(max_output_bytes=self.max_output_bytes,
                           max_pending_calls=self._limits.max_pending_calls,
                           max_call_bytes=self._limits.max_call_bytes,
                           max_displays=self._limits.max_displays,
                           max_display_bytes=self._limits.max_display_bytes)
        life = RunLifecycle(request, limits, to_kernel)
        kernel = _core().Runtime(to_host, (_Stream(life, "stdout"), _Stream(life, "stderr")))
        task = asyncio.ensure_future(
            kernel.execute(sorted(request.bindings.names), request.program,
                           self.max_output_bytes, dict(request.helpers),
                           signatures=dict(request.signatures)))
        try:
            with life.watching((request.signal,), self.wall_seconds, f"the program passed "
                               f"its wall budget of {self.wall_seconds:g} s"):
                outcome = await life.outcome
        finally:
            task.cancel()  # the program's own failure is already reported; else it is stopped
            await asyncio.gather(task, return_exceptions=True)
            life.stop_calls()
            await life.drain()
        return safe_result(life.result(outcome))
