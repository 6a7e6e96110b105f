"""Step 2: the new root. What it shows of the host is opened first (while the caller's
file access lasts); then a tmpfs becomes the root, with those paths bound read-only,
``/workspace`` (the kernel's own tmpfs), a minimal ``/dev``, the inputs, and a ``/proc``
of the new PID namespace masked as runc and bubblewrap mask it; the old root is unmounted.
"""

from __future__ import annotations

import contextlib
import os
import platform
from typing import Any

from .libc import ConfineError, check, libc, mount

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 0x20, 0x400, 0x800, 0x1000
MS_REC, MS_PRIVATE, MS_RELATIME = 0x4000, 0x40000, 0x200000
MNT_DETACH = 2
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
# What runc (Docker's defaults) and bubblewrap hide of /proc: files under MASKED read as
# empty, directories as an empty read-only tmpfs; READ_ONLY ones stay readable. The
# writable sysctls are why: Linux checks writes to /proc/sys by uid and mode, not by
# capability, and a writable kernel/core_pattern runs a program as host root.
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
PROC_MASKED = ("asound", "acpi", "interrupts", "kcore", "keys", "key-users", "kallsyms",
               "kmsg", "latency_stats", "timer_list", "timer_stats", "sched_debug", "scsi",
               "kpagecount", "kpageflags", "kpagecgroup", "sysvipc", "config.gz")
_PIVOT_ROOT_SYSCALL = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203,
                       "s390x": 217}
_STATVFS_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV),
                  (os.ST_NOEXEC, MS_NOEXEC), (os.ST_NOATIME, MS_NOATIME),
                  (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME))


class Exposed:
    """What the new root shows of the host, opened before the kernel's ids are taken (they
    may not be able to reach it: a Python installation under root's 0700 home)."""

    def __init__(self) -> None:
        self.binds: list[tuple[int, str, bool]] = []   # (O_PATH fd, target, read-only)
        self.links: list[tuple[str, str]] = []         # (target, link text)
        self.seed: list[tuple[int, str]] = []          # (readable fd, path under HOME)
        self.inputs: list[tuple[int, str]] = []        # (O_PATH fd, target)

    def all_fds(self) -> list[int]:
        return [fd for fd, *_ in self.binds] + [fd for fd, _ in self.seed] + [
            fd for fd, _ in self.inputs]


def _open_path(path: str) -> int:
    return os.open(path, os.O_PATH | os.O_CLOEXEC)


def open_exposed(plan: dict[str, Any]) -> Exposed:
    exposed = Exposed()
    for path in plan["read_only"]:
        if os.path.islink(path):
            exposed.links.append((path, os.readlink(path)))
        elif os.path.exists(path):
            exposed.binds.append((_open_path(path), path, True))
    for name in DEVICES:
        if os.path.exists("/dev/" + name):
            exposed.binds.append((_open_path("/dev/" + name), "/dev/" + name, False))
    seed = plan.get("seed_home")
    if seed and os.path.isdir(seed):
        for directory, _subdirectories, files in os.walk(seed):
            for name in files:
                if not name.endswith(".partial"):  # being written: the next kernel gets it
                    path = os.path.join(directory, name)
                    with contextlib.suppress(OSError):
                        exposed.seed.append((os.open(path, os.O_RDONLY | os.O_CLOEXEC),
                                             os.path.relpath(path, seed)))
    for source, target in plan.get("inputs", ()):
        exposed.inputs.append((_open_path(source), target))
    return exposed


def _fd_path(fd: int) -> str:
    """A mount source naming an opened file (through the host's /proc, under /oldroot)."""
    return f"/oldroot/proc/self/fd/{fd}"


def build_root(plan: dict[str, Any], exposed: Exposed) -> None:
    """A tmpfs root holding only what the plan names; the host's root unmounted."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # bubblewrap's trick: the tmpfs on /tmp becomes the root, and the old root stays
    # reachable under /oldroot until everything is bound.
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    os.chdir("/tmp")
    os.mkdir("oldroot")
    _pivot_root(".", "oldroot")
    os.chdir("/")
    for target, text in exposed.links:
        if not os.path.lexists(target):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(text, target)
    os.mkdir("/dev")
    mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    # The workspace (and /tmp) first: an installation may live below /tmp (a CI venv in
    # mktemp -d), and its mount point then lands in the kernel's own temp.
    _make_workspace(plan, exposed)
    for fd, target, read_only in exposed.binds:
        _bind(_fd_path(fd), target, read_only=read_only, is_dir=_is_dir(fd))
    _finish_dev()
    _bind_inputs(plan, exposed)
    os.makedirs("/proc", exist_ok=True)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mask_proc()
    for fd in exposed.all_fds():
        os.close(fd)
    mount(None, "/oldroot", None, MS_REC | MS_PRIVATE)
    check(libc.umount2(b"/oldroot", MNT_DETACH), "unmount the old root")
    os.rmdir("/oldroot")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _is_dir(fd: int) -> bool:
    import stat

    return stat.S_ISDIR(os.fstat(fd).st_mode)


def _make_workspace(plan: dict[str, Any], exposed: Exposed) -> None:
    """``/workspace``: a tmpfs of the kernel's own, capped in bytes and files; HOME (with
    the seed's files), the temp directory (also ``/tmp``), the working directory with
    ``outputs/``."""
    view = plan["view"]
    root = view["root"]
    os.makedirs(root)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV,
          f"mode=0700,size={int(plan['workspace_bytes'])},"
          f"nr_inodes={int(plan['workspace_files'])}")
    for key in ("home", "ipython_dir", "tmp", "cwd", "outputs"):
        os.makedirs(view[key], mode=0o700, exist_ok=True)
    for fd, relative in exposed.seed:
        _copy_seed(fd, os.path.join(view["home"], relative))
    _bind(view["tmp"], "/tmp", read_only=False, is_dir=True)


def _bind_inputs(plan: dict[str, Any], exposed: Exposed) -> None:
    """The inputs, read-only under the working directory's ``inputs/``."""
    inputs_dir = plan.get("inputs_dir")
    if inputs_dir:
        os.makedirs(inputs_dir, mode=0o700, exist_ok=True)
        for fd, target in exposed.inputs:
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            if _is_dir(fd):
                os.makedirs(target, mode=0o700, exist_ok=True)
            else:
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        # The directory first (nothing can be added next to the inputs), then each input.
        _bind(inputs_dir, inputs_dir, read_only=True, is_dir=True)
        for fd, target in exposed.inputs:
            _bind(_fd_path(fd), target, read_only=True, is_dir=_is_dir(fd))


def _copy_seed(source: int, target: str) -> None:
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            while chunk := os.read(source, 1 << 20):
                os.write(out, chunk)
        finally:
            os.close(out)


def _mask_proc() -> None:
    for name in PROC_READ_ONLY:
        path = "/proc/" + name
        if os.path.exists(path):
            _bind(path, path, read_only=True, is_dir=os.path.isdir(path))
    for name in PROC_MASKED:
        path = "/proc/" + name
        if not os.path.lexists(path):
            continue
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "mode=0555,size=4k,nr_inodes=1")
        else:
            _bind("/dev/null", path, read_only=True, is_dir=False)


def _pivot_root(new_root: str, put_old: str) -> None:
    function = getattr(libc, "pivot_root", None)
    if function is not None:
        check(function(new_root.encode(), put_old.encode()), "pivot_root")
        return
    number = _PIVOT_ROOT_SYSCALL.get(platform.machine())
    if number is None:
        raise ConfineError(f"pivot_root: unknown system call number on {platform.machine()}")
    check(libc.syscall(number, new_root.encode(), put_old.encode()), "pivot_root")


def _bind(source: str, target: str, *, read_only: bool, is_dir: bool) -> None:
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    try:
        mount(source, target, None, MS_BIND)
        nested = False
    except ConfineError:
        # A subtree holding mounts locked by the user namespace binds only recursively.
        mount(source, target, None, MS_BIND | MS_REC)
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
    mount(None, target, None, flags)


def _mounts_below(target: str) -> list[str]:
    prefix = target.rstrip("/") + "/"
    found: list[str] = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as file:
        for line in file:
            point = line.split()[4].encode().decode("unicode_escape")
            if point.startswith(prefix):
                found.append(point)
    return found


def _finish_dev() -> None:
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, "/dev/" + name)
    os.mkdir("/dev/shm")
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")
