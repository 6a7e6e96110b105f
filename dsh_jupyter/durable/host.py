"""Which process runs a journaled run, and whether it still does.

A run records its host as ``<pid>@<hostname>`` (:func:`current_host`). Whoever answers
its approval from elsewhere (``dsh-jupyter approvals``) asks :func:`host_state` what
happens next: an ``alive`` host picks the decision up itself; a ``gone`` one never will,
and the run must be resumed; for a host on another machine, or a host string this module
did not write, the answer is ``unknown``.

``alive`` means a process with that pid exists on this machine and is not a zombie. A
pid is reused once its process is gone, so ``alive`` can be wrong after a long time
(another process now has the pid); ``gone`` is always right.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeAlias

__all__ = ["HostState", "current_host", "host_state", "pid_exists"]

HostState: TypeAlias = Literal["alive", "gone", "unknown"]


def current_host() -> str:
    """This process as a run's host: ``<pid>@<hostname>``."""
    return f"{os.getpid()}@{socket.gethostname()}"


def host_state(host: str, *, this_machine: str | None = None,
               exists: Callable[[int], bool] | None = None) -> HostState:
    """Whether the process ``host`` names (``<pid>@<hostname>``) is running.

    ``unknown`` when it names another machine than ``this_machine`` (default: this one's
    hostname), is not in that form, or this is not a POSIX system; else ``alive`` or
    ``gone``, as ``exists`` (default :func:`pid_exists`) says of the pid.
    """
    pid_text, at, hostname = host.partition("@")
    if not at or not (pid_text.isascii() and pid_text.isdigit()) or int(pid_text) <= 0:
        return "unknown"
    if hostname != (socket.gethostname() if this_machine is None else this_machine):
        return "unknown"
    if exists is None:
        if os.name != "posix":  # os.kill(pid, 0) would end the process on Windows
            return "unknown"
        exists = pid_exists
    return "alive" if exists(int(pid_text)) else "gone"


def pid_exists(pid: int) -> bool:
    """Whether a process ``pid`` (> 0) exists on this POSIX machine and has not exited (a
    zombie, exited and not yet reaped by its parent, has exited)."""
    try:
        os.kill(pid, 0)  # signal 0: only checks that the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        pass
    except OverflowError:  # beyond any pid
        return False
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    # /proc/<pid>/stat is "pid (comm) state ...", and comm may hold spaces and parentheses.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False  # no /proc (macOS), or the process ended just now: kill said it exists
    return stat.rpartition(")")[2].split()[:1] == ["Z"]
