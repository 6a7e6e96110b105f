"""One live kernel, prepared and used for exactly one run (or, kept by a stateful session,
for each run of that session in turn: see ``stateful``).

:meth:`LiveKernel.open` makes a workspace, starts a kernel, connects, waits
until it is ready and injects the in-kernel package (which opens the tools comm: the
first ``comm_open`` for our target answering our setup cell is the only comm the
host trusts; with ``carrier="socket"`` on a local kernel the setup cell also
names the socket carrier), then removes the connection file a stock launch
wrote. From then on the kernel must stay silent until its run: see
:meth:`LiveKernel.pristine`. :meth:`LiveKernel.execute` executes the program
and watches it; :meth:`close` kills the kernel, waits until its process tree is
reaped, and removes its workspace.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from pathlib import Path

import zmq.asyncio

from ...abort import AbortSignal
from ...runtime import CodeRunResult, RunRequest
from ..config import KernelRuntimeConfig
from ..inject import setup_cell
from ..inkernel.messages import TARGET_NAME
from ..launch.base import KernelLauncher, KernelProcess
from ..transport.calls import CallTransport, CommCalls, SocketCalls
from ..transport.carrier import CarrierListener, SocketCarrier
from ..transport.channels import HasChannels, KernelChannels
from ..transport.connection import KernelConnection
from ..transport.wire import one_line
from .files import prepare_work_directory
from .logs import OutputBudget
from .remote_files import prepare_remote
from .watch import ComputeLimit, RunWatch
from .workspace import Workspace, create_workspace


class KernelStartError(Exception):
    """The kernel did not start, become ready, or accept the injected module."""


class LiveKernel:
    """A started, ready kernel with the runtime injected; serves one run, or a stateful
    session's runs while each leaves it :attr:`reusable`."""

    def __init__(self, process: KernelProcess, connection: KernelChannels,
                 workspace: Workspace, config: KernelRuntimeConfig) -> None:
        self.process = process
        self.connection = connection
        self.workspace = workspace
        self.config = config
        self.comm_id: str | None = None
        self.carrier: SocketCarrier | None = None
        self.used = False
        self.remote_workdir: str | None = None
        """A remote kernel's private working directory (see ``remote_files``)."""
        self.reusable = False
        """Whether the last run (``keep=True``) left the kernel alive for another."""
        self._closed = False

    @classmethod
    async def open(cls, launcher: KernelLauncher, config: KernelRuntimeConfig,
                   context: zmq.asyncio.Context, runtime_dir: Path) -> LiveKernel:
        """Start and prepare a kernel whose workspace goes in ``runtime_dir``. Raises
        :class:`KernelStartError`; on any failure or cancellation everything started is
        torn down first."""
        confined = bool(getattr(launcher, "confines", False))
        workspace = await create_workspace(runtime_dir, confined=confined)
        process: KernelProcess | None = None
        connection: KernelChannels | None = None
        listener: CarrierListener | None = None
        try:
            # A remote kernel's working directory is remote; a confined one's is made by
            # _confine inside its namespaces.
            if config.gateway is None and not confined:
                await _prepare_files(workspace, config)
            try:
                process = await launcher.start(workspace, workspace.environment(config))
            except Exception as error:
                raise KernelStartError(f"the kernel failed to start: {error}") from error
            if isinstance(process, HasChannels):  # a gateway kernel: its websocket
                connection = process.channels
            else:
                connection = KernelConnection(context, process.connection_info,
                                              max_message_bytes=config.max_message_bytes)
            kernel = cls(process, connection, workspace, config)
            if config.carrier == "socket" and process.root_pid is not None:
                listener = await CarrierListener.open(
                    workspace, max_message_bytes=config.max_message_bytes,
                    max_buffered_bytes=2 * max(config.max_output_bytes, config.max_call_bytes),
                    seconds=min(1.0, config.startup_seconds))
            carrier = None if listener is None else (listener.kernel_path, listener.token)
            setup = setup_cell(carrier, preloaded=launcher.preloads_runtime)
            await kernel._prepare(setup, listener)
            if config.gateway is not None:
                kernel.remote_workdir = await _prepare_remote(kernel)
            return kernel
        except BaseException as error:
            if listener is not None:
                listener.close()
            if connection is not None:
                connection.close()
            if process is not None:
                await process.kill()
                await process.wait_gone()
            detail = await asyncio.to_thread(_remove_reporting, workspace)
            if detail is not None and isinstance(error, KernelStartError):
                raise KernelStartError(f"the kernel could not be confined: {detail}") from error
            raise

    async def _prepare(self, setup: str, listener: CarrierListener | None) -> None:
        timeout = self.config.startup_seconds
        ready = asyncio.ensure_future(self._handshake(setup, listener, timeout))
        try:
            await _unless_dead(ready, self.process)
        except TimeoutError:
            raise KernelStartError(f"the kernel was not ready within {timeout:g} s") from None
        # The kernel holds its connection info now: nothing else needs the file.
        self.workspace.connection_file.unlink(missing_ok=True)

    async def pristine(self) -> bool:
        """Whether nothing but the host spoke to this kernel since it was prepared: any
        request (from anyone who reached its sockets) makes it publish on iopub."""
        return not await self.connection.ready_iopub()

    async def _handshake(self, setup: str, listener: CarrierListener | None,
                         seconds: float) -> None:
        async with asyncio.timeout(seconds):
            await self.connection.wait_ready(seconds)
            request = self.connection.execute(setup)
            error: str | None = None
            while True:
                message = await self.connection.recv_iopub()
                if message is None or message.parent_id != request:
                    continue
                msg_type, content = message.msg_type, message.content
                if (msg_type == "comm_open" and self.comm_id is None
                        and content.get("target_name") == TARGET_NAME
                        and isinstance(content.get("comm_id"), str)):
                    self.comm_id = content["comm_id"]
                elif msg_type == "error":
                    # IPython's traceback (ANSI-coloured, 20 KB for one failed check) is
                    # the runtime's, not the program's: what failed fits one line.
                    error = f"{one_line(content.get('ename'))}: {one_line(content.get('evalue'))}"
                elif msg_type == "status" and content.get("execution_state") == "idle":
                    break
            if error is not None or self.comm_id is None:
                raise KernelStartError(
                    f"the kernel rejected the dsh-jupyter runtime: {error or 'no comm opened'}")
            if listener is not None:
                self.carrier = await listener.accept()

    async def execute(self, request: RunRequest, signals: Iterable[AbortSignal],
                  budget: OutputBudget | None = None, *, keep: bool = False,
                  compute: ComputeLimit | None = None) -> CodeRunResult:
        """Run the request's program on this kernel (see :class:`~.watch.RunWatch`); its output
        draws on ``budget`` (the runtime's, shared by its runs) as well as its own cap.
        ``keep`` (a stateful session) keeps the program's names and, when the run ends
        cleanly, the kernel (:attr:`reusable`); ``compute`` overrides the compute budget."""
        if self.used and not self.reusable:
            raise RuntimeError("a live kernel serves one run")
        self.used = True
        self.reusable = False
        watch = RunWatch(self, request, budget, keep=keep, compute=compute)
        caps = self.workspace.caps
        before = caps.counters() if caps is not None else (0, 0)
        try:
            result = await watch.watch(signals)
        finally:
            self.reusable = watch.kept and not self._closed
        if caps is None or result.failure is None:
            return result
        return caps.explain(result, before, self.workspace.usage())

    def call_transport(self) -> CallTransport:
        """A run's tool calls: on the tools comm, or on the socket carrier beside it when
        one was negotiated (see ``transport.calls``)."""
        assert self.comm_id is not None
        comm = CommCalls(self.connection, self.comm_id,
                         max_waiting=self.config.max_pending_calls)
        if self.carrier is None:
            return comm
        return SocketCalls(self.carrier, comm, max_message_bytes=self.config.max_message_bytes)

    async def close(self) -> None:
        """Kill the kernel, close sockets, wait until its process tree is reaped, remove the
        workspace. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.process.kill()
            self._close_channels()
            await self.process.wait_gone()
        finally:
            self._close_channels()
            await asyncio.to_thread(self.workspace.remove)

    def _close_channels(self) -> None:
        self.connection.close()
        if self.carrier is not None:
            self.carrier.close()


def _remove_reporting(workspace: Workspace) -> str | None:
    """Remove a workspace whose kernel failed to start; what confinement said, if it
    failed."""
    detail = workspace.confine_error()
    workspace.remove()
    return detail


async def _prepare_files(workspace: Workspace, config: KernelRuntimeConfig) -> None:
    """``outputs/`` and a copy of the inputs in an unconfined kernel's working directory
    (see ``files``; a confined kernel's inputs are bound read-only by ``_confine``)."""
    try:
        await asyncio.to_thread(prepare_work_directory, Path(workspace.kernel.cwd),
                                config.input_paths, copy=True)
    except OSError as error:
        raise KernelStartError(f"the run's inputs could not be placed: {error}") from error


async def _prepare_remote(kernel: LiveKernel) -> str:
    """A remote kernel's private working directory, holding its inputs."""
    config = kernel.config
    try:
        return await prepare_remote(kernel.connection, config.input_paths,
                                    config.startup_seconds)
    except (RuntimeError, TimeoutError, ValueError) as error:
        raise KernelStartError(f"the remote kernel's working directory could not be "
                               f"prepared: {error}") from error


async def _unless_dead(work: asyncio.Future[None], process: KernelProcess) -> None:
    """Await ``work``, failing fast (KernelStartError) if the kernel dies meanwhile."""
    try:
        while True:
            done, _ = await asyncio.wait({work}, timeout=0.05)
            if done:
                return work.result()
            if not await process.is_alive():
                raise KernelStartError(f"the kernel died while starting: {process.exit_reason()}")
    finally:
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await work
