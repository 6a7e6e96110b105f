"""Process trees of local kernels, read from ``/proc`` (Linux).

Kernels are started under a *subreaper* (the keeper of a stock launch, the fork
server for forked kernels), so a descendant whose parent exits re-parents into
the tree instead of to init: walking ``/proc`` from the root finds every
process a program started, including ``start_new_session`` and double-forked
ones. :func:`kill_tree` stops the whole tree first (so nothing forks while it
is being walked), then kills it.

The walk goes down from the root through ``/proc/<pid>/task/<tid>/children`` (each
thread's children): a few small files for a kernel's tree, where reading every process's
``stat`` took milliseconds on a host running hundreds of processes, for each run's CPU
account and each reap in the fork server. A Linux built without those files (or one that
refuses to read them) gets the scan of every process.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from dataclasses import dataclass

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class ProcStat:
    pid: int
    ppid: int
    state: str
    cpu_seconds: float
    """utime + stime of the process plus cutime + cstime of its reaped children."""


def read_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat`` parsed, or ``None`` when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            raw = file.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(b")") + 2:].split()
    try:
        ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
        return ProcStat(pid, int(fields[1]), fields[0].decode(), ticks / _CLOCK_TICKS)
    except (IndexError, ValueError):
        return None


def children(pid: int) -> list[int]:
    """The PIDs of ``pid``'s live children (zombies included); ``[]`` once it is gone."""
    listed = _listed_children(pid)
    if listed is not None:
        return listed
    return [stat.pid for stat in _all_stats() if stat.ppid == pid]


def _listed_children(pid: int) -> list[int] | None:
    """:func:`children` from ``/proc/<pid>/task/*/children`` (each thread lists those it
    forked); ``None`` where ``/proc`` does not tell."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return [] if _children_files() else None
    except OSError:
        return None
    found: dict[int, None] = {}  # a child that moved between threads' lists: once
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children", "rb") as file:
                found.update(dict.fromkeys(int(each) for each in file.read().split()))
        except (FileNotFoundError, ProcessLookupError):
            if not _children_files():
                return None
            # the thread has exited: its children went to another thread, or to the reaper
        except OSError:
            return None
    return list(found)


@functools.cache
def _children_files() -> bool:
    """Whether this Linux lists a thread's children in ``/proc`` (CONFIG_PROC_CHILDREN)."""
    return os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def dying(pid: int) -> bool:
    """Whether ``pid`` runs no more code: gone, a zombie, or with SIGKILL pending (it dies
    before it returns to user space, and a fork racing with the signal fails). What it
    leaves re-parents to its subreaper when it dies. A killed kernel's processes are in
    this state when the fork server finds them re-parented, for the moment they take to
    die: freezing them first (:func:`kill_tree`) only waited for that."""
    try:
        with open(f"/proc/{pid}/status", "rb") as file:
            lines = file.read().splitlines()
    except OSError:
        return True
    pending = 0
    for line in lines:
        key, _, value = line.partition(b":")
        if key == b"State" and value.strip()[:1] in (b"Z", b"X"):
            return True
        if key in (b"SigPnd", b"ShdPnd"):
            pending |= int(value, 16)
    return bool(pending & _SIGKILL_BIT)


_SIGKILL_BIT = 1 << (signal.SIGKILL - 1)
"""SIGKILL in ``/proc/<pid>/status``'s masks of pending signals."""


def _all_stats() -> list[ProcStat]:
    stats: list[ProcStat] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return stats
    for name in names:
        if name.isdigit():
            stat = read_stat(int(name))
            if stat is not None:
                stats.append(stat)
    return stats


def tree(root: int) -> list[ProcStat]:
    """``root`` and all its live descendants (root first); empty if ``root`` is gone."""
    first = read_stat(root)
    if first is None:
        return []
    found = [first]
    index = 0
    while index < len(found):
        parent = found[index].pid
        pids = _listed_children(parent)
        if pids is None:
            return _scanned_tree(root)
        found.extend(stat for pid in pids
                     if (stat := read_stat(pid)) is not None and stat.ppid == parent)
        index += 1
    return found


def _scanned_tree(root: int) -> list[ProcStat]:
    """:func:`tree` from every process's ``stat``."""
    stats = _all_stats()
    below: dict[int, list[ProcStat]] = {}
    by_pid: dict[int, ProcStat] = {}
    for stat in stats:
        by_pid[stat.pid] = stat
        below.setdefault(stat.ppid, []).append(stat)
    first = by_pid.get(root)
    if first is None:
        return []
    found = [first]
    index = 0
    while index < len(found):
        found.extend(below.get(found[index].pid, ()))
        index += 1
    return found


def tree_cpu_seconds(root: int) -> float:
    """CPU time of ``root``'s tree, including its reaped children."""
    return sum(stat.cpu_seconds for stat in tree(root))


def descendants(root: int) -> list[int]:
    return [stat.pid for stat in tree(root)[1:]]


def kill_tree(root: int) -> list[int]:
    """Freeze ``root`` and its descendants with SIGSTOP until no new ones appear, then
    SIGKILL them all. Returns the PIDs signalled."""
    frozen: list[int] = []
    seen: set[int] = set()
    for _ in range(100):  # each pass can only find processes forked before it froze them
        new = [pid for pid in [root, *descendants(root)] if pid not in seen]
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
            seen.add(pid)
            frozen.append(pid)
        _wait_stopped(new)
    for pid in frozen:
        _signal(pid, signal.SIGKILL)
    return frozen


def _wait_stopped(pids: list[int], seconds: float = 1.0) -> None:
    """Wait until ``pids`` are stopped (or gone). A SIGSTOP lands asynchronously: until it
    has, a process can still fork, and a child forked after the last pass would escape."""
    deadline = time.monotonic() + seconds
    pending = list(pids)
    while pending and time.monotonic() < deadline:
        pending = [pid for pid in pending
                   if (stat := read_stat(pid)) is not None and stat.state not in "TtZXx"]
        if pending:
            time.sleep(0.0002)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)
