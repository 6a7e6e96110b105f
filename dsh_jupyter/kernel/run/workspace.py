"""Private directories: one per runtime, one per kernel inside it, the directories a
kernel sees, and the scrubbed environment that points into them.

::

    dsh-runtime-XXXX/        0700, made when a runtime is entered, removed when it closes
        seed-home/           files every kernel's HOME starts with (a copy of each;
                             matplotlib's font list, see ``fontcache``)
        dsh-kernel-XXXX/     0700, one kernel's host directory (its ``root``)
            kernel.json      a stock launch's connection file, removed once the kernel is ready
            confine.log      why confinement failed, if it did
            ready            a FIFO: the confined kernel says where it runs and when its
                             root is built (see ``_confine``)

A kernel's own directories (:class:`KernelPaths`)::

    <kernel root>/           /workspace when confined, else the host directory itself
        zmq-*                the kernel's IPC sockets;  tools.sock: the socket carrier
        home/                HOME (IPYTHONDIR inside)
        tmp/                 TMPDIR (and /tmp when confined)
        work/                the working directory (outputs/, inputs/: see ``files``)

A confined kernel's ``/workspace`` is a tmpfs in its own mount namespace, capped in
bytes and files: nothing it writes reaches the host's disk, and it vanishes with the
kernel. The host reaches it through ``/proc/<pid>/root/workspace`` of the process that
confined the kernel, opened once the kernel's root is built (:meth:`Workspace.attach`)
and held as a file descriptor, so the files stay readable after the kernel is killed
(the collection of ``outputs/``) until the workspace is removed. An unconfined kernel's
directories are on the host's disk, inside its 0700 host directory.

Connection material (keys, socket paths, carrier tokens) lives only in these
directories, so only the host's user can reach it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..._waiting import wait_uncancelled
from ..config import KernelRuntimeConfig
from ..confine.sandbox import kernel_ids
from . import removal

if TYPE_CHECKING:
    from ..confine.caps import KernelCaps

_log = logging.getLogger("dsh_jupyter.kernel.workspace")  # the name docs/security.md gives

SEED_HOME = "seed-home"
"""The directory of a runtime's directory whose files each workspace's HOME starts with."""
KERNEL_ROOT = "/workspace"
"""Where a confined kernel sees its own directories."""
READY_POLL_SECONDS = 0.05
EXIT_POLL_SECONDS = 0.005


def create_runtime_directory() -> Path:
    """A new ``dsh-runtime-*`` directory (0700) in the temp root."""
    return Path(tempfile.mkdtemp(prefix="dsh-runtime-"))


def remove_tree(root: Path) -> None:
    """Remove ``root`` whatever a program left in it (any depth, locked directories,
    symlinks removed as links: see ``removal``). Never raises: what could not be removed
    is logged as a warning, not raised or warned, because closing a runtime must not fail
    on what a program did (and a warnings filter of "error" would make a warning raise).
    Idempotent."""
    left = removal.remove_tree(root)
    if left:
        _log.warning("could not remove all of %s: %s", root, "; ".join(left))


@dataclass(frozen=True, slots=True)
class KernelPaths:
    """A kernel's own directories, as the kernel sees them."""

    root: str
    home: str
    ipython_dir: str
    tmp: str
    cwd: str
    outputs: str

    @classmethod
    def under(cls, root: str) -> KernelPaths:
        home = f"{root}/home"
        return cls(root=root, home=home, ipython_dir=f"{home}/.ipython", tmp=f"{root}/tmp",
                   cwd=f"{root}/work", outputs=f"{root}/work/outputs")


class _Alive(Protocol):
    async def is_alive(self) -> bool: ...

    def exit_reason(self) -> str: ...


class Workspace:
    """One kernel's host directory and its own directories (see the module docstring).
    :meth:`remove` deletes it all; it is idempotent."""

    def __init__(self, root: Path, *, confined: bool = False) -> None:
        self.root = root
        self.confined = confined
        self.kernel = KernelPaths.under(KERNEL_ROOT if confined else str(root))
        self.connection_file = root / "kernel.json"
        self.confine_log = root / "confine.log"
        self.ready_file = root / "ready"
        self.seed_home = root.parent / SEED_HOME
        self._files: int | None = None
        self.caps: KernelCaps | None = None
        """The kernel's resource caps (set by the launcher; removed with the workspace)."""
        self.confiner_pid: int | None = None
        """The host PID of the process that confined the kernel (its root is the kernel's)."""
        self._ready: tuple[int, int] | None = None

    @classmethod
    def create(cls, parent: Path, *, confined: bool = False) -> Workspace:
        """A new workspace in ``parent`` (a runtime's directory). Unconfined, its
        directories are made here, HOME holding a copy of ``parent``'s :data:`SEED_HOME`
        (a confined kernel makes its own, see ``_confine``); confined, the ``ready``
        FIFO is made and opened."""
        workspace = cls(Path(tempfile.mkdtemp(prefix="dsh-kernel-", dir=parent)),
                        confined=confined)
        if confined:
            os.mkfifo(workspace.ready_file, 0o600)
            reader = os.open(workspace.ready_file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            # A writer of our own: the reader sees no end of file before the kernel writes.
            writer = os.open(workspace.ready_file, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            workspace._ready = (reader, writer)
            return workspace
        paths = workspace.kernel
        for directory in (paths.home, paths.ipython_dir, paths.tmp, paths.cwd):
            os.mkdir(directory, mode=0o700)
        _copy_seed(workspace.seed_home, Path(paths.home))
        return workspace

    def environment(self, config: KernelRuntimeConfig,
                    host: Mapping[str, str] | None = None) -> dict[str, str]:
        """The kernel's whole environment: allow-listed host variables, then our own."""
        env = scrubbed_environment(config, host)
        env.update({
            "HOME": self.kernel.home,
            "IPYTHONDIR": self.kernel.ipython_dir,
            "TMPDIR": "/tmp" if self.confined else self.kernel.tmp,
        })
        return env

    async def wait_confined(self, process: _Alive, seconds: float) -> None:
        """Wait until the confined kernel's root is built, then :meth:`attach` to it.
        Raises ``RuntimeError`` if the kernel dies first, ``TimeoutError`` past
        ``seconds``."""
        assert self._ready is not None, "not a confined workspace"
        reader = self._ready[0]
        loop = asyncio.get_running_loop()
        readable = asyncio.Event()
        loop.add_reader(reader, readable.set)
        lines: list[bytes] = []
        try:
            async with asyncio.timeout(seconds):
                while b"ready" not in lines:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(READY_POLL_SECONDS):
                            await readable.wait()
                    readable.clear()
                    with contextlib.suppress(BlockingIOError):
                        lines += os.read(reader, 4096).splitlines()
                    if b"ready" not in lines and not await process.is_alive():
                        raise RuntimeError(f"the kernel died while being confined: "
                                           f"{self.confine_error() or process.exit_reason()}")
        finally:
            loop.remove_reader(reader)
        pids = [int(line[4:]) for line in lines if line.startswith(b"pid ")]
        if len(pids) != 1:
            raise RuntimeError(f"the confined kernel said {lines!r}, not one pid")
        try:
            self.attach(pids[0])
        except OSError:  # its confiner has gone already: the kernel exited as it started
            for _ in range(int(seconds / EXIT_POLL_SECONDS)):  # its status is on its way
                if not await process.is_alive():
                    break
                await asyncio.sleep(EXIT_POLL_SECONDS)
            raise RuntimeError(process.exit_reason()) from None

    def attach(self, pid: int) -> None:
        """Hold the confined kernel's ``/workspace``, seen through the root of ``pid`` (the
        process that confined it, whose root became the kernel's)."""
        self._files = os.open(f"/proc/{pid}/root{KERNEL_ROOT}",
                              os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.confiner_pid = pid
        self._close_ready()

    @property
    def kernel_owner(self) -> tuple[int, int] | None:
        """The uid and gid a confined kernel runs as when they are not the host's (the host
        is root): what the host makes in the kernel's root must be theirs."""
        if not self.confined or os.geteuid() != 0:
            return None
        return kernel_ids()

    def host_path(self, kernel_path: str) -> str:
        """Where the host reaches one of the kernel's paths (a socket, a file)."""
        if not self.confined:
            return kernel_path
        if self._files is None:
            raise RuntimeError("the confined kernel's workspace is not attached yet")
        relative = os.path.relpath(kernel_path, KERNEL_ROOT)
        return f"/proc/self/fd/{self._files}/{relative}"

    def open_root(self) -> int:
        """A new directory descriptor on the kernel's root (see :class:`KernelPaths`)."""
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
        if not self.confined:
            return os.open(self.root, flags | os.O_NOFOLLOW)
        if self._files is None:
            raise FileNotFoundError("the confined kernel's workspace is not attached")
        return os.open(".", flags, dir_fd=self._files)

    def confine_error(self) -> str | None:
        """What ``_confine.enter`` wrote when it failed, if anything."""
        with contextlib.suppress(OSError):
            text = self.confine_log.read_text(encoding="utf-8", errors="replace").strip()
            return text or None
        return None

    def _close_ready(self) -> None:
        if self._ready is not None:
            for fd in self._ready:
                os.close(fd)
            self._ready = None

    def remove(self) -> None:
        """Let go of the kernel's files (a confined kernel's tmpfs is freed with the last
        reference) and remove the host directory."""
        self._close_ready()
        if self._files is not None:
            os.close(self._files)
            self._files = None
        if self.caps is not None:
            self.caps.remove()
        remove_tree(self.root)

    def usage(self) -> os.statvfs_result | None:
        """How full a confined kernel's ``/workspace`` is (``None`` unconfined: its files
        are on the host's disk)."""
        if not self.confined or self._files is None:
            return None
        try:
            return os.statvfs(f"/proc/self/fd/{self._files}")
        except OSError:
            return None


def _copy_seed(seed: Path, home: Path) -> None:
    """Copy the files under ``seed`` into ``home`` (contents only; a font list adds ~0.6 ms
    to a workspace's ~0.4 ms). A seed is a cache: a kernel works without it."""
    for directory, _subdirectories, files in os.walk(seed):
        target = home / os.path.relpath(directory, seed)
        with contextlib.suppress(OSError):
            target.mkdir(mode=0o700, exist_ok=True)
            for name in files:
                if not name.endswith(".partial"):  # being written: the next kernel gets it
                    shutil.copyfile(os.path.join(directory, name), target / name)


async def create_workspace(parent: Path, *, confined: bool = False) -> Workspace:
    """:meth:`Workspace.create` off the event loop (a busy disk takes milliseconds). If
    the caller is cancelled meanwhile, the thread is awaited and the directory removed
    before the cancellation goes on: nothing is left behind once this returns."""
    making = asyncio.ensure_future(asyncio.to_thread(Workspace.create, parent,
                                                       confined=confined))
    if await wait_uncancelled((making,)):
        if making.exception() is None:
            making.result().remove()  # a few empty directories: well under a millisecond
        raise asyncio.CancelledError
    return making.result()


def scrubbed_environment(config: KernelRuntimeConfig,
                         host: Mapping[str, str] | None = None) -> dict[str, str]:
    """Allow-listed host variables plus ``extra_env`` (HOME and co. come from a workspace)."""
    source = os.environ if host is None else host
    env = {k: v for k, v in source.items() if _allowed(k, config.env_allow)}
    env.update(config.extra_env)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _allowed(name: str, allow: tuple[str, ...]) -> bool:
    for pattern in allow:
        if pattern.endswith("*"):
            if name.startswith(pattern[:-1]):
                return True
        elif name == pattern:
            return True
    return False
