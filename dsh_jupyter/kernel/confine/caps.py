"""Resource caps of local kernels: memory, processes, workspace bytes and files.

Every local kernel of a runtime with a sandbox (``SandboxConfig``, the default) gets:

- **memory** (``memory_bytes``, 2 GiB): a memory cgroup of its own where one can be made
  (cgroup v1 as root; cgroup v2 as root or under a delegated ``cgroup_parent``; confined
  kernels only, as they join it while being confined), capped
  with no swap, which counts everything the kernel's processes hold (its tmpfs too); and
  in every case ``RLIMIT_DATA`` per process, so one allocation past the cap is a
  ``MemoryError`` the program can catch instead of a kill;
- **processes** (``max_processes``, 256 tasks, threads included): ``pids.max`` of a pids
  cgroup where one can be made, else ``RLIMIT_NPROC`` when the host is root (its kernels
  run as ``nobody``, so they share that count); a user's own kernels without a cgroup
  have no process cap (``RLIMIT_NPROC`` would count the user's other processes);
- **workspace** (``workspace_bytes``, 1 GiB; ``workspace_files``, 100,000): the size and
  inodes of a confined kernel's ``/workspace`` tmpfs; an unconfined kernel's files are
  the host's, so only ``RLIMIT_FSIZE`` (per file) holds there.

A run that fails after running into a cap fails with that cap's kind
(``memory-limit``, ``process-limit``, ``workspace-limit``, ``file-limit``) and one line
saying which cap and how to raise it (:meth:`KernelCaps.explain`): the cgroups' event
counters say what was hit during the run (an OOM kill, a refused fork), a full tmpfs
says itself, and without cgroups the program's own ``MemoryError`` does.

Where cgroups cannot be made :func:`cgroup_problem` says why (once per runtime, in the
same warning as the other missing walls, see ``sandbox``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...runtime import CodeRunFailure, CodeRunResult

if TYPE_CHECKING:
    from .sandbox import SandboxConfig

log = logging.getLogger(__name__)

GiB = 1024 * 1024 * 1024
CGROUP_PREFIX = "dsh-kernel-"
V2_PARENT = "dsh-kernels"
"""Where a root host puts its kernels' cgroups on cgroup v2 (under the hierarchy's root)."""
_CONTROLLERS = ("memory", "pids")


@dataclass(frozen=True, slots=True)
class CgroupParents:
    """Where kernel cgroups are made: one directory per controller (cgroup v1) or one for
    both (v2)."""

    version: int
    memory: Path
    pids: Path


@functools.cache
def find_cgroup_parents(delegated: str | None = None) -> CgroupParents | str:
    """Where this process may make kernel cgroups with a memory and a pids controller, or
    why it may not (looked up once per process)."""
    if delegated is not None:
        return _v2_parent(Path(delegated), create=False)
    v1, v2 = _cgroup_mounts()
    own = _own_cgroups()
    if all(name in v1 for name in _CONTROLLERS):
        parents = {name: _under(v1[name], own.get(name, "/")) for name in _CONTROLLERS}
        problems = [why for why in map(_writable, parents.values()) if why]
        if not problems:
            return CgroupParents(1, parents["memory"], parents["pids"])
        return f"cgroup v1 memory and pids are not writable here ({problems[0]})"
    if v2 is None:
        return "no cgroup hierarchy with memory and pids controllers is mounted"
    if os.geteuid() != 0:
        return ("cgroup v2 is not delegated to this user: pass SandboxConfig(cgroup_parent=...) "
                "naming a delegated cgroup (systemd-run --user -p Delegate=yes ...)")
    return _v2_parent(v2 / V2_PARENT, create=True)


def _cgroup_mounts() -> tuple[dict[str, Path], Path | None]:
    """The cgroup v1 mount of each controller we use, and the cgroup v2 mount."""
    v1: dict[str, Path] = {}
    v2: Path | None = None
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8") as file:
        for line in file:
            fields = line.split()
            dash = fields.index("-")
            fstype, options = fields[dash + 1], fields[dash + 3].split(",")
            point = Path(fields[4].encode().decode("unicode_escape"))
            if fstype == "cgroup2" and v2 is None:
                v2 = point
            elif fstype == "cgroup":
                for name in _CONTROLLERS:
                    if name in options and fields[3] == "/":
                        v1.setdefault(name, point)
    return v1, v2


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup", encoding="utf-8") as file:
        for line in file:
            _, names, path = line.rstrip("\n").split(":", 2)
            for name in names.split(","):
                if name:
                    found[name] = path
    return found


def _under(mount: Path, path: str) -> Path:
    return mount / path.lstrip("/")


def _writable(parent: Path) -> str | None:
    probe = parent / f"{CGROUP_PREFIX}probe-{secrets.token_hex(4)}"
    try:
        probe.mkdir()
    except OSError as error:
        return f"{parent}: {error.strerror}"
    with contextlib.suppress(OSError):
        probe.rmdir()
    return None


def _v2_parent(parent: Path, *, create: bool) -> CgroupParents | str:
    try:
        if create:
            root = parent.parent
            _enable(root)
            parent.mkdir(exist_ok=True)
        _enable(parent)
        problem = _writable(parent)
    except OSError as error:
        return f"cgroup v2 at {parent} cannot hold kernel cgroups ({error.strerror})"
    if problem is not None:
        return f"cgroup v2 at {parent} cannot hold kernel cgroups ({problem})"
    return CgroupParents(2, parent, parent)


def _enable(directory: Path) -> None:
    """``+memory +pids`` in ``directory``'s subtree_control (for its children)."""
    wanted = [name for name in _CONTROLLERS
              if name not in (directory / "cgroup.subtree_control").read_text().split()]
    if wanted:
        (directory / "cgroup.subtree_control").write_text(" ".join(f"+{n}" for n in wanted))


def cgroup_problem(delegated: str | None = None) -> str | None:
    """Why kernels get no cgroups here, or ``None``."""
    found = find_cgroup_parents(delegated)
    return found if isinstance(found, str) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class CapSettings:
    """What one runtime caps (from its ``SandboxConfig``)."""

    memory_bytes: int | None
    max_processes: int | None
    address_space_bytes: int | None = None
    """``KernelRuntimeConfig.memory_bytes`` (RLIMIT_AS), when set: named when it is the
    tighter cap a ``MemoryError`` ran into."""
    workspace_bytes: int
    workspace_files: int
    confined: bool
    cgroup_parent: str | None = None


RUNTIME_PREFIX = "dsh-runtime-"


class RuntimeCgroups:
    """One runtime's cgroup directories (``dsh-runtime-<host pid>-<token>``, one per
    hierarchy), which its kernels' cgroups go in. :meth:`remove` deletes them with
    whatever kernel cgroups are left (the fork server does too, should the host die);
    opening one first removes those of runtimes whose host is gone."""

    def __init__(self, parents: CgroupParents, directories: list[Path]) -> None:
        self.parents = parents
        self.directories = directories

    @classmethod
    def open(cls, delegated: str | None) -> RuntimeCgroups | None:
        """The runtime's directories, or ``None`` where cgroups cannot be made here."""
        found = find_cgroup_parents(delegated)
        if isinstance(found, str):
            return None
        name = f"{RUNTIME_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        made: list[Path] = []
        try:
            for parent in dict.fromkeys((found.memory, found.pids)):
                _sweep_stale(parent)
                (parent / name).mkdir()
                made.append(parent / name)
                if found.version == 2:
                    _enable(parent / name)
        except OSError as error:
            log.warning("runtime cgroups could not be made (%s): rlimits only", error)
            remove_cgroup_trees(made)
            return None
        memory = made[0]
        return cls(CgroupParents(found.version, memory, made[-1]), made)

    def remove(self) -> None:
        remove_cgroup_trees(self.directories)
        self.directories = []


def remove_cgroup_trees(directories: list[Path]) -> None:
    """Remove each cgroup directory after the cgroups in it (all empty of processes by
    now; a cgroup is retried for a second while its last processes are reaped)."""
    for directory in directories:
        with contextlib.suppress(OSError):
            for child in directory.iterdir():
                if child.is_dir():
                    _rmdir(child)
        _rmdir(directory)


def _rmdir(directory: Path, *, attempts: int = 20) -> None:
    for attempt in range(attempts):
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if attempt == attempts - 1:
                log.warning("cgroup %s not removed: %s", directory, error.strerror)
            time.sleep(0.05)


def _sweep_stale(parent: Path) -> None:
    """The cgroups of runtimes whose host process is gone (killed outright): any process
    still in them is a kernel of that host's, left running, so it is killed first."""
    for entry in parent.glob(f"{RUNTIME_PREFIX}*"):
        pid = entry.name[len(RUNTIME_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        for procs in entry.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                for line in procs.read_text().split():
                    os.kill(int(line), signal.SIGKILL)
        remove_cgroup_trees([entry])


class KernelCaps:
    """One kernel's caps: its cgroups (if any), the rlimits its processes start with, and
    the classification of a failed run (:meth:`explain`). :meth:`remove` deletes the
    cgroups once the kernel's processes are gone; it is idempotent."""

    def __init__(self, settings: CapSettings, cgroups: RuntimeCgroups | None = None) -> None:
        self.settings = settings
        self.cgroups: list[Path] = []
        self._memory: Path | None = None
        self._pids: Path | None = None
        # A kernel joins its cgroups as it is confined (see _confine): an unconfined one
        # gets the rlimits only.
        if cgroups is not None and settings.confined:
            self._make(cgroups.parents)

    def _make(self, parents: CgroupParents) -> None:
        name = f"{CGROUP_PREFIX}{secrets.token_hex(6)}"
        settings = self.settings
        try:
            memory = parents.memory / name
            memory.mkdir()
            self.cgroups.append(memory)
            if parents.pids != parents.memory:
                pids = parents.pids / name
                pids.mkdir()
                self.cgroups.append(pids)
            else:
                pids = memory
            if settings.memory_bytes is not None:
                if parents.version == 1:
                    (memory / "memory.limit_in_bytes").write_text(str(settings.memory_bytes))
                    with contextlib.suppress(OSError):  # only with swap accounting
                        (memory / "memory.memsw.limit_in_bytes").write_text(
                            str(settings.memory_bytes))
                else:
                    (memory / "memory.max").write_text(str(settings.memory_bytes))
                    with contextlib.suppress(OSError):
                        (memory / "memory.swap.max").write_text("0")
                    with contextlib.suppress(OSError):  # an OOM kill takes the whole kernel
                        (memory / "memory.oom.group").write_text("1")
                self._memory = memory
            if settings.max_processes is not None:
                (pids / "pids.max").write_text(str(settings.max_processes))
                self._pids = pids
        except OSError as error:
            log.warning("kernel cgroups could not be set up (%s): rlimits only", error)
            self.remove()

    @property
    def rlimits(self) -> dict[str, int]:
        """The resource limits each of the kernel's processes starts with (the launchers'
        names: ``data``, ``nproc``, ``fsize``)."""
        settings = self.settings
        limits: dict[str, int] = {}
        if settings.memory_bytes is not None:
            limits["data"] = settings.memory_bytes
        if settings.max_processes is not None and self._pids is None and os.geteuid() == 0:
            limits["nproc"] = settings.max_processes
        if not settings.confined:
            limits["fsize"] = settings.workspace_bytes
        return limits

    def counters(self) -> tuple[int, int]:
        """(OOM kills, refused forks) so far: compared before and after a run."""
        return self._oom_kills(), self._refused_forks()

    def _oom_kills(self) -> int:
        if self._memory is None:
            return 0
        for name in ("memory.events", "memory.oom_control"):
            value = _field(self._memory / name, "oom_kill")
            if value is not None:
                return value
        return 0

    def _refused_forks(self) -> int:
        if self._pids is None:
            return 0
        return _field(self._pids / "pids.events", "max") or 0

    def explain(self, result: CodeRunResult, before: tuple[int, int],
                workspace: os.statvfs_result | None) -> CodeRunResult:
        """``result`` with its failure replaced by the cap the run ran into, if one did."""
        failure = result.failure
        if failure is None:
            return result
        oom, refused = (now - then for now, then in zip(self.counters(), before, strict=True))
        last = failure.message.strip().splitlines()[-1] if failure.message.strip() else ""
        settings = self.settings
        cap: CodeRunFailure | None = None
        if settings.memory_bytes is not None and (oom > 0 or last.startswith("MemoryError")):
            limit, name = settings.memory_bytes, "SandboxConfig.memory_bytes"
            space = settings.address_space_bytes
            if oom == 0 and space is not None and space < limit:
                limit, name = space, "KernelRuntimeConfig.memory_bytes"
            cap = CodeRunFailure(kind="memory-limit", message=(
                f"the program ran out of memory: its kernel may use {_size(limit)} ({name})"))
        elif settings.max_processes is not None and (
                refused > 0 or "can't start new thread" in last  # stacks count as memory too
                or (self._pids is None and last.startswith("BlockingIOError: [Errno 11]"))):
            cap = CodeRunFailure(kind="process-limit", message=(
                f"the program started too many processes or threads: its kernel may run "
                f"{settings.max_processes} (SandboxConfig.max_processes)"))
        elif workspace is not None and workspace.f_favail == 0:
            cap = CodeRunFailure(kind="file-limit", message=(
                f"the program made too many files: its workspace holds "
                f"{settings.workspace_files:,} (SandboxConfig.workspace_files)"))
        elif workspace is not None and workspace.f_bavail == 0:
            cap = CodeRunFailure(kind="workspace-limit", message=(
                f"the program filled its workspace: {_size(settings.workspace_bytes)} "
                f"(SandboxConfig.workspace_bytes)"))
        if cap is None:
            return result
        if last and failure.kind == "exception":
            cap = CodeRunFailure(kind=cap.kind, message=f"{cap.message}; {last}")
        return dataclasses.replace(result, failure=cap)

    def remove(self) -> None:
        """Delete the kernel's cgroups (its processes are gone; a cgroup still busy a
        moment after is retried for a second, then logged)."""
        for directory in reversed(self.cgroups):
            _rmdir(directory)
        self.cgroups = []
        self._memory = self._pids = None


def _field(path: Path, key: str) -> int | None:
    """``key``'s number in a flat-keyed cgroup file (``oom_kill 3``), or ``None``."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def _size(count: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", 1024 * 1024), ("KiB", 1024)):
        if count >= size and count % size == 0:
            return f"{count // size} {unit}"
    return f"{count:,} bytes"


def new_caps(sandbox: SandboxConfig | None, *, confined: bool,
             cgroups: RuntimeCgroups | None,
             address_space_bytes: int | None = None) -> KernelCaps | None:
    """A new kernel's caps under ``sandbox`` (a runtime's ``config.confinement``, applied
    even where the kernel cannot be confined: its rlimits), its cgroups in ``cgroups``;
    ``None`` without a sandbox (``sandbox=None``)."""
    if sandbox is None:
        return None
    return KernelCaps(CapSettings(
        memory_bytes=sandbox.memory_bytes, max_processes=sandbox.max_processes,
        workspace_bytes=sandbox.workspace_bytes, workspace_files=sandbox.workspace_files,
        confined=confined, cgroup_parent=sandbox.cgroup_parent,
        address_space_bytes=address_space_bytes), cgroups)
