"""Helpers for kernel runtime tests (imported by the tests; fixtures live in conftest)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

# make_runtime's type (tests/conftest.py), re-exported: the kernel tests import it from here.
from runtime_support import RuntimeFactory as RuntimeFactory

from dsh_jupyter.abort import AbortSignal
from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.kernel import KernelRuntime
from dsh_jupyter.runtime import CodeRunResult, FunctionBindings, RunRequest

Bindings = dict[str, Callable[[JsonValue], Awaitable[JsonValue]]]


class Recorder:
    """Bindings that record calls and how many overlapped."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, JsonValue]] = []
        self.active = 0
        self.max_active = 0

    def binding(self, name: str, *, delay: float = 0.0,
                result: Callable[[JsonValue], JsonValue] | None = None
                ) -> Callable[[JsonValue], Awaitable[JsonValue]]:
        async def call(args: JsonValue) -> JsonValue:
            self.calls.append((name, args))
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            try:
                if delay:
                    await asyncio.sleep(delay)
                return result(args) if result is not None else {"tool": name, "args": args}
            finally:
                self.active -= 1

        return call


async def run(runtime: KernelRuntime, program: str,
              bindings: Bindings | None = None,
              signal: AbortSignal | None = None) -> CodeRunResult:
    return await runtime.run(RunRequest(program, FunctionBindings(bindings or {}),
                             signal or AbortSignal.never()))



KERNEL_IDENTITY = """\
import IPython
return IPython.get_ipython().kernel.session.session
"""
"""A program returning which kernel it ran in (ipykernel's session id, random per kernel
process: a confined kernel's paths are the same in every kernel)."""


def host_pids(marker: str) -> list[int]:
    """Live host processes whose command line contains ``marker``. A confined program sees
    PIDs of its own namespace, so tests find its processes by what they run instead."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                cmdline = file.read()
            with open(f"/proc/{entry}/stat", "rb") as file:
                state = file.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != b"Z":
            found.append(int(entry))
    return found


async def gone(marker: str, within: float = 5.0) -> bool:
    """Whether every process running ``marker`` is gone within ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while host_pids(marker):
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


# A program that fires 100,000 calls the host refuses at once (unknown names: the fastest
# replies a program can get) while it does not read the replies. The injected ``tools``
# refuses unknown names itself, so the flood goes to its bridge. It calls ``flooding``
# first, so a test knows the flood is under way.
REPLY_FLOOD = """\
import sys
bridge = sys.modules["_dsh_jupyter_inkernel"].runtime.client
await tools.flooding({})
for _ in range(100_000):
    asyncio.ensure_future(bridge.call("nope", {}))
await asyncio.sleep(30)
"""
