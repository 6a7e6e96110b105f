"""Resource caps, run into from inside real programs through ``run_code``: each cap ends
the run with its own kind and one line, the runtime goes on serving, a concurrent run is
unaffected, the host process does not grow, and no cgroup is left behind."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from reliability_support import Harness, code_registry, returned_by, rss_bytes, run_code

from dsh_jupyter.kernel.confine.caps import RUNTIME_PREFIX, cgroup_problem, find_cgroup_parents
from dsh_jupyter.kernel.confine.sandbox import SandboxConfig, confinement_problem

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120),
              pytest.mark.skipif(confinement_problem() is not None,
                                 reason=f"no confinement here: {confinement_problem()}")]

MiB = 1024 * 1024
SMALL = SandboxConfig(memory_bytes=512 * MiB, max_processes=64, workspace_bytes=64 * MiB,
                      workspace_files=1000)

PROGRAMS = {
    "one big allocation": ("x = bytearray(3 << 30)\nreturn len(x)", "memory-limit"),
    "growing memory": ("chunks = []\nwhile True:\n    chunk = bytearray(64 << 20)\n"
                       "    chunk[::4096] = b'x' * len(chunk[::4096])\n    chunks.append(chunk)",
                       "memory-limit"),
    "fork bomb": ("import os, time\nwhile True:\n    if os.fork() == 0:\n"
                  "        time.sleep(30)\n        os._exit(0)", "process-limit"),
    "thread bomb": ("import threading, time\nwhile True:\n"
                    "    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()",
                    "process-limit"),
    "filling the workspace": ("with open('big', 'wb') as f:\n    while True:\n"
                              "        f.write(b'x' * (16 << 20))", "workspace-limit"),
    "filling /tmp": ("with open('/tmp/big', 'wb') as f:\n    while True:\n"
                     "        f.write(b'x' * (16 << 20))", "workspace-limit"),
    "too many files": ("i = 0\nwhile True:\n    open(f'f{i}', 'w').close()\n    i += 1",
                       "file-limit"),
}
MESSAGES = {
    "memory-limit": "the program ran out of memory: its kernel may use 512 MiB "
                    "(SandboxConfig.memory_bytes)",
    "process-limit": "the program started too many processes or threads: its kernel may run "
                     "64 (SandboxConfig.max_processes)",
    "workspace-limit": "the program filled its workspace: 64 MiB (SandboxConfig.workspace_bytes)",
    "file-limit": "the program made too many files: its workspace holds 1,000 "
                  "(SandboxConfig.workspace_files)",
}


def kernel_cgroups() -> list[Path]:
    """The cgroups this process's runtimes made that are still there (kernels' and
    runtimes')."""
    parents = find_cgroup_parents()
    if isinstance(parents, str):
        return []
    mine = f"{RUNTIME_PREFIX}{os.getpid()}-"
    return [path for parent in {parents.memory, parents.pids}
            for path in parent.glob(f"{mine}*")]


def failure(result: Any) -> tuple[str, str]:
    """(kind, message) of a failed run_code result."""
    assert result.error is not None, result
    head = result.error.message.splitlines()[0]
    assert head.startswith("code run failed ("), head
    kind, _, message = head[len("code run failed ("):].partition("): ")
    return kind, message


@pytest.mark.parametrize("launcher", ["fork", "stock"])
@pytest.mark.parametrize("name", list(PROGRAMS))
async def test_each_cap_ends_the_run_with_its_kind(harness: Harness, name: str,
                                                   launcher: str) -> None:
    program, kind = PROGRAMS[name]
    registry, _ = await harness.registry(sandbox=SMALL, launcher=launcher)
    result = await run_code(registry, program, call_id="capped")
    got_kind, message = failure(result)
    assert got_kind == kind, result.error
    assert message.startswith(MESSAGES[kind]), message
    assert "\n" not in message and "Traceback" not in message
    again = await run_code(registry, "return 'fine'", call_id="next")  # the runtime goes on
    assert again.error is None and returned_by(again) == "fine"
    assert not await harness.finish()
    assert kernel_cgroups() == []


async def test_a_concurrent_run_and_the_host_are_unaffected(harness: Harness) -> None:
    """While one run allocates and forks without end, another on the same runtime computes
    and returns; the host process does not grow by what the hog takes."""
    runtime = await harness.runtime(sandbox=SMALL, pool_size=2)
    registry, _ = code_registry(runtime)
    before = rss_bytes()
    hog = asyncio.ensure_future(run_code(
        registry, PROGRAMS["growing memory"][0], call_id="hog"))
    bomb = asyncio.ensure_future(run_code(registry, PROGRAMS["fork bomb"][0], call_id="bomb"))
    honest = await run_code(registry, "return sum(range(10**6))", call_id="honest")
    assert honest.error is None and returned_by(honest) == sum(range(10**6))
    assert failure(await hog)[0] == "memory-limit"
    assert failure(await bomb)[0] == "process-limit"
    assert rss_bytes() - before < 64 * MiB
    assert not await harness.finish()


CHILDREN = """\
import subprocess, sys
held = bytearray(300 << 20)
held[::4096] = b"x" * len(held[::4096])
child = "x = bytearray(150 << 20); x[::4096] = b'x' * len(x[::4096]); import time; time.sleep(20)"
kids = [subprocess.Popen([sys.executable, "-c", child]) for _ in range(3)]
return [kid.wait() for kid in kids]
"""


@pytest.mark.skipif(cgroup_problem() is not None, reason=f"no cgroups here: {cgroup_problem()}")
async def test_the_memory_cgroup_counts_the_whole_kernel(harness: Harness) -> None:
    """No process is over ``RLIMIT_DATA``, but together they pass the cap: the memory cgroup
    ends it (the kernel, the biggest, is killed) and the run says which cap it was."""
    registry, _ = await harness.registry(sandbox=SMALL)
    result = await run_code(registry, CHILDREN, call_id="children")
    kind, message = failure(result)
    assert kind == "memory-limit", result.error
    assert message == MESSAGES["memory-limit"]
    assert not await harness.finish()
    assert kernel_cgroups() == []


def test_caps_are_checked() -> None:
    with pytest.raises(ValueError, match="memory_bytes must be an int >= 268435456 or None"):
        SandboxConfig(memory_bytes=1000)
    with pytest.raises(ValueError, match="max_processes must be an int >= 32 or None"):
        SandboxConfig(max_processes=True)
    with pytest.raises(ValueError, match="cgroup_parent must be an absolute path"):
        SandboxConfig(cgroup_parent="relative/path")
    assert SandboxConfig(memory_bytes=None, max_processes=None).memory_bytes is None


@pytest.mark.skipif(cgroup_problem() is not None, reason=f"no cgroups here: {cgroup_problem()}")
def test_a_dead_hosts_cgroups_and_kernels_are_swept() -> None:
    """A host killed outright left its runtime's cgroups, and a process in them: the next
    runtime to open its cgroups kills that process and removes the directories."""
    import subprocess
    import time

    from dsh_jupyter.kernel.confine.caps import RuntimeCgroups

    dead = subprocess.Popen(["true"])
    dead.wait()  # a PID no host has any more
    parents = find_cgroup_parents()
    assert not isinstance(parents, str)
    left = [parent / f"{RUNTIME_PREFIX}{dead.pid}-leftover" for parent in
            dict.fromkeys((parents.memory, parents.pids))]
    orphan = subprocess.Popen(["sleep", "60"])
    try:
        for directory in left:
            (directory / "dsh-kernel-x").mkdir(parents=True)
            (directory / "dsh-kernel-x" / "cgroup.procs").write_text(str(orphan.pid))
        opened = RuntimeCgroups.open(None)
        assert opened is not None
        opened.remove()
        deadline = time.monotonic() + 5
        while orphan.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert orphan.returncode == -9
        assert not any(directory.exists() for directory in left)
    finally:
        orphan.kill()
        orphan.wait()
