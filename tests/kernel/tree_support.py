"""Directory trees a hostile program leaves in its workspace, and a way to remove them as an
ordinary user when the tests run as root (root's permission checks would pass anyway).

:func:`build_deep` and :func:`build_locked` import what they use inside their body, so a
test can send their source (``inspect.getsource``) to a kernel and call them there.
"""

from __future__ import annotations

import json
import os
import resource
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

NOBODY = 65534


def build_deep(base: str, depth: int, lock_every: int = 0) -> None:
    """A chain of ``depth`` directories named ``d`` below ``base`` (far past PATH_MAX, so it
    is built through directory descriptors), with a file and a directory chmod-ed 000 at the
    bottom; every ``lock_every``-th level is chmod-ed 000 as well (``0``: none)."""
    import os

    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    fd = os.open(base, flags)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        below = os.open("d", flags, dir_fd=fd)
        os.close(fd)
        fd = below
    os.close(os.open("file", os.O_WRONLY | os.O_CREAT, 0o000, dir_fd=fd))
    os.mkdir("locked", 0o000, dir_fd=fd)
    # Back up, locking levels behind us (a locked level cannot be entered again, even by
    # root in a kernel: it has no capability).
    for level in range(depth, 0, -1):
        above = os.open("..", flags, dir_fd=fd)
        os.close(fd)
        fd = above
        if lock_every and level % lock_every == 0:
            os.chmod("d", 0o000, dir_fd=fd)
    os.close(fd)


def build_locked(tree: str, outside: str) -> None:
    """``tree``: files and directories a program locked (000, read-only, write-only,
    search-only, sticky), a FIFO, a unix socket, and symlinks and a hard link to
    ``outside`` (an existing directory holding ``file`` and ``dir/file``); the tree's own
    directory is left read-only."""
    import os
    import socket

    def write(path: str, mode: int) -> None:
        with open(path, "w") as file:
            file.write("x")
        os.chmod(path, mode)

    os.mkdir(tree)
    write(f"{tree}/mode-000", 0o000)
    write(f"{tree}/read-only", 0o444)
    os.makedirs(f"{tree}/locked/inner/deeper")
    write(f"{tree}/locked/inner/deeper/file", 0o000)
    for directory in ("locked/inner/deeper", "locked/inner", "locked"):
        os.chmod(f"{tree}/{directory}", 0o000)
    for name, mode in (("read-only-dir", 0o555), ("write-only-dir", 0o300),
                       ("search-only-dir", 0o100), ("read-only-empty", 0o500),
                       ("sticky-dir", 0o1555)):
        os.mkdir(f"{tree}/{name}")
        if name != "read-only-empty":
            write(f"{tree}/{name}/file", 0o000)
            os.mkdir(f"{tree}/{name}/sub")
        os.chmod(f"{tree}/{name}", mode)
    os.mkfifo(f"{tree}/fifo")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(f"{tree}/socket")
    os.symlink(os.path.abspath(f"{outside}/file"), f"{tree}/link-to-file")
    os.symlink(os.path.abspath(f"{outside}/dir"), f"{tree}/link-to-dir")
    os.symlink(os.path.abspath(outside), f"{tree}/link-to-outside")
    os.symlink("nowhere", f"{tree}/dangling")
    os.symlink("loop", f"{tree}/loop")
    os.link(f"{outside}/file", f"{tree}/hard-link")
    os.chmod(tree, 0o555)


def make_outside(outside: str) -> None:
    """The directory :func:`build_locked` links to, with modes a remover must not change."""
    os.makedirs(f"{outside}/dir")
    for path in (f"{outside}/file", f"{outside}/dir/file"):
        with open(path, "w") as file:
            file.write("keep me")
        os.chmod(path, 0o640)
    os.chmod(f"{outside}/dir", 0o750)


def describe(root: str) -> dict[str, Any]:
    """Every path below ``root`` with its mode and, for files, content (to compare)."""
    found: dict[str, Any] = {}
    for directory, subdirectories, files in os.walk(root):
        for name in subdirectories + files:
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            content = Path(path).read_text() if name in files and os.path.isfile(path) else None
            found[os.path.relpath(path, root)] = [oct(mode), content]
    return found


def mount_tmpfs(target: str) -> None:
    """Mount a tmpfs at ``target``, in a user and mount namespace of this (single-threaded,
    forked) process's own: what an unconfined program can do in its workspace."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE, which setuid cleared: /proc/self is ours
    if libc.unshare(0x10000000 | 0x00020000) != 0:  # CLONE_NEWUSER | CLONE_NEWNS
        raise OSError(ctypes.get_errno(), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as file:
            file.write(text)
    if libc.mount(b"tmpfs", target.encode(), b"tmpfs", 0, None) != 0:
        raise OSError(ctypes.get_errno(), f"mount {target}")


def as_ordinary_user(base: Path, work: Callable[[], Any], *, max_fds: int | None = None) -> Any:
    """``work()`` (returning JSON) in a forked child whose working directory is ``base``:
    as ``nobody`` when this process is root (``base`` is handed to nobody first), else as
    this user; with ``max_fds``, only descriptors 0 to ``max_fds - 1`` exist (the child
    keeps 0-2 and its pipe). Re-raises what the child raised, as an ``AssertionError``
    holding its traceback."""
    root = os.geteuid() == 0
    if root:
        os.chown(base, NOBODY, NOBODY)
    directory = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.fchdir(directory)  # base's parents may be closed to nobody: no path needed
            if root:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            os.dup2(writing, 3)
            os.closerange(4, os.sysconf("SC_OPEN_MAX"))
            if max_fds is not None:
                hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
                resource.setrlimit(resource.RLIMIT_NOFILE, (max_fds, hard))
            try:
                reply = {"value": work()}
            except BaseException:
                reply = {"error": traceback.format_exc()}
            os.write(3, json.dumps(reply).encode())
        finally:
            os._exit(0)
    os.close(writing)
    os.close(directory)
    chunks = []
    while chunk := os.read(reading, 1 << 16):
        chunks.append(chunk)
    os.close(reading)
    os.waitpid(pid, 0)
    reply = json.loads(b"".join(chunks) or b'{"error": "the child died without a word"}')
    if "error" in reply:
        raise AssertionError(f"in the child:\n{reply['error']}")
    return reply["value"]
