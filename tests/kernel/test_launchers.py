"""Both start paths (fork server, stock jupyter-client), custom kernelspecs, and the pool."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from kernel_support import KERNEL_IDENTITY, Recorder, RuntimeFactory, gone, run
from tree_support import build_deep
from waiting_support import still_running

from dsh_jupyter.kernel import KernelRuntime
from dsh_jupyter.kernel.launch import proctree
from dsh_jupyter.kernel.launch.base import KernelProcess
from dsh_jupyter.kernel.run import removal

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(90)]


async def seen_dead(process: KernelProcess, within: float = 5.0) -> bool:
    """Whether ``process`` is seen dead within ``within`` seconds, as the pool checks it
    (a SIGKILL lands asynchronously)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while await process.is_alive():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


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
    tag = str(uuid.uuid4().int)[:12]
    program = f"""\
import subprocess, os, time
child = subprocess.Popen(["sleep", "600.{tag}"], start_new_session=True)
while b"600.{tag}" not in open(f"/proc/{{child.pid}}/cmdline", "rb").read():  # exec'd yet?
    time.sleep(0.005)
os.kill(os.getpid(), 9)
"""
    result = await run(any_runtime, program)
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert "SIGKILL" in result.failure.message
    assert await gone(f"600.{tag}"), "a process outlived its kernel"


async def test_fresh_random_state(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(launcher="fork")
    program = "import random\nreturn random.random()"
    first, second = await run(runtime, program), await run(runtime, program)
    assert first.value != second.value  # every forked kernel reseeds


async def test_fork_server_restarts_after_dying(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(launcher="fork")
    assert (await run(runtime, "return 1")).value == 1
    server = runtime._launcher._server  # type: ignore[union-attr]
    assert server is not None
    os.kill(server.process.pid, signal.SIGKILL)
    await asyncio.to_thread(server.process.wait, 10)
    again = await run(runtime, "return 2")
    assert again.failure is None and again.value == 2
    assert runtime._launcher._server is not server  # type: ignore[union-attr]


async def test_pool_hands_out_each_kernel_once(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(pool_size=2)
    workspaces = []
    for _ in range(4):
        result = await run(runtime, KERNEL_IDENTITY)
        assert result.failure is None
        workspaces.append(result.value)
    assert len(set(workspaces)) == 4


async def test_pool_skips_dead_kernels(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(pool_size=1)
    pool = runtime._pool
    assert pool is not None
    await pool.wait_filled()
    victim = pool._ready[0].process.root_pid
    victim_session = pool._ready[0]
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    assert await seen_dead(victim_session.process)
    result = await run(runtime, KERNEL_IDENTITY)
    assert result.failure is None and isinstance(result.value, str)
    assert victim_session not in pool._ready


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


# A shell exits before its confiner can move it into its cgroups (the move waits 5-20 ms
# for an RCU grace period): the failure is still the kernel's exit, not "could not be
# confined" (failed every time before the confiner let a vanished process go).
@pytest.mark.parametrize("argv", [[sys.executable, "-c", "raise SystemExit(7)"],
                                  ["/bin/sh", "-c", "exit 7"]], ids=["python", "shell"])
async def test_kernel_that_exits_at_start(make_runtime: RuntimeFactory, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          argv: list[str]) -> None:
    _kernelspec(tmp_path, "dsh-test-broken", argv)
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
    from dsh_jupyter.kernel.confine.caps import RuntimeCgroups
    from dsh_jupyter.kernel.launch.forkserver import ForkLauncher
    from dsh_jupyter.kernel.run.workspace import Workspace, create_runtime_directory

    config = KernelRuntimeConfig()
    directory = create_runtime_directory()
    cgroups = RuntimeCgroups.open(None) if config.confinement is not None else None
    launcher = ForkLauncher(config, directory, config.confinement, cgroups)
    workspace = Workspace.create(directory, confined=config.confinement is not None)
    kernel = await launcher.start(workspace, workspace.environment(config))
    pid = kernel.root_pid
    assert pid is not None
    if cgroups is not None:  # the kernel's cgroups, in the runtime's
        assert workspace.caps is not None and workspace.caps.cgroups
        assert all(path.parent in cgroups.directories for path in workspace.caps.cgroups)
    await launcher.close()  # what the server sees when the host dies: EOF on its socket
    stat = proctree.read_stat(pid)
    assert stat is None or stat.state == "Z"
    assert not directory.exists()
    if cgroups is not None:  # the server removed the runtime's cgroups too
        assert not any(path.exists() for path in cgroups.directories)


def _in_session(session: int) -> list[int]:
    """The live processes of ``session`` (the fork server's: it starts a session of its
    own, which its kernels stay in)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                with open(f"/proc/{name}/stat", "rb") as file:
                    fields = file.read().rsplit(b")", 1)[1].split()
                if int(fields[3]) == session and fields[0] != b"Z":
                    found.append(int(name))
    return found


async def test_fork_server_shuts_down_cleanly_with_a_spawn_in_flight() -> None:
    """The host goes while the server forks a kernel for it (a pool's prewarm as the
    host closes): the server cannot answer, yet still kills that kernel, removes the
    runtime's directory and exits normally (it died on the failed reply before)."""
    from dsh_jupyter.kernel import KernelRuntimeConfig
    from dsh_jupyter.kernel.confine.caps import RuntimeCgroups
    from dsh_jupyter.kernel.launch.forkserver import ForkLauncher
    from dsh_jupyter.kernel.run.workspace import Workspace, create_runtime_directory

    config = KernelRuntimeConfig()
    directory = create_runtime_directory()
    cgroups = RuntimeCgroups.open(None) if config.confinement is not None else None
    launcher = ForkLauncher(config, directory, config.confinement, cgroups)
    server = await launcher.server()
    workspace = Workspace.create(directory, confined=config.confinement is not None)
    spawn = asyncio.create_task(launcher.start(workspace, workspace.environment(config)))
    for _ in range(10_000):
        if server._pending:  # the request is written: the host goes now
            break
        await asyncio.sleep(0)
    await launcher.close()
    with pytest.raises(Exception):  # noqa: B017  # the spawn's reply never comes
        await spawn
    assert server.process.returncode == 0
    assert not directory.exists()
    if cgroups is not None:
        assert not any(path.exists() for path in cgroups.directories)
    assert await still_running(_in_session(server.process.pid), within=5.0) == []


async def test_fork_server_removes_what_a_program_left_after_a_vanished_host() -> None:
    """A tree too deep for ``shutil.rmtree``, locked levels and a locked workspace: the
    server alone (the host never removes anything here) leaves nothing on disk."""
    from dsh_jupyter.kernel import KernelRuntimeConfig
    from dsh_jupyter.kernel.launch.forkserver import ForkLauncher
    from dsh_jupyter.kernel.run.workspace import Workspace, create_runtime_directory

    config = KernelRuntimeConfig()
    directory = create_runtime_directory()
    launcher = ForkLauncher(config, directory, config.confinement)
    workspace = Workspace.create(directory, confined=config.confinement is not None)
    try:
        kernel = await launcher.start(workspace, workspace.environment(config))
        assert kernel.root_pid is not None
        # What an unconfined program could leave in its host directory.
        left = workspace.root / "left"
        left.mkdir()
        await asyncio.to_thread(build_deep, str(left), 3_000, 500)
        left.chmod(0o000)
        await launcher.close()
        assert not directory.exists()
    finally:
        await launcher.close()
        removal.remove_tree(directory)  # if the test failed, not in the next one's way



def _remote_spec(root: Path, name: str, provisioner: str, config: dict[str, Any]) -> None:
    spec_dir = root / "kernels" / name
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": name, "language": "python",
        "metadata": {"kernel_provisioner": {"provisioner_name": provisioner,
                                            "config": config}}}))


async def test_a_kernelspec_naming_a_missing_provisioner_says_so(
        make_runtime: RuntimeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _remote_spec(tmp_path, "dsh-test-remote", "dsh-no-such-provisioner", {})
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    runtime = await make_runtime(kernel_name="dsh-test-remote")
    result = await run(runtime, "return 1")
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert "No such kernel" not in result.failure.message
    assert ("the kernelspec 'dsh-test-remote' names the kernel provisioner "
            "'dsh-no-such-provisioner', which is not installed in this environment "
            "(installed: ") in result.failure.message
    assert "local-provisioner" in result.failure.message  # what is installed
    assert "pip install gateway_provisioners" in result.failure.message
    assert "KernelRuntimeConfig(provisioner=...)" in result.failure.message


async def test_provisioner_replaces_a_missing_one_and_merges_settings(
        make_runtime: RuntimeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _remote_spec(tmp_path, "dsh-test-remote", "dsh-no-such-provisioner", {"host": "far"})
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    runtime = await make_runtime(kernel_name="dsh-test-remote", provisioner="local-provisioner")
    result = await run(runtime, "import sys\nreturn sys.executable")
    assert result.failure is None, result.failure
    assert result.value == sys.executable


def _spec_manager(**config: Any) -> Any:
    from dsh_jupyter.kernel import KernelRuntimeConfig
    from dsh_jupyter.kernel.launch.stock import _SpecManager

    settings = KernelRuntimeConfig(launcher="stock", **config)
    return _SpecManager(provisioner=settings.provisioner,
                        provisioner_config=settings.provisioner_config)


@pytest.mark.parametrize(("config", "expected"), [
    ({}, {"provisioner_name": "local-provisioner", "config": {"a": 1, "b": 2}}),
    ({"provisioner_config": {"b": 3, "c": [1]}},
     {"provisioner_name": "local-provisioner", "config": {"a": 1, "b": 3, "c": [1]}}),
    ({"provisioner": "local-provisioner", "provisioner_config": {"c": 4}},
     {"provisioner_name": "local-provisioner", "config": {"a": 1, "b": 2, "c": 4}}),
])
def test_the_kernelspecs_provisioner_settings_are_kept_and_merged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict[str, Any],
        expected: dict[str, Any]) -> None:
    _remote_spec(tmp_path, "dsh-test-local", "local-provisioner", {"a": 1, "b": 2})
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    spec = _spec_manager(kernel_name="dsh-test-local", **config).get_kernel_spec("dsh-test-local")
    assert spec.metadata["kernel_provisioner"] == expected


def test_another_provisioner_drops_the_kernelspecs_settings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _remote_spec(tmp_path, "dsh-test-remote", "dsh-no-such-provisioner", {"host": "far"})
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    manager = _spec_manager(kernel_name="dsh-test-remote", provisioner="local-provisioner",
                            provisioner_config={"x": 1})
    assert manager.get_kernel_spec("dsh-test-remote").metadata["kernel_provisioner"] == {
        "provisioner_name": "local-provisioner", "config": {"x": 1}}


def test_a_missing_provisioner_in_the_config_is_named() -> None:
    from dsh_jupyter.kernel.launch.stock import DEFAULT_KERNEL_NAME, MissingProvisionerError

    manager = _spec_manager(provisioner="dsh-no-such-provisioner")
    with pytest.raises(MissingProvisionerError) as caught:
        manager.get_kernel_spec(DEFAULT_KERNEL_NAME)
    assert str(caught.value).startswith(
        "KernelRuntimeConfig(provisioner=...) names the kernel provisioner "
        "'dsh-no-such-provisioner', which is not installed")


@pytest.mark.parametrize(("config", "message"), [
    ({"launcher": "fork", "provisioner_config": {}}, "launcher='fork' does not use a provisioner"),
    ({"provisioner_config": {1: "x"}}, "provisioner_config must map setting names"),
    ({"provisioner_config": {"x": float("nan")}}, "provisioner_config must be JSON"),
])
def test_provisioner_config_is_checked(config: dict[str, Any], message: str) -> None:
    from dsh_jupyter.kernel import KernelRuntimeConfig

    with pytest.raises(ValueError, match=message):
        KernelRuntimeConfig(**config)


def test_provisioner_config_means_the_stock_launcher() -> None:
    from dsh_jupyter.kernel import KernelRuntimeConfig

    assert not KernelRuntimeConfig(provisioner_config={"x": 1}).uses_fork
    assert KernelRuntimeConfig().uses_fork


async def test_a_fork_server_killed_outright_takes_its_confined_kernels_along(
        make_runtime: RuntimeFactory) -> None:
    """SIGKILL to the fork server (no shutdown sweep): the confiner dies with it, the
    namespace's init with the confiner (its parent-death signal, set again after it took
    the kernel's ids, which cleared it) and the kernel with the namespace."""
    from dsh_jupyter.kernel.confine.sandbox import confinement_problem

    if confinement_problem() is not None:
        pytest.skip(f"no confinement here: {confinement_problem()}")
    runtime = await make_runtime(pool_size=1)
    pool = runtime._pool
    assert pool is not None
    await pool.wait_filled()
    confiner = pool._ready[0].process.root_pid
    assert confiner is not None
    tree = [stat.pid for stat in proctree.tree(confiner)]
    assert len(tree) == 3  # the confiner, the namespace's init, the kernel
    server = runtime._launcher._server  # type: ignore[union-attr]
    os.kill(server.process.pid, signal.SIGKILL)
    alive = await still_running(tree, within=5.0)
    assert not alive, f"outlived the fork server: {alive}"


@pytest.mark.parametrize("confined", [False, True], ids=["unconfined", "confined"])
async def test_a_kill_lands_without_waiting_for_the_fork_server(
        make_runtime: RuntimeFactory, monkeypatch: pytest.MonkeyPatch, confined: bool) -> None:
    """A run's kernel is killed on its critical path: the host signals it through its
    pidfd at once, and the server's kill of the group (and its reply) follows off that
    path. With the server's replies held back, kill still returns at once and the
    kernel's whole tree dies."""
    from dsh_jupyter.kernel.confine.sandbox import SandboxConfig, confinement_problem

    if confined and confinement_problem() is not None:
        pytest.skip(f"no confinement here: {confinement_problem()}")
    runtime = await make_runtime(pool_size=1, sandbox=SandboxConfig() if confined else None)
    pool = runtime._pool
    assert pool is not None
    await pool.wait_filled()
    kernel = pool._ready[0].process
    root = kernel.root_pid
    assert root is not None
    tree = [stat.pid for stat in proctree.tree(root)]
    assert len(tree) == (3 if confined else 1)
    server = runtime._launcher._server  # type: ignore[union-attr]
    held = asyncio.Event()
    request = server.request

    async def held_back(op: str, **fields: Any) -> dict[str, Any]:
        if op == "kill":
            await held.wait()  # the reply comes only once the test is done
        reply: dict[str, Any] = await request(op, **fields)
        return reply

    monkeypatch.setattr(server, "request", held_back)
    async with asyncio.timeout(0.5):
        await kernel.kill()
    alive = await still_running(tree, within=1.0)
    assert not alive, f"still running after kill: {alive}"
    held.set()
    await kernel.wait_gone()


@pytest.mark.parametrize("launcher", ["fork", "stock"])
async def test_kernels_get_the_options_every_local_kernel_gets(
        make_runtime: RuntimeFactory, launcher: str) -> None:
    """KERNEL_ARGS hold on both launchers: a forked kernel gets them as a traitlets Config
    (no command-line parsing in its start), a stock one on its command line."""
    runtime = await make_runtime(launcher=launcher)
    result = await run(runtime, "app = get_ipython().kernel.parent\n"
                       "return [get_ipython().history_manager.enabled, app.quiet]")
    assert (result.failure, result.value) == (None, [False, True])
