"""A host's shell + iopub connection to one kernel, over any jupyter-client connection info.

No client-side comm manager exists in jupyter-client, so this is deliberately
low level: raw frames from iopub are verified and decoded by
:class:`~.wire.WireCodec`; anything that fails (bad signature, bad JSON, too
deep, not a message) is dropped and reported as ``None``. Incoming
messages are capped by ``ZMQ_MAXMSGSIZE`` (libzmq drops the connection of a
peer that sends more; :meth:`disconnected` reports that), which bounds what a
hostile kernel can make the host allocate per message.

Shell sends never wait: they go through a plain (not asyncio) view of the shell
socket with ``DONTWAIT``. Past zmq's high-water mark (1,000 messages; reached
when the kernel is too busy to read its replies) the frames wait in an
:class:`~.channels.Outbox` whose one flusher awaits ``POLLOUT``. pyzmq's asyncio
socket would instead queue a future per send and rescan that queue on each
completion: O(n²) on the event loop (a flood of 100,000 replies stalled it for
minutes).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from .channels import MAX_WAITING, Outbox
from .wire import Incoming, WireCodec

IOPUB_QUEUE = 32
"""Messages the host's iopub socket holds before the kernel's side waits."""


class KernelConnection:
    """Shell (DEALER) and iopub (SUB) sockets plus the session that signs and verifies."""

    def __init__(self, context: zmq.asyncio.Context, info: dict[str, Any], *,
                 max_message_bytes: int) -> None:
        key = info.get("key", "")
        self.codec = WireCodec(key.encode() if isinstance(key, str) else bytes(key),
                               info.get("signature_scheme", "hmac-sha256"))
        self.shell = context.socket(zmq.DEALER)
        self.iopub = context.socket(zmq.SUB)
        # Sends use this plain view: with DONTWAIT it raises zmq.Again instead of queueing.
        self._shell_now: zmq.Socket[bytes] = zmq.Socket.shadow(self.shell.underlying)
        self._writable = zmq.asyncio.Poller()
        self._writable.register(self.shell, zmq.POLLOUT)
        self._outbox: Outbox[list[bytes]] = Outbox(self._try_send, self._send_when_writable)
        self._overflowed = False
        self._monitor: zmq.asyncio.Socket | None = None
        self._closed = False
        try:
            for sock in (self.shell, self.iopub):
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.RECONNECT_IVL, 5)
                sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
            self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
            # Few messages queued here: past them the kernel keeps its backlog (its iopub
            # never drops, see _inkernel.unlimit_iopub), not the host (a 64 KiB output
            # chunk each, up to 1,000 of them per flooding kernel at zmq's default).
            self.iopub.setsockopt(zmq.RCVHWM, IOPUB_QUEUE)
            self._monitor = self.iopub.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            self.iopub.connect(_url(info, "iopub_port"))
            self.shell.connect(_url(info, "shell_port"))
        except BaseException:
            self.close()
            raise

    def send(self, msg_type: str, content: dict[str, Any]) -> str:
        """Send a request on shell; returns its ``msg_id``. Never blocks; requests are few
        (one per run plus the handshake), so they wait in the outbox without a bound."""
        msg_id, frames = self.codec.encode(msg_type, content)
        self._outbox.post(frames, None)
        return msg_id

    def send_comm(self, comm_id: str, data: dict[str, Any], *,
                  max_waiting: int = MAX_WAITING) -> None:
        _, frames = self.codec.encode("comm_msg", {"comm_id": comm_id, "data": data})
        if not self._outbox.post(frames, max_waiting):
            self._overflowed = True

    @property
    def overflowed(self) -> bool:
        return self._overflowed

    def _try_send(self, frames: list[bytes]) -> bool:
        try:
            # zmq checks the high-water mark on the first frame only: a multipart message
            # is taken whole or not at all.
            self._shell_now.send_multipart(frames, flags=zmq.DONTWAIT, copy=False)
        except zmq.Again:
            return False
        return True

    async def _send_when_writable(self, frames: list[bytes]) -> None:
        while not self._try_send(frames):
            await self._writable.poll()

    def execute(self, code: str) -> str:
        return self.send("execute_request", {
            "code": code, "silent": True, "store_history": False, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True,
        })

    async def recv_iopub(self) -> Incoming | None:
        """The next iopub message, or ``None`` for junk (dropped)."""
        return self._decode(await self.iopub.recv_multipart(copy=True))

    async def ready_iopub(self) -> list[Incoming]:
        """The iopub messages already received (without waiting for more)."""
        ready: list[Incoming] = []
        while cast(int, self.iopub.get(zmq.EVENTS)) & zmq.POLLIN:
            message = self._decode(await self.iopub.recv_multipart(copy=True))
            if message is not None:
                ready.append(message)
        return ready

    async def recv_shell(self) -> Incoming | None:
        return self._decode(await self.shell.recv_multipart(copy=True))

    def _decode(self, frames: list[bytes]) -> Incoming | None:
        return self.codec.decode(frames)

    async def wait_disconnected(self) -> None:
        """Return once iopub is dropped (the kernel sent a message over the size cap)."""
        monitor = self._monitor
        if monitor is None:
            await asyncio.Event().wait()
            return
        while True:
            frames = await monitor.recv_multipart()
            if parse_monitor_message(frames)["event"] == zmq.EVENT_DISCONNECTED:
                return

    async def wait_ready(self, seconds: float) -> None:
        """A ``kernel_info`` handshake: returns once iopub carries the kernel's status for
        our request, so the subscription is live and no output of the next request is lost.
        Retries while the kernel starts or iopub subscribes. Raises ``TimeoutError``."""
        async with asyncio.timeout(seconds):
            loop = asyncio.get_running_loop()
            requests: set[str] = set()
            while True:
                requests.add(self.send("kernel_info_request", {}))
                retry = loop.time() + 0.25
                while (wait := retry - loop.time()) > 0:
                    source = await _first(self, wait)
                    if source is None:
                        break
                    channel, message = source
                    if message is None or message.parent_id not in requests:
                        continue
                    if channel == "iopub":
                        return  # an answer to our request on iopub proves the subscription
                    # The kernel answered but iopub missed its status: ask again soon.
                    retry = min(retry, loop.time() + 0.01)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._outbox.close()
        if self._monitor is not None:
            with contextlib.suppress(zmq.ZMQError):
                self.iopub.disable_monitor()
            self._monitor.close(linger=0)
        self.shell.close(linger=0)
        self.iopub.close(linger=0)


async def _first(connection: KernelConnection,
                 seconds: float) -> tuple[str, Incoming | None] | None:
    poller = zmq.asyncio.Poller()
    poller.register(connection.shell, zmq.POLLIN)
    poller.register(connection.iopub, zmq.POLLIN)
    ready = dict(await poller.poll(seconds * 1000))
    if connection.shell in ready:
        return "shell", await connection.recv_shell()
    if connection.iopub in ready:
        return "iopub", await connection.recv_iopub()
    return None


def _url(info: dict[str, Any], port_name: str) -> str:
    transport = info.get("transport", "tcp")
    ip = info.get("ip", "127.0.0.1")
    port = info[port_name]
    if transport == "ipc":
        return f"ipc://{ip}-{port}"
    return f"{transport}://{ip}:{port}"
