"""Where kernels cannot be confined: one clear warning, the documented exposure, the walls
that need no namespace (the syscall filter, Landlock), and the explicit choices
(``sandbox="required"`` fails, ``sandbox=None`` and ``namespaces=False`` are silent).

The platform is real, not simulated: the script below runs in a user namespace whose
``max_user_namespaces`` is 0, so creating the kernels' namespaces fails there as it does
in a container that forbids them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dsh_jupyter.kernel.confine.sandbox import confinement_problem, landlock_abi
from dsh_jupyter.kernel.confine.seccomp import filter_problem

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120)]

SCRIPT = textwrap.dedent("""\
    import asyncio, json, os, sys, warnings
    from dsh_jupyter.errors import CodeModeError
    from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig
    from dsh_jupyter.kernel.confine.sandbox import UnconfinedWarning
    from dsh_jupyter.runtime import FunctionBindings, RunRequest

    PROGRAM = '''
    import os, socket
    seen = {"pid": os.getpid(), "host visible": os.path.exists("/proc/%d" % HOST),
            "filter": [l.split()[1] for l in open("/proc/self/status")
                       if l.startswith("Seccomp:")]}
    def attempt(name, action):
        try:
            seen[name] = action()
        except OSError as error:
            seen[name] = type(error).__name__
    attempt("host file", lambda: open(HOST_FILE).read(12))
    attempt("host environ", lambda: open("/proc/%d/environ" % HOST, "rb").read(4).decode())
    attempt("tcp", lambda: socket.create_connection(("127.0.0.1", PORT), 2).close() or "connected")
    return seen
    '''.replace("HOST_FILE", repr(sys.argv[1])).replace("HOST", str(os.getpid())).replace(
        "PORT", sys.argv[2])

    async def run(**options):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            async with KernelRuntime(KernelRuntimeConfig(pool_size=0, **options)) as runtime:
                first = await runtime.run(RunRequest(PROGRAM, FunctionBindings({})))
                await runtime.run(RunRequest("return 1", FunctionBindings({})))
        messages = [str(w.message) for w in caught if issubclass(w.category, UnconfinedWarning)]
        return {"confined": runtime.confined, "warnings": messages, "value": first.value}

    async def main():
        from dsh_jupyter.kernel.confine.sandbox import SandboxConfig
        report = {"auto": await run(), "none": await run(sandbox=None),
                  "no namespaces": await run(sandbox=SandboxConfig(namespaces=False))}
        try:
            await run(sandbox="required")
            report["required"] = "ran"
        except CodeModeError as error:
            report["required"] = str(error)
        print(json.dumps(report))

    asyncio.run(main())
    """)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
@pytest.mark.skipif(confinement_problem() is not None,
                    reason="user namespaces are unavailable: cannot build the test platform")
def test_a_platform_without_user_namespaces(tmp_path: Path) -> None:
    script = tmp_path / "unconfined.py"
    script.write_text(SCRIPT)
    host_file = tmp_path / "host-file.txt"
    host_file.write_text("host secret: not for programs")
    listener = socket.create_server(("127.0.0.1", 0))  # a host loopback service
    port = listener.getsockname()[1]
    inner = (f"echo 0 > /proc/sys/user/max_user_namespaces && "
             f"exec {sys.executable} {script} {host_file} {port}")
    with listener:
        done = subprocess.run(["unshare", "--user", "--map-root-user", "sh", "-c", inner],
                              capture_output=True, text=True, timeout=100, check=False,
                              env={**os.environ, "PYTHONWARNINGS": "default"})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])

    auto = report["auto"]
    assert auto["confined"] is False
    assert len(auto["warnings"]) == 1  # one per runtime, not per run
    warning = auto["warnings"][0]
    assert "kernels run without namespaces" in warning and "user namespaces" in warning
    assert "the syscall filter, Landlock, rlimits" in warning
    assert "sandbox='required'" in warning
    # ... and the documented exposure is what happens: the host's processes are there,
    # but the walls that need no namespace hold (where this Linux has them).
    for seen in (auto["value"], report["no namespaces"]["value"]):
        assert seen["host visible"] is True and seen["pid"] != 2
        assert seen["filter"] == (["0"] if filter_problem() else ["2"])
        if landlock_abi() > 0:
            assert seen["host file"] == seen["host environ"] == "PermissionError", seen
        if landlock_abi() >= 4:
            assert seen["tcp"] == "PermissionError", seen
    assert report["no namespaces"]["warnings"] == []  # chosen: no warning

    none = report["none"]
    assert none["confined"] is False and none["warnings"] == []
    assert none["value"]["host file"] == "host secret:" and none["value"]["tcp"] == "connected"
    assert none["value"]["filter"] == ["0"]
    assert report["required"].startswith("sandbox='required', but kernels cannot be confined")
