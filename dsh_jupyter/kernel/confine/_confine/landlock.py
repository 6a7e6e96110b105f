"""Step 3, second part: a Landlock ruleset, the file-system wall that does not depend on
mounts (and, without namespaces, the wall between the program and the user's files)."""

from __future__ import annotations

import ctypes
import os
from typing import Any

from .libc import ConfineError, check, libc
from .root import DEVICES

# Landlock (the same numbers on every architecture: the calls are newer than the split).
_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION, _LANDLOCK_RULE_PATH_BENEATH = 1, 1
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 14, 1 << 15
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1,
              5: (1 << 16) - 1}
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
PROC_MACHINE = ("cpuinfo", "meminfo", "stat", "loadavg", "uptime", "version", "filesystems")
"""``/proc`` files a kernel without namespaces may read: the machine's, not the processes'."""


def landlock_abi() -> int:
    """The Landlock ABI this Linux offers (0: none, or disabled)."""
    version = libc.syscall(_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                           ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    return max(0, int(version))


class _RulesetAttr(ctypes.Structure):
    _fields_ = (("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64))


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def restrict_files(plan: dict[str, Any], *, confined: bool = True) -> None:
    """A Landlock ruleset, the file-system wall that does not depend on mounts: the
    read-only paths (and inputs) can be read and executed, the kernel's own root (and,
    confined, its ``/tmp`` and ``/dev/shm``) are the kernel's, devices can be read and
    written, ``/proc`` read; nothing else can be opened or written. Abstract unix sockets
    and signals outside the kernel's own processes are scoped away too (ABI 6).

    Confined, any directory may be listed (what exists is the mounts' business). Without
    namespaces (:func:`restrict`), only the device files of the minimal ``/dev`` are
    opened, no other directory is listed, and without ``network`` no TCP port is bound or
    connected (ABI 4): this ruleset is then the wall between the program and the user's
    files. Skipped where Landlock is missing (the host said so)."""
    abi = landlock_abi()
    if abi <= 0:
        return
    everything = _FS_BY_ABI.get(abi, _FS_BY_ABI[5])
    read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
    device = _FS_READ_FILE | _FS_WRITE_FILE | _FS_READ_DIR | (everything & _FS_TRUNCATE) | (
        everything & _FS_IOCTL_DEV)
    rules = [(path, read) for path in plan["read_only"] if not os.path.islink(path)]
    rules.append((plan["view"]["root"], everything))
    if confined:
        rules += [("/tmp", everything), ("/dev/shm", everything), ("/dev", device),
                  ("/proc", _FS_READ_FILE | _FS_READ_DIR), ("/", _FS_READ_DIR)]
    else:
        # The host's /proc shows every process: the kernel's own directory only (its
        # children's are out of reach, which Python does without), and the machine's.
        rules += [("/dev/" + name, device) for name in DEVICES]
        rules += [(f"/proc/{os.getpid()}", _FS_READ_FILE | _FS_READ_DIR),
                  ("/proc/sys", _FS_READ_FILE | _FS_READ_DIR)]
        rules += [("/proc/" + name, _FS_READ_FILE) for name in PROC_MACHINE]
    attr = _RulesetAttr(everything, 0, 0)
    size = 8 if abi < 4 else 16
    if abi >= 4 and not confined and not plan["network"]:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP  # and no rule allows any
    if abi >= 6:
        attr.scoped = _SCOPE_SIGNAL | (0 if plan["network"] else _SCOPE_ABSTRACT_UNIX_SOCKET)
        size = 24
    ruleset = libc.syscall(_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                            ctypes.c_uint32(0))
    if ruleset < 0:
        raise ConfineError(f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        for path, access in rules:
            if not os.path.exists(path):
                continue
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                if not os.path.isdir(path):
                    access &= _FS_EXECUTE | _FS_READ_FILE | _FS_WRITE_FILE | _FS_TRUNCATE | (
                        _FS_IOCTL_DEV)
                beneath = _PathBeneath(access & everything, fd)
                check(libc.syscall(_LANDLOCK_ADD_RULE, ruleset,
                                   ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
                                   ctypes.byref(beneath), ctypes.c_uint32(0)),
                      f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        check(libc.syscall(_LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)),
              "landlock_restrict_self")
    finally:
        os.close(ruleset)
