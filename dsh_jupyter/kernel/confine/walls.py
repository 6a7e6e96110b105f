"""The walls behind a confined kernel's namespaces that this machine may lack: the syscall
filter (libseccomp), Landlock, and cgroups for the resource caps. A runtime checks them
once when it is entered: it warns (:class:`~.sandbox.MissingWallWarning`) naming each one
missing and what holds instead, or, with ``sandbox="required"``, refuses to run."""

from __future__ import annotations

import os
from collections.abc import Mapping

from .caps import cgroup_problem
from .sandbox import SandboxConfig, landlock_abi
from .seccomp import filter_problem

WALLS = ("syscall filter", "Landlock", "cgroups")
"""The walls :func:`missing_walls` checks, besides the namespaces themselves."""


def missing_walls(sandbox: SandboxConfig) -> dict[str, str]:
    """The walls this machine cannot give confined kernels, each with why and what holds
    instead (empty: all of them)."""
    missing: dict[str, str] = {}
    problem = filter_problem()
    if problem is not None:
        missing["syscall filter"] = f"{problem}; the namespaces and dropped capabilities hold"
    if landlock_abi() == 0:
        missing["Landlock"] = ("this Linux has no Landlock (5.13 or newer, with landlock in "
                               "its LSM list); the mount namespace holds")
    if sandbox.memory_bytes is not None or sandbox.max_processes is not None:
        problem = cgroup_problem(sandbox.cgroup_parent)
        if problem is not None:
            fallback = ("per-process rlimits hold memory" + (
                " and processes" if os.geteuid() == 0 else
                "; processes are not capped"))
            missing["cgroups"] = f"{problem}; {fallback}"
    return missing


def missing_walls_message(missing: Mapping[str, str], *, required: bool = False) -> str:
    said = "; ".join(f"no {wall}: {why}" for wall, why in missing.items())
    if required:
        return (f"sandbox='required' refuses to run kernels without every wall: {said} "
                "(see docs/security.md)")
    return (f"dsh-jupyter kernels are confined, but without every wall: {said}. Pass "
            "sandbox='required' to refuse, or see docs/security.md.")
