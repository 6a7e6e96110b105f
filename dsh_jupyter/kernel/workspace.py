"""A per-kernel temporary directory and the scrubbed environment that points into it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .config import KernelRuntimeConfig


class Workspace:
    """``root/`` (0700) holds the connection file, ``home/`` (HOME, with IPYTHONDIR inside),
    ``tmp/`` (TMPDIR) and ``work/`` (the kernel's working directory). :meth:`remove`
    deletes it all; it is idempotent."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.ipython_dir = self.home / ".ipython"
        self.tmp = root / "tmp"
        self.cwd = root / "work"
        self.connection_file = root / "kernel.json"

    @classmethod
    def create(cls) -> Workspace:
        workspace = cls(Path(tempfile.mkdtemp(prefix="dsh-kernel-")))
        for directory in (workspace.home, workspace.ipython_dir, workspace.tmp, workspace.cwd):
            directory.mkdir(mode=0o700)
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

    def remove(self) -> None:
        # A program may have made files read-only or directories unreadable.
        def make_writable_and_retry(function: object, path: str, _error: object) -> None:
            try:
                os.chmod(os.path.dirname(path), 0o700)
                if os.path.isdir(path) and not os.path.islink(path):
                    os.chmod(path, 0o700)
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            except OSError:
                pass

        shutil.rmtree(self.root, onerror=make_writable_and_retry)


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
