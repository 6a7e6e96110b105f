"""The launcher seam: :class:`KernelLauncher` starts kernels, :class:`KernelProcess` is one.

The runtime, the pool and the session depend on these two Protocols only. Three
launchers implement them: the fork server (``forkserver``), the stock
jupyter-client launch (``stock``) and a kernel gateway (``gateway``). What the
local launchers share lives here too: the host's ipykernel check, the kernel
options, exit statuses in words, and ``_child.py``, the steps the keeper's and the fork
server's children both take on their way to becoming a kernel.
"""

from __future__ import annotations

import importlib.metadata
import signal
from pathlib import Path
from typing import Any, Protocol

from ...errors import CodeModeError
from ..inkernel.runner import ipykernel_problem
from ..run.workspace import Workspace

KERNEL_ARGS = ("--HistoryManager.enabled=False", "--IPKernelApp.quiet=True")
"""Options every local kernel of the host's Python gets (stock and forked alike)."""
CHILD_SCRIPT = Path(__file__).with_name("_child.py")
"""What the keeper and the fork server run in each child they fork (loaded by path)."""


class KernelProcess(Protocol):
    """One started kernel. ``kill`` and ``wait_gone`` are idempotent."""

    @property
    def connection_info(self) -> dict[str, Any]: ...

    @property
    def root_pid(self) -> int | None:
        """Root of the local process tree to account and kill; ``None`` for remote kernels."""

    async def is_alive(self) -> bool: ...

    def exit_reason(self) -> str:
        """Why the kernel is gone (exit status or signal), once ``is_alive`` said False."""

    async def interrupt(self) -> None: ...

    async def kill(self) -> None:
        """Stop the kernel for good: after this returns it runs no more code."""

    async def wait_gone(self) -> None:
        """After :meth:`kill`: wait until the kernel and its process tree are reaped."""


class KernelLauncher(Protocol):
    """Starts kernels in a workspace with a given environment. ``preloads_runtime``: its
    kernels already hold the in-kernel package (only ``start()`` is left to call)."""

    @property
    def preloads_runtime(self) -> bool: ...

    async def start(self, workspace: Workspace, env: dict[str, str]) -> KernelProcess: ...

    async def close(self) -> None:
        """Release what the launcher holds (a fork server, ...); kernels are killed by owners."""


def check_host_ipykernel() -> None:
    """Raise :class:`CodeModeError` unless the host's ipykernel is >= 7.4."""
    try:
        version: str | None = importlib.metadata.version("ipykernel")
    except importlib.metadata.PackageNotFoundError:
        version = None
    problem = ipykernel_problem(version)
    if problem is not None:
        raise CodeModeError(f"the kernel runtime {problem}")


def describe_status(code: int | None) -> str:
    """A kernel exit status as words (the keeper reports death by signal N as 128 + N)."""
    if code is None:
        return "the kernel died"
    if code < 0 or code > 128:
        number = -code if code < 0 else code - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        hint = " (out of memory?)" if name == "SIGKILL" else ""
        return f"the kernel was killed by {name}{hint}"
    return f"the kernel exited with status {code}"
