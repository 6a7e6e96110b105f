"""What a run leaves behind (nothing) and what it can see (little)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kernel_support import RuntimeFactory, run

from dsh_jupyter.kernel import KernelRuntime, proctree

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]


async def _gone(pid: int, within: float = 5.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        stat = proctree.read_stat(pid)
        if stat is None or stat.state == "Z":
            return True
        await asyncio.sleep(0.05)
    return False


SPAWN_ESCAPEES = """\
import subprocess
session = subprocess.Popen(["sleep", "60"], start_new_session=True)
double = subprocess.run(["sh", "-c", "setsid sleep 61 >/dev/null 2>&1 & echo $!"],
                        capture_output=True, text=True, check=True)
pids = [session.pid, int(double.stdout)]
"""


async def test_no_orphans_after_a_run(runtime: KernelRuntime) -> None:
    result = await run(runtime, SPAWN_ESCAPEES + "return pids")
    assert result.failure is None, result.failure
    assert isinstance(result.value, list)
    for pid in result.value:
        assert isinstance(pid, int)
        assert await _gone(pid), f"process {pid} outlived its run"


async def test_no_orphans_after_the_kernel_exits(runtime: KernelRuntime) -> None:
    program = SPAWN_ESCAPEES + """\
import sys, os, time
print(pids)
sys.stdout.flush()
time.sleep(0.3)  # let zmq deliver the line before the process vanishes
os._exit(1)
"""
    result = await run(runtime, program)
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    pids = [int(p) for p in result.logs[0].strip("[]").split(",")]
    for pid in pids:
        assert await _gone(pid), f"process {pid} outlived its kernel"


async def test_environment_is_scrubbed(make_runtime: RuntimeFactory,
                                       monkeypatch: pytest.MonkeyPatch,
                                       capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DSH_SECRET", "hunter2")
    monkeypatch.setenv("LC_DSH_TEST", "kept")
    runtime = await make_runtime(extra_env={"DSH_GIVEN": "yes"})
    program = """\
import os
os.write(1, b"RAW-STDOUT\\n")
os.write(2, b"RAW-STDERR\\n")
return {"env": dict(os.environ), "cwd": os.getcwd()}
"""
    result = await run(runtime, program)
    assert result.failure is None, result.failure
    assert isinstance(result.value, dict)
    env = result.value["env"]
    assert "DSH_SECRET" not in env
    assert env["LC_DSH_TEST"] == "kept" and env["DSH_GIVEN"] == "yes"
    assert env["IPYTHONDIR"].startswith(env["HOME"])
    assert env["TMPDIR"] != "/tmp"
    home, cwd = Path(env["HOME"]), Path(result.value["cwd"])
    assert cwd.parent == home.parent  # one private workspace (removal: see below)
    assert not any(key.startswith("JUPYTER") and key != "JPY_PARENT_PID" for key in env)
    captured = capfd.readouterr()
    assert "RAW-STD" not in captured.out + captured.err  # kernel output never reaches the host


async def test_no_state_between_runs(runtime: KernelRuntime) -> None:
    first = """\
import builtins, json, os
builtins.leaked = 1
json.leaked = 2
with open("marker.txt", "w") as f:
    f.write("x")
return os.getpid()
"""
    second = """\
import builtins, json, os
return {"builtins": hasattr(builtins, "leaked"), "module": hasattr(json, "leaked"),
        "file": os.path.exists("marker.txt"), "pid": os.getpid()}
"""
    one = await run(runtime, first)
    two = await run(runtime, second)
    assert one.failure is None and two.failure is None
    assert isinstance(two.value, dict)
    assert two.value == {"builtins": False, "module": False, "file": False, "pid": two.value["pid"]}
    assert two.value["pid"] != one.value


async def test_nothing_outlives_the_runtime(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime()
    result = await run(runtime, "import os\nreturn [os.getpid(), os.environ['HOME']]")
    assert isinstance(result.value, list)
    pid, home = result.value
    await runtime.aclose()
    assert isinstance(pid, int) and isinstance(home, str)
    assert await _gone(pid)
    assert not Path(home).exists()  # noqa: ASYNC240
    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert leftovers == []
