"""Attacks on the host from inside a real program, through ``run_code``.

Each attack runs on the default configuration (confined: it must fail) and, where that
shows the attack is real, on ``sandbox=None`` too (unconfined: it works, as
``docs/security.md`` says). Both launchers: forked kernels and stock jupyter-client
launches are confined by different processes.
"""

from __future__ import annotations

import http.server
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reliability_support import Harness, echo_body, json_tool, run_code

from dsh_jupyter.kernel.confine.sandbox import SandboxConfig, confinement_problem

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(90),
              pytest.mark.skipif(confinement_problem() is not None,
                                 reason=f"no confinement here: {confinement_problem()}")]

LAUNCHERS = pytest.mark.parametrize("launcher", ["fork", "stock"])


async def attack(harness: Harness, program: str, **options: Any) -> Any:
    """Run ``program`` through run_code on a fresh runtime; its return value."""
    registry, log = await harness.registry(json_tool("echo", echo_body), **options)
    result = await run_code(registry, ATTEMPT + program)
    assert result.error is None, result.error
    log.settlement()
    assert isinstance(result.value, dict)
    return result.value["result"]


ATTEMPT = """\
import os, signal
seen = {}
def attempt(name, action):
    try:
        seen[name] = action()
    except OSError as error:
        seen[name] = type(error).__name__
"""

READ_HOST = """\
host = {host}
def read(path, mode="r"):
    with open(path, mode) as file:
        return file.read()
def read_memory():
    with open(f"/proc/{{host}}/mem", "rb") as memory:
        memory.seek({address})
        return memory.read({length}).decode()
attempt("environ", lambda: read(f"/proc/{{host}}/environ", "rb").decode(errors="replace"))
attempt("memory", read_memory)
attempt("host file", lambda: read({host_file!r}))
attempt("signal host", lambda: os.kill(host, 0) or "signalled")
attempt("signal anyone", lambda: os.kill(-1, 0) or "signalled")
attempt("processes", lambda: sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
return seen
"""


@LAUNCHERS
async def test_host_environment_memory_files_and_signals(harness: Harness, launcher: str) -> None:
    """The host's /proc/<pid>/environ and /mem (with a secret at a known address), a host
    file, and signals to the host or to anyone: all out of a confined program's reach."""
    secret = f"dsh-host-secret-{uuid.uuid4().hex}".encode()
    address = id(secret) + bytes.__basicsize__ - 1  # CPython: where a bytes object's data is
    program = READ_HOST.format(host=os.getpid(), address=address, length=len(secret),
                               host_file=__file__)
    confined = await attack(harness, program, launcher=launcher)
    assert confined["environ"] == "FileNotFoundError"
    assert confined["memory"] == "FileNotFoundError"
    assert confined["host file"] == "FileNotFoundError"
    assert confined["signal host"] == "ProcessLookupError"
    assert confined["signal anyone"] == "ProcessLookupError"  # nobody else in its namespace
    assert confined["processes"] == [1, 2]  # its init and itself
    exposed = await attack(harness, program, launcher=launcher, sandbox=None)
    assert "PATH=" in exposed["environ"]
    assert exposed["memory"] == secret.decode()
    assert exposed["host file"] == Path(__file__).read_text()  # noqa: ASYNC240
    assert exposed["signal host"] == "signalled"
    assert not await harness.finish()


WRITE_AROUND = """\
def write(path):
    with open(path, "w") as file:
        file.write("x")
    return "written"
for name, path in {targets!r}.items():
    attempt(name, lambda path=path: write(path))
"""
WRITE_MORE = """\
attempt("own workspace", lambda: write("probe"))
attempt("home", lambda: write(os.path.join(os.environ["HOME"], "probe")))
attempt("tmpdir", lambda: write(os.path.join(os.environ["TMPDIR"], "probe")))
attempt("/tmp", lambda: write("/tmp/dsh-probe"))
attempt("remount /usr writable", lambda: __import__("subprocess").run(
    ["mount", "-o", "remount,rw", "/usr"], capture_output=True).returncode)
attempt("capabilities", lambda: [line.split()[1] for line in open("/proc/self/status")
                                 if line.startswith("CapEff")][0])
return seen
"""


@LAUNCHERS
async def test_writes_outside_the_workspace(harness: Harness, launcher: str,
                                            tmp_path: Path) -> None:
    """Only the kernel's own workspace (and its private /tmp) is writable; the system is
    read-only, and with no capability the program cannot remount it."""
    targets = {"/etc": "/etc/dsh-probe", "/usr": "/usr/dsh-probe",
               "python": os.path.join(os.path.dirname(os.__file__), "dsh-probe.py"),
               "host tmp": str(tmp_path / "probe")}
    seen = await attack(harness, WRITE_AROUND.format(targets=targets) + WRITE_MORE,
                        launcher=launcher)
    assert seen["/etc"] in ("OSError", "PermissionError")  # EROFS
    assert seen["/usr"] in ("OSError", "PermissionError")
    assert seen["python"] in ("OSError", "PermissionError")
    assert seen["host tmp"] == "FileNotFoundError"  # the host's /tmp is not there at all
    assert seen["own workspace"] == seen["home"] == seen["tmpdir"] == "written"
    assert seen["/tmp"] == "written"  # its private /tmp: the workspace's temp
    assert seen["remount /usr writable"] != 0
    assert seen["capabilities"] == "0000000000000000"
    assert not Path("/tmp/dsh-probe").exists()  # noqa: ASYNC240  # one stat
    assert not list(tmp_path.iterdir())  # noqa: ASYNC240  # an empty directory
    exposed = await attack(harness, WRITE_AROUND.format(targets={"host tmp": targets["host tmp"]})
                           + "return seen", launcher=launcher, sandbox=None)
    assert exposed["host tmp"] == "written"  # unconfined, the host's files are the program's
    assert not await harness.finish()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def host_services(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """An HTTP server on the host's loopback and a listening abstract unix socket (ask
    for it before ``harness``, so its thread and sockets are in the baseline)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0dsh-security-{uuid.uuid4().hex}")
    abstract.listen()
    try:
        yield {"port": server.server_address[1], "abstract": abstract.getsockname()}
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        abstract.close()


REACH = """\
import socket, urllib.request
def http():
    with urllib.request.urlopen("http://127.0.0.1:{port}/", timeout=2) as response:
        return response.status
def connect(family, address):
    with socket.socket(family) as probe:
        probe.settimeout(2)
        probe.connect(address)
        return "connected"
attempt("host loopback http", http)
attempt("abstract socket", lambda: connect(socket.AF_UNIX, {abstract!r}))
attempt("internet", lambda: connect(socket.AF_INET, ("192.0.2.1", 80)))
def own_loopback():
    with socket.create_server(("127.0.0.1", 0)) as server:
        with socket.create_connection(server.getsockname(), timeout=2):
            return "works"
attempt("own loopback", own_loopback)
seen["echo"] = await tools.echo({{"tools": "still work"}})
return seen
"""


@LAUNCHERS
async def test_network_reach(host_services: dict[str, Any], harness: Harness,
                             launcher: str) -> None:
    """No host loopback service, no abstract socket, no route out; a loopback of its own
    and the tools still work. ``SandboxConfig(network=True)`` gives the host's network."""
    program = REACH.format(**host_services)
    seen = await attack(harness, program, launcher=launcher)
    assert seen["host loopback http"] in ("URLError", "ConnectionRefusedError")
    assert seen["abstract socket"] == "ConnectionRefusedError"
    assert seen["internet"] == "OSError"  # ENETUNREACH: no route at all
    assert seen["own loopback"] == "works"
    assert seen["echo"] == {"tools": "still work"}
    networked = await attack(harness, program, launcher=launcher,
                             sandbox=SandboxConfig(network=True))
    assert networked["host loopback http"] == 200
    assert networked["abstract socket"] == "connected"
    assert not await harness.finish()
