"""Private directories: one per runtime, one per kernel inside it, and the scrubbed
environment that points into a kernel's.

::

    dsh-runtime-XXXX/        0700, made when a runtime is entered, removed when it closes
        seed-home/           files every kernel's HOME starts with (a copy of each;
                             matplotlib's font list, see ``fontcache``)
        dsh-kernel-XXXX/     0700, one kernel's workspace (its root)
            kernel.json      a stock launch's connection file, removed once the kernel is ready
            zmq-*            the kernel's IPC sockets;  tools.sock: the socket carrier
            confine.log      why confinement failed, if it did
            home/            HOME (IPYTHONDIR inside)
            tmp/             TMPDIR (and /tmp when confined)
            work/            the working directory

Connection material (keys, socket paths, carrier tokens) lives only here, so
only the host's user can reach it; a confined kernel sees its own workspace and
nothing else of the host's file system (see ``sandbox``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .._waiting import wait_uncancelled
from . import removal
from .config import KernelRuntimeConfig

_log = logging.getLogger(__name__)

SEED_HOME = "seed-home"
"""The directory of a runtime's directory whose files each workspace's HOME starts with."""


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


class Workspace:
    """One kernel's directory (see the module docstring). :meth:`remove` deletes it all;
    it is idempotent."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.ipython_dir = self.home / ".ipython"
        self.tmp = root / "tmp"
        self.cwd = root / "work"
        self.connection_file = root / "kernel.json"
        self.confine_log = root / "confine.log"

    @classmethod
    def create(cls, parent: Path) -> Workspace:
        """A new workspace in ``parent`` (a runtime's directory), its HOME holding a copy
        of ``parent``'s :data:`SEED_HOME`, if there is one."""
        workspace = cls(Path(tempfile.mkdtemp(prefix="dsh-kernel-", dir=parent)))
        for directory in (workspace.home, workspace.ipython_dir, workspace.tmp, workspace.cwd):
            directory.mkdir(mode=0o700)
        _copy_seed(parent / SEED_HOME, workspace.home)
        return workspace

    def environment(self, config: KernelRuntimeConfig,
                    host: Mapping[str, str] | None = None) -> dict[str, str]:
        """The kernel's whole environment: allow-listed host variables, then our own."""
        env = scrubbed_environment(config, host)
        env.update({
            "HOME": str(self.home),
            "IPYTHONDIR": str(self.ipython_dir),
            "TMPDIR": str(self.tmp),
        })
        return env

    def confine_error(self) -> str | None:
        """What ``_confine.enter`` wrote when it failed, if anything."""
        with contextlib.suppress(OSError):
            text = self.confine_log.read_text(encoding="utf-8", errors="replace").strip()
            return text or None
        return None

    def remove(self) -> None:
        remove_tree(self.root)


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


async def create_workspace(parent: Path) -> Workspace:
    """:meth:`Workspace.create` off the event loop (a busy disk takes milliseconds). If
    the caller is cancelled meanwhile, the thread is awaited and the directory removed
    before the cancellation goes on: nothing is left behind once this returns."""
    making = asyncio.ensure_future(asyncio.to_thread(Workspace.create, parent))
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
