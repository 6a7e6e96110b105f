"""The reliability harness: registries on real kernel runtimes, event checks, leak accounting.

Imported by the tests; fixtures live in ``conftest.py``; ``bench/reliability.py`` runs them.

A *leak* is anything a run leaves behind once its runtime is closed (or, during a
soak, once the runtime's background cleanups are done): a process descending from
this one, or living in a kernel's workspace; a ``dsh-runtime-*`` or ``dsh-kernel-*``
directory in the temp root; an asyncio task; an open host end of a kernel channel (zmq sockets of
a ``KernelConnection``, a socket carrier); a file descriptor; a thread.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq
import zmq.utils.garbage as zmq_garbage

from dsh_jupyter import AbortSignal, ToolCall, ToolRegistry, ToolResult, ToolRunContext, define_tool
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.kernel.launch import proctree
from dsh_jupyter.kernel.run import removal
from dsh_jupyter.kernel.transport.carrier import SocketCarrier
from dsh_jupyter.kernel.transport.connection import KernelConnection
from dsh_jupyter.registry import ToolDefinition

SCALES = ("default", "short", "long")


def scale() -> str:
    """``DSH_RELIABILITY_SCALE``: ``default`` (plain pytest), ``short`` (CI), ``long`` (docs)."""
    value = os.environ.get("DSH_RELIABILITY_SCALE", "default")
    if value not in SCALES:
        raise ValueError(f"DSH_RELIABILITY_SCALE must be one of {SCALES}, not {value!r}")
    return value


def sized(default: int, short: int, long: int) -> int:
    return {"default": default, "short": short, "long": long}[scale()]


# --- tools and registries ------------------------------------------------------------------

Body = Callable[[Any, ToolRunContext], Awaitable[Any]]


def json_tool(name: str, body: Body, *, safe: bool = True) -> ToolDefinition:
    """A tool taking any object and returning any JSON; ``safe`` ones overlap."""
    return define_tool(name=name, description=f"{name} (reliability test tool)",
                       parameters={"type": "object"},
                       output={"schema": {}, "render": lambda _a, v: json.dumps(v)},
                       execute=body, is_concurrency_safe=(lambda _a: True) if safe else None)


async def echo_body(args: Any, _ctx: ToolRunContext) -> Any:
    return dict(args)


def code_registry(runtime: KernelRuntime, *tools: ToolDefinition,
                  max_parallel_sub_calls: int = 10) -> tuple[ToolRegistry, EventLog]:
    """A registry in code mode on ``runtime`` with ``tools``, and the log of its events."""
    registry = ToolRegistry(mode="code", code_runtime=runtime,
                            max_parallel_sub_calls=max_parallel_sub_calls)
    for tool in tools:
        registry.register(tool)
    log = EventLog()
    registry.on_event(log)
    return registry, log


async def run_code(registry: ToolRegistry, code: str, *, call_id: str = "run",
                   signal: AbortSignal | None = None) -> ToolResult:
    return await registry.execute(ToolCall(call_id=call_id, name="run_code", signal=signal,
                                           arguments={"code": code, "description": "test"}))


def returned_by(result: ToolResult) -> Any:
    """What the program returned (``result`` in run_code's value): JSON the test takes
    apart itself, hence ``Any``."""
    assert isinstance(result.value, dict), result
    return result.value["result"]


# --- events --------------------------------------------------------------------------------


@dataclass
class Settlement:
    """What the events of the runs said: sub-calls started and the code each settled with."""

    started: int
    codes: dict[str, str | None]
    results: dict[str, str | None]
    """Top-level call id -> its error code (``None``: success)."""


class EventLog:
    """An event sink that checks the settlement rules when asked."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: Any) -> None:
        self.events.append(dict(event))

    def take(self, call_id: str) -> EventLog:
        """Move the events of top-level call ``call_id`` (and its sub-calls) to a new log."""
        taken = EventLog()
        kept: list[dict[str, Any]] = []
        for event in self.events:
            mine = event["call_id"] == call_id or event.get("root_call_id") == call_id
            (taken.events if mine else kept).append(event)
        self.events = kept
        return taken

    def settlement(self) -> Settlement:
        """Check: every top-level call has one ``tool/call`` and one ``tool/result``; every
        started sub-call exactly one ``tool/code-dispatch`` after its start, and no settle
        without a start. Raises ``AssertionError`` naming each violation."""
        problems: list[str] = []
        seen: dict[tuple[str, str], list[int]] = {}
        for index, event in enumerate(self.events):
            seen.setdefault((event["kind"], event["call_id"]), []).append(index)
        results: dict[str, str | None] = {}
        codes: dict[str, str | None] = {}
        for (kind, call_id), where in seen.items():
            if kind == "tool/call":
                ended = seen.get(("tool/result", call_id), [])
                if len(where) != 1 or len(ended) != 1:
                    problems.append(f"{call_id}: {len(where)} call, {len(ended)} result events")
            elif kind == "tool/result":
                results[call_id] = (self.events[where[-1]].get("error") or {}).get("code")
            elif kind == "tool/code-dispatch-start":
                settles = seen.get(("tool/code-dispatch", call_id), [])
                if len(where) != 1 or len(settles) != 1:
                    problems.append(f"{call_id}: {len(where)} starts, {len(settles)} settles")
                elif settles[0] < where[0]:
                    problems.append(f"{call_id}: settled before it started")
                else:
                    codes[call_id] = (self.events[settles[0]].get("error") or {}).get("code")
            elif kind == "tool/code-dispatch" and ("tool/code-dispatch-start", call_id) not in seen:
                problems.append(f"{call_id}: settled but never started")
        assert not problems, "settlement rules broken: " + "; ".join(problems)
        started = sum(1 for kind, _ in seen if kind == "tool/code-dispatch-start")
        return Settlement(started=started, codes=codes, results=results)


# --- leaks ---------------------------------------------------------------------------------

EXECUTOR_THREAD_PREFIX = "asyncio_"  # the loop's default executor keeps idle threads
WORKSPACE_PATTERNS = ("dsh-runtime-*", "dsh-runtime-*/dsh-kernel-*")


@dataclass(frozen=True)
class Snapshot:
    processes: frozenset[int]
    strays: frozenset[int]
    temp_dirs: frozenset[str]
    tasks: int
    channels: int
    fds: int
    threads: int
    rss: int


def descendants() -> frozenset[int]:
    """Live (not zombie) descendants of this process."""
    return frozenset(s.pid for s in proctree.tree(os.getpid())[1:] if s.state != "Z")


def strays(temp_root: Path) -> frozenset[int]:
    """Live processes anywhere whose working directory is under ``temp_root`` (a daemon
    that escaped every tree still sits in the workspace it was started in)."""
    found: set[int] = set()
    root = str(temp_root)
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        if cwd == root or cwd.startswith(root + os.sep):
            stat = proctree.read_stat(int(name))
            if stat is not None and stat.state != "Z":
                found.add(int(name))
    return frozenset(found)


def marked(token: str) -> list[int]:
    """Live processes whose environment holds ``token`` (a program sets it before it
    spawns, so every descendant carries it, wherever it re-parented)."""
    needle = token.encode()
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as file:
                environ = file.read()
        except OSError:
            continue
        stat = proctree.read_stat(int(name))
        if needle in environ and stat is not None and stat.state != "Z":
            found.append(int(name))
    return found


def open_channels() -> int:
    """Host ends of kernel channels still open (zmq connections and socket carriers)."""
    gc.collect()
    return sum(1 for obj in gc.get_objects()
               if (isinstance(obj, KernelConnection) and not obj._closed)
               or (isinstance(obj, SocketCarrier) and not obj._writer.is_closing()))


def rss_bytes() -> int:
    with open("/proc/self/statm") as file:
        return int(file.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def thread_count() -> int:
    """OS threads of this process, minus the event loop's idle executor workers."""
    executor = sum(1 for t in threading.enumerate() if t.name.startswith(EXECUTOR_THREAD_PREFIX))
    return len(os.listdir("/proc/self/task")) - executor


def snapshot(temp_root: Path, *, channels: bool = True) -> Snapshot:
    current = asyncio.current_task()
    return Snapshot(
        processes=descendants(),
        strays=strays(temp_root),
        temp_dirs=frozenset(str(p.relative_to(temp_root)) for pattern in WORKSPACE_PATTERNS
                            for p in temp_root.glob(pattern)),
        tasks=sum(1 for t in asyncio.all_tasks() if t is not current),
        channels=open_channels() if channels else 0,
        fds=len(os.listdir("/proc/self/fd")),
        threads=thread_count(),
        rss=rss_bytes(),
    )


def describe(pids: frozenset[int]) -> str:
    """PIDs with their command line and parent, for a leak report."""
    described: list[str] = []
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                command = file.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            command = "?"
        stat = proctree.read_stat(pid)
        parent, state = (stat.ppid, stat.state) if stat is not None else ("?", "gone")
        described.append(f"{pid} [{command[:80]}] (parent {parent}, state {state})")
    return ", ".join(described)


def leaks(before: Snapshot, after: Snapshot) -> list[str]:
    """What ``after`` holds that ``before`` did not (RSS is reported, not judged, here)."""
    found: list[str] = []
    if extra := after.processes - before.processes:
        found.append(f"processes {describe(extra)}")
    if extra := after.strays - before.strays:
        found.append(f"processes in a workspace {describe(extra)}")
    if dirs := after.temp_dirs - before.temp_dirs:
        found.append(f"temp dirs {sorted(dirs)}")
    for name in ("tasks", "channels", "fds", "threads"):
        grown = getattr(after, name) - getattr(before, name)
        if grown > 0:
            found.append(f"{grown} {name}")
    if after.fds > before.fds:
        found.append(f"open fds now: {fd_targets()}")
    if after.threads > before.threads:
        found.append(f"threads now: {[t.name for t in threading.enumerate()]}")
    return found


def fd_targets() -> dict[str, int]:
    """What this process's file descriptors point at, counted (for a leak report)."""
    targets: Counter[str] = Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        targets[link.split(":[")[0] if ":[" in link else link] += 1
    return dict(targets)


async def settled_snapshot(temp_root: Path, before: Snapshot, *, seconds: float = 5.0,
                           channels: bool = True) -> Snapshot:
    """A snapshot once nothing more is leaking, or the last one after ``seconds`` (reaping a
    killed tree and closing a zmq socket are asynchronous, though quick)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        after = snapshot(temp_root, channels=channels)
        if not leaks(before, after) or loop.time() >= deadline:
            return after
        await asyncio.sleep(0.05)


async def none_marked(token: str, within: float = 3.0) -> bool:
    """Whether no process carries ``token`` (see :func:`marked`) within ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while marked(token):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def gone(pid: int, within: float = 5.0) -> bool:
    """Whether ``pid`` is dead (or a zombie) within ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        stat = proctree.read_stat(pid)
        if stat is None or stat.state == "Z":
            return True
        await asyncio.sleep(0.02)
    return False


@contextmanager
def temp_root() -> Iterator[Path]:
    """A private, short temp root for workspaces (unix socket paths stay short)."""
    root = Path(tempfile.mkdtemp(prefix="dshrel-"))
    saved = tempfile.tempdir
    tempfile.tempdir = str(root)
    try:
        yield root
    finally:
        tempfile.tempdir = saved
        removal.remove_tree(root)  # what a failed test left, whatever it is (not rmtree)


# --- the harness ---------------------------------------------------------------------------


def warm_up_zmq_garbage_collector() -> None:
    """pyzmq starts a process-wide garbage collector (a thread, a context, sockets) on the
    first zero-copy send of a large frame, and keeps it for the life of the process: start
    it before a baseline, so it does not count as a leak."""
    if zmq_garbage.gc.is_alive():
        return
    context = zmq.Context()
    sender, receiver = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    sender.bind("inproc://dsh-reliability-warm-up")
    receiver.connect("inproc://dsh-reliability-warm-up")
    sender.send(b"x" * (1 << 17), copy=False)
    receiver.recv()
    sender.close(linger=0)
    receiver.close(linger=0)
    context.term()


@dataclass
class Figures:
    """Counters a test adds to the suite's figures (kept only when the test passes,
    except ``leaks found``)."""

    counts: Counter[str] = field(default_factory=Counter)
    notes: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, amount: int = 1) -> None:
        self.counts[name] += amount


class Harness:
    """Runtimes and registries for one test, and the leak check at its end."""

    def __init__(self, root: Path, figures: Figures) -> None:
        self.root = root
        self.figures = figures
        self.runtimes: list[KernelRuntime] = []
        self.before: Snapshot | None = None
        self.finished = False

    def baseline(self) -> None:
        warm_up_zmq_garbage_collector()
        self.before = snapshot(self.root)

    async def runtime(self, **options: Any) -> KernelRuntime:
        """An entered runtime (``pool_size=0`` unless given), closed by :meth:`finish`."""
        config: dict[str, Any] = {"pool_size": 0}
        config.update(options)
        runtime = KernelRuntime(KernelRuntimeConfig(**config))
        await runtime.__aenter__()
        self.runtimes.append(runtime)
        return runtime

    async def registry(self, *tools: ToolDefinition, **options: Any
                       ) -> tuple[ToolRegistry, EventLog]:
        return code_registry(await self.runtime(**options), *tools)

    async def finish(self) -> list[str]:
        """Close every runtime, then return (and count) what leaked since the baseline."""
        self.finished = True
        for runtime in self.runtimes:
            await runtime.aclose()
        assert self.before is not None
        after = await settled_snapshot(self.root, self.before)
        found = leaks(self.before, after)
        self.figures.add("leaks found", len(found))
        return found


def kernelspec(root: Path, name: str, argv: list[str], **extra: Any) -> None:
    """Install a kernelspec under ``root`` (put ``root`` on ``JUPYTER_PATH``)."""
    spec_dir = root / "kernels" / name
    spec_dir.mkdir(parents=True)
    spec = {"argv": argv, "display_name": name, "language": "python", **extra}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))


STALLING_KERNEL = """\
import os, sys, time
where, argv = sys.argv[1], sys.argv[2:]
if where == "launch":
    open("starting", "w").close()
    time.sleep(120)
import comm
import ipykernel.ipkernel  # installs its own comm.create_comm: wrap that one
real = comm.create_comm

def never(*args, **kwargs):
    open("injecting", "w").close()
    time.sleep(120)
    return real(*args, **kwargs)

comm.create_comm = never
from ipykernel.kernelapp import IPKernelApp
IPKernelApp.launch_instance(argv=argv)
"""


def install_stalling_kernel(root: Path, name: str, where: str) -> None:
    """A kernelspec whose kernel stalls at ``where``: ``"launch"`` (it never answers) or
    ``"injection"`` (it answers but never opens the tools comm). On reaching the stall it
    creates the file ``starting`` or ``injecting`` in its working directory."""
    script = root / "stalling_kernel.py"
    script.write_text(STALLING_KERNEL)
    kernelspec(root, name, [sys.executable, str(script), where, "-f", "{connection_file}"])


async def reached(root: Path, marker: str, seconds: float = 30.0) -> None:
    """Wait until a kernel under ``root`` created ``marker`` in its working directory: on
    the host's disk (unconfined), or in a confined kernel's own ``/workspace`` (seen
    through the kernel process's ``/proc/<pid>/cwd``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not (list(root.glob(f"dsh-runtime-*/dsh-kernel-*/work/{marker}"))  # noqa: ASYNC240
               or _stalled_kernel_made(marker)):
        assert loop.time() < deadline, f"no kernel reached {marker!r}"
        await asyncio.sleep(0.01)


def _stalled_kernel_made(marker: str) -> bool:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                if b"stalling_kernel.py" not in file.read():
                    continue
            if os.path.exists(f"/proc/{pid}/cwd/{marker}"):
                return True
        except OSError:
            continue
    return False
