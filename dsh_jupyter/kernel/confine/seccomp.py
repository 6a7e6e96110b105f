"""The syscall filter of confined kernels: a seccomp-bpf program built with libseccomp.

The second wall behind the namespaces, modelled on the default profiles of Docker and
Flatpak: everything a Python program needs is allowed, and what it never needs, but an
attacker reaching for the host's kernel does, fails with an errno
(:data:`DENIED`, grouped by why). Namespace flags of ``clone`` and the socket families
other than unix, IP and netlink (libzmq needs netlink) are refused by argument;
``clone3``, whose flags a filter cannot read, answers ``ENOSYS`` so that the C library
falls back to ``clone``. System calls of another architecture (32-bit ``int 0x80``,
x32) answer ``ENOSYS``: the filter only knows the native table.

Built with libseccomp, the library behind Docker's, runc's, systemd's and Flatpak's
filters, through ctypes: its official Python binding is not on PyPI (a Cython module
the distributions build for their own Python only) and the ctypes wrapper there
(``pyseccomp`` 0.1, 2021) is unmaintained, while five functions of libseccomp's stable
C API are all this needs. The program is built once per process, exported as BPF and
sent with each kernel's confinement plan; ``_confine`` installs it with ``prctl``
(standard library, no libseccomp in the kernel). Where libseccomp is missing
(``libseccomp2`` on Debian and Ubuntu, ``libseccomp`` elsewhere) :func:`filter_problem`
says so and kernels run without the filter (``sandbox="required"`` refuses).
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import errno
import functools
import os
import platform
from dataclasses import dataclass

DENIED: dict[str, tuple[str, ...]] = {
    "namespaces and mounts": (
        "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot",
        "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    ),
    "the kernel itself": (
        "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
        "create_module", "get_kernel_syms", "query_module", "reboot", "swapon", "swapoff",
        "acct", "syslog", "sysfs", "_sysctl", "uselib", "ustat", "nfsservctl", "quotactl",
        "quotactl_fd", "lookup_dcookie", "vhangup", "iopl", "ioperm", "vm86", "vm86old",
        "modify_ldt",
    ),
    "clocks": (
        "settimeofday", "stime", "clock_settime", "clock_settime64", "clock_adjtime",
        "clock_adjtime64", "adjtimex",
    ),
    "other processes' memory and the kernel's tracing": (
        "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp",
        "pidfd_getfd", "perf_event_open", "bpf", "userfaultfd", "fanotify_init",
        "open_by_handle_at", "name_to_handle_at",
    ),
    "the kernel's keyrings": ("add_key", "request_key", "keyctl"),
    "io_uring": ("io_uring_setup", "io_uring_enter", "io_uring_register"),
}
"""System calls that fail with ``EPERM``, by what they would reach."""

NAMESPACE_FLAGS = {"CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000,
                   "CLONE_NEWUTS": 0x04000000, "CLONE_NEWIPC": 0x08000000,
                   "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
                   "CLONE_NEWNET": 0x40000000}
"""``clone`` with any of these fails with ``EPERM`` (CLONE_NEWTIME is clone3-only)."""

SOCKET_FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16}
"""The socket families a kernel may open; any other fails with ``EAFNOSUPPORT``
(``AF_PACKET``, ``AF_ALG``, ``AF_VSOCK``, Bluetooth, ...)."""
_AF_MAX = 64

TERMINAL_IOCTLS = {"TIOCSTI": 0x5412, "TIOCLINUX": 0x541C}
"""``ioctl`` requests that fail with ``EPERM``: typing into, or taking over, a terminal."""

PER_LINUX = 0x0000
"""The only ``personality`` allowed (as Flatpak does); any other, ``ADDR_NO_RANDOMIZE``
(which turns off address randomisation for what the program starts) included, fails
with ``EPERM``, and so does the query (``0xffffffff``)."""

_ACT_ALLOW = 0x7FFF0000
_ACT_ERRNO = 0x00050000
_ATTR_ACT_BADARCH = 2
_ATTR_CTL_OPTIMIZE = 8
_CMP_NE, _CMP_EQ, _CMP_GE, _CMP_MASKED_EQ = 1, 4, 5, 7


class _ArgCmp(ctypes.Structure):
    _fields_ = (("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64))


class _Version(ctypes.Structure):
    _fields_ = (("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint))


@dataclass(frozen=True, slots=True)
class SyscallFilter:
    """A built filter: the BPF program (``struct sock_filter`` array) and what made it."""

    program: bytes
    libseccomp: str
    instructions: int

    @property
    def encoded(self) -> str:
        """The program as the confinement plan carries it (base64)."""
        return base64.b64encode(self.program).decode()


def _errno(number: int) -> int:
    return _ACT_ERRNO | (number & 0xFFFF)


@functools.cache
def build_filter() -> SyscallFilter | str:
    """The filter for this machine's architecture, or why there is none (built once per
    process: ~1 ms)."""
    name = ctypes.util.find_library("seccomp")
    if name is None:
        return ("libseccomp is not installed, so kernels get no syscall filter (install "
                "libseccomp2 on Debian or Ubuntu, libseccomp elsewhere)")
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as error:
        return f"libseccomp could not be loaded: {error}"
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = (ctypes.c_uint32,)
    lib.seccomp_release.argtypes = (ctypes.c_void_p,)
    lib.seccomp_attr_set.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32)
    lib.seccomp_syscall_resolve_name.argtypes = (ctypes.c_char_p,)
    lib.seccomp_rule_add_array.argtypes = (ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ArgCmp))
    lib.seccomp_export_bpf.argtypes = (ctypes.c_void_p, ctypes.c_int)
    lib.seccomp_version.restype = ctypes.POINTER(_Version)
    version = lib.seccomp_version().contents
    label = f"libseccomp {version.major}.{version.minor}.{version.micro}"
    context = lib.seccomp_init(_ACT_ALLOW)
    if not context:
        return f"{label}: seccomp_init failed"
    try:
        _configure(lib, context)
        return _export(lib, context, label)
    except OSError as error:
        return f"{label}: {error}"
    finally:
        lib.seccomp_release(context)


def _configure(lib: ctypes.CDLL, context: int) -> None:
    def check(result: int, what: str) -> None:
        if result < 0:
            raise OSError(-result, f"{what}: {os.strerror(-result)}")

    check(lib.seccomp_attr_set(context, _ATTR_ACT_BADARCH, _errno(errno.ENOSYS)),
          "bad-architecture action")
    # A binary tree of comparisons (libseccomp >= 2.5): a syscall costs a few jumps.
    lib.seccomp_attr_set(context, _ATTR_CTL_OPTIMIZE, 2)

    def rule(syscall: str, action: int, *conditions: tuple[int, int, int, int]) -> None:
        number = lib.seccomp_syscall_resolve_name(syscall.encode())
        if number < 0:
            return  # not a system call of this architecture
        array = (_ArgCmp * max(1, len(conditions)))(*(_ArgCmp(*c) for c in conditions))
        check(lib.seccomp_rule_add_array(context, action, number, len(conditions), array),
              f"rule for {syscall}")

    for names in DENIED.values():
        for syscall in names:
            rule(syscall, _errno(errno.EPERM))
    flags_arg = 1 if platform.machine().startswith("s390") else 0  # s390 swaps clone's args
    for flag in NAMESPACE_FLAGS.values():
        rule("clone", _errno(errno.EPERM), (flags_arg, _CMP_MASKED_EQ, flag, flag))
    rule("clone3", _errno(errno.ENOSYS))
    allowed = set(SOCKET_FAMILIES.values())
    for family in range(_AF_MAX):
        if family not in allowed:
            rule("socket", _errno(errno.EAFNOSUPPORT), (0, _CMP_EQ, family, 0))
            rule("socketpair", _errno(errno.EAFNOSUPPORT), (0, _CMP_EQ, family, 0))
    rule("socket", _errno(errno.EAFNOSUPPORT), (0, _CMP_GE, _AF_MAX, 0))
    rule("socketpair", _errno(errno.EAFNOSUPPORT), (0, _CMP_GE, _AF_MAX, 0))
    for request in TERMINAL_IOCTLS.values():
        rule("ioctl", _errno(errno.EPERM), (1, _CMP_MASKED_EQ, 0xFFFFFFFF, request))
    rule("personality", _errno(errno.EPERM), (0, _CMP_NE, PER_LINUX, 0))


def _export(lib: ctypes.CDLL, context: int, label: str) -> SyscallFilter:
    memfd = os.memfd_create("dsh-seccomp", os.MFD_CLOEXEC)
    try:
        result = lib.seccomp_export_bpf(context, memfd)
        if result < 0:
            raise OSError(-result, f"seccomp_export_bpf: {os.strerror(-result)}")
        size = os.lseek(memfd, 0, os.SEEK_END)
        program = os.pread(memfd, size, 0)
    finally:
        os.close(memfd)
    return SyscallFilter(program=program, libseccomp=label, instructions=len(program) // 8)


def filter_problem() -> str | None:
    """Why confined kernels get no syscall filter here, or ``None``."""
    built = build_filter()
    return built if isinstance(built, str) else None
