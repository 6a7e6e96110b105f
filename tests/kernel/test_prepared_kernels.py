"""Forked kernels start from an application, kernel and shell the fork server built before
any fork (``launch/_kernelapp.py``): the server builds them without a thread, a zmq context,
an event loop or a file; each kernel finishes them as a stock kernel would have started; no
kernel sees another's state or identity; other options start the usual way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kernel_support import RuntimeFactory, run

from dsh_jupyter.kernel.launch import forkserver
from dsh_jupyter.kernel.launch.base import CHILD_SCRIPT, KERNEL_ARGS

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(90)]

PREPARE = """\
import asyncio, gc, importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("_dsh_jupyter_child", {child!r})
child = importlib.util.module_from_spec(spec)
spec.loader.exec_module(child)
kernelapp = child.load("_dsh_jupyter_kernelapp", {kernelapp!r})
sys.modules["debugpy"] = None  # as the fork server hides it
import zmq
from ipykernel.kernelapp import IPKernelApp
from ipykernel.zmqshell import ZMQInteractiveShell
found = {{}}
for name, argv in json.loads({cases!r}).items():
    prepared = kernelapp.prepare(argv)
    found[name] = {{
        "prepared": prepared is not None,
        "singletons": [IPKernelApp.initialized(), ZMQInteractiveShell.initialized()],
        "threads": len(os.listdir("/proc/self/task")),
        "zmq contexts": sum(isinstance(o, zmq.Context) for o in gc.get_objects()),
        "event loops": sum(isinstance(o, asyncio.AbstractEventLoop) for o in gc.get_objects()),
    }}
print(json.dumps(found))
"""


def prepare_in_a_fresh_interpreter(tmp_path: Path, cases: dict[str, list[str]]
                                   ) -> dict[str, dict[str, Any]]:
    """``_kernelapp.prepare`` on each case's options in turn, in a new interpreter whose
    HOME, IPython directory and working directory are empty directories of ``tmp_path``."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    script = PREPARE.format(child=str(CHILD_SCRIPT), kernelapp=str(forkserver.KERNELAPP_SCRIPT),
                            cases=json.dumps(cases))
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home),
           "IPYTHONDIR": str(home / ".ipython")}
    done = subprocess.run([sys.executable, "-I", "-c", script], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    found: dict[str, dict[str, Any]] = json.loads(done.stdout.splitlines()[-1])
    assert list(home.iterdir()) == [] and list(cwd.iterdir()) == []  # nothing written
    return found


def test_preparing_starts_no_thread_no_zmq_context_no_event_loop(tmp_path: Path) -> None:
    found = prepare_in_a_fresh_interpreter(tmp_path, {"ours": list(KERNEL_ARGS)})
    assert found["ours"] == {"prepared": True, "singletons": [True, True], "threads": 1,
                             "zmq contexts": 0, "event loops": 0}


def test_options_it_cannot_prepare_leave_nothing_behind(tmp_path: Path) -> None:
    found = prepare_in_a_fresh_interpreter(tmp_path, {
        "a flag": ["--debug"],
        "a kernel class that fails": [*KERNEL_ARGS, "--IPKernelApp.kernel_class=no.such.Kernel"],
    })
    for case in found.values():
        assert case == {"prepared": False, "singletons": [False, False], "threads": 1,
                        "zmq contexts": 0, "event loops": 0}


SHELL_STATE = """\
import os, sys
ip = get_ipython()
kernel, history = ip.kernel, ip.history_manager
return {
    "namespace": sorted(ip.user_ns), "hidden": sorted(ip.user_ns_hidden),
    "ipython_dir": ip.ipython_dir == os.environ["IPYTHONDIR"],
    "profile_dir": ip.profile_dir.location == os.environ["IPYTHONDIR"] + "/profile_default",
    "profile_dir exists": os.path.isdir(ip.profile_dir.startup_dir),
    "starting_dir": ip.starting_dir == os.getcwd(),
    "home_dir": ip.home_dir == os.environ["HOME"],
    "_dh": [str(path) for path in ip.user_ns["_dh"]] == [os.getcwd()],
    "hist_file": str(history.hist_file) == ip.profile_dir.location + "/history.sqlite",
    "environment": [os.environ.get(name) for name in ("TERM", "PAGER", "CLICOLOR")],
    "shell's kernel": ip.kernel is kernel and ip.parent is kernel,
    "kernel's app": type(kernel.parent).__name__,
    "app's and kernel's profile": kernel.profile_dir is ip.profile_dir is kernel.parent.profile_dir,
    "hooks on the kernel's iopub": [ip.displayhook.pub_socket is kernel.iopub_socket,
                                    ip.display_pub.pub_socket is kernel.iopub_socket,
                                    ip.display_pub.session is kernel.session],
    "execute_result topic": ip.displayhook.topic == kernel._topic("execute_result"),
    "kernel's stdout": kernel._stdout is sys.stdout,
    "session's pid": kernel.session.pid == os.getpid(),
    "__main__": sys.modules["__main__"] is ip.user_module,
    "extensions": sorted(ip.extension_manager.loaded),
    "configurables": sorted(type(each).__name__ for each in ip.configurables),
    "line magics": sorted(ip.magics_manager.magics["line"]),
}
"""


async def test_a_prepared_kernel_starts_as_a_stock_one(make_runtime: RuntimeFactory) -> None:
    found = {}
    for launcher in ("fork", "stock"):
        runtime = await make_runtime(launcher=launcher, pool_size=0)
        result = await run(runtime, SHELL_STATE)
        assert result.failure is None, result.failure
        found[launcher] = result.value
    assert found["fork"] == found["stock"]
    state = found["fork"]
    assert isinstance(state, dict)
    assert all(state[key] is True for key in (
        "ipython_dir", "profile_dir", "profile_dir exists", "starting_dir", "home_dir", "_dh",
        "hist_file", "shell's kernel", "app's and kernel's profile", "execute_result topic",
        "kernel's stdout", "session's pid", "__main__")), state
    assert state["environment"] == ["xterm-color", "cat", "1"]
    assert state["hooks on the kernel's iopub"] == [True, True, True]


LEAK = """\
ip = get_ipython()
kernel = ip.kernel
ip.user_ns["leaked"] = ip.user_ns_hidden["leaked"] = 1
ip.meta.leaked = kernel.leaked = kernel.parent.leaked = 1
ip.magics_manager.register_function(lambda line: line, magic_name="leaked")
ip.user_ns["_dh"].append("/leaked")
kernel.session.digest_history.add(b"leaked")
return [kernel.session.session, kernel.session.key.decode(), kernel.ident]
"""
LOOK = """\
ip = get_ipython()
kernel = ip.kernel
seen = ["leaked" in ip.user_ns, "leaked" in ip.user_ns_hidden, hasattr(ip.meta, "leaked"),
        hasattr(kernel, "leaked"), hasattr(kernel.parent, "leaked"),
        "leaked" in ip.magics_manager.magics["line"], "/leaked" in ip.user_ns["_dh"],
        b"leaked" in kernel.session.digest_history]
return [seen, kernel.session.session, kernel.session.key.decode(), kernel.ident]
"""


async def test_kernels_of_one_server_share_no_state_and_no_identity(
        make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(launcher="fork", pool_size=0)
    first = await run(runtime, LEAK)
    second = await run(runtime, LOOK)
    assert first.failure is None and second.failure is None, (first.failure, second.failure)
    assert isinstance(first.value, list) and isinstance(second.value, list)
    seen, *identities = second.value
    assert seen == [False] * 8
    key = identities[1]
    assert isinstance(key, str) and len(key) == 64  # its connection info's: signs its messages
    for mine, theirs in zip(identities, first.value, strict=True):  # session id, key, ident
        assert mine != theirs


async def test_a_server_prepared_for_other_options_starts_kernels_the_usual_way(
        make_runtime: RuntimeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = await make_runtime(launcher="fork", pool_size=0)
    launcher = runtime._launcher
    assert isinstance(launcher, forkserver.ForkLauncher)
    with monkeypatch.context() as patch:
        patch.setattr(forkserver, "KERNEL_ARGS", (*KERNEL_ARGS, "--IPKernelApp.trio_loop=False"))
        await launcher.server()
    program = ("app = get_ipython().kernel.parent\n"
               "return [app.heartbeat is not None, get_ipython().history_manager.enabled]")
    result = await run(runtime, program)
    assert (result.failure, result.value) == (None, [True, False])  # built in the child
    prepared = await make_runtime(launcher="fork", pool_size=0)
    result = await run(prepared, program)
    assert (result.failure, result.value) == (None, [False, False])  # the server's, finished
