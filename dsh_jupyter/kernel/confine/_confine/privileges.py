"""Step 3, first part: the host's name, the namespace's own loopback, and no privileges."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import socket
import struct

from .libc import (
    PR_CAP_AMBIENT,
    PR_CAP_AMBIENT_CLEAR_ALL,
    PR_CAPBSET_DROP,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_SECUREBITS,
    ConfineError,
    check,
    libc,
    prctl,
)

# NOROOT, NO_SETUID_FIXUP, KEEP_CAPS off, NO_CAP_AMBIENT_RAISE: each with its lock bit.
SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x80
CAPABILITY_VERSION_3 = 0x20080522
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def name_host(name: str) -> None:
    encoded = name.encode()
    check(libc.sethostname(encoded, len(encoded)), "sethostname")
    check(libc.setdomainname(b"(none)", 6), "setdomainname")


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32))


def drop_privileges() -> None:
    """No capability, now or after any exec; no privilege gained through setuid files.
    Without this, the namespace's root could remount the read-only binds writable."""
    capability = 0
    while True:
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            if ctypes.get_errno() == errno.EINVAL:
                break  # past the last capability this kernel knows
            raise ConfineError(f"PR_CAPBSET_DROP: {os.strerror(ctypes.get_errno())}")
        capability += 1
    prctl(PR_SET_SECUREBITS, SECUREBITS, "PR_SET_SECUREBITS")
    with contextlib.suppress(ConfineError):  # ambient capabilities: Linux >= 4.3
        check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "ambient")
    header = _CapHeader(CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    check(libc.capset(ctypes.byref(header), data), "capset")
    prctl(PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
