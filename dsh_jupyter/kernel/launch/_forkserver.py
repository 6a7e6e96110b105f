"""The fork server: preloads IPython and ipykernel once, then forks one kernel per request.

Run by the host as ``python -I _forkserver.py CONTROL_FD CHILD_PY PROCTREE_PY
INKERNEL_LOADER_PY INKERNEL_MODULE INKERNEL_FILENAME CONFINE_DIR RUNTIME_DIR NICE REMOVAL_PY
CGROUPS_JSON KERNELAPP_PY KERNEL_ARGS_JSON`` (standard library plus what it preloads; the
host names the in-kernel package and its loader, see ``inject``; ``CGROUPS_JSON``: the
runtime's cgroup directories, removed with the runtime's directory when the host is gone;
``KERNEL_ARGS_JSON``: the kernel options its kernels will be asked for, whose
``IPKernelApp`` and shell it builds ahead with ``_kernelapp.py``). At fork time it
has no threads, no zmq context and no event loop; each child takes the steps of
``_child.py``, as the keeper's child does: it dies with the server
(``PR_SET_PDEATHSIG``), is confined when the request carries a plan (see ``_confine/``:
the child then waits outside while the kernel runs as PID 2 of its own namespaces), and
gets its resource limits and priority. Of its own it becomes a kernel in its own process
group (in the server's session, which runs ``NICE`` below the host), a child subreaper
(orphans stay in its tree), gets its own environment and working directory, reseeds
``random``, and finishes the prepared ``IPKernelApp`` (or, for other options, builds one)
and runs it. The connection info
(with the key) arrives in the request and reaches the kernel through a memfd:
it is never written to disk. The debugger (debugpy) is left out: throwaway
kernels are never debugged, and it would double the modules to load.

The server is itself a subreaper and the parent of every kernel, so it is the
one that signals, kills and reaps them: a PID it answers for is never reused
behind the host's back. Control messages are JSON lines on a unix socket::

    host -> server  {"op": "spawn", "id", "connection", "cwd", "env", "limits", "argv",
                     "confine" | "restrict"}
                    {"op": "signal", "id", "pid", "signum"}
                    {"op": "kill", "id", "pid"}
    server -> host  {"event": "ready", "pid"}
                    {"id", "pid"} | {"id", "ok": bool} | {"id", "error"}
                    {"event": "exit", "pid", "status"}   (status: exit code, or 128 + signal)

A signal goes to the kernel's process group (as jupyter-client interrupts). A
kill is immediate (SIGKILL to the kernel's process group); when the kernel is
reaped, every other child of the server (processes that escaped the group with
``setsid`` and were re-parented here) is frozen and killed with its tree. EOF
on the control socket means the host is gone: the server kills every kernel,
removes the runtime's directory (with ``removal``: whatever the programs left in it) and
exits.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
import os
import select
import signal
import socket
import sys
import time
import types
from typing import Any

AUTOGROUP_RETRY_SECONDS = 0.11
SHUTDOWN_POLL_SECONDS = 0.005
SHUTDOWN_SECONDS = 30.0
"""How long a server that is shutting down waits for its killed processes to be reaped."""

PRELOAD = (
    "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell", "ipykernel.comm",
    "ipykernel.debugger", "ipykernel.iostream", "ipykernel.heartbeat", "ipykernel.eventloops",
    "comm", "IPython.core.completerlib", "IPython.core.debugger", "IPython.core.oinspect",
    "IPython.extensions.storemagic", "IPython.utils.wildcard", "tornado.gen", "tornado.locks",
    "tornado.queues", "tornado.platform.asyncio", "psutil", "pdb", "faulthandler", "resource",
    "unicodedata", "encodings.idna", "random", "tempfile", "ctypes",
)


def _load_child(path: str) -> types.ModuleType:
    """``_child.py``, the steps every launcher's child takes (bootstraps its ``load``)."""
    spec = importlib.util.spec_from_file_location("_dsh_jupyter_child", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _preload(child: Any, loader_path: str, inkernel_module: str,
             inkernel_filename: str) -> None:
    sys.modules["debugpy"] = None  # type: ignore[assignment]  # no debugger in throwaway kernels
    for name in PRELOAD:
        with contextlib.suppress(Exception):
            __import__(name)
    loader = child.load("_dsh_jupyter_inkernel_loader", loader_path)
    loader.load(inkernel_module, loader.sources(), inkernel_filename)


class Server:
    def __init__(self, control: socket.socket, child: Any, proctree: Any, confine: Any,
                 removal: Any, runtime_dir: str, nice: int, cgroups: list[str],
                 kernelapp: Any, prepared: Any) -> None:
        self.cgroups = cgroups
        self.child = child
        self.kernelapp = kernelapp
        self.prepared = prepared
        self.control = control
        self.proctree = proctree
        self.confine = confine
        self.removal = removal
        self.runtime_dir = runtime_dir
        self.nice = nice
        self.session_lowered = nice == 0
        self.kernels: set[int] = set()
        self.wake_read, wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(wake_write, False)
        self.wake_write = wake_write

    def send(self, message: dict[str, Any]) -> None:
        self.control.sendall(json.dumps(message).encode() + b"\n")

    def serve(self) -> None:
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_write)
        self.send({"event": "ready", "pid": os.getpid()})
        buffer = b""
        while True:
            if not self.session_lowered:  # rate-limited: the next wake-up tries again
                self.session_lowered = self.child.lower_session(self.nice)
            timeout = None if self.session_lowered else AUTOGROUP_RETRY_SECONDS
            try:
                readable, _, _ = select.select([self.control.fileno(), self.wake_read], [], [],
                                               timeout)
            except InterruptedError:
                continue
            try:
                if self.wake_read in readable:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_read, 4096):
                            pass
                    self.reap()
                if self.control.fileno() in readable:
                    data = self.control.recv(1 << 20)
                    if not data:
                        self.shutdown()
                        return
                    buffer += data
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        self.handle(json.loads(line))
            except ConnectionError:  # a reply the host is no longer there to read: it has gone
                self.shutdown()
                return

    def handle(self, request: dict[str, Any]) -> None:
        op, request_id = request.get("op"), request.get("id")
        try:
            if op == "spawn":
                self.send({"id": request_id, "pid": self.spawn(request)})
            elif op == "signal":
                if request["pid"] in self.kernels:
                    os.killpg(request["pid"], request["signum"])
                self.send({"id": request_id, "ok": True})
            elif op == "kill":
                self.send({"id": request_id, "ok": self.kill(request["pid"])})
            else:
                self.send({"id": request_id, "error": f"unknown op {op!r}"})
        except ConnectionError:
            raise
        except Exception as error:
            self.send({"id": request_id, "error": f"{type(error).__name__}: {error}"})

    def spawn(self, request: dict[str, Any]) -> int:
        plan = request.get("confine")
        mapping = self.confine.mapping_pipes(plan) if plan else None
        pid = os.fork()
        if pid == 0:
            try:
                self.become_kernel(request, mapping)
            finally:
                os._exit(1)
        self.kernels.add(pid)
        if mapping is not None:  # a root host: the child's map is ours to write (~1 ms)
            self.confine.map_child(pid, plan, mapping)
        return pid

    def become_kernel(self, request: dict[str, Any], mapping: Any) -> None:
        child = self.child
        signal.set_wakeup_fd(-1)
        child.begin()
        self.control.close()
        os.close(self.wake_read)
        os.close(self.wake_write)
        os.setpgid(0, 0)  # its own group, to signal and kill; the server's (lowered) session
        child.become_subreaper()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        if request.get("confine"):
            self.confine.enter(request["confine"], mapping)  # returns in the kernel only
        else:
            # Other programs of this user cannot read its memory (no exec follows to undo it).
            child.prctl(child.PR_SET_DUMPABLE, 0)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import random
        import tempfile

        random.seed()
        tempfile.tempdir = None
        # Preloaded objects stay frozen (gc.freeze in main): unfreezing would make the next
        # full collection walk all of them, and it measurably slows the kernel's start.
        # The key lives in this process only: a memfd read through /proc/self/fd, closed
        # once the app has loaded it (ipykernel leaves an existing, unchanged file alone).
        connection = child.connection_memfd(json.dumps(request["connection"]).encode(),
                                            across_exec=False)
        argv = ["-f", f"/proc/self/fd/{connection}", *request.get("argv", ())]
        child.finish(self.confine, confined=bool(request.get("confine")),
                     restrict=request.get("restrict") or None,
                     limits=request.get("limits", {}), nice=self.nice)
        sys.argv = ["ipykernel_launcher", *argv]
        prepared = self.prepared
        if prepared is not None and tuple(request.get("argv", ())) == prepared.argv:
            app = self.kernelapp.finish(prepared, f"/proc/self/fd/{connection}")
        else:
            app = self.kernelapp.build(argv)
        os.close(connection)
        app.start()
        os._exit(0)

    def kill(self, pid: int) -> bool:
        """SIGKILL the kernel and its process group now; the reap (and the sweep of what
        escaped the group, now re-parented here) follows on SIGCHLD."""
        if pid not in self.kernels:
            return False
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        return True

    def reap(self) -> None:
        reaped = False
        while True:
            try:
                pid, raw = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            reaped = True
            if pid in self.kernels:
                self.kernels.discard(pid)
                self.send({"event": "exit", "pid": pid,
                           "status": self.child.exit_status(raw)})
        if reaped:
            self.kill_orphans()

    def kill_orphans(self) -> None:
        """Children that are not kernels re-parented here when their kernel died. One that
        is dying already (a confined kernel's init, killed with it) is left to die: it is
        reaped here, and what it leaves swept then."""
        for pid in self.proctree.children(os.getpid()):
            if pid not in self.kernels and not self.proctree.dying(pid):
                self.proctree.kill_tree(pid)

    def shutdown(self) -> None:
        """The host is gone (or done): kill everything; a host that died without cleaning
        up also left its runtime directory behind, so remove that. What cannot be removed
        goes unreported here (no one reads this process's output); a host that is still
        there removes the directory again and logs it."""
        for pid in list(self.kernels):
            self.proctree.kill_tree(pid)
        self.kernels.clear()  # killed: from here on, any child left is an orphan to kill
        deadline = time.monotonic() + SHUTDOWN_SECONDS
        with contextlib.suppress(ChildProcessError):
            # Sweep on every pass, not only after a reap: a process that forks as its parent
            # dies re-parents here without waking a wait, and a blocking wait then waited
            # for it forever (it would outlive the server otherwise). A killed process stuck
            # in the kernel (a hung file system) is not waited for past the deadline.
            while time.monotonic() < deadline:
                self.kill_orphans()
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    time.sleep(SHUTDOWN_POLL_SECONDS)
        if os.path.basename(self.runtime_dir).startswith("dsh-runtime-"):
            self.removal.remove_tree(self.runtime_dir)
        for directory in self.cgroups:  # the runtime's, with its kernels' (all empty now)
            if os.path.basename(directory).startswith("dsh-runtime-"):
                with contextlib.suppress(OSError):
                    for name in os.listdir(directory):
                        _remove_cgroup(os.path.join(directory, name))
                _remove_cgroup(directory)


def _remove_cgroup(directory: str) -> None:
    if not os.path.isdir(directory):
        return
    for _ in range(20):  # the last processes are being reaped
        try:
            os.rmdir(directory)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)


def main(argv: list[str]) -> None:
    control = socket.socket(fileno=int(argv[0]))
    child = _load_child(argv[1])
    proctree = child.load("_dsh_jupyter_proctree", argv[2])
    confine = child.load("_dsh_jupyter_confine", argv[6])
    removal = child.load("_dsh_jupyter_removal", argv[9])
    kernelapp = child.load("_dsh_jupyter_kernelapp", argv[11])
    _preload(child, argv[3], argv[4], argv[5])
    # The kernel's application and shell, as far as a fork allows: each child finishes them.
    prepared = kernelapp.prepare(json.loads(argv[12]))
    child.become_subreaper()
    gc.collect()
    gc.freeze()  # keep preloaded objects out of collections: fewer pages copied per kernel
    Server(control, child, proctree, confine, removal, argv[7], int(argv[8]),
           json.loads(argv[10]), kernelapp, prepared).serve()


if __name__ == "__main__":
    main(sys.argv[1:])
