"""Step 1: the namespaces and the id map (and, for a root host, the kernel's ids)."""

from __future__ import annotations

import contextlib
import os
import select
import time
from typing import Any

from .libc import ConfineError, check, libc, write

CLONE_NEWTIME = 0x00000080
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000


def unshare(plan: dict[str, Any], mapping: Pipes | None) -> bool:
    """The namespaces and the id map; whether the caller must still take the kernel's ids
    (it was root: its own ids are not mapped)."""
    uid, gid = plan["uid"], plan["gid"]
    mapped_from_outside = (uid, gid) != (os.geteuid(), os.getegid())
    if mapping is not None:
        os.close(mapping[0])  # the parent's ends: an answer must come from the parent
        os.close(mapping[3])
    if mapped_from_outside:
        if mapping is None:
            raise ConfineError(f"map uid {uid}: the kernel's ids are not the caller's, and no "
                               "parent was asked to map them")
        os.setgroups([])  # root's supplementary groups would stay with the kernel
    flags = (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWUTS
             | (0 if plan["network"] else CLONE_NEWNET))
    if libc.unshare(flags | CLONE_NEWTIME) == 0:
        flags |= CLONE_NEWTIME
    else:  # a Linux older than 5.6 (or one built without time namespaces)
        check(libc.unshare(flags), "unshare")
    if mapped_from_outside:
        assert mapping is not None
        ask, answer = mapping[1], mapping[2]
        os.write(ask, b"m")
        if os.read(answer, 1) != b"y":
            raise ConfineError(f"map uid {uid} and gid {gid} into the user namespace: the "
                               "parent could not write the map")
        for fd in (ask, answer):
            os.close(fd)
    else:
        write("/proc/self/setgroups", "deny")
        write("/proc/self/uid_map", f"{uid} {uid} 1")
        write("/proc/self/gid_map", f"{gid} {gid} 1")
    if flags & CLONE_NEWTIME:
        _offset_boot_time()
    return mapped_from_outside


Pipes = tuple[int, int, int, int]
"""The pipes of a mapping (:func:`mapping_pipes`): the parent's read end and the child's
write end of its request, the child's read end and the parent's write end of the answer."""


def mapping_pipes(plan: dict[str, Any]) -> Pipes | None:
    """Before forking the process that will call :func:`enter`: the pipes for its parent
    to map the kernel's ids (only a process with ``CAP_SETUID`` in the parent namespace
    may map an id other than its own, and the unshared child has none there), or ``None``
    when the caller's own ids are the kernel's (an ordinary user's host)."""
    if (plan["uid"], plan["gid"]) == (os.geteuid(), os.getegid()):
        return None
    request, ask = os.pipe()
    answer, reply = os.pipe()
    return request, ask, answer, reply


def map_child(pid: int, plan: dict[str, Any], pipes: Pipes, seconds: float = 10.0) -> None:
    """In the parent, right after the fork: once the child has unshared its user namespace
    (it asks on the pipe), write its uid and gid map and answer. Returns at once if the
    child died first; the child fails if no answer comes."""
    request, ask, answer, reply = pipes
    os.close(ask)
    os.close(answer)
    try:
        readable, _, _ = select.select([request], [], [], seconds)
        if readable and os.read(request, 1) == b"m":
            target = f"/proc/{pid}"
            write(f"{target}/setgroups", "deny")
            write(f"{target}/gid_map", f"{plan['gid']} {plan['gid']} 1")
            write(f"{target}/uid_map", f"{plan['uid']} {plan['uid']} 1")
            os.write(reply, b"y")
    except OSError:
        pass  # the child reads no answer and fails, saying so
    finally:
        os.close(request)
        os.close(reply)


def _offset_boot_time() -> None:
    """The new time namespace's boot clock starts now: ``/proc/uptime`` and
    ``CLOCK_BOOTTIME`` no longer tell the host's uptime. (The monotonic clock is left as
    it is: a forked kernel holds values it read before the fork.)"""
    boot = int(time.clock_gettime(time.CLOCK_BOOTTIME))
    with contextlib.suppress(OSError):
        write("/proc/self/timens_offsets", f"boottime {-boot} 0\n")


def take_ids(plan: dict[str, Any]) -> None:
    """Take the kernel's ids (the caller was root, which the namespace does not map).
    Capabilities in the user namespace stay until :func:`drop_privileges`: neither id
    is root in it."""
    uid, gid = plan["uid"], plan["gid"]
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
