"""Confining one kernel with Linux namespaces (standard library plus ctypes; no bubblewrap).

Loaded by path inside the fork server (for forked kernels) and the keeper (for
stock launches); never imported by the host. :func:`enter` is called by a
single-threaded process that is about to become a kernel. It follows
bubblewrap's sequence, in-process so that a forked kernel keeps its preloaded
interpreter:

1. ``unshare`` a user, mount, IPC, PID and (unless ``network``) network
   namespace; map the caller's own uid and gid (nothing else is mapped).
2. Fork the namespace's init (PID 1): it builds a new root on a tmpfs — the
   read-only system and interpreter paths of the plan, the kernel's own
   workspace read-write, ``/tmp`` (the workspace's temp), a minimal ``/dev``
   and a ``/proc`` of the new PID namespace — pivots into it and unmounts the
   old root, so nothing else of the host's file system is reachable.
3. Brings up the namespace's own loopback, drops every capability (bounding
   set included, root locked out by securebits) and sets ``no_new_privs``.
4. Forks the kernel (PID 2), which :func:`enter` returns in. The init reaps
   orphans and exits with the kernel's status; when it exits the kernel kills
   everything left in the namespace.

The calling process stays outside as the waiter: it exits with the init's
status (``128 + N`` for death by signal N), so whoever watches it sees the
kernel's fate. A failure before the kernel runs is written to the plan's
``error_file`` and ends with status :data:`CONFINE_FAILED`.

The plan (a JSON object built by ``confine.py`` on the host)::

    {"uid", "gid", "network": bool, "read_only": [PATH...], "workspace": PATH,
     "tmp": PATH, "error_file": PATH,
     "inputs_dir": PATH | null, "inputs": [[HOST PATH, PATH IN inputs_dir], ...]}

Run as ``python -I -S _confine.py --probe`` it tries the whole sequence once and
prints ``ok`` or why it failed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import platform
import signal
import socket
import struct
import sys
import tempfile
from typing import Any, NoReturn

CONFINE_FAILED = 125
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 0x20, 0x400, 0x800, 0x1000
MS_REC, MS_PRIVATE, MS_RELATIME = 0x4000, 0x40000, 0x200000
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS = 1, 24, 28, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
# NOROOT, NO_SETUID_FIXUP, KEEP_CAPS off, NO_CAP_AMBIENT_RAISE: each with its lock bit.
SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x80
CAPABILITY_VERSION_3 = 0x20080522
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_PIVOT_ROOT_SYSCALL = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203,
                       "s390x": 217}
_STATVFS_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV),
                  (os.ST_NOEXEC, MS_NOEXEC), (os.ST_NOATIME, MS_NOATIME),
                  (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME))

_libc = ctypes.CDLL(None, use_errno=True)


class ConfineError(Exception):
    """A step of the confinement failed (the message names it)."""


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise ConfineError(f"{what}: {os.strerror(number)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    _check(_libc.mount(source and source.encode(), target.encode(),
                       fstype and fstype.encode(), ctypes.c_ulong(flags),
                       data and data.encode()), f"mount {target}")


def _prctl(option: int, value: int, what: str) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), what)


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as file:
        file.write(text)


def _status_code(raw: int) -> int:
    return 128 + os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)


def _wait_for(child: int) -> int:
    """Reap children until ``child`` exits; its status as an exit code."""
    while True:
        try:
            pid, raw = os.wait()
        except ChildProcessError:
            return CONFINE_FAILED
        if pid == child:
            return _status_code(raw)


def _fail(error_fd: int, error: BaseException) -> NoReturn:
    with contextlib.suppress(OSError):
        os.write(error_fd, f"{error}\n".encode(errors="replace"))
    os._exit(CONFINE_FAILED)


def enter(plan: dict[str, Any]) -> None:
    """Confine the calling process's future as a kernel (see the module docstring).
    Returns only in the confined kernel process."""
    error_fd = os.open(plan["error_file"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                       0o600)
    cwd = os.getcwd()
    try:
        flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID
        if not plan["network"]:
            flags |= CLONE_NEWNET
        _check(_libc.unshare(flags), "unshare")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{plan['uid']} {plan['uid']} 1")
        _write("/proc/self/gid_map", f"{plan['gid']} {plan['gid']} 1")
    except (OSError, ConfineError) as error:
        _fail(error_fd, error)
    # Interrupts go to the kernel's process group: the waiter and the init ignore them.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    init = os.fork()
    if init:
        os._exit(_wait_for(init))
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "PR_SET_PDEATHSIG")
        _build_root(plan)
        os.chdir(cwd if os.path.isdir(cwd) else plan["workspace"])
        if not plan["network"]:
            _loopback_up()
        _drop_privileges()
    except (OSError, ConfineError) as error:
        _fail(error_fd, error)
    kernel = os.fork()
    if kernel:
        os.close(error_fd)
        os._exit(_wait_for(kernel))
    os.close(error_fd)
    with contextlib.suppress(ConfineError):
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "PR_SET_PDEATHSIG")
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # ipykernel exits when its parent looks like init, which the kernel's parent is here.
    os.environ.pop("JPY_PARENT_PID", None)


def _build_root(plan: dict[str, Any]) -> None:
    """A tmpfs root holding only what the plan names; the host's root unmounted."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    # bubblewrap's trick: the tmpfs on /tmp becomes the root, and the old root stays
    # reachable under /oldroot (with the real /tmp) until everything is bound.
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    os.chdir("/tmp")
    os.mkdir("oldroot")
    _pivot_root(".", "oldroot")
    os.chdir("/")
    # /tmp first: an installation or the workspace may live below it (a CI venv in
    # mktemp -d), and their mount points then land in the workspace's own temp.
    _bind("/oldroot" + plan["tmp"], "/tmp", read_only=False)
    for path in plan["read_only"]:
        _expose("/oldroot" + path, path)
    _make_dev()
    _bind("/oldroot" + plan["workspace"], plan["workspace"], read_only=False)
    _bind_inputs(plan)
    os.makedirs("/proc", exist_ok=True)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount(None, "/oldroot", None, MS_REC | MS_PRIVATE)
    _check(_libc.umount2(b"/oldroot", MNT_DETACH), "unmount the old root")
    os.rmdir("/oldroot")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _bind_inputs(plan: dict[str, Any]) -> None:
    """The run's inputs, read-only: their directory first (the host made a mount point
    for each, so nothing can be added next to them), then each input over its point."""
    inputs_dir = plan.get("inputs_dir")
    if not inputs_dir:
        return
    _bind(inputs_dir, inputs_dir, read_only=True)
    for source, target in plan["inputs"]:
        _bind("/oldroot" + source, target, read_only=True)


def _pivot_root(new_root: str, put_old: str) -> None:
    function = getattr(_libc, "pivot_root", None)
    if function is not None:
        _check(function(new_root.encode(), put_old.encode()), "pivot_root")
        return
    number = _PIVOT_ROOT_SYSCALL.get(platform.machine())
    if number is None:
        raise ConfineError(f"pivot_root: unknown system call number on {platform.machine()}")
    _check(_libc.syscall(number, new_root.encode(), put_old.encode()), "pivot_root")


def _expose(source: str, target: str) -> None:
    """A host path, read-only at the same place (a symlink is copied as a symlink)."""
    if os.path.islink(source):
        if not os.path.lexists(target):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(os.readlink(source), target)
        return
    if os.path.exists(source):
        _bind(source, target, read_only=True)


def _bind(source: str, target: str, *, read_only: bool) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o600))
    try:
        _mount(source, target, None, MS_BIND)
        nested = False
    except ConfineError:
        # A subtree holding mounts locked by the user namespace binds only recursively.
        _mount(source, target, None, MS_BIND | MS_REC)
        nested = True
    if not read_only:
        return
    for mount_point in [target, *(_mounts_below(target) if nested else ())]:
        _remount_read_only(mount_point)


def _remount_read_only(target: str) -> None:
    # Flags the user namespace locked (nosuid, nodev, noexec, atime) must be repeated.
    kept = os.statvfs(target).f_flag
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    for statvfs_flag, mount_flag in _STATVFS_FLAGS:
        if kept & statvfs_flag:
            flags |= mount_flag
    _mount(None, target, None, flags)


def _mounts_below(target: str) -> list[str]:
    prefix = target.rstrip("/") + "/"
    found: list[str] = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as file:
        for line in file:
            point = line.split()[4].encode().decode("unicode_escape")
            if point.startswith(prefix):
                found.append(point)
    return found


def _make_dev() -> None:
    os.mkdir("/dev")
    _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    for name in DEVICES:
        if os.path.exists("/oldroot/dev/" + name):
            _bind("/oldroot/dev/" + name, "/dev/" + name, read_only=False)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, "/dev/" + name)
    os.mkdir("/dev/shm")
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32))


def _drop_privileges() -> None:
    """No capability, now or after any exec; no privilege gained through setuid files.
    Without this, the namespace's root could remount the read-only binds writable."""
    capability = 0
    while True:
        if _libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            if ctypes.get_errno() == errno.EINVAL:
                break  # past the last capability this kernel knows
            raise ConfineError(f"PR_CAPBSET_DROP: {os.strerror(ctypes.get_errno())}")
        capability += 1
    _prctl(PR_SET_SECUREBITS, SECUREBITS, "PR_SET_SECUREBITS")
    with contextlib.suppress(ConfineError):  # ambient capabilities: Linux >= 4.3
        _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "ambient")
    header = _CapHeader(CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _prctl(PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")


def probe() -> str | None:
    """Confine a throwaway child with a minimal plan; ``None`` if it worked, else why not."""
    if not sys.platform.startswith("linux"):
        return f"kernel namespaces are Linux only (this is {sys.platform})"
    with tempfile.TemporaryDirectory(prefix="dsh-probe-") as root:
        workspace = os.path.join(root, "ws")
        os.makedirs(os.path.join(workspace, "tmp"))
        plan = {"uid": os.getuid(), "gid": os.getgid(), "network": False,
                "read_only": [sys.prefix], "workspace": workspace,
                "tmp": os.path.join(workspace, "tmp"),
                "error_file": os.path.join(root, "error")}
        child = os.fork()
        if child == 0:
            try:
                enter(plan)
                # The kernel's view: PID 2 of its own namespace, no host file, no network.
                alone = os.getpid() == 2 and not os.path.exists(root + "/error")
                os._exit(0 if alone else 1)
            finally:
                os._exit(1)
        status = _wait_for(child)
        if status == 0:
            return None
        with open(str(plan["error_file"]), encoding="utf-8", errors="replace") as file:
            detail = file.read().strip()
        return detail or f"the confined probe exited with status {status}"


if __name__ == "__main__":
    if sys.argv[1:] == ["--probe"]:
        problem = probe()
        print(problem or "ok")
        sys.exit(0 if problem is None else 1)
    print(json.dumps({"usage": "python -I -S _confine.py --probe"}))
    sys.exit(2)
