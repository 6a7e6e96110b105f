"""A host's shell + iopub connection to one kernel, over any jupyter-client connection info.

No client-side comm manager exists in jupyter-client, so this is deliberately
low level: raw frames from iopub are verified and decoded by
:class:`~.wire.WireCodec`; anything that fails (bad signature, bad JSON, too
deep, not a message) is dropped and reported as ``None``. Incoming
messages are capped by ``ZMQ_MAXMSGSIZE`` (libzmq drops the connection of a
peer that sends more; :meth:`disconnected` reports that), which bounds what a
hostile kernel can make the host allocate per message.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from .wire import Incoming, WireCodec


class KernelConnection:
    """Shell (DEALER) and iopub (SUB) sockets plus the session that signs and verifies."""

    def __init__(self, context: zmq.asyncio.Context, info: dict[str, Any], *,
                 max_message_bytes: int) -> None:
        key = info.get("key", "")
        self.codec = WireCodec(key.encode() if isinstance(key, str) else bytes(key),
                               info.get("signature_scheme", "hmac-sha256"))
        self.shell = context.socket(zmq.DEALER)
        self.iopub = context.socket(zmq.SUB)
        self._monitor: zmq.asyncio.Socket | None = None
        self._closed = False
        try:
            for sock in (self.shell, self.iopub):
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.RECONNECT_IVL, 5)
                sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
            self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
            self._monitor = self.iopub.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            self.iopub.connect(_url(info, "iopub_port"))
            self.shell.connect(_url(info, "shell_port"))
        except BaseException:
            self.close()
            raise

    def send(self, msg_type: str, content: dict[str, Any]) -> str:
        """Send a request on shell; returns its ``msg_id``."""
        msg_id, frames = self.codec.encode(msg_type, content)
        self.shell.send_multipart(frames, copy=False)
        return msg_id

    def send_comm(self, comm_id: str, data: dict[str, Any]) -> None:
        self.send("comm_msg", {"comm_id": comm_id, "data": data})

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
