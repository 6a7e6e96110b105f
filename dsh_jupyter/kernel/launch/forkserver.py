"""The fast start path: kernels forked from a preloaded server (see ``_forkserver.py``).

:class:`ForkLauncher` implements the same :class:`~.launch.KernelLauncher` seam
as the stock launch, for the host's own Python with ipykernel. It starts the
server lazily (and again if it died), makes each kernel's connection info
itself (IPC transport in the kernel's private workspace: no TCP ports to race
for, and nothing on disk: the info travels in the request) and asks the server
to fork, with a confinement plan when the runtime confines kernels. Signals and
kills go through the server, which is every kernel's parent, so PIDs are never
reused behind our back.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..config import KernelRuntimeConfig
from ..confine.caps import RuntimeCgroups, new_caps
from ..confine.plan import confinement_plan, restriction_plan
from ..confine.sandbox import CONFINE_PACKAGE, SandboxConfig
from ..inject import LOADER_PATH, MODULE_NAME
from ..inkernel.program import SOURCE_FILENAME
from ..run import removal
from ..run.workspace import Workspace, scrubbed_environment
from . import proctree
from .base import CHILD_SCRIPT, KERNEL_ARGS, check_host_ipykernel, describe_status

SERVER_SCRIPT = Path(__file__).with_name("_forkserver.py")
KERNELAPP_SCRIPT = Path(__file__).with_name("_kernelapp.py")
"""The kernel application the server builds ahead for ``KERNEL_ARGS`` (loaded by path)."""


class ForkServerError(Exception):
    """The fork server died or refused a request."""


class ForkServer:
    """A running fork server and the host end of its control socket."""

    def __init__(self, process: subprocess.Popen[bytes], reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.process = process
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._exits: dict[int, asyncio.Future[int]] = {}
        self._listener: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, env: dict[str, str], startup_seconds: float,
                    runtime_dir: Path, nice: int, cgroups: list[Path]) -> ForkServer:
        host_end, server_end = socket.socketpair()
        try:
            process = subprocess.Popen(  # noqa: ASYNC220  # fork+exec, returns at once
                [sys.executable, "-I", str(SERVER_SCRIPT), str(server_end.fileno()),
                 str(CHILD_SCRIPT), proctree.__file__, str(LOADER_PATH), MODULE_NAME,
                 SOURCE_FILENAME,
                 str(CONFINE_PACKAGE), str(runtime_dir), str(nice), removal.__file__,
                 json.dumps([str(path) for path in cgroups]), str(KERNELAPP_SCRIPT),
                 json.dumps(list(KERNEL_ARGS))],
                pass_fds=[server_end.fileno()], env=env, cwd="/",
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            server_end.close()
        reader, writer = await asyncio.open_unix_connection(sock=host_end, limit=1 << 20)
        server = cls(process, reader, writer)
        try:
            async with asyncio.timeout(startup_seconds):
                hello = json.loads(await reader.readline() or b"{}")
            if hello.get("event") != "ready":
                raise ForkServerError("the fork server did not start")
        except BaseException:
            await server.close()
            raise
        server._listener = asyncio.create_task(server._listen())
        return server

    @property
    def alive(self) -> bool:
        return self.process.poll() is None and self._listener is not None \
            and not self._listener.done()

    async def _listen(self) -> None:
        try:
            while line := await self._reader.readline():
                message = json.loads(line)
                if message.get("event") == "exit":
                    exit_future = self._exits.get(message["pid"])
                    if exit_future is not None and not exit_future.done():
                        exit_future.set_result(int(message["status"]))
                    continue
                future = self._pending.pop(message.get("id"), None)
                if future is not None and not future.done():
                    future.set_result(message)
        finally:
            error = ForkServerError("the fork server exited")
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(error)
            self._pending.clear()
            for exit_future in self._exits.values():
                if not exit_future.done():
                    exit_future.set_result(-9)

    async def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send a request and wait for its reply. If the caller is cancelled while a
        ``spawn`` is in flight, the kernel it produces is killed when the reply comes."""
        if not self.alive:
            raise ForkServerError("the fork server is not running")
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self._writer.write(json.dumps({"op": op, "id": request_id, **fields}).encode() + b"\n")
        try:
            reply = await asyncio.shield(future)
        except asyncio.CancelledError:
            if op == "spawn":
                future.add_done_callback(self._kill_unwanted)
            raise
        if "error" in reply:
            raise ForkServerError(str(reply["error"]))
        return reply

    def _kill_unwanted(self, future: asyncio.Future[dict[str, Any]]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        pid = future.result().get("pid")
        if isinstance(pid, int) and self.alive:
            request_id = next(self._ids)
            self._writer.write(json.dumps({"op": "kill", "id": request_id, "pid": pid}).encode()
                               + b"\n")

    def watch_exit(self, pid: int) -> asyncio.Future[int]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._exits[pid] = future
        return future

    def forget(self, pid: int) -> None:
        self._exits.pop(pid, None)

    async def close(self) -> None:
        """Close the control socket (the server kills its kernels and exits) and reap it."""
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener
        try:
            async with asyncio.timeout(5):
                await _exited(self.process)
        except TimeoutError:
            self.process.kill()
            await _exited(self.process)


async def _exited(process: subprocess.Popen[bytes]) -> None:
    delay = 0.001
    while process.poll() is None:  # a Popen has no awaitable exit
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)


class ForkKernel:
    """A kernel forked by the server (see :class:`~.launch.KernelProcess`).

    The host holds a pidfd of the kernel's process (opened when the server names it, before
    any program has run in it: a PID the server answers for is not reaped behind the host's
    back, and the pidfd keeps naming that process even after), so :meth:`kill` signals it
    itself, at once, instead of waiting for the server's reply (a round trip that took 1-2 ms
    on a busy machine, on every run's critical path). The server still kills the kernel's
    group and sweeps what escaped it; :meth:`wait_gone` waits for that and the reap."""

    def __init__(self, server: ForkServer, pid: int, info: dict[str, Any]) -> None:
        self._server = server
        self._pid = pid
        self._info = info
        self._exit = server.watch_exit(pid)
        self._status: int | None = None
        self._killed = False
        self._pidfd = _pidfd(pid)
        self._group_kill: asyncio.Future[dict[str, Any]] | None = None

    @property
    def connection_info(self) -> dict[str, Any]:
        return self._info

    @connection_info.setter
    def connection_info(self, info: dict[str, Any]) -> None:
        self._info = info

    @property
    def root_pid(self) -> int | None:
        return self._pid

    async def is_alive(self) -> bool:
        return not (self._killed or self._exit.done())

    def exit_reason(self) -> str:
        status = self._exit.result() if self._exit.done() else self._status
        return describe_status(status)

    async def interrupt(self) -> None:
        if await self.is_alive():
            with contextlib.suppress(ForkServerError):
                await self._server.request("signal", pid=self._pid, signum=2)

    async def kill(self) -> None:
        """SIGKILL now: the kernel's process through its pidfd, at once (a confined
        kernel's namespace dies with it); its process group through the server, whose
        reply :meth:`wait_gone` awaits with the reap."""
        if self._killed:
            return
        self._killed = True
        if self._exit.done():
            return
        if self._pidfd is not None and _signal_pidfd(self._pidfd, signal.SIGKILL):
            self._group_kill = asyncio.ensure_future(self._server.request("kill", pid=self._pid))
            self._group_kill.add_done_callback(_consume)
            return
        with contextlib.suppress(ForkServerError):  # a dead server took its kernels along
            await self._server.request("kill", pid=self._pid)

    async def wait_gone(self) -> None:
        """Wait until the server reaped the kernel and swept what escaped its group."""
        try:
            async with asyncio.timeout(5):
                if self._group_kill is not None:
                    await asyncio.wait({self._group_kill})
                await asyncio.shield(self._exit)
        except TimeoutError:
            pass
        finally:
            self._server.forget(self._pid)
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid``, or ``None`` where the kernel has none (Linux < 5.3) or the
    process is gone already (the server's kill request then covers it)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _signal_pidfd(pidfd: int, signum: int) -> bool:
    try:
        signal.pidfd_send_signal(pidfd, signum)
    except (AttributeError, OSError):  # ESRCH: it has exited (not yet reaped)
        return False
    return True


def _consume(future: asyncio.Future[Any]) -> None:
    """A dead server took its kernels along: its refusal of a kill is no failure."""
    if not future.cancelled():
        future.exception()


class ForkLauncher:
    """Starts kernels from a fork server, starting (or restarting) the server on demand."""

    preloads_runtime = True

    def __init__(self, config: KernelRuntimeConfig, runtime_dir: Path,
                 confinement: SandboxConfig | None,
                 cgroups: RuntimeCgroups | None = None) -> None:
        check_host_ipykernel()
        self._config = config
        self._runtime_dir = runtime_dir
        self._confinement = confinement
        self._cgroups = cgroups
        self._server: ForkServer | None = None
        self._lock = asyncio.Lock()
        self._limits: dict[str, int] = {}
        if config.memory_bytes is not None:
            self._limits["as"] = config.memory_bytes
        if config.open_files is not None:
            self._limits["nofile"] = config.open_files
        sandbox = config.confinement
        if sandbox is not None and sandbox.cpu_seconds is not None:
            self._limits["cpu"] = sandbox.cpu_seconds

    async def server(self) -> ForkServer:
        async with self._lock:
            if self._server is None or not self._server.alive:
                if self._server is not None:
                    await self._server.close()
                    self._server = None
                self._server = await ForkServer.start(
                    scrubbed_environment(self._config), self._config.startup_seconds,
                    self._runtime_dir, self._config.kernel_nice,
                    self._cgroups.directories if self._cgroups is not None else [])
            return self._server

    @property
    def confines(self) -> bool:
        """Whether its kernels are confined (inputs are bound, not copied)."""
        return self._confinement is not None

    async def start(self, workspace: Workspace, env: dict[str, str]) -> ForkKernel:
        server = await self.server()
        info = ipc_connection_info(workspace.kernel.root)
        caps = workspace.caps = new_caps(self._config.confinement,
                                         confined=self._confinement is not None,
                                         cgroups=self._cgroups,
                                         address_space_bytes=self._config.memory_bytes)
        plan = None if self._confinement is None else confinement_plan(
            self._confinement, workspace, inputs=self._config.input_paths,
            cgroups=caps.cgroups if caps is not None else ())
        limits = {**self._limits, **(caps.rlimits if caps is not None else {})}
        wanted = self._config.confinement
        restrict = restriction_plan(wanted, workspace) if plan is None and wanted else None
        reply = await server.request(
            "spawn", connection=info, cwd=workspace.kernel.cwd, env=env, limits=limits,
            argv=list(KERNEL_ARGS), confine=plan, restrict=restrict,
        )
        kernel = ForkKernel(server, int(reply["pid"]), info)
        if plan is not None:
            try:
                await workspace.wait_confined(kernel, self._config.startup_seconds)
            except BaseException:
                await kernel.kill()
                await kernel.wait_gone()
                raise
            kernel.connection_info = {**info, "ip": workspace.host_path(info["ip"])}
        return kernel

    async def close(self) -> None:
        async with self._lock:
            if self._server is not None:
                await self._server.close()
                self._server = None


def ipc_connection_info(kernel_root: str) -> dict[str, Any]:
    """Connection info for a kernel listening on IPC sockets in its root (as it sees it)."""
    info: dict[str, Any] = {"transport": "ipc", "ip": f"{kernel_root}/zmq",
                            "key": secrets.token_hex(32), "signature_scheme": "hmac-sha256",
                            "kernel_name": ""}
    for port, name in enumerate(("shell", "iopub", "stdin", "control", "hb"), start=1):
        info[f"{name}_port"] = port
    return info


def fork_supported() -> bool:
    """Fork servers need ``os.fork`` and ``/proc`` (Linux)."""
    return hasattr(os, "fork") and os.path.isdir("/proc")
