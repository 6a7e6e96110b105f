"""The system calls every step makes, through ``ctypes``, and how a step fails.

A failed step raises :class:`ConfineError`; the process being confined then writes it to
the plan's ``error_file`` (:func:`fail`) and exits with :data:`CONFINE_FAILED`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from typing import NoReturn

CONFINE_FAILED = 125
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_SECUREBITS = 1, 24, 28
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4

libc = ctypes.CDLL(None, use_errno=True)


class ConfineError(Exception):
    """A step of the confinement failed (the message names it)."""


def check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise ConfineError(f"{what}: {os.strerror(number)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int,
          data: str | None = None) -> None:
    check(libc.mount(source and source.encode(), target.encode(),
                     fstype and fstype.encode(), ctypes.c_ulong(flags),
                     data and data.encode()), f"mount {target}")


def prctl(option: int, value: int, what: str) -> None:
    check(libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), what)


def write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as file:
        file.write(text)


def status_code(raw: int) -> int:
    return 128 + os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)


def wait_for(child: int) -> int:
    """Reap children until ``child`` exits; its status as an exit code."""
    while True:
        try:
            pid, raw = os.wait()
        except ChildProcessError:
            return CONFINE_FAILED
        if pid == child:
            return status_code(raw)


def fail(error_fd: int, error: BaseException) -> NoReturn:
    with contextlib.suppress(OSError):
        os.write(error_fd, f"{error}\n".encode(errors="replace"))
    os._exit(CONFINE_FAILED)


def report(ready_fd: int, line: str) -> None:
    if ready_fd >= 0:
        with contextlib.suppress(OSError):
            os.write(ready_fd, line.encode() + b"\n")
