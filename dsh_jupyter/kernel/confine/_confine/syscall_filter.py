"""Step 3, last: the seccomp filter the host built (``confine/seccomp.py``), installed."""

from __future__ import annotations

import ctypes

from .libc import PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ConfineError, check, libc


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def install_filter(program: bytes) -> None:
    """Install a seccomp BPF program (``struct sock_filter`` array, as libseccomp exports
    it). Needs ``no_new_privs``; binds this process and everything it starts."""
    if not program or len(program) % 8:
        raise ConfineError("seccomp: the host's filter is not a BPF program")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
          "seccomp")
