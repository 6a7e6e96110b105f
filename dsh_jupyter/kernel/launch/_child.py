"""What a process about to become a kernel gets, whichever launcher forked it (standard
library only).

The keeper (``_keeper.py``, a stock launch) and the fork server (``_forkserver.py``) each
load this file by path (:func:`load`, which they carry in a few lines of their own to
bootstrap) and run the same steps in the child they fork::

    begin()                            dies with its parent; default signal handling
    [connection_memfd(...)]            the connection info, in memory only
    [confine.enter(plan, mapping)]     confined: returns in the kernel (see ``_confine``)
    ... the launcher's own: working directory, environment ...
    finish(confine, ...)               PATH, resource limits, priority, walls without
                                       namespaces (last: they may forbid what precedes)

and the same in the parent: it becomes a subreaper (:func:`become_subreaper`), so orphans
stay in its tree; lowers its session's autogroup (:func:`lower_session`); and reads a
child's fate as :func:`exit_status`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import resource
import signal
import sys
import types
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36

LIMITS = {"as": resource.RLIMIT_AS, "nofile": resource.RLIMIT_NOFILE,
          "cpu": resource.RLIMIT_CPU, "data": resource.RLIMIT_DATA,
          "nproc": resource.RLIMIT_NPROC, "fsize": resource.RLIMIT_FSIZE}
"""The resource limits a launcher applies, by the names the host gives them (``caps``)."""


def prctl(option: int, value: int) -> None:
    """``prctl(option, value)``, where there is one (not Linux: the host still kills the
    process group)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def load(name: str, path: str) -> types.ModuleType:
    """The module at ``path``, or the package whose directory it is, as ``name``."""
    if os.path.isdir(path):
        spec = importlib.util.spec_from_file_location(
            name, os.path.join(path, "__init__.py"), submodule_search_locations=[path])
    else:
        spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a package's modules import each other through it
    spec.loader.exec_module(module)
    return module


def become_subreaper() -> None:
    """Orphans of this process's descendants re-parent to it, not to init: the tree the
    host walks (to account CPU, to kill) holds everything a kernel started."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)


def begin() -> None:
    """First, in the forked child: it dies with its parent (a host killed outright takes
    its kernels along) and handles signals as a fresh process does (interrupts reach the
    kernel; the launcher ignores them)."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    for signum in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


def connection_memfd(data: bytes, *, across_exec: bool) -> int:
    """A memfd holding ``data`` (the connection info, with its key), which the kernel
    reads through ``/proc/self/fd``: the key is never written where the kernel runs.
    ``across_exec``: kept open through the ``exec`` of a keeper's kernel."""
    memfd = os.memfd_create("kernel.json", 0 if across_exec else os.MFD_CLOEXEC)
    os.write(memfd, data)
    return memfd


def finish(confine: Any, *, confined: bool, restrict: dict[str, Any] | None,
           limits: dict[str, int], nice: int) -> None:
    """Last, before the kernel runs: a confined kernel's ``PATH`` without what it cannot
    see; the resource ``limits`` (:data:`LIMITS`); ``nice`` below the host (within the
    session too: see :func:`lower_session`); and for a kernel that cannot be confined,
    the walls that need no namespace (``restrict``, a plan for ``confine.restrict``)."""
    if confined:
        confine.tidy_path()
    for name, value in limits.items():
        # CPU: SIGXCPU at the limit, SIGKILL a second later if the program handles it.
        resource.setrlimit(LIMITS[name], (value, value + 1 if name == "cpu" else value))
    with contextlib.suppress(OSError):
        os.nice(nice)
    if restrict is not None:
        confine.restrict(restrict)


def lower_session(nice: int) -> bool:
    """Run this process's session (its kernels stay in it) ``nice`` below the host. With
    autogroup scheduling, the default on many systems, sessions share the CPU as groups
    whatever their members' nice values: four spinning kernels in sessions of their own
    kept the host's event loop waiting on the run queue two thirds of the time. ``False``
    when Linux's rate limit (once per 100 ms without ``CAP_SYS_ADMIN``) refused it: try
    again later."""
    try:
        with open("/proc/self/autogroup", "w") as autogroup:
            autogroup.write(str(nice))
    except BlockingIOError:
        return False
    except OSError:
        pass  # no autogroup scheduling here
    return True


def exit_status(raw: int) -> int:
    """A ``waitpid`` status as the host reads it: the exit code, or ``128 + N`` for death
    by signal N."""
    return 128 + os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)
