"""A whole host run as an ordinary user (the suite itself runs as root in CI and Docker).

As root, the test makes a private mount namespace in which an ordinary user can reach
this Python (a Python under root's 0700 home is bound onto a tmpfs there) and has a
``/tmp`` of its own, drops to that user's uid and gid, and runs a real ``run_code``
program there that attacks the same walls as ``test_walls``: the kernel maps the user's
own uid (there is no other to map), the sysctls and the syscall filter hold, a memory cap
holds through ``RLIMIT_DATA`` (no cgroup is delegated to the user), and the runtime says
which wall is missing, once; ``sandbox="required"`` refuses to run without it.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_jupyter.kernel.confine.sandbox import confinement_problem

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120),
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user "
                                 "(as an ordinary user the whole suite is this test)"),
              pytest.mark.skipif(not (shutil.which("unshare") and shutil.which("setpriv")),
                                 reason="needs util-linux's unshare and setpriv"),
              pytest.mark.skipif(confinement_problem() is not None,
                                 reason=f"no confinement here: {confinement_problem()}")]

HOST = r'''
import asyncio, json, os, sys, warnings
from dsh_jupyter import ToolCall, ToolRegistry
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.kernel.confine.sandbox import SandboxConfig

PROGRAM = """
import errno, os
seen = {"uid": [os.getuid(), os.getgid()], "uid_map": open("/proc/self/uid_map").read().split(),
        "filter": [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")]}
try:
    open("/proc/sys/kernel/core_pattern", "w").write("|/workspace/x")
    seen["core_pattern"] = "written"
except OSError as error:
    seen["core_pattern"] = errno.errorcode[error.errno]
return seen
"""

async def run(registry, code):
    result = await registry.execute(ToolCall(call_id="c", name="run_code",
                                             arguments={"code": code, "description": "probe"}))
    return result.value["result"] if result.error is None else result.error.message

async def main():
    report = {"uid": os.getuid()}
    sandbox = SandboxConfig(memory_bytes=512 << 20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with KernelRuntime(KernelRuntimeConfig(pool_size=0, sandbox=sandbox)) as runtime:
            registry = ToolRegistry(mode="code", code_runtime=runtime)
            report["seen"] = await run(registry, PROGRAM)
            report["memory"] = await run(registry, "x = bytearray(3 << 30)")
    report["warnings"] = [str(w.message) for w in caught]
    try:
        async with KernelRuntime(KernelRuntimeConfig(sandbox=SandboxConfig(required=True))):
            report["required"] = "ran"
    except Exception as error:
        report["required"] = f"{type(error).__name__}: {error}"
    print(json.dumps(report))

asyncio.run(main())
'''


def ordinary_user() -> pwd.struct_passwd:
    for entry in pwd.getpwall():
        if 1000 <= entry.pw_uid < 65534:
            return entry
    pytest.skip("no ordinary user (uid 1000 to 65533) on this machine")


def blocked(path: str, uid: int) -> str | None:
    """The first directory on ``path``'s way that ``uid`` cannot pass (no search permission
    for others: root's home, a 0700 /tmp, a ``mktemp -d`` directory), or ``None``."""
    parts = Path(path).resolve().parts
    for depth in range(1, len(parts)):
        directory = Path(*parts[:depth + 1])
        info = directory.stat()
        if directory.is_dir() and info.st_uid != uid and not info.st_mode & 0o001:
            return str(directory)
    return None


def host_as(user: pwd.struct_passwd) -> dict[str, object]:
    """Run :data:`HOST` as ``user`` in a private mount namespace; its JSON report. What the
    user must reach (this Python, the venv, the checkout) and cannot is bound, read-only
    as it was, at the same path on tmpfs directories it can pass; ``/tmp`` is a tmpfs of
    its own."""
    needed = sorted({os.path.realpath(p) for p in (
        sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)),
        str(Path(__file__).resolve().parents[2]))}, key=len)
    outermost = [p for i, p in enumerate(needed)
                 if not any(p.startswith(q.rstrip("/") + "/") for q in needed[:i])]
    staged = [(path, top) for path in outermost if (top := blocked(path, user.pw_uid))]
    stage = "/mnt" if os.path.isdir("/mnt") else "/media"
    steps = ["set -e", f"mount -t tmpfs tmpfs {stage}"]
    for number, (path, _top) in enumerate(staged):
        steps += [f"mkdir -p {stage}/{number}", f"mount --bind {path} {stage}/{number}"]
    tops = sorted({top for _path, top in staged} | {"/tmp"}, key=len)
    for top in tops:
        # A top inside /tmp (a mktemp -d directory under a 1777 /tmp) is hidden once /tmp,
        # shorter and so first, has its tmpfs: made again on it before it gets its own.
        steps += [f"mkdir -p {top}",
                  f"mount -t tmpfs -o mode={'1777' if top == '/tmp' else '0755'} tmpfs {top}"]
    for number, (path, _top) in enumerate(staged):
        steps += [f"mkdir -p {path}", f"mount --bind {stage}/{number} {path}"]
    steps += [f"mkdir -p /tmp/home && chown {user.pw_uid}:{user.pw_gid} /tmp/home",
              f"exec setpriv --reuid={user.pw_uid} --regid={user.pw_gid} --clear-groups "
              f"env -i HOME=/tmp/home TMPDIR=/tmp PATH=/usr/bin:/bin "
              f"{sys.executable} -c \"$HOST\""]
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           "\n".join(steps)], capture_output=True, text=True, timeout=100,
                          env={**os.environ, "HOST": HOST}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_an_ordinary_users_host() -> None:
    user = ordinary_user()
    report = host_as(user)
    assert report["uid"] == user.pw_uid
    seen = report["seen"]
    assert isinstance(seen, dict), seen
    assert seen["uid"] == [user.pw_uid, user.pw_gid]
    assert seen["uid_map"] == [str(user.pw_uid), str(user.pw_uid), "1"]
    assert seen["core_pattern"] in ("EROFS", "EACCES")
    assert seen["filter"] == ["2"]
    assert isinstance(report["memory"], str)
    assert report["memory"].startswith("code run failed (memory-limit): the program ran out of "
                                       "memory: its kernel may use 512 MiB")
    # No cgroup is delegated to the user (none is found without cgroup_parent): one warning
    # says so and what holds instead, and a required sandbox refuses.
    warnings = report["warnings"]
    assert isinstance(warnings, list) and len(warnings) == 1, warnings
    assert "no cgroups" in warnings[0] and "processes are not capped" in warnings[0]
    assert str(report["required"]).startswith(
        "CodeModeError: sandbox='required' refuses to run kernels without every wall: "
        "no cgroups")
