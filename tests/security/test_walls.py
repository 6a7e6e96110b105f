"""The walls behind the namespaces, attacked from inside a real program through ``run_code``
on the default runtime (both launchers): what a root host must never give a program
(sysctls, ``core_pattern``, uid 0), the masked ``/proc``, the host's name, the syscall
filter, Landlock, and the neutral view of the host's paths.

Run as root (CI and Docker do), these are the attacks that reached host root before the
kernel was mapped to ``nobody`` and ``/proc/sys`` was covered; run as an ordinary user they
check the same walls with the user's own uid (``test_ordinary_user`` runs a whole host as
one).
"""

from __future__ import annotations

import os
import platform
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
from reliability_support import Harness, echo_body, json_tool, run_code

from dsh_jupyter.kernel.confine.sandbox import (
    KERNEL_HOSTNAME,
    UNPRIVILEGED_IDS,
    SandboxConfig,
    confinement_problem,
    landlock_abi,
)
from dsh_jupyter.kernel.confine.seccomp import DENIED, filter_problem

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(90),
              pytest.mark.skipif(confinement_problem() is not None,
                                 reason=f"no confinement here: {confinement_problem()}")]

LAUNCHERS = pytest.mark.parametrize("launcher", ["fork", "stock"])
ROOT = os.geteuid() == 0

ATTEMPT = """\
import ctypes, errno, os, socket
seen = {}
def attempt(name, action):
    try:
        seen[name] = action()
    except OSError as error:
        seen[name] = errno.errorcode.get(error.errno, type(error).__name__)
def read(path, mode="r"):
    with open(path, mode) as file:
        return file.read()
def write(path, text):
    with open(path, "w") as file:
        file.write(text)
    return "written"
"""


async def attack(harness: Harness, program: str, **options: Any) -> Any:
    """Run ``program`` (after :data:`ATTEMPT`) on a fresh default runtime; its value."""
    registry, log = await harness.registry(json_tool("echo", echo_body), **options)
    result = await run_code(registry, ATTEMPT + program)
    assert result.error is None, result.error
    log.settlement()
    assert isinstance(result.value, dict)
    return result.value["result"]


SYSCTLS = tuple(name for name in (
    "kernel/core_pattern", "kernel/hostname", "vm/drop_caches", "kernel/randomize_va_space",
    "fs/file-max", "kernel/modprobe", "net/ipv4/ip_forward")
    if os.path.exists(f"/proc/sys/{name}"))

CORE_PATTERN = """\
script = os.path.join(os.getcwd(), "x.sh")
write(script, "#!/bin/sh\\necho pwned > {marker}\\n")
os.chmod(script, 0o755)
for name in {sysctls!r}:
    attempt(name, lambda name=name: write("/proc/sys/" + name, "|" + script))
import subprocess, sys
crashed = subprocess.run([sys.executable, "-c", "import os; os.abort()"], capture_output=True)
seen["child"] = crashed.returncode
return seen
"""


@LAUNCHERS
async def test_the_core_pattern_escape_fails(harness: Harness, launcher: str,
                                             tmp_path: Path) -> None:
    """A program sets ``core_pattern`` to a pipe into its own script and crashes a child: the
    write fails, the host's sysctl is unchanged and no script ran (as host root it wrote a
    file on the host in under a second). Every root-writable sysctl refuses the same way."""
    marker = tmp_path / f"pwned-{uuid.uuid4().hex}"
    before = Path("/proc/sys/kernel/core_pattern").read_text()  # noqa: ASYNC240
    seen = await attack(harness, CORE_PATTERN.format(marker=str(marker), sysctls=SYSCTLS),
                        launcher=launcher)
    for name in SYSCTLS:
        assert seen[name] in ("EROFS", "EACCES"), seen
    assert seen["child"] == -6  # SIGABRT: the crash happened
    assert Path("/proc/sys/kernel/core_pattern").read_text() == before  # noqa: ASYNC240
    assert not marker.exists()
    assert not await harness.finish()


MASKED = """\
def first_file(path):
    for directory, _, files in os.walk(path):
        for name in sorted(files):
            return os.path.join(directory, name)
for name in {read_only!r}:
    path = "/proc/" + name
    probe = first_file(path) if os.path.isdir(path) else path
    if probe and os.path.lexists(probe):
        attempt("write " + name, lambda probe=probe: write(probe, "1"))
for name in {masked!r}:
    path = "/proc/" + name
    if os.path.lexists(path):
        attempt("read " + name, lambda path=path: sorted(os.listdir(path))
                if os.path.isdir(path) else read(path, "rb").decode())
        attempt("write " + name, lambda path=path: write(path, "1")
                if not os.path.isdir(path) else write(path + "/x", "1"))
attempt("remount /proc/sys", lambda: ctypes.CDLL(None, use_errno=True).mount(
    None, b"/proc/sys", None, 0x20, None) or "remounted")
return seen
"""


@LAUNCHERS
async def test_masked_proc(harness: Harness, launcher: str) -> None:
    """``/proc``'s sensitive files, as runc and bubblewrap mask them: the read-only ones
    refuse every write, the masked ones read as empty, and nothing can be remounted."""
    from dsh_jupyter.kernel.confine._confine.root import PROC_MASKED, PROC_READ_ONLY

    seen = await attack(harness, MASKED.format(read_only=PROC_READ_ONLY, masked=PROC_MASKED),
                        launcher=launcher)
    writes = {name: value for name, value in seen.items() if name.startswith("write ")}
    reads = {name: value for name, value in seen.items() if name.startswith("read ")}
    assert "write sys" in writes and len(reads) > 3, seen  # both kinds were tried
    assert "written" not in writes.values(), seen
    assert writes["write sys"] in ("EROFS", "EACCES"), seen
    assert all(value in ("", []) for value in reads.values()), seen
    assert seen["remount /proc/sys"] != "remounted"
    assert not await harness.finish()


IDENTITY = """\
seen["uid"] = [os.getuid(), os.geteuid(), os.getgid(), os.getegid()]
seen["groups"] = os.getgroups()
seen["uid_map"] = read("/proc/self/uid_map").split()
seen["gid_map"] = read("/proc/self/gid_map").split()
attempt("setuid 0", lambda: os.setuid(0) or "became root")
attempt("hostname", socket.gethostname)
attempt("sethostname", lambda: socket.sethostname("dsh-owned") or "renamed")
seen["cgroup"] = sorted({line.split(":", 2)[2].strip() for line in read("/proc/self/cgroup")
                         .splitlines()})
seen["uptime"] = float(read("/proc/uptime").split()[0])
return seen
"""


@LAUNCHERS
async def test_uid_hostname_and_namespaces(harness: Harness, launcher: str) -> None:
    """On a root host the kernel is ``nobody`` to the host's kernel: only that uid and gid
    are mapped (host uid 0 never is) and no supplementary group is kept; as an ordinary
    user, the user's own. It has a host name of its own that it cannot change, sees its
    cgroups below its own root, and its boot clock started with it."""
    host_name = socket.gethostname()
    seen = await attack(harness, IDENTITY, launcher=launcher)
    uid, gid = UNPRIVILEGED_IDS if ROOT else (os.getuid(), os.getgid())
    assert seen["uid"] == [uid, uid, gid, gid], seen
    assert seen["uid_map"] == [str(uid), str(uid), "1"], seen  # inside -> host, one id
    assert seen["gid_map"] == [str(gid), str(gid), "1"], seen
    if ROOT:
        assert seen["groups"] == [], seen
    assert seen["setuid 0"] in ("EPERM", "EINVAL"), seen
    assert seen["hostname"] == KERNEL_HOSTNAME and seen["sethostname"] == "EPERM", seen
    assert socket.gethostname() == host_name
    # Its own cgroup namespace: the host process's cgroup is the root it sees ("/"), its
    # own cgroups (where the host can make them) a directory below it: no host path.
    own = Path(f"/proc/{os.getpid()}/cgroup").read_text()  # noqa: ASYNC240
    host_paths = {line.split(":", 2)[2] for line in own.splitlines()} - {"/"}
    assert not host_paths & set(seen["cgroup"]), seen
    assert all(path == "/" or path.startswith("/dsh-runtime-") for path in seen["cgroup"]), seen
    assert seen["uptime"] < 60, seen  # the host has been up longer than its test run
    assert not await harness.finish()


# x86_64 and aarch64 numbers of the calls tried (ctypes' syscall() takes numbers).
SYSCALLS = {
    "x86_64": {"unshare": 272, "setns": 308, "mount": 165, "pivot_root": 155, "chroot": 161,
               "ptrace": 101, "process_vm_readv": 310, "kexec_load": 246, "init_module": 175,
               "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250,
               "add_key": 248, "io_uring_setup": 425, "clock_settime": 227, "clone3": 435,
               "open_by_handle_at": 304, "fsopen": 430, "acct": 163},
    "aarch64": {"unshare": 97, "setns": 268, "mount": 40, "pivot_root": 41, "chroot": 51,
                "ptrace": 117, "process_vm_readv": 270, "kexec_load": 104, "init_module": 105,
                "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "keyctl": 219,
                "add_key": 217, "io_uring_setup": 425, "clock_settime": 112, "clone3": 435,
                "open_by_handle_at": 265, "fsopen": 430, "acct": 89},
}
CLONE_NUMBER = {"x86_64": 56, "aarch64": 220}

FILTERED = """\
libc = ctypes.CDLL(None, use_errno=True)
def call(number, *args):
    result = libc.syscall(number, *[ctypes.c_long(a) for a in args])
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]
for name, number in {numbers!r}.items():
    seen[name] = call(number, 0, 0, 0, 0, 0)
seen["clone with CLONE_NEWUSER"] = call({clone}, 0x10000000 | 17, 0, 0, 0, 0)
seen["unshare CLONE_NEWUSER"] = call({numbers[unshare]}, 0x10000000)
for family in (17, 38, 40, 31):  # AF_PACKET, AF_ALG, AF_VSOCK, AF_BLUETOOTH
    attempt(f"socket {{family}}", lambda family=family: socket.socket(family, 1).close())
import fcntl, termios
attempt("TIOCSTI", lambda: fcntl.ioctl(0, termios.TIOCSTI, b"x"))
seen["personality ADDR_NO_RANDOMIZE"] = call({personality}, 0x0040000)
seen["filter"] = [line.split()[1] for line in read("/proc/self/status").splitlines()
                  if line.startswith("Seccomp:")][0]
import subprocess, threading
seen["subprocess"] = subprocess.run(["true"]).returncode
worker = threading.Thread(target=lambda: None)
worker.start()
worker.join()
seen["thread"] = "ok"
return seen
"""


@LAUNCHERS
@pytest.mark.skipif(filter_problem() is not None, reason=f"no filter here: {filter_problem()}")
@pytest.mark.skipif(platform.machine() not in SYSCALLS, reason="syscall numbers of x86_64 "
                    "and aarch64 only")
async def test_denied_syscalls(harness: Harness, launcher: str) -> None:
    """Each call the filter denies fails with EPERM (clone3: ENOSYS, so the C library
    falls back to clone), namespace flags of clone too, socket families other than
    unix, IP and netlink with EAFNOSUPPORT; threads and subprocesses still work."""
    machine = platform.machine()
    numbers = SYSCALLS[machine]
    assert all(name in sum(DENIED.values(), ()) for name in numbers if name != "clone3")
    program = FILTERED.format(numbers=numbers, clone=CLONE_NUMBER[machine],
                              personality=135 if machine == "x86_64" else 92)
    seen = await attack(harness, program, launcher=launcher)
    for name in numbers:
        assert seen[name] == ("ENOSYS" if name == "clone3" else "EPERM"), (name, seen)
    assert seen["clone with CLONE_NEWUSER"] == "EPERM"
    assert seen["unshare CLONE_NEWUSER"] == "EPERM"
    for family in (17, 38, 40, 31):
        assert seen[f"socket {family}"] == "EAFNOSUPPORT", seen
    assert seen["TIOCSTI"] == "EPERM"
    assert seen["personality ADDR_NO_RANDOMIZE"] == "EPERM"
    assert seen["filter"] == "2"  # SECCOMP_MODE_FILTER
    assert seen["subprocess"] == 0 and seen["thread"] == "ok"
    assert not await harness.finish()


LANDLOCKED = """\
attempt("write /proc/self/comm", lambda: write("/proc/self/comm", "renamed"))
attempt("list /", lambda: len(os.listdir("/")) > 0)
attempt("write /dev/shm", lambda: write("/dev/shm/probe", "x"))
attempt("write workspace", lambda: write("probe", "x"))
return seen
"""


@LAUNCHERS
@pytest.mark.skipif(landlock_abi() == 0, reason="this Linux has no Landlock")
async def test_landlock(harness: Harness, launcher: str) -> None:
    """The Landlock ruleset refuses what file modes would allow: renaming itself through
    ``/proc/self/comm`` (its own file, writable without Landlock); its workspace and
    ``/dev/shm`` stay writable, any directory listable."""
    seen = await attack(harness, LANDLOCKED, launcher=launcher)
    assert seen["write /proc/self/comm"] == "EACCES", seen
    assert seen["list /"] is True
    assert seen["write /dev/shm"] == seen["write workspace"] == "written"
    unconfined = await attack(harness, LANDLOCKED, launcher=launcher, sandbox=None)
    assert unconfined["write /proc/self/comm"] == "written"  # the wall is Landlock's
    assert not await harness.finish()


VIEW = """\
seen["cwd"] = os.getcwd()
seen["env"] = {{k: os.environ[k] for k in ("HOME", "TMPDIR", "IPYTHONDIR", "PATH")}}
seen["mounts"] = [line.split()[4] for line in read("/proc/self/mountinfo").splitlines()]
seen["unseen PATH entries"] = [entry for entry in os.environ["PATH"].split(":")
                               if not os.path.isdir(entry)]
return seen
"""


@LAUNCHERS
async def test_neutral_paths(harness: Harness, launcher: str) -> None:
    """The kernel sees its directories as /workspace and /tmp: no mount point, working
    directory or variable names the host's runtime directory, and PATH holds only
    directories it can see."""
    seen = await attack(harness, VIEW.format(), launcher=launcher)
    runtime_dir = str(harness.runtimes[-1]._directory)
    assert seen["cwd"] == "/workspace/work"
    assert seen["env"]["HOME"] == "/workspace/home" and seen["env"]["TMPDIR"] == "/tmp"
    assert "/workspace" in seen["mounts"] and "/tmp" in seen["mounts"]
    assert not [point for point in seen["mounts"] if "dsh-" in point], seen["mounts"]
    assert runtime_dir not in repr(seen)
    assert seen["unseen PATH entries"] == []
    home = os.environ.get("HOME", "/nonexistent")
    assert not [entry for entry in seen["env"]["PATH"].split(":")
                if entry.startswith(home + "/") and ".venv" not in entry], seen["env"]
    assert not await harness.finish()


@LAUNCHERS
async def test_a_read_only_path_below_tmp_is_seen_in_the_kernels_own_tmp(
        harness: Harness, launcher: str, tmp_path: Path) -> None:
    """A path the kernel may read that lives below the host's /tmp (an installation made
    with ``mktemp -d``, as CI's venv is): it is bound in the kernel's own /tmp, read-only,
    and nothing else of the host's /tmp comes with it."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "table.csv").write_text("a,b\n1,2\n")
    (tmp_path / "secret").write_text("host only")
    program = (f"attempt('read', lambda: read({str(data / 'table.csv')!r}))\n"
               f"attempt('write', lambda: write({str(data / 'new')!r}, 'x'))\n"
               f"attempt('sibling', lambda: read({str(tmp_path / 'secret')!r}))\n"
               "return seen\n")
    seen = await attack(harness, program, launcher=launcher,
                        sandbox=SandboxConfig(read_only_paths=(str(data),)))
    assert seen == {"read": "a,b\n1,2\n", "write": "EROFS", "sibling": "ENOENT"}, seen
    assert not (data / "new").exists()
    assert not await harness.finish()
