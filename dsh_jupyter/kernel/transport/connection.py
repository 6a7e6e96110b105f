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

from .channels import BaseChannels
from .wire import Incoming, WireCodec

IOPUB_QUEUE = 32
"""Messages the host's iopub socket holds before the kernel's side waits."""


class KernelConnection(BaseChannels[list[bytes]]):
    """Shell (DEALER) and iopub (SUB) sockets plus the session that signs and verifies."""

    def __init__(self, context: zmq.asyncio.Context, info: dict[str, Any], *,
                 max_message_bytes: int) -> None:
        super().__init__()
        key = info.get("key", "")
        self.codec = WireCodec(key.encode() if isinstance(key, str) else bytes(key),
                               info.get("signature_scheme", "hmac-sha256"))
        self.shell = context.socket(zmq.DEALER)
        self.iopub = context.socket(zmq.SUB)
        # Sends use this plain view: with DONTWAIT it raises zmq.Again instead of queueing.
        self._shell_now: zmq.Socket[bytes] = zmq.Socket.shadow(self.shell.underlying)
        self._writable = zmq.asyncio.Poller()
        self._writable.register(self.shell, zmq.POLLOUT)
        self._monitor: zmq.asyncio.Socket | None = None
        self._closed = False
        try:
            for sock in (self.shell, self.iopub):
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.RECONNECT_IVL, 5)
                sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
            self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
            # Few messages queued here: past them the kernel keeps its backlog (its iopub
            # never drops, see inkernel.outputs.unlimit_iopub), not the host (a 64 KiB output
            # chunk each, up to 1,000 of them per flooding kernel at zmq's default).
            self.iopub.setsockopt(zmq.RCVHWM, IOPUB_QUEUE)
            self._monitor = self.iopub.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            self.iopub.connect(_url(info, "iopub_port"))
            self.shell.connect(_url(info, "shell_port"))
        except BaseException:
            self.close()
            raise

    def _frame(self, msg_type: str, content: dict[str, Any]) -> tuple[str, list[bytes]]:
        return self.codec.encode(msg_type, content)

    def _try_send(self, frames: list[bytes]) -> bool:
        try:
            # zmq checks the high-water mark on the first frame only: a multipart message
            # is taken whole or not at all.
            self._shell_now.send_multipart(frames, flags=zmq.DONTWAIT, copy=False)
        except zmq.Again:
            return False
        return True

    async def _send_when_drained(self, frames: list[bytes]) -> None:
        while not self._try_send(frames):
            await self._writable.poll()

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

    async def _next_reply(self, seconds: float) -> tuple[str, Incoming | None] | None:
        poller = zmq.asyncio.Poller()
        poller.register(self.shell, zmq.POLLIN)
        poller.register(self.iopub, zmq.POLLIN)
        ready = dict(await poller.poll(seconds * 1000))
        if self.shell in ready:
            return "shell", await self.recv_shell()
        if self.iopub in ready:
            return "iopub", await self.recv_iopub()
        return None

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


def _url(info: dict[str, Any], port_name: str) -> str:
    transport = info.get("transport", "tcp")
    ip = info.get("ip", "127.0.0.1")
    port = info[port_name]
    if transport == "ipc":
        return f"ipc://{ip}-{port}"
    return f"{transport}://{ip}:{port}"
