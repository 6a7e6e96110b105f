"""Both start paths (fork server, stock jupyter-client), custom kernelspecs, and the pool."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest
from kernel_support import Recorder, RuntimeFactory, run

from dsh_jupyter.kernel import KernelRuntime, proctree

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(90)]


@pytest.fixture(params=["fork", "stock"])
async def any_runtime(request: pytest.FixtureRequest,
                      make_runtime: RuntimeFactory) -> KernelRuntime:
    return await make_runtime(launcher=request.param)


async def test_calls_gather_and_output(any_runtime: KernelRuntime, recorder: Recorder) -> None:
    program = """\
print("start")
results = await asyncio.gather(*(tools.echo({"n": n}) for n in range(3)))
return [r["args"]["n"] for r in results]
"""
    result = await run(any_runtime, program, {"echo": recorder.binding("echo", delay=0.1)})
    assert (result.failure, result.value, result.logs) == (None, [0, 1, 2], ("start",))
    assert recorder.max_active == 3


async def test_kernel_death_and_orphans(any_runtime: KernelRuntime) -> None:
    program = """\
import subprocess, os
child = subprocess.Popen(["sleep", "60"], start_new_session=True)
print(child.pid, flush=True)
import time
time.sleep(0.3)
os.kill(os.getpid(), 9)
"""
    result = await run(any_runtime, program)
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert "SIGKILL" in result.failure.message
    pid = int(result.logs[0])
    for _ in range(100):
        stat = proctree.read_stat(pid)
        if stat is None or stat.state == "Z":
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail(f"process {pid} outlived its kernel")


async def test_fresh_random_state(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(launcher="fork")
    program = "import random\nreturn random.random()"
    first, second = await run(runtime, program), await run(runtime, program)
    assert first.value != second.value  # every forked kernel reseeds


async def test_fork_server_restarts_after_dying(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(launcher="fork")
    program = "import os\nreturn os.getppid()"
    server_pid = (await run(runtime, program)).value
    assert isinstance(server_pid, int)
    os.kill(server_pid, signal.SIGKILL)
    await asyncio.sleep(0.2)
    again = await run(runtime, program)
    assert again.failure is None
    assert again.value != server_pid


async def test_pool_hands_out_each_kernel_once(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(pool_size=2)
    pids = []
    for _ in range(4):
        result = await run(runtime, "import os\nreturn os.getpid()")
        assert result.failure is None
        pids.append(result.value)
    assert len(set(pids)) == 4


async def test_pool_skips_dead_kernels(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(pool_size=1)
    pool = runtime._pool
    assert pool is not None
    await pool.wait_filled()
    victim = pool._ready[0].process.root_pid
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    await asyncio.sleep(0.2)
    result = await run(runtime, "import os\nreturn os.getpid()")
    assert result.failure is None and result.value != victim


async def test_dispose_kills_pooled_kernels(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(pool_size=2)
    pool = runtime._pool
    assert pool is not None
    await pool.wait_filled()
    pids = [session.process.root_pid for session in pool._ready]
    roots = [session.workspace.root for session in pool._ready]
    await runtime.aclose()
    for pid in pids:
        assert pid is not None
        stat = proctree.read_stat(pid)
        assert stat is None or stat.state == "Z"
    assert not any(root.exists() for root in roots)


def _kernelspec(root: Path, name: str, argv: list[str]) -> None:
    spec_dir = root / "kernels" / name
    spec_dir.mkdir(parents=True)
    spec = {"argv": argv, "display_name": name, "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))


async def test_custom_kernelspec_and_provisioner(make_runtime: RuntimeFactory, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _kernelspec(tmp_path, "dsh-test-python",
                [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    runtime = await make_runtime(kernel_name="dsh-test-python", provisioner="local-provisioner")
    result = await run(runtime, "import sys\nreturn sys.executable")
    assert result.failure is None, result.failure
    assert result.value == sys.executable


async def test_kernel_that_exits_at_start(make_runtime: RuntimeFactory, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _kernelspec(tmp_path, "dsh-test-broken", [sys.executable, "-c", "raise SystemExit(7)"])
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    runtime = await make_runtime(kernel_name="dsh-test-broken")
    result = await run(runtime, "return 1")
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert "status 7" in result.failure.message


async def test_kernel_that_never_answers(make_runtime: RuntimeFactory, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _kernelspec(tmp_path, "dsh-test-mute", [sys.executable, "-c", "import time; time.sleep(60)"])
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    runtime = await make_runtime(kernel_name="dsh-test-mute", startup_seconds=1.0)
    result = await run(runtime, "return 1")
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert "not ready within 1 s" in result.failure.message


async def test_fork_server_cleans_up_after_a_vanished_host() -> None:
    from dsh_jupyter.kernel import KernelRuntimeConfig
    from dsh_jupyter.kernel.forkserver import ForkLauncher
    from dsh_jupyter.kernel.workspace import Workspace

    config = KernelRuntimeConfig()
    launcher = ForkLauncher(config)
    workspace = Workspace.create()
    kernel = await launcher.start(workspace, workspace.environment(config))
    pid = kernel.root_pid
    assert pid is not None
    await launcher.close()  # what the server sees when the host dies: EOF on its socket
    stat = proctree.read_stat(pid)
    assert stat is None or stat.state == "Z"
    assert not workspace.root.exists()
