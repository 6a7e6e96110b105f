"""Confining one kernel with Linux namespaces (standard library plus ctypes; no bubblewrap).

Loaded by path inside the fork server (for forked kernels) and the keeper (for
stock launches); never imported by the host. :func:`enter` is called by a
single-threaded process that is about to become a kernel. It follows
bubblewrap's sequence, in-process so that a forked kernel keeps its preloaded
interpreter. Its processes::

    W (the caller: outside the new PID namespace, waits)
    └── init (PID 1 of the new namespaces: builds the root, then waits and reaps)
        └── kernel (PID 2: returns from enter)

1. W joins the kernel's cgroups (the plan names them), then ``unshare``\\ s a user,
   mount, IPC, PID, UTS, cgroup and time namespace (and network, unless
   ``network``). One host uid and gid are mapped, to themselves: the kernel's
   (``uid``/``gid``). When the host runs as root those are an unprivileged pair
   (``nobody``): W's parent, still in the host's namespaces, writes the map
   (:func:`map_child`), because mapping another uid takes ``CAP_SETUID`` there, and
   host uid 0 is never mapped, so nothing in the namespaces is root to the host's
   kernel (sysctls, ``core_pattern``, files). Otherwise W maps its own ids.
2. W forks init. Init opens what the new root exposes while it still has the
   caller's file access (the system and interpreter paths, the inputs, the seed of
   HOME), switches to the kernel's ids, and builds a new root on a tmpfs: those
   paths read-only at their places, ``/workspace`` a size-capped tmpfs of the
   kernel's own (HOME, ``/tmp``, the working directory), a minimal ``/dev`` and a
   ``/proc`` of the new PID namespace whose sensitive files are masked or read-only
   (as bubblewrap and runc do: ``/proc/sys``, ``/proc/sysrq-trigger``, ``kcore``,
   ...). It pivots into the root and unmounts the old one, so nothing else of the
   host's file system is reachable.
3. Init names the host ``dsh-kernel``, brings up the network namespace's own
   loopback, drops every capability (bounding set included, root locked out by
   securebits), sets ``no_new_privs``, adds a Landlock ruleset where the kernel has
   Landlock and installs the plan's seccomp filter (a BPF program the host built
   with libseccomp, see ``seccomp.py``): from here on the filter binds init and the
   kernel alike.
4. Init reports ``ready`` on the plan's ``ready_file`` (a FIFO the host reads: W
   wrote its own PID there first) and forks the kernel, which :func:`enter`
   returns in. Init reaps orphans and exits with the kernel's status; when it
   exits, everything left in the namespace is killed.

W exits with the init's status (``128 + N`` for death by signal N), so whoever
watches it sees the kernel's fate. A failure before the kernel runs is written to
the plan's ``error_file`` and ends with status :data:`CONFINE_FAILED`.

The host reaches the kernel's ``/workspace`` (its sockets, ``outputs/``) through
``/proc/<W>/root/workspace``: W's root became the new root when init pivoted.

The plan (a JSON object built by ``sandbox.py`` on the host)::

    {"uid", "gid", "network": bool, "hostname", "read_only": [PATH...],
     "view": {"root", "home", "ipython_dir", "tmp", "cwd", "outputs"},
     "workspace_bytes": int, "workspace_files": int, "seed_home": PATH | null,
     "inputs_dir": PATH | null, "inputs": [[HOST PATH, PATH IN inputs_dir], ...],
     "cgroups": [DIR...], "landlock": bool, "seccomp": BASE64 | null,
     "error_file": PATH, "ready_file": PATH | null}

The steps are modules of this package (standard library plus ctypes; loaded from its
directory by the fork server and the keeper, which a host never needs): ``namespaces``
(step 1), ``root`` (step 2), ``privileges``, ``landlock`` and ``syscall_filter`` (step 3),
on the system calls of ``libc``. Run as ``python -I -S <this directory> --probe``, it
tries the whole sequence once and prints ``ok`` or why it failed (``__main__``).
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import struct
import sys
import tempfile
from typing import Any, NoReturn

from .landlock import landlock_abi, restrict_files
from .libc import (
    CONFINE_FAILED,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    ConfineError,
    check,
    fail,
    libc,
    prctl,
    report,
    wait_for,
)
from .namespaces import CLONE_NEWCGROUP, Pipes, map_child, mapping_pipes, take_ids, unshare
from .privileges import drop_privileges, loopback_up, name_host
from .root import build_root, open_exposed
from .syscall_filter import install_filter

__all__ = ["CONFINE_FAILED", "ConfineError", "Pipes", "enter", "landlock_abi", "map_child",
           "mapping_pipes", "probe", "restrict", "tidy_path"]


def enter(plan: dict[str, Any], mapping: Pipes | None = None) -> None:
    """Confine the calling process's future as a kernel (see the module docstring).
    Returns only in the confined kernel process. ``mapping``: the pipes of
    :func:`mapping_pipes`, when the parent maps the kernel's ids (:func:`map_child`)."""
    error_fd = os.open(plan["error_file"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                       0o600)
    parent = os.getppid()
    ready_fd = -1
    try:
        if plan.get("ready_file"):
            # Non-blocking: a host that stopped reading must not hang the start.
            ready_fd = os.open(plan["ready_file"], os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        report(ready_fd, f"pid {os.getpid()}")
        switch_ids = unshare(plan, mapping)
        # A change of credentials (the new user namespace's) clears the parent-death
        # signal: set it again, and leave if the parent is already gone.
        _die_with(parent)
    except (OSError, ConfineError) as error:
        fail(error_fd, error)
    # Interrupts go to the kernel's process group: the waiter and the init ignore them.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        # Opened now: once init pivots, W's root is the new one, without /sys.
        procs = [os.open(os.path.join(directory, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
                 for directory in plan.get("cgroups", ())]
    except OSError as error:
        fail(error_fd, error)
    heard, tell = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    heard.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    init = os.fork()
    if init:
        tell.close()
        _settle(init, procs, heard, ready_fd, error_fd)
    heard.close()
    for fd in procs:
        os.close(fd)
    try:
        exposed = open_exposed(plan)
        if switch_ids:
            take_ids(plan)
        # Only now: taking the kernel's ids cleared it. (Init cannot see W die through
        # getppid, which is 0 in its namespace; W dying before this line is not covered.)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "PR_SET_PDEATHSIG")
        build_root(plan, exposed)
        os.chdir(plan["view"]["cwd"])
        name_host(plan.get("hostname") or "localhost")
        if not plan["network"]:
            loopback_up()
        # Here, not with the other namespaces: W, outside it, moves init and the kernel
        # into their cgroups (which a writer inside a cgroup namespace may not reach).
        check(libc.unshare(CLONE_NEWCGROUP), "unshare the cgroup namespace")
        drop_privileges()
        if plan.get("landlock"):
            restrict_files(plan)
        if plan.get("seccomp"):
            install_filter(base64.b64decode(plan["seccomp"]))
    except (OSError, ConfineError) as error:
        fail(error_fd, error)
    if ready_fd >= 0:
        os.close(ready_fd)
    kernel = os.fork()
    if kernel:
        os.close(error_fd)
        tell.close()
        os._exit(wait_for(kernel))
    os.close(error_fd)
    with contextlib.suppress(OSError):
        tell.send(b"k")  # W learns the kernel's host PID from the message's credentials
    tell.close()
    with contextlib.suppress(ConfineError):
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "PR_SET_PDEATHSIG")
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # ipykernel exits when its parent looks like init, which the kernel's parent is here.
    os.environ.pop("JPY_PARENT_PID", None)


def _die_with(parent: int) -> None:
    """SIGKILL when ``parent`` dies; exit now if it already has."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "PR_SET_PDEATHSIG")
    if os.getppid() != parent:
        os._exit(CONFINE_FAILED)


def _settle(init: int, procs: list[int], heard: socket.socket, ready_fd: int,
            error_fd: int) -> NoReturn:
    """W, once init has forked the kernel: move both into the kernel's cgroups while the
    kernel starts (moving a process waits for an RCU grace period, 5-20 ms: off the
    start's critical path this way; nothing the program runs exists yet), then report
    ``ready`` (the root is built: the host may reach it) and wait. The kernel says it
    exists on ``heard``; the kernel gives its PID as W's namespace numbers it."""
    try:
        said, ancillary, _, _ = heard.recvmsg(1, socket.CMSG_SPACE(12))
        if said == b"k":  # else init failed (the pipe's end of file), and said why
            kernel = next(struct.unpack("iII", data[:12])[0] for level, kind, data
                          in ancillary
                          if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS)
            for fd in procs:
                for pid in (init, kernel):
                    # A kernel that exited at once (a kernelspec that fails) is gone before
                    # it is moved: nothing is left to contain, and it exits as it chose.
                    with contextlib.suppress(ProcessLookupError):
                        os.write(fd, str(pid).encode())
            report(ready_fd, "ready")
    except (OSError, StopIteration) as error:
        with contextlib.suppress(OSError):
            os.kill(init, signal.SIGKILL)
        fail(error_fd, ConfineError(f"move the kernel into its cgroups: {error!r}"))
    heard.close()
    for fd in (*procs, ready_fd, error_fd):
        if fd >= 0:
            os.close(fd)
    os._exit(wait_for(init))


def restrict(plan: dict[str, Any]) -> None:
    """The walls that need no namespace, for a kernel that cannot be confined (no user
    namespaces here): ``no_new_privs``, the Landlock ruleset (see :func:`restrict_files`)
    and the seccomp filter, on the calling process, which becomes the kernel. The plan is
    :func:`enter`'s, its paths the host's own (``view.root``: the kernel's directory)."""
    prctl(PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
    if plan.get("landlock"):
        restrict_files(plan, confined=False)
    if plan.get("seccomp"):
        install_filter(base64.b64decode(plan["seccomp"]))


def tidy_path() -> None:
    """``PATH`` without the entries a confined kernel cannot see (a host's ``~/.local/bin``
    would only tell the program the host's layout)."""
    kept = [entry for entry in os.environ.get("PATH", "").split(":")
            if entry.startswith("/") and os.path.isdir(entry)]
    os.environ["PATH"] = ":".join(dict.fromkeys(kept)) or "/usr/bin:/bin"


def probe() -> str | None:
    """Confine a throwaway child with a minimal plan; ``None`` if it worked, else why not."""
    if not sys.platform.startswith("linux"):
        return f"kernel namespaces are Linux only (this is {sys.platform})"
    with tempfile.TemporaryDirectory(prefix="dsh-probe-") as root:
        view = {key: f"/workspace/{key}" for key in ("home", "tmp", "cwd")}
        view.update(root="/workspace", ipython_dir="/workspace/home/.ipython",
                    outputs="/workspace/cwd/outputs")
        uid, gid = (65534, 65534) if os.geteuid() == 0 else (os.getuid(), os.getgid())
        plan = {"uid": uid, "gid": gid, "network": False, "hostname": "dsh-probe",
                "read_only": [sys.prefix], "view": view, "workspace_bytes": 1 << 20,
                "workspace_files": 64, "error_file": os.path.join(root, "error")}
        pipes = mapping_pipes(plan)
        child = os.fork()
        if child == 0:
            try:
                enter(plan, pipes)
                # The kernel's view: PID 2 of its own namespace, no host file.
                alone = os.getpid() == 2 and not os.path.exists(root + "/error")
                os._exit(0 if alone else 1)
            finally:
                os._exit(1)
        if pipes is not None:
            map_child(child, plan, pipes)
        status = wait_for(child)
        if status == 0:
            return None
        with open(str(plan["error_file"]), encoding="utf-8", errors="replace") as file:
            detail = file.read().strip()
        return detail or f"the confined probe exited with status {status}"
