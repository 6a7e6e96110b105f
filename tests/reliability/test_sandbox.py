"""The sandbox options, tested where this machine has them (bubblewrap), skipped where not.

Every test also shows what a confined kernel can still do, so ``docs/reliability.md``
states only what was seen here.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reliability_support import Harness, echo_body, json_tool, none_marked, run_code

from dsh_jupyter import CodeModeError
from dsh_jupyter.kernel import KernelRuntimeConfig, sandbox
from dsh_jupyter.kernel.sandbox import SandboxConfig, bubblewrap_problem

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]

NO_BWRAP = bubblewrap_problem()
needs_bwrap = pytest.mark.skipif(NO_BWRAP is not None, reason=f"no sandbox here: {NO_BWRAP}")
CONFINED = SandboxConfig(network=False, read_only_root=True, private_pids=True)


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


@pytest.fixture
def listeners(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A TCP listener on the host's loopback, an abstract and a path unix socket (ask for
    it before ``harness``, so its sockets are in the baseline)."""
    tcp = socket.create_server(("127.0.0.1", 0))
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0dsh-reliability-{uuid.uuid4().hex}")
    path = tmp_path / "host.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(path))
    for sock in (abstract, unix):
        sock.listen()
    try:
        yield {"tcp": tcp.getsockname()[1], "abstract": abstract.getsockname(),
               "path": str(path), "dir": str(tmp_path)}
    finally:
        for sock in (tcp, abstract, unix):
            sock.close()


REACH = """\
import socket
reached = {{}}
for name, family, address in (("tcp", socket.AF_INET, ("127.0.0.1", {tcp})),
                              ("abstract", socket.AF_UNIX, {abstract!r}),
                              ("path", socket.AF_UNIX, {path!r}),
                              ("internet", socket.AF_INET, ("192.0.2.1", 80))):
    probe = socket.socket(family)
    probe.settimeout(1)
    try:
        probe.connect(address)
        reached[name] = True
    except OSError:
        reached[name] = False
    finally:
        probe.close()
return reached
"""


async def test_network_reach_without_a_sandbox(listeners: dict[str, Any],
                                               harness: Harness) -> None:
    reached = await run_value(harness, REACH.format(**listeners))
    assert reached["tcp"] and reached["abstract"] and reached["path"]


@needs_bwrap
async def test_network_off(listeners: dict[str, Any], harness: Harness) -> None:
    """A private network namespace: no host loopback, no abstract sockets, no route out;
    the kernel's own channels (IPC) and tool calls still work. A unix socket *file* is
    reached through the file system, read-only or not, unless ``hide`` covers it."""
    program = REACH.format(**listeners).replace(
        "return reached", "reached['echo'] = await tools.echo({'ok': True})\nreturn reached")
    off = SandboxConfig(network=False, read_only_root=True)
    reached = await run_value(harness, program, sandbox=off)
    assert reached == {"tcp": False, "abstract": False, "path": True, "internet": False,
                       "echo": {"ok": True}}
    hidden = SandboxConfig(network=False, read_only_root=True, hide=(listeners["dir"],))
    reached = await run_value(harness, program, sandbox=hidden)
    assert reached["path"] is False
    assert not await harness.finish()


WRITES = """\
import os
home = os.environ["HOME"]
workspace = os.path.dirname(home)
targets = {{"etc": "/etc/dsh-probe", "tmp": "/tmp/dsh-probe", "host temp root": {root!r} + "/probe",
            "sibling workspace": {sibling!r} + "/probe", "home": home + "/probe",
            "tmpdir": os.environ["TMPDIR"] + "/probe", "cwd": "probe"}}
wrote = {{}}
for name, path in targets.items():
    try:
        with open(path, "w") as file:
            file.write("x")
        wrote[name] = True
        os.unlink(path)
    except OSError:
        wrote[name] = False
return wrote
"""


@needs_bwrap
async def test_read_only_root(harness: Harness) -> None:
    sibling = harness.root / "dsh-kernel-sibling"
    sibling.mkdir()
    try:
        wrote = await run_value(harness, WRITES.format(root=str(harness.root),
                                                       sibling=str(sibling)),
                                sandbox=SandboxConfig(read_only_root=True))
    finally:
        sibling.rmdir()
    assert wrote == {"etc": False, "tmp": False, "host temp root": False,
                     "sibling workspace": False, "home": True, "tmpdir": True, "cwd": True}
    assert not await harness.finish()


PIDS = """\
import os
visible = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
try:
    os.kill({host}, 0)
    host = "visible"
except ProcessLookupError:
    host = "not visible"
except PermissionError:
    host = "visible"
return {{"visible": visible, "host": host, "me": os.getpid()}}
"""


@needs_bwrap
async def test_private_pids(harness: Harness) -> None:
    seen = await run_value(harness, PIDS.format(host=os.getpid()),
                           sandbox=SandboxConfig(private_pids=True))
    assert seen["host"] == "not visible"
    assert len(seen["visible"]) <= 3 and seen["me"] in seen["visible"]
    unconfined = await run_value(harness, PIDS.format(host=os.getpid()))
    assert unconfined["host"] == "visible"
    assert not await harness.finish()


@needs_bwrap
async def test_confined_kernel_still_behaves(harness: Harness) -> None:
    """Under every namespace: calls, output, interrupts on timeout, death, daemons."""
    token = f"dsh-rel-{uuid.uuid4().hex}"
    registry, log = await harness.registry(json_tool("echo", echo_body), sandbox=CONFINED,
                                           wall_seconds=2.0, interrupt_grace_seconds=1.0)
    ok = await run_code(registry, "print('hi')\nreturn await tools.echo({'x': 1})")
    assert ok.value == {"logs": ["hi"], "result": {"x": 1}}, ok
    slow = await run_code(registry, "import time\nprint('before')\ntime.sleep(30)",
                          call_id="slow")
    assert slow.error is not None and "(timeout)" in slow.error.message
    assert "before" in slow.error.message  # the interrupt reached the kernel, not bwrap
    died = await run_code(registry, "import os\nos._exit(3)", call_id="died")
    assert died.error is not None and "status 3" in died.error.message
    daemons = await run_code(registry, f"""\
import os, subprocess
os.environ["DSH_REL_MARK"] = {token!r}
subprocess.Popen(["sh", "-c", "setsid sleep 61 &"], start_new_session=True).wait()
return 'spawned'""", call_id="daemons")
    assert daemons.error is None, daemons
    assert await none_marked(token)
    log.settlement()
    assert not await harness.finish()
    harness.figures.add("faults survived", 3)


def test_sandbox_options_are_checked() -> None:
    with pytest.raises(ValueError, match="cpu_seconds"):
        SandboxConfig(cpu_seconds=0)
    with pytest.raises(ValueError, match="hide"):
        SandboxConfig(hide=("relative",))
    with pytest.raises(ValueError, match="fork server"):
        KernelRuntimeConfig(launcher="fork", sandbox=SandboxConfig(network=False))
    assert KernelRuntimeConfig(launcher="fork", sandbox=SandboxConfig(cpu_seconds=5)).uses_fork
    assert not KernelRuntimeConfig(sandbox=SandboxConfig(private_pids=True)).uses_fork
    argv = CONFINED.bubblewrap_argv(Path("/tmp/ws"))
    assert argv[-4:] == ["--bind", "/tmp/ws", "/tmp/ws", "--"]
    assert "--unshare-net" in argv and "--ro-bind" in argv and "--unshare-pid" in argv


async def test_missing_bubblewrap_is_a_clear_error(harness: Harness,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    bubblewrap_problem.cache_clear()
    monkeypatch.setattr(sandbox, "BWRAP", "dsh-no-such-bwrap")
    try:
        with pytest.raises(CodeModeError, match=r"bubblewrap .* is not installed"):
            await harness.runtime(sandbox=SandboxConfig(network=False))
    finally:
        bubblewrap_problem.cache_clear()
    assert not await harness.finish()

