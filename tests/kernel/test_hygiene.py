"""What a run leaves behind (nothing) and what it can see (little)."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from kernel_support import RuntimeFactory, gone, run

from dsh_jupyter.kernel import KernelRuntime
from dsh_jupyter.kernel.launch import proctree

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]


SPAWN_ESCAPEES = """\
import subprocess
session = subprocess.Popen(["sleep", "600.{tag}1"], start_new_session=True)
subprocess.run(["sh", "-c", "setsid sleep 600.{tag}2 >/dev/null 2>&1 &"], check=True)
"""


async def test_no_orphans_after_a_run(runtime: KernelRuntime) -> None:
    tag = str(uuid.uuid4().int)[:12]
    result = await run(runtime, SPAWN_ESCAPEES.format(tag=tag) + "return 1")
    assert result.failure is None, result.failure
    assert await gone(f"600.{tag}"), "a process outlived its run"


async def test_no_orphans_after_the_kernel_exits(runtime: KernelRuntime) -> None:
    tag = str(uuid.uuid4().int)[:12]
    program = SPAWN_ESCAPEES.format(tag=tag) + """\
import os, time
time.sleep(0.3)  # let the shell's background sleep start
os._exit(1)
"""
    result = await run(runtime, program)
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert await gone(f"600.{tag}"), "a process outlived its kernel"


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
    env: Any = result.value["env"]
    assert "DSH_SECRET" not in env
    assert env["LC_DSH_TEST"] == "kept" and env["DSH_GIVEN"] == "yes"
    assert env["IPYTHONDIR"].startswith(env["HOME"])
    assert isinstance(result.value["cwd"], str)
    home, cwd = Path(env["HOME"]), Path(result.value["cwd"])
    assert cwd.parent == home.parent  # one private workspace (removal: see below)
    # The temp directory is private too: the workspace's own, which is /tmp when confined.
    assert env["TMPDIR"] in ("/tmp", str(home.parent / "tmp"))
    assert (env["TMPDIR"] == "/tmp") == (str(cwd) == "/workspace/work")
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
return get_ipython().kernel.session.session
"""
    second = """\
import builtins, json, os
return {"builtins": hasattr(builtins, "leaked"), "module": hasattr(json, "leaked"),
        "file": os.path.exists("marker.txt"), "kernel": get_ipython().kernel.session.session}
"""
    one = await run(runtime, first)
    two = await run(runtime, second)
    assert one.failure is None and two.failure is None
    assert isinstance(two.value, dict)
    assert two.value == {"builtins": False, "module": False, "file": False,
                         "kernel": two.value["kernel"]}
    assert two.value["kernel"] != one.value  # another kernel (with a workspace of its own)


async def test_nothing_outlives_the_runtime(make_runtime: RuntimeFactory) -> None:
    before = set(proctree.descendants(os.getpid()))  # other tests' runtimes, still closing
    runtime = await make_runtime()
    tag = str(uuid.uuid4().int)[:12]
    program = (f"import os, subprocess\nsubprocess.Popen(['sleep', '600.{tag}'])\n"
               "return os.environ['HOME']")
    result = await run(runtime, program)
    home = result.value
    ours = set(proctree.descendants(os.getpid())) - before  # kernels, keepers, fork server
    assert ours
    await runtime.aclose()
    assert isinstance(home, str)
    assert await gone(f"600.{tag}", within=0.5)
    assert not ours & set(proctree.descendants(os.getpid()))
    assert not Path(home).exists()  # noqa: ASYNC240
    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert leftovers == []
