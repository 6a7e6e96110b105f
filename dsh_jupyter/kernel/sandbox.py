"""Optional confinement of local kernels: a CPU limit, no network, a read-only file system.

::

    config = KernelRuntimeConfig(
        sandbox=SandboxConfig(network=False, read_only_root=True, private_pids=True,
                              cpu_seconds=120),
        memory_bytes=2 * 1024**3, open_files=256,   # the other resource limits
    )

``cpu_seconds`` is an ``RLIMIT_CPU`` per kernel process (SIGXCPU at the limit,
SIGKILL a second later), applied by either launcher. Every other option runs
each kernel under bubblewrap (``bwrap``, not a Python dependency: ``apt-get
install bubblewrap``) in its own namespaces, so it needs the stock launch
(``launcher="auto"`` picks it) and a local kernel:

- ``network=False``: a private network namespace (only a loopback of its own);
  the kernel's channels move to IPC sockets in its workspace, which still work.
- ``read_only_root=True``: the whole file system read-only except the kernel's
  workspace (its HOME, TMPDIR and working directory); ``hide`` mounts empty
  directories over the paths it names.
- ``private_pids=True``: a PID namespace with a private ``/proc``: the kernel
  sees, and can signal, only its own processes, and everything left in the
  namespace dies with it.

What a confined kernel can still reach is in ``docs/reliability.md``: above all,
it runs as the host's user, and it can read every file that user can read unless
``hide`` covers it.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

BWRAP = "bwrap"


class SandboxUnavailable(Exception):
    """The sandbox asked for cannot be built on this machine (the message says why)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxConfig:
    """What a kernel may reach; the default confines nothing (see the module docstring)."""

    network: bool = True
    read_only_root: bool = False
    private_pids: bool = False
    hide: tuple[str, ...] = ()
    cpu_seconds: int | None = None

    def __post_init__(self) -> None:
        for name in ("network", "read_only_root", "private_pids"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False")
        hide: object = self.hide
        if not isinstance(hide, tuple | list) or not all(
                isinstance(p, str) and p.startswith("/") and p != "/" for p in hide):
            raise ValueError("hide must be a tuple of absolute paths other than '/'")
        object.__setattr__(self, "hide", tuple(hide))
        seconds = self.cpu_seconds
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)
                                    or seconds < 1):
            raise ValueError(f"cpu_seconds must be an int >= 1 or None, not {seconds!r}")

    @property
    def uses_namespaces(self) -> bool:
        """Whether kernels run under bubblewrap (every option but ``cpu_seconds``)."""
        return not self.network or self.read_only_root or self.private_pids or bool(self.hide)

    def bubblewrap_argv(self, workspace: Path) -> list[str]:
        """The command prefix that confines one kernel whose workspace is ``workspace``."""
        argv = [BWRAP, "--die-with-parent"]
        if not self.network:
            argv.append("--unshare-net")
        if self.private_pids:
            # ipykernel exits when its parent looks like init, which bwrap's is in the namespace.
            argv += ["--unshare-pid", "--unsetenv", "JPY_PARENT_PID"]
        argv += ["--ro-bind" if self.read_only_root else "--bind", "/", "/", "--dev", "/dev"]
        if self.private_pids:
            argv += ["--proc", "/proc"]
        for path in self.hide:
            argv += ["--tmpfs", path]
        root = str(workspace)
        argv += ["--bind", root, root, "--"]
        return argv


def check_available(sandbox: SandboxConfig) -> None:
    """Raise :class:`SandboxUnavailable` unless ``sandbox`` can be built here."""
    if sandbox.uses_namespaces:
        problem = bubblewrap_problem()
        if problem is not None:
            raise SandboxUnavailable(problem)


@functools.cache
def bubblewrap_problem() -> str | None:
    """Why bubblewrap cannot confine kernels on this machine, or ``None`` (probed once)."""
    path = shutil.which(BWRAP)
    if path is None:
        return "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    probe = [path, "--die-with-parent", "--unshare-net", "--unshare-pid", "--ro-bind", "/", "/",
             "--dev", "/dev", "--proc", "/proc", "--", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap did not run: {error}"
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip() or f"status {done.returncode}"
        return f"bubblewrap cannot create namespaces here: {detail}"
    return None
