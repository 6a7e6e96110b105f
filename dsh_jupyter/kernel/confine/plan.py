"""The confinement plan: what ``_confine.enter`` sets up for one kernel, as plain JSON.

The host builds it (here) and the fork server or the keeper hands it to ``_confine``,
which runs in the process that becomes the kernel: the paths the kernel may read, the
kernel's own directories as it sees them (``workspace``), its caps, the seccomp program
(``seccomp``), whether to add a Landlock ruleset, and where to report.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..run.files import INPUTS_DIR, input_mounts
from ..run.workspace import Workspace
from .sandbox import KERNEL_HOSTNAME, SandboxConfig, kernel_ids, landlock_abi
from .seccomp import build_filter

SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
"""Host paths a confined kernel sees read-only (those that exist)."""


def confinement_plan(sandbox: SandboxConfig, workspace: Workspace, *,
                     command: Sequence[str] = (),
                     inputs: Mapping[str, Path] | None = None,
                     cgroups: Sequence[Path] = ()) -> dict[str, Any]:
    """The plan ``_confine.enter`` carries out for one kernel (plain JSON). ``command``: a
    stock launch's kernel command; its interpreter and the files it names (a kernelspec's
    script, say) are readable too, and its connection file reaches the kernel through
    the keeper. Without it, the host's own interpreter. ``inputs`` are bound read-only
    under the kernel's ``work/inputs`` (see ``files``)."""
    paths = workspace.kernel
    uid, gid = kernel_ids()
    seed = workspace.seed_home
    plan: dict[str, Any] = {
        "uid": uid, "gid": gid, "network": sandbox.network, "hostname": KERNEL_HOSTNAME,
        "read_only": _read_only(sandbox, workspace, command),
        "view": {"root": paths.root, "home": paths.home, "ipython_dir": paths.ipython_dir,
                 "tmp": paths.tmp, "cwd": paths.cwd, "outputs": paths.outputs},
        "workspace_bytes": sandbox.workspace_bytes, "workspace_files": sandbox.workspace_files,
        "seed_home": str(seed) if seed.is_dir() else None,
        "inputs_dir": f"{paths.cwd}/{INPUTS_DIR}" if inputs else None,
        "inputs": input_mounts(Path(paths.cwd), inputs) if inputs else [],
        "error_file": str(workspace.confine_log), "ready_file": str(workspace.ready_file),
        "cgroups": [str(directory) for directory in cgroups],
    }
    if command:
        plan["connection_file"] = str(workspace.connection_file)
    return {**plan, **_walls()}


def restriction_plan(sandbox: SandboxConfig, workspace: Workspace, *,
                     command: Sequence[str] = ()) -> dict[str, Any]:
    """The plan ``_confine.restrict`` carries out for a kernel that cannot be confined (no
    user namespaces): the syscall filter and a Landlock ruleset over the host's own paths,
    the kernel's directory (``view.root``) its only writable place."""
    return {"network": sandbox.network, "read_only": _read_only(sandbox, workspace, command),
            "view": {"root": str(workspace.root)}, **_walls()}


def _read_only(sandbox: SandboxConfig, workspace: Workspace,
               command: Sequence[str]) -> list[str]:
    """The paths a kernel reads: the system, its interpreter (``command``'s, or the host's),
    the files a stock launch's command names, ``read_only_paths``."""
    host_dir = str(workspace.root)
    named = [arg for arg in command[1:] if os.path.isabs(arg) and os.path.isfile(arg)
             and not arg.startswith(host_dir)]
    static = _readable(sandbox, command[0] if command else None)
    return _outermost((*static, *named)) if named else list(static)


def _walls() -> dict[str, Any]:
    built = build_filter()
    return {"seccomp": None if isinstance(built, str) else built.encoded,
            "landlock": landlock_abi() > 0}


def interpreter_paths(executable: str | None = None) -> tuple[str, ...]:
    """The installation a kernel's interpreter needs (prefixes and their real paths)."""
    found: list[str] = []
    if executable is not None and not os.path.isabs(executable):
        executable = shutil.which(executable) or executable
    if executable is None:
        found += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
        executable = sys.executable
    for path in (executable, os.path.realpath(executable)):
        found.append(os.path.dirname(os.path.dirname(os.path.abspath(path))))
    return tuple(dict.fromkeys(os.path.normpath(p) for p in found if p and p != "/"))


@functools.lru_cache(maxsize=16)
def _readable(sandbox: SandboxConfig, executable: str | None) -> tuple[str, ...]:
    """The read-only paths a kernel needs that do not change from one kernel to the next
    (looked up once: the file system work stays off the start of every kernel)."""
    paths = (*SYSTEM_PATHS, *interpreter_paths(executable), *sandbox.read_only_paths)
    return tuple(_outermost(p for p in paths if os.path.lexists(p)))


def _outermost(paths: Iterable[str]) -> list[str]:
    """Paths without those inside another one (a read-only bind cannot hold a new one)."""
    kept: list[str] = []
    for path in sorted(set(paths), key=len):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept
