"""Attacks on other runs and on the pool, from inside a real program, through ``run_code``.

The attacker is a program in one run; its victims are a concurrent run (mid-way through
its tool calls) and the pool's idle kernel. In the default configuration the attacker
cannot even see them. Two more tests grant the attacker what an unconfined program on an
unconfined host could steal (a kernel's connection info, key included) and show that the
protocol still holds: a forged carrier offer is ignored, and a pooled kernel that saw
foreign traffic is discarded, never handed out.
"""

from __future__ import annotations

import asyncio
import builtins
import gc
from typing import Any

import pytest
from reliability_support import Harness, code_registry, json_tool, returned_by, run_code

from dsh_jupyter import ToolRunContext
from dsh_jupyter.kernel import StatefulConfig
from dsh_jupyter.kernel.confine.sandbox import confinement_problem
from dsh_jupyter.kernel.run.live_kernel import LiveKernel

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(90),
              pytest.mark.skipif(confinement_problem() is not None,
                                 reason=f"no confinement here: {confinement_problem()}")]


class Victim:
    """A run that reports its workspace, waits at a gate, then makes ``calls`` calls."""

    PROGRAM = """\
import os
await tools.where({"cwd": os.getcwd()})
await tools.gate({})
answers = [await tools.count({"n": n}) for n in range(5)]
return answers
"""

    def __init__(self) -> None:
        self.cwd: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.release = asyncio.Event()
        self.counted: list[int] = []

    def tools(self) -> list[Any]:
        async def where(args: Any, _ctx: ToolRunContext) -> Any:
            self.cwd.set_result(args["cwd"])
            return None

        async def gate(_args: Any, _ctx: ToolRunContext) -> Any:
            await self.release.wait()
            return None

        async def count(args: Any, _ctx: ToolRunContext) -> Any:
            self.counted.append(args["n"])
            return args["n"]

        return [json_tool("where", where), json_tool("gate", gate), json_tool("count", count)]


def live_sessions() -> list[LiveKernel]:
    """Kernel sessions of this host that are prepared and not yet closed (the host's own
    view: what an attacker would need to steal)."""
    gc.collect()
    return [obj for obj in gc.get_objects()
            if isinstance(obj, LiveKernel) and not obj._closed and obj.comm_id is not None]


SNOOP = """\
import os, socket
seen = {{}}
def attempt(name, action):
    try:
        seen[name] = action()
    except OSError as error:
        seen[name] = type(error).__name__
for name, path in {paths!r}.items():
    attempt(name + " listing", lambda path=path: os.listdir(path))
    attempt(name + " connection file", lambda path=path: open(path + "/kernel.json").read())
    def connect(path=path):
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect(path + "/zmq-1")
            return "connected"
    attempt(name + " shell socket", connect)
attempt("root", lambda: sorted(os.listdir("/")))
attempt("tmp", lambda: sorted(os.listdir("/tmp")))
attempt("workspace", lambda: sorted(os.listdir("/workspace")))
attempt("processes", lambda: sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
return seen
"""


def targets(session: LiveKernel) -> dict[str, str]:
    """Where a kernel's files are, as the host knows it: its host directory (a stock
    launch's connection file, the confinement FIFO) and its own root through the process
    that confined it."""
    workspace = session.workspace
    return {"host directory": str(workspace.root),
            "kernel root": f"/proc/{workspace.confiner_pid}/root/workspace"}


def assert_out_of_reach(seen: dict[str, Any], names: list[str]) -> None:
    for name in names:
        assert seen[f"{name} listing"] == "FileNotFoundError", seen
        assert seen[f"{name} connection file"] == "FileNotFoundError", seen
        assert seen[f"{name} shell socket"] == "FileNotFoundError", seen
    # Its own root: the system, the interpreter, its own /workspace; no runtime directory,
    # no other kernel's files.
    assert {"proc", "tmp", "usr", "workspace"} <= set(seen["root"]), seen
    assert not [name for name in seen["root"] if name.startswith("dsh")], seen
    # /tmp is its own (an installation below the host's /tmp has its mount point there).
    assert not [name for name in seen["tmp"] if name.startswith("dsh")], seen
    # Its sockets: shell, iopub, stdin, control (a forked kernel serves no heartbeat).
    assert seen["workspace"] == ["home", "tmp", "work", *(f"zmq-{n}" for n in range(1, 5))]
    assert seen["processes"] == [1, 2]


async def test_a_concurrent_run_and_the_pool_are_out_of_reach(harness: Harness) -> None:
    """The attacker knows where the victim's and the pooled kernel's workspaces are (their
    IPC sockets, a stock launch's connection file): it can list, read and connect to
    none of it, and sees no other process. The victim's calls all reach the host."""
    runtime = await harness.runtime(pool_size=3)  # the victim's, the attacker's, one idle
    assert runtime._pool is not None
    await runtime._pool.wait_filled()
    victim = Victim()
    victim_registry, victim_log = code_registry(runtime, *victim.tools())
    victim_run = asyncio.ensure_future(run_code(victim_registry, Victim.PROGRAM, call_id="victim"))
    assert await asyncio.wait_for(victim.cwd, 30) == "/workspace/work"
    [victim_session] = [s for s in live_sessions() if s.used]
    pooled = runtime._pool._ready[-1]  # the attacker takes the oldest
    paths = {f"victim {key}": path for key, path in targets(victim_session).items()}
    paths.update({f"pool {key}": path for key, path in targets(pooled).items()})
    attacker_registry, _ = code_registry(runtime)
    try:
        attacked = await run_code(attacker_registry, SNOOP.format(paths=paths),
                                  call_id="attacker")
    finally:
        victim.release.set()
    assert attacked.error is None, attacked.error
    assert_out_of_reach(returned_by(attacked), list(paths))
    result = await victim_run
    assert result.error is None and returned_by(result) == [0, 1, 2, 3, 4]
    assert victim.counted == [0, 1, 2, 3, 4]
    assert victim_log.settlement().started == 7
    assert not await harness.finish()


FORGE = """\
import asyncio, os, socket, zmq, zmq.asyncio
from jupyter_client.session import Session
stolen = {stolen!r}
listener = socket.socket(socket.AF_UNIX)
listener.bind(os.path.join(os.getcwd(), "attacker.sock"))
listener.listen()
listener.setblocking(False)
context = zmq.asyncio.Context()
shell = context.socket(zmq.DEALER)
shell.connect(f"ipc://{{stolen['ip']}}-{{stolen['shell_port']}}")
session = Session(key=stolen["key"].encode())
offer = {{"kind": "carrier", "path": listener.getsockname(), "token": "attacker"}}
for _ in range(5):  # the DEALER connects asynchronously: repeat the offer for a while
    session.send(shell, "comm_msg", {{"comm_id": stolen["comm_id"], "data": offer}})
    await asyncio.sleep(0.1)
control = context.socket(zmq.DEALER)  # proof that the victim was reached (and the key
control.connect(f"ipc://{{stolen['ip']}}-{{stolen['control_port']}}")  # is right): the
session.send(control, "kernel_info_request", {{}})  # control channel answers mid-cell
reached = session.deserialize(session.feed_identities(
    await asyncio.wait_for(control.recv_multipart(), 10))[1])["msg_type"]
control.close(0)
await tools.offered({{}})  # the victim makes its calls now
loop = asyncio.get_running_loop()
try:
    connection, _ = await asyncio.wait_for(loop.sock_accept(listener), 2)
    intercepted = (await asyncio.wait_for(loop.sock_recv(connection, 65536), 2)).decode()
except (TimeoutError, OSError) as error:
    intercepted = None
shell.close(0)
context.term()
return {{"reached": reached, "intercepted": intercepted}}
"""


async def test_a_forged_carrier_offer_is_ignored(harness: Harness) -> None:
    """Even with the victim kernel's key and sockets (stolen from the host here, as an
    unconfined program could by reading memory), a carrier offer sent to it mid-run is
    ignored: a carrier is named by the signed setup cell only. Every call the victim makes
    afterwards reaches the host's pipeline. (Both runs are unconfined here: confined, the
    victim could not even reach the attacker's socket.)"""
    runtime = await harness.runtime(sandbox=None, wall_seconds=20)
    victim = Victim()
    victim_registry, victim_log = code_registry(runtime, *victim.tools())
    victim_run = asyncio.ensure_future(run_code(victim_registry, Victim.PROGRAM, call_id="victim"))
    await asyncio.wait_for(victim.cwd, 30)
    [session] = [s for s in live_sessions() if s.used]
    info = session.process.connection_info
    stolen = {"ip": info["ip"], "shell_port": info["shell_port"], "key": info["key"],
              "control_port": info["control_port"], "comm_id": session.comm_id}
    attacker = await harness.runtime(sandbox=None)  # to reach the victim's socket files
    offered = asyncio.Event()

    async def signal_offered(_args: Any, _ctx: ToolRunContext) -> Any:
        offered.set()
        return None

    attacker_registry, _ = code_registry(attacker, json_tool("offered", signal_offered))
    forged = asyncio.ensure_future(run_code(attacker_registry, FORGE.format(stolen=stolen),
                                            call_id="attacker"))
    await asyncio.wait_for(offered.wait(), 30)
    victim.release.set()
    result = await victim_run
    attacked = await forged
    assert attacked.error is None, attacked.error
    assert returned_by(attacked) == {
        "reached": "kernel_info_reply", "intercepted": None}
    assert result.error is None and returned_by(result) == [0, 1, 2, 3, 4]
    assert victim.counted == [0, 1, 2, 3, 4]
    victim_log.settlement()
    assert not await harness.finish()


PLANT = """\
import asyncio, zmq, zmq.asyncio
from jupyter_client.session import Session
stolen = {stolen!r}
context = zmq.asyncio.Context()
shell = context.socket(zmq.DEALER)
shell.connect(f"ipc://{{stolen['ip']}}-{{stolen['shell_port']}}")
session = Session(key=stolen["key"].encode())
code = "import builtins; builtins.dsh_planted = True"
session.send(shell, "execute_request", {{"code": code, "silent": True, "store_history": False,
             "user_expressions": {{}}, "allow_stdin": False, "stop_on_error": True}})
reply = await asyncio.wait_for(shell.recv_multipart(), 10)
shell.close(0)
context.term()
return session.deserialize(session.feed_identities(reply)[1])["content"]["status"]
"""


async def test_a_pooled_kernel_that_saw_foreign_traffic_is_discarded(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """Code planted in the idle pooled kernel (with its stolen key) never runs in the next
    run: the kernel published on iopub for a request that was not the host's, so the pool
    discards it and the run gets a fresh kernel."""
    runtime = await harness.runtime(pool_size=1)
    assert runtime._pool is not None
    await runtime._pool.wait_filled()
    pooled = runtime._pool._ready[0]
    info = pooled.process.connection_info
    # The confined kernel's sockets, as an unconfined program of the host's user reaches
    # them: through the root of the process that confined it.
    ip = f"/proc/{pooled.workspace.confiner_pid}/root/workspace/zmq"
    stolen = {"ip": ip, "shell_port": info["shell_port"], "key": info["key"]}
    attacker_registry, _ = code_registry(await harness.runtime(sandbox=None))
    planted = await run_code(attacker_registry, PLANT.format(stolen=stolen), call_id="attacker")
    assert planted.error is None and returned_by(planted) == "ok"
    registry, _ = code_registry(runtime)
    check = "import builtins, os\nreturn [hasattr(builtins, 'dsh_planted'), os.getcwd()]"
    result = await run_code(registry, check, call_id="next")
    assert result.error is None, result.error
    value = returned_by(result)
    assert value[0] is False, "the planted code ran in the next run"
    assert pooled._closed  # discarded, not handed out
    assert "saw traffic other than the host's" in caplog.text
    assert not hasattr(builtins, "dsh_planted")
    assert not await harness.finish()


async def test_stateful_sessions_are_out_of_each_others_reach(harness: Harness) -> None:
    """On a stateful runtime, two conversations (two registries: two session keys) each keep
    a kernel. The attacker's session, knowing where the victim's kept kernel lives, can list,
    read and connect to none of it, sees neither its variables nor its processes; the
    victim's session keeps its own state; closing the runtime leaves nothing behind."""
    runtime = await harness.runtime(pool_size=1, stateful=StatefulConfig())
    victim = Victim()
    victim_registry, _ = code_registry(runtime, *victim.tools())
    kept = await run_code(victim_registry, "secret = 'victim-only'", call_id="v1")
    assert kept.error is None, kept.error
    program = Victim.PROGRAM.replace("return answers", "return [answers, secret]")
    victim_run = asyncio.ensure_future(run_code(victim_registry, program, call_id="v2"))
    await asyncio.wait_for(victim.cwd, 30)
    [victim_session] = [s for s in live_sessions() if s.used]
    paths = {f"victim {key}": path for key, path in targets(victim_session).items()}
    attacker_registry, _ = code_registry(runtime)
    try:
        attacked = await run_code(attacker_registry, "found = 'secret' in globals()\n"
                                  + SNOOP.format(paths=paths), call_id="attacker")
        again = await run_code(attacker_registry, "return [found, sorted(seen)[0]]",
                               call_id="a2")
    finally:
        victim.release.set()
    assert attacked.error is None, attacked.error
    assert_out_of_reach(returned_by(attacked), list(paths))
    assert returned_by(again) == [False, "processes"]  # its own state, not the victim's
    result = await victim_run
    assert result.error is None and returned_by(result) == [[0, 1, 2, 3, 4], "victim-only"]
    assert len(runtime.sessions) == 2
    assert not await harness.finish()
