"""Confinement of local kernels: on by default where Linux namespaces allow it.

::

    KernelRuntimeConfig()                                   # sandbox="auto": confined here
    KernelRuntimeConfig(sandbox="required")                 # refuse to run unconfined
    KernelRuntimeConfig(sandbox=SandboxConfig(network=True, cpu_seconds=120))
    KernelRuntimeConfig(sandbox=None)                       # unconfined, no warning

A confined kernel (forked or stock-launched; see ``_confine.py`` for how) runs
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
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import DshWarning
from .files import INPUTS_DIR, input_mounts
from .seccomp import build_filter

if TYPE_CHECKING:
    from .workspace import Workspace

CONFINE_SCRIPT = Path(__file__).parent / "_confine.py"
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
"""Host paths a confined kernel sees read-only (those that exist)."""

SandboxSetting = Literal["auto", "required"]
UNPRIVILEGED_IDS = (65534, 65534)
"""The uid and gid (``nobody``, ``nogroup``) of confined kernels when the host runs as root."""
KERNEL_HOSTNAME = "dsh-kernel"
"""The host name a confined kernel sees (its own UTS namespace)."""
GiB = 1024 * 1024 * 1024

UNCONFINED_EXPOSURE = (
    "a program can read and write every file this user can (other runs' workspaces "
    "and connection files included), reach the network and the host's loopback "
    "services, and see and signal the host's processes"
)


class UnconfinedWarning(DshWarning):
    """Kernels run without confinement (once per runtime; the message says why)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxConfig:
    """What a confined kernel may reach beyond its own workspace.

    - ``required``: fail (``CodeModeError`` on entering the runtime) instead of
      running unconfined where confinement is unavailable.
    - ``network``: keep the host's network (default: a private loopback only).
    - ``read_only_paths``: more host paths the kernel may read (a data set, a
      second Python installation); they appear at the same place.
    - ``cpu_seconds``: ``RLIMIT_CPU`` of each kernel process (SIGXCPU at the
      limit, SIGKILL a second later); applies confined or not.
    - ``workspace_bytes`` / ``workspace_files``: the size of the kernel's
      ``/workspace`` (a tmpfs: HOME, ``/tmp``, the working directory) and how many
      files it may hold.
    """

    required: bool = False
    network: bool = False
    read_only_paths: tuple[str, ...] = ()
    cpu_seconds: int | None = None
    workspace_bytes: int = 1 * GiB
    workspace_files: int = 100_000

    def __post_init__(self) -> None:
        for name in ("required", "network"):
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
        for name, minimum in (("workspace_bytes", 1024 * 1024), ("workspace_files", 64)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name} must be an int >= {minimum}, not {value!r}")


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
        done = subprocess.run([sys.executable, "-I", "-S", str(CONFINE_SCRIPT), "--probe"],
                              capture_output=True, timeout=30, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"the confinement probe did not run: {error}"
    if done.returncode == 0:
        return None
    said = (done.stdout or done.stderr).decode(errors="replace").strip().splitlines()
    return f"unprivileged user namespaces are unavailable ({said[-1] if said else done.returncode})"


def unconfined_message(problem: str) -> str:
    return (f"dsh-jupyter kernels run unconfined: {problem}. Exposed: {UNCONFINED_EXPOSURE}. "
            "Pass sandbox='required' to refuse, or sandbox=None to accept this without a "
            "warning (see docs/security.md).")


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


def kernel_ids() -> tuple[int, int]:
    """The host uid and gid a confined kernel runs as: the host's own, or, when the host
    runs as root, :data:`UNPRIVILEGED_IDS` (host root is never mapped into a kernel)."""
    if os.geteuid() == 0:
        return UNPRIVILEGED_IDS
    return os.getuid(), os.getgid()


def confinement_plan(sandbox: SandboxConfig, workspace: Workspace, *,
                     command: Sequence[str] = (),
                     inputs: Mapping[str, Path] | None = None) -> dict[str, Any]:
    """The plan ``_confine.enter`` carries out for one kernel (plain JSON). ``command``: a
    stock launch's kernel command; its interpreter and the files it names (a kernelspec's
    script, say) are readable too, and its connection file reaches the kernel through
    the keeper. Without it, the host's own interpreter. ``inputs`` are bound read-only
    under the kernel's ``work/inputs`` (see ``files``)."""
    host_dir = str(workspace.root)
    named = [arg for arg in command[1:] if os.path.isabs(arg) and os.path.isfile(arg)
             and not arg.startswith(host_dir)]
    static = _readable(sandbox, command[0] if command else None)
    paths = workspace.kernel
    uid, gid = kernel_ids()
    seed = workspace.seed_home
    plan: dict[str, Any] = {
        "uid": uid, "gid": gid, "network": sandbox.network, "hostname": KERNEL_HOSTNAME,
        "read_only": _outermost((*static, *named)) if named else list(static),
        "view": {"root": paths.root, "home": paths.home, "ipython_dir": paths.ipython_dir,
                 "tmp": paths.tmp, "cwd": paths.cwd, "outputs": paths.outputs},
        "workspace_bytes": sandbox.workspace_bytes, "workspace_files": sandbox.workspace_files,
        "seed_home": str(seed) if seed.is_dir() else None,
        "inputs_dir": f"{paths.cwd}/{INPUTS_DIR}" if inputs else None,
        "inputs": input_mounts(Path(paths.cwd), inputs) if inputs else [],
        "error_file": str(workspace.confine_log), "ready_file": str(workspace.ready_file),
    }
    if command:
        plan["connection_file"] = str(workspace.connection_file)
    built = build_filter()
    plan["seccomp"] = None if isinstance(built, str) else built.encoded
    plan["landlock"] = landlock_abi() > 0
    return plan


@functools.cache
def landlock_abi() -> int:
    """The Landlock ABI version this Linux offers; 0 where it has none (or it is off)."""
    if not sys.platform.startswith("linux"):
        return 0
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION): 444 everywhere.
    return max(0, int(libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))))


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
