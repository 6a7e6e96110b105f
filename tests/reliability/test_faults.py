"""Faults under ``registry.execute(run_code)`` on real kernels: each ends with the right
failure, exactly one settle event per started sub-call, and nothing left behind."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from reliability_support import (
    Harness,
    echo_body,
    gone,
    install_stalling_kernel,
    json_tool,
    marked,
    none_marked,
    returned_by,
    rss_bytes,
    run_code,
    sized,
    strays,
)

from dsh_jupyter import ToolRunContext
from dsh_jupyter.kernel.launch import proctree
from dsh_jupyter.registry import ToolDefinition
from dsh_jupyter.runtime import FunctionBindings, RunRequest

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]

MiB = 1024 * 1024


class Hold:
    """``hold`` runs until its signal fires; ``started`` returns once ``hold``'s body runs,
    so a program that awaited ``started`` knows a sub-call's body is running on the host."""

    def __init__(self) -> None:
        self.holding = asyncio.Event()
        self.reasons: list[str | None] = []

    def tools(self) -> tuple[ToolDefinition, ...]:
        async def hold(_args: Any, ctx: ToolRunContext) -> str:
            self.holding.set()
            await ctx.signal.wait()
            self.reasons.append(ctx.signal.reason)
            return "released"

        async def started(_args: Any, _ctx: ToolRunContext) -> bool:
            await self.holding.wait()
            return True

        return json_tool("hold", hold), json_tool("started", started), json_tool("echo", echo_body)


HELD = {"run:code:1": None, "run:code:2": "ABORTED"}
"""The settle codes of a program that died :func:`during_a_sub_call`: ``started`` (sent first)
succeeded, ``hold`` ended when the run did."""


def during_a_sub_call(fault: str, prelude: str = "") -> str:
    return (f"{prelude}\npending = asyncio.ensure_future(tools.hold({{}}))\n"
            f"await tools.started({{}})\n{fault}\nreturn await pending\n")


async def still_works(harness: Harness, registry: Any) -> None:
    again = await run_code(registry, "return await tools.echo({'again': 1})", call_id="again")
    assert again.value == {"logs": [], "result": {"again": 1}}, again


DEATHS = {
    "exit": ("import os\nos._exit(3)", "kernel-exit", "exited with status 3", {}),
    "segfault": ("import ctypes\nctypes.string_at(0)", "kernel-exit", "SIGSEGV", {}),
    "sigkill": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "kernel-exit",
                "SIGKILL", {}),
    # Memory limits: the C stack (a deep C recursion overflows it), and RLIMIT_AS (the
    # program gets MemoryError, the kernel survives, and the run says which cap it was).
    "stack-overflow": ("import json, sys\nsys.setrecursionlimit(10**8)\n"
                       "json.loads('[' * 10**7 + ']' * 10**7)", "kernel-exit", "SIGSEGV", {}),
    "memory-limit": ("block = bytearray(4 * 1024**3)", "memory-limit",
                     "may use 1 GiB (KernelRuntimeConfig.memory_bytes); MemoryError",
                     {"memory_bytes": 1024 * MiB}),
}


@pytest.mark.parametrize("launcher", ["fork", "stock"])
@pytest.mark.parametrize("death", list(DEATHS))
async def test_kernel_dies_during_a_sub_call(harness: Harness, death: str,
                                             launcher: str) -> None:
    fault, kind, words, options = DEATHS[death]
    hold = Hold()
    registry, log = await harness.registry(*hold.tools(), launcher=launcher, **options)
    result = await run_code(registry, during_a_sub_call(fault))
    assert result.error is not None and result.error.code == "CODE_RUN_FAILED", result
    assert f"({kind})" in result.error.message and words in result.error.message
    settlement = log.settlement()
    assert settlement.codes == HELD
    assert hold.reasons == ["run_code settled"]
    await still_works(harness, registry)
    assert not await harness.finish()
    harness.figures.add("faults survived")


async def test_memory_limit_leaves_the_kernel_working(harness: Harness) -> None:
    hold = Hold()
    registry, log = await harness.registry(*hold.tools(), memory_bytes=1024 * MiB)
    program = """\
try:
    block = bytearray(4 * 1024**3)
except MemoryError:
    pass
return await tools.echo({"after": "MemoryError"})
"""
    result = await run_code(registry, program)
    assert result.value == {"logs": [], "result": {"after": "MemoryError"}}, result
    assert log.settlement().codes == {"run:code:1": None}
    assert not await harness.finish()
    harness.figures.add("faults survived")


@pytest.mark.parametrize("where", ["launch", "injection"])
async def test_kernel_never_becomes_ready(harness: Harness, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """A kernelspec whose kernel never answers, or answers but never opens the tools comm."""
    install_stalling_kernel(tmp_path, "dsh-rel-mute", where)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    hold = Hold()
    registry, log = await harness.registry(*hold.tools(), kernel_name="dsh-rel-mute",
                                           startup_seconds=1.5)
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await run_code(registry, "return await tools.echo({})")
    assert loop.time() - started < 10
    assert result.error is not None and result.error.code == "CODE_RUN_FAILED"
    assert "(kernel-exit)" in result.error.message
    assert "not ready within 1.5 s" in result.error.message
    assert log.settlement().started == 0
    assert not await harness.finish()
    harness.figures.add("faults survived")




async def test_kernel_ignores_sigint(harness: Harness) -> None:
    hold = Hold()
    registry, log = await harness.registry(*hold.tools(), wall_seconds=1.5,
                                           interrupt_grace_seconds=0.3)
    program = during_a_sub_call(
        "print('spinning', flush=True)\nwhile True:\n    pass",
        prelude="import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                "signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await run_code(registry, program)
    assert loop.time() - started < 10
    assert result.error is not None and "(timeout)" in result.error.message
    assert "spinning" in result.error.message  # output before the timeout is kept
    assert log.settlement().codes == HELD
    await still_works(harness, registry)
    assert not await harness.finish()
    harness.figures.add("faults survived")


FLOODS = {
    "stdout": "while True:\n    print('x' * 10_000)",
    "stderr": "import sys\nwhile True:\n    sys.stderr.write('e' * 10_000 + '\\n')",
    "one-line": "print('y' * 100_000_000)",
    "tiny-lines": "while True:\n    print('z')",
}


@pytest.mark.parametrize("flood", list(FLOODS))
async def test_output_flood_during_a_sub_call(harness: Harness, flood: str) -> None:
    hold = Hold()
    registry, log = await harness.registry(*hold.tools(), max_output_bytes=1 * MiB,
                                           wall_seconds=20)
    rss = rss_bytes()
    result = await run_code(registry, during_a_sub_call(FLOODS[flood]))
    grown = rss_bytes() - rss
    assert result.error is not None and "(output-limit)" in result.error.message, result
    assert log.settlement().codes == HELD
    assert grown < 128 * MiB, f"host RSS grew by {grown / MiB:.0f} MiB"
    harness.figures.notes[f"flood {flood}: host RSS growth (MiB)"] = round(grown / MiB, 1)
    await still_works(harness, registry)
    assert not await harness.finish()
    harness.figures.add("faults survived")


async def test_display_flood_is_bounded_by_the_wall_budget(harness: Harness) -> None:
    """Rich output is not program output (the host drops it), so only the wall budget
    stops an endless stream of it; the host's memory must stay flat meanwhile."""
    hold = Hold()
    registry, log = await harness.registry(*hold.tools(), wall_seconds=2.0)
    program = during_a_sub_call(
        "from IPython.display import display\n"
        "while True:\n    display({'text/plain': 'd' * 10_000}, raw=True)")
    rss = rss_bytes()
    result = await run_code(registry, program)
    grown = rss_bytes() - rss
    assert result.error is not None and "(timeout)" in result.error.message, result
    assert log.settlement().codes == HELD
    assert grown < 128 * MiB, f"host RSS grew by {grown / MiB:.0f} MiB"
    assert not await harness.finish()
    harness.figures.add("faults survived")


async def test_call_flood(harness: Harness) -> None:
    """Thousands of calls fired at once: each is answered, each started one settles once."""
    registry, log = await harness.registry(json_tool("echo", echo_body), max_pending_calls=256)
    program = """\
calls = [tools.echo({"i": i}) for i in range(2000)]
answers = await asyncio.gather(*calls, return_exceptions=True)
ok = sum(1 for i, a in enumerate(answers) if a == {"i": i})
refused = [str(a) for a in answers if isinstance(a, Exception)]
return {"ok": ok, "refused": len(refused), "why": sorted(set(refused))}
"""
    result = await run_code(registry, program)
    assert result.error is None, result
    value = returned_by(result)
    assert value["ok"] + value["refused"] == 2000
    assert all("too many calls in flight" in why for why in value["why"])
    settlement = log.settlement()
    assert settlement.started == value["ok"]
    assert set(settlement.codes.values()) == {None}
    assert not await harness.finish()
    harness.figures.add("faults survived")


DAEMONS = """\
import os, subprocess, sys, time
os.environ["DSH_REL_MARK"] = {token!r}
session = subprocess.Popen(["sleep", "60"], start_new_session=True)
double = subprocess.run(["sh", "-c", "setsid sleep 61 >/dev/null 2>&1 & echo $!"],
                        capture_output=True, text=True, check=True)
daemon = subprocess.Popen([sys.executable, "-c", '''
import os, signal, sys, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(sig, signal.SIG_IGN)
os.chdir("/")
print(os.getpid(), flush=True)
time.sleep(60)
'''], stdout=subprocess.PIPE, text=True)
daemon_pid = int(daemon.stdout.readline())
daemon.wait()
wanderer = os.fork()
if wanderer == 0:
    # A new PID every 20 ms: no PID list catches it; only a tree (or namespace) kill does.
    for _ in range(500):
        if os.fork():
            os._exit(0)
        os.setsid()
        time.sleep(0.02)
    os._exit(0)
pids = [session.pid, int(double.stdout), daemon_pid, wanderer]
print(pids, flush=True)
"""


@pytest.mark.parametrize("sandbox", ["auto", None], ids=["confined", "unconfined"])
@pytest.mark.parametrize("launcher", ["fork", "stock"])
@pytest.mark.parametrize("ending", ["returns", "dies", "times-out"])
async def test_daemons_die_with_their_run(harness: Harness, launcher: str, ending: str,
                                          sandbox: str | None) -> None:
    """Confined, the PID namespace ends with the kernel; unconfined, the tree kill under a
    subreaper catches everything. The printed PIDs are the host's only when unconfined;
    the environment marker finds the processes either way."""
    token = f"dsh-rel-{uuid.uuid4().hex}"
    hold = Hold()
    registry, log = await harness.registry(*hold.tools(), launcher=launcher, wall_seconds=3.0,
                                           sandbox=sandbox)
    fault = {"returns": "pending.cancel()\nreturn pids",
             "dies": "time.sleep(0.3)\nos._exit(1)",
             "times-out": "while True:\n    pass"}[ending]
    result = await run_code(registry, during_a_sub_call(fault, DAEMONS.format(token=token)))
    text = result.error.message if result.error is not None else str(result.value)
    printed = re.search(r"\[(\d+(?:, \d+)*)\]", text)
    assert printed is not None, result
    pids = [int(pid) for pid in printed.group(1).split(", ")]
    if ending == "returns":
        assert result.error is None, result
    else:
        assert result.error is not None
        assert ("(kernel-exit)" if ending == "dies" else "(timeout)") in result.error.message
    log.settlement()
    for pid in pids if sandbox is None else ():
        assert await gone(pid), f"process {pid} outlived its run"
    assert await none_marked(token), f"a daemon escaped: {marked(token)}"
    assert not await harness.finish()
    harness.figures.add("faults survived")


async def test_call_burst_loses_no_call(harness: Harness) -> None:
    """Regression: at zmq's default high-water mark the kernel's iopub dropped calls from a
    burst (about 3 % of 3,000 here), and the program waited for them until its wall budget."""
    seen: set[int] = set()

    async def slow_echo(args: Any) -> Any:
        seen.add(args["i"])
        await asyncio.sleep(0.05)  # the host falls behind the kernel
        return args

    runtime = await harness.runtime(max_pending_calls=10_000)
    program = """\
calls = [asyncio.ensure_future(tools.echo({"i": i})) for i in range(3000)]
done, pending = await asyncio.wait(calls, timeout=30)
return len(pending)
"""
    result = await runtime.run(RunRequest(program, FunctionBindings({"echo": slow_echo})))
    assert result.failure is None, result.failure
    assert (result.value, len(seen)) == (0, 3000)
    assert not await harness.finish()
    harness.figures.add("faults survived")


SUBREAPER_WITH_WANDERER = """\
import ctypes, os, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER, as the keeper does
if os.fork() == 0:
    for _ in range(2000):  # a new PID every 5 ms
        if os.fork():
            os._exit(0)
        os.setsid()
        time.sleep(0.005)
    os._exit(0)
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(1)
"""


@pytest.mark.timeout(400)
def test_tree_kill_catches_a_process_that_forks_as_it_dies(tmp_path: Path) -> None:
    """Regression: ``kill_tree`` stopped looking once a pass found no new process, but a
    SIGSTOP lands asynchronously, so a process could still fork after that pass; its child
    then outlived the kill (about 3 % of kills of this wanderer)."""
    escaped: list[int] = []
    for attempt in range(sized(default=10, short=20, long=150)):
        cwd = tmp_path / str(attempt)
        cwd.mkdir()
        keeper = subprocess.Popen([sys.executable, "-c", SUBREAPER_WITH_WANDERER], cwd=cwd)
        deadline = time.monotonic() + 30
        while not strays(cwd) - {keeper.pid}:  # until the wanderer runs
            assert time.monotonic() < deadline, "the wanderer never started"
            time.sleep(0.005)
        proctree.kill_tree(keeper.pid)
        keeper.wait()
        deadline = time.monotonic() + 1  # the killed ones vanish asynchronously
        while (survivors := strays(cwd)) and time.monotonic() < deadline:
            time.sleep(0.01)
        escaped += survivors
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)
    assert escaped == []
