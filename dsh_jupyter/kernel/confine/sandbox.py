"""Confinement of local kernels: on by default where Linux namespaces allow it.

::

    KernelRuntimeConfig()                                   # sandbox="auto": confined here
    KernelRuntimeConfig(sandbox="required")                 # refuse to run unconfined
    KernelRuntimeConfig(sandbox=SandboxConfig(network=True, cpu_seconds=120))
    KernelRuntimeConfig(sandbox=None)                       # unconfined, no warning

A confined kernel (forked or stock-launched; see ``_confine/`` for how) runs
in its own user, mount, IPC, PID and network namespaces:

- **files:** a new root holding the system (``/usr``, ``/etc``, ...) and the
  kernel's Python installation read-only, its own workspace read-write (HOME,
  TMPDIR, the working directory; ``/tmp`` is the workspace's temp), a minimal
  ``/dev``; no other workspace, no host home, no host ``/tmp``;
- **processes:** its own ``/proc``; nothing outside its namespace can be seen,
  signalled or read (``/proc/<pid>/mem``, ``environ``), and whatever it starts
  dies with it;
- **network:** only a loopback of its own, unless ``network=True``;
- **privileges:** none (no capability, ``no_new_privs``), so nothing it does
  can undo the above.

Where user namespaces are unavailable (not Linux, or a container that forbids
them), ``"auto"`` runs kernels unconfined and warns once per runtime with what
is exposed (see ``docs/security.md``); ``"required"`` fails instead.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ...errors import DshWarning

CONFINE_PACKAGE = Path(__file__).parent / "_confine"
"""The confiner: a standard-library package the keeper and the fork server load by path."""

SandboxSetting = Literal["auto", "required"]
UNPRIVILEGED_IDS = (65534, 65534)
"""The uid and gid (``nobody``, ``nogroup``) of confined kernels when the host runs as root."""
KERNEL_HOSTNAME = "dsh-kernel"
"""The host name a confined kernel sees (its own UTS namespace)."""
MiB = 1024 * 1024
GiB = 1024 * MiB

UNCONFINED_EXPOSURE = (
    "a program can read and write every file this user can (other runs' workspaces "
    "and connection files included), reach the network and the host's loopback "
    "services, and see and signal the host's processes"
)
RESTRICTED_EXPOSURE = (
    "a program runs as this user in the host's namespaces: it can see the host's "
    "processes and, unless Landlock scopes them (Linux 6.12), signal them; reach the "
    "network over UDP (over TCP too, unless Landlock covers it: Linux 6.7, network=False) "
    "and the host's loopback; its files are the system's, read-only, and its own "
    "directory (Landlock), or everything this user can reach where Linux has no Landlock"
)


class UnconfinedWarning(DshWarning):
    """Kernels run without confinement (once per runtime; the message says why)."""


class MissingWallWarning(UnconfinedWarning):
    """Kernels are confined, but this machine lacks one of the walls behind the namespaces
    (a syscall filter, Landlock, cgroups): once per runtime, naming each and what takes
    its place."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxConfig:
    """What a confined kernel may reach beyond its own workspace.

    - ``required``: fail (``CodeModeError`` on entering the runtime) instead of
      running unconfined where confinement is unavailable.
    - ``network``: keep the host's network (default: a private loopback only).
    - ``read_only_paths``: more host paths the kernel may read (a data set, a
      second Python installation); they appear at the same place.
    - ``namespaces``: confine kernels in namespaces (the default); ``False`` gives them
      only the walls that need none (the syscall filter, Landlock, rlimits), as where
      user namespaces are unavailable, without a warning.
    - ``cpu_seconds``: ``RLIMIT_CPU`` of each kernel process (SIGXCPU at the
      limit, SIGKILL a second later); applies confined or not.
    - ``workspace_bytes`` / ``workspace_files``: the size of the kernel's
      ``/workspace`` (a tmpfs: HOME, ``/tmp``, the working directory) and how many
      files it may hold.
    - ``memory_bytes``: what the kernel's processes may hold together (a memory cgroup
      where one can be made, else per process) and each process's ``RLIMIT_DATA``;
      ``None``: no memory cap.
    - ``max_processes``: processes and threads the kernel may run at once (a pids
      cgroup, or ``RLIMIT_NPROC`` on a root host); ``None``: no cap.
    - ``cgroup_parent``: a cgroup v2 directory delegated to this user (with ``memory``
      and ``pids`` in its ``cgroup.subtree_control``) to make kernel cgroups in; found
      by itself when the host is root (see ``caps``).

    Running into a cap fails the run with its own kind (``memory-limit``,
    ``process-limit``, ``workspace-limit``, ``file-limit``).
    """

    required: bool = False
    namespaces: bool = True
    network: bool = False
    read_only_paths: tuple[str, ...] = ()
    cpu_seconds: int | None = None
    workspace_bytes: int = 1 * GiB
    workspace_files: int = 100_000
    memory_bytes: int | None = 2 * GiB
    max_processes: int | None = 256
    cgroup_parent: str | None = None

    def __post_init__(self) -> None:
        for name in ("required", "namespaces", "network"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False")
        paths: object = self.read_only_paths
        if isinstance(paths, str) or not isinstance(paths, tuple | list) or not all(
                isinstance(p, str) and p.startswith("/") and p != "/" for p in paths):
            raise ValueError("read_only_paths must be a tuple of absolute paths other than '/'")
        object.__setattr__(self, "read_only_paths", tuple(os.path.normpath(p) for p in paths))
        seconds = self.cpu_seconds
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)
                                    or seconds < 1):
            raise ValueError(f"cpu_seconds must be an int >= 1 or None, not {seconds!r}")
        for name, minimum, optional in (("workspace_bytes", MiB, False),
                                        ("workspace_files", 64, False),
                                        ("memory_bytes", 256 * MiB, True),
                                        ("max_processes", 32, True)):
            value = getattr(self, name)
            if value is None and optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name} must be an int >= {minimum}"
                                 f"{' or None' if optional else ''}, not {value!r}")
        parent = self.cgroup_parent
        if parent is not None and (not isinstance(parent, str) or not parent.startswith("/")):
            raise ValueError(f"cgroup_parent must be an absolute path or None, not {parent!r}")


def resolve_sandbox(value: object) -> SandboxConfig | None:
    """``"auto"``/``"required"``/a :class:`SandboxConfig`/``None`` as a config or ``None``."""
    if value is None or isinstance(value, SandboxConfig):
        return value
    if value == "auto":
        return SandboxConfig()
    if value == "required":
        return SandboxConfig(required=True)
    raise ValueError(f"sandbox must be 'auto', 'required', a SandboxConfig or None, "
                     f"not {value!r}")


@functools.cache
def confinement_problem() -> str | None:
    """Why kernels cannot be confined on this machine, or ``None`` (probed once per
    process, in a throwaway child: ~50 ms)."""
    if not sys.platform.startswith("linux"):
        return f"kernel confinement needs Linux namespaces (this is {sys.platform})"
    try:
        done = subprocess.run([sys.executable, "-I", "-S", str(CONFINE_PACKAGE), "--probe"],
                              capture_output=True, timeout=30, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"the confinement probe did not run: {error}"
    if done.returncode == 0:
        return None
    said = (done.stdout or done.stderr).decode(errors="replace").strip().splitlines()
    return f"unprivileged user namespaces are unavailable ({said[-1] if said else done.returncode})"


def unconfined_message(problem: str) -> str:
    """The warning of a runtime whose kernels get no namespaces: they still get the
    syscall filter, Landlock and the caps' rlimits where this machine has them."""
    return (f"dsh-jupyter kernels run without namespaces: {problem}. They get only the "
            f"walls that need none (the syscall filter, Landlock, rlimits). Exposed: "
            f"{RESTRICTED_EXPOSURE}. Pass sandbox='required' to refuse, or "
            "SandboxConfig(namespaces=False) to accept this without a warning (see "
            "docs/security.md).")


def kernel_ids() -> tuple[int, int]:
    """The host uid and gid a confined kernel runs as: the host's own, or, when the host
    runs as root, :data:`UNPRIVILEGED_IDS` (host root is never mapped into a kernel)."""
    if os.geteuid() == 0:
        return UNPRIVILEGED_IDS
    return os.getuid(), os.getgid()


@functools.cache
def landlock_abi() -> int:
    """The Landlock ABI version this Linux offers; 0 where it has none (or it is off)."""
    if not sys.platform.startswith("linux"):
        return 0
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION): 444 everywhere.
    return max(0, int(libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))))
