"""Resource limits, and confined kernels behaving like any other under faults.

What confinement keeps a program from reaching is tested in ``tests/security``; here, a
confined kernel must still take interrupts, report deaths and lose its daemons.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from reliability_support import Harness, echo_body, json_tool, none_marked, run_code

from dsh_jupyter.kernel import KernelRuntimeConfig
from dsh_jupyter.kernel.confine.sandbox import SandboxConfig, confinement_problem
from dsh_jupyter.kernel.gateway_config import GatewayConfig

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]

NO_CONFINEMENT = confinement_problem()
needs_confinement = pytest.mark.skipif(NO_CONFINEMENT is not None,
                                       reason=f"no confinement here: {NO_CONFINEMENT}")


async def run_value(harness: Harness, program: str, **options: Any) -> Any:
    registry, log = await harness.registry(json_tool("echo", echo_body), **options)
    result = await run_code(registry, program)
    assert result.error is None, result.error
    log.settlement()
    assert isinstance(result.value, dict)
    return result.value["result"]


@pytest.mark.parametrize("launcher", ["fork", "stock"])
async def test_cpu_seconds(harness: Harness, launcher: str) -> None:
    """RLIMIT_CPU: SIGXCPU at the limit (and SIGKILL a second later for a program that
    handles SIGXCPU), whatever the host's compute budget says."""
    registry, _ = await harness.registry(
        launcher=launcher, compute_seconds=60, sandbox=SandboxConfig(cpu_seconds=2))
    plain = await run_code(registry, "while True:\n    pass")
    assert plain.error is not None and "(kernel-exit)" in plain.error.message
    assert "SIGXCPU" in plain.error.message
    stubborn = await run_code(registry, "import signal\n"
                              "signal.signal(signal.SIGXCPU, lambda *a: None)\nwhile True:\n"
                              "    pass", call_id="stubborn")
    assert stubborn.error is not None and "SIGKILL" in stubborn.error.message
    assert not await harness.finish()
    harness.figures.add("faults survived", 2)


@pytest.mark.parametrize("launcher", ["fork", "stock"])
async def test_open_files(harness: Harness, launcher: str) -> None:
    """RLIMIT_NOFILE: the program gets EMFILE, the kernel goes on answering."""
    program = """\
import errno, os
opened, failed = [], None
try:
    while len(opened) < 1000:
        opened.append(os.open(os.devnull, os.O_RDONLY))
except OSError as error:
    failed = errno.errorcode[error.errno]
for fd in opened:
    os.close(fd)
return {"failed": failed, "echo": await tools.echo({"after": True})}
"""
    value = await run_value(harness, program, launcher=launcher, open_files=128)
    assert value == {"failed": "EMFILE", "echo": {"after": True}}
    assert not await harness.finish()
    harness.figures.add("faults survived")


@needs_confinement
@pytest.mark.parametrize("launcher", ["fork", "stock"])
async def test_confined_kernel_still_behaves(harness: Harness, launcher: str) -> None:
    """Confined (the default): calls, output kept on timeout, death by exit and by signal
    (the status of the kernel, not of the processes around it), daemons."""
    token = f"dsh-rel-{uuid.uuid4().hex}"
    registry, log = await harness.registry(json_tool("echo", echo_body), launcher=launcher,
                                           wall_seconds=2.0, interrupt_grace_seconds=1.0)
    assert harness.runtimes[-1].confined
    ok = await run_code(registry, "print('hi')\nreturn await tools.echo({'x': 1})")
    assert ok.value == {"logs": ["hi"], "result": {"x": 1}}, ok
    slow = await run_code(registry, "import time\nprint('before')\ntime.sleep(30)",
                          call_id="slow")
    assert slow.error is not None and "(timeout)" in slow.error.message
    assert "before" in slow.error.message  # output read before the kill is kept
    died = await run_code(registry, "import os\nos._exit(3)", call_id="died")
    assert died.error is not None and "status 3" in died.error.message
    killed = await run_code(registry, "import os\nos.kill(os.getpid(), 9)", call_id="killed")
    assert killed.error is not None and "SIGKILL" in killed.error.message
    daemons = await run_code(registry, f"""\
import os, subprocess
os.environ["DSH_REL_MARK"] = {token!r}
subprocess.Popen(["sh", "-c", "setsid sleep 61 &"], start_new_session=True).wait()
return 'spawned'""", call_id="daemons")
    assert daemons.error is None, daemons
    assert await none_marked(token)
    log.settlement()
    assert not await harness.finish()
    harness.figures.add("faults survived", 4)


def test_sandbox_options_are_checked() -> None:
    with pytest.raises(ValueError, match="cpu_seconds"):
        SandboxConfig(cpu_seconds=0)
    with pytest.raises(ValueError, match="read_only_paths"):
        SandboxConfig(read_only_paths=("relative",))
    with pytest.raises(ValueError, match="read_only_paths"):
        SandboxConfig(read_only_paths="/data")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sandbox must be 'auto', 'required'"):
        KernelRuntimeConfig(sandbox="yes")  # type: ignore[arg-type]
    gateway = GatewayConfig(url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="confine remote kernels on the gateway side"):
        KernelRuntimeConfig(gateway=gateway, sandbox="required")
    assert KernelRuntimeConfig(gateway=gateway).confinement is None  # "auto": remote
    assert KernelRuntimeConfig().confinement == SandboxConfig()
    assert KernelRuntimeConfig(sandbox="required").confinement == SandboxConfig(required=True)
    assert KernelRuntimeConfig(sandbox=None).confinement is None
    assert KernelRuntimeConfig(launcher="fork").uses_fork  # confinement keeps the fork server
