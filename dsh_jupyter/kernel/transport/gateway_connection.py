"""One gateway kernel's channels: a websocket to ``/api/kernels/<id>/channels``.

Implements :class:`~.channels.KernelChannels` over the Jupyter server's kernel
websocket, in either framing the gateway offers:

- ``v1.kernel.websocket.jupyter.org`` (jupyter_server >= 2: Kernel Gateway 3):
  binary frames ``[n][offsets][channel][header][parent][metadata][content]...``
  holding the kernel's message parts as the gateway received them;
- the legacy JSON framing (jupyter_server 1: Enterprise Gateway 3), one JSON
  object per message with a ``channel`` key.

The gateway signs what it forwards to the kernel, so nothing is signed here.
What the kernel sends is decoded as untrusted (the same checks as
:class:`~.wire.WireCodec`); junk decodes to ``None``. Incoming frames are capped
at ``max_message_bytes`` (the websocket is failed with 1009 above it, which
:meth:`wait_disconnected` reports), and the gateway's own notices are watched:
a ``restarting``/``dead`` status or a foreign ``shutdown_reply`` mean the kernel
is gone, an "IOPub ... rate exceeded" notice means the gateway dropped output.

Sends are written to the websocket synchronously (no task or future per send),
but asyncio's write buffer has no bound of its own: once it is past its
high-water mark (the gateway is not reading as fast as the host replies), frames
wait in an :class:`~.channels.Outbox` whose one flusher writes them as the
buffer drains. What the gateway itself has read but the kernel has not is out
of the host's sight.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from dataclasses import replace
from typing import Any, Final

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.connection import broadcast
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.protocol import State
from websockets.typing import Subprotocol

from ..gateway_config import GatewayConfig
from .channels import BaseChannels
from .wire import DELIMITER, Incoming, WireCodec

V1_PROTOCOL: Final = Subprotocol("v1.kernel.websocket.jupyter.org")
DRAIN_SECONDS: Final = 0.005
DRAIN_MAX_SECONDS: Final = 0.5
MAX_PARTS: Final = 64
RATE_NOTICES: Final = ("IOPub data rate exceeded", "IOPub message rate exceeded")


class GatewayConnection(BaseChannels[str | bytes]):
    """The websocket of one gateway kernel (see the module docstring)."""

    def __init__(self, socket: ClientConnection, *, url: str) -> None:
        super().__init__()
        self._ws = socket
        self._url = url
        self._v1 = socket.subprotocol == V1_PROTOCOL
        self._codec = WireCodec(b"")  # builds and parses parts; the gateway signs
        self._ended = False
        self._closed_by_us = False
        self._kernel_gone: str | None = None
        self._trouble = asyncio.Event()
        self._trouble_reason: str | None = None
        self._never = asyncio.Event()

    @classmethod
    async def open(cls, gateway: GatewayConfig, kernel_id: str, *,
                   max_message_bytes: int) -> GatewayConnection:
        """Connect to the kernel's channels (the handshake returns once the gateway has
        the kernel's iopub subscribed). Raises websockets' and OS errors."""
        url = f"{gateway.websocket_url}/api/kernels/{kernel_id}/channels"
        socket = await connect(
            f"{url}?session_id={uuid.uuid4().hex}",
            additional_headers=gateway.auth_headers,
            subprotocols=[V1_PROTOCOL],
            compression=None,
            max_size=max_message_bytes,
            open_timeout=None,  # the caller bounds the start
            ping_interval=gateway.ping_seconds,
            ping_timeout=gateway.ping_seconds,
            close_timeout=min(2.0, gateway.request_seconds),
            ssl=gateway.ssl_context() if url.startswith("wss:") else None,
        )
        return cls(socket, url=url)

    @property
    def protocol(self) -> str:
        """The framing in use: ``"v1"`` or ``"legacy"``."""
        return "v1" if self._v1 else "legacy"

    @property
    def gone(self) -> str | None:
        """Why the kernel can no longer be reached, or ``None`` while it can (or while
        only an oversized message closed the websocket: that is :meth:`wait_disconnected`'s)."""
        if self._kernel_gone is not None or self._closed_by_us:
            return self._kernel_gone
        if self._ws.state in (State.CLOSING, State.CLOSED) and not self._too_big():
            return f"lost the connection to the gateway ({self._describe_close()})"
        return None

    # Sending ------------------------------------------------------------------------

    def _frame(self, msg_type: str, content: dict[str, Any]) -> tuple[str, str | bytes]:
        """A request on shell (the host sends on no other channel)."""
        msg_id, frames = self._codec.encode(msg_type, content)
        parts = frames[2:]  # without the delimiter and the (empty) signature
        return msg_id, encode_v1("shell", parts) if self._v1 else encode_legacy("shell", parts)

    def _try_send(self, data: str | bytes) -> bool:
        """Write ``data`` now unless the gateway is behind. Once the websocket is not open
        it is dropped silently (the kernel's state then says why)."""
        transport = self._ws.transport
        if transport.get_write_buffer_size() > transport.get_write_buffer_limits()[1]:
            return False  # writing is paused: the gateway is behind
        broadcast([self._ws], data)  # synchronous and ordered; skips a closing socket
        return True

    async def _send_when_drained(self, data: str | bytes) -> None:
        await self._ws.send(data)  # writes, then waits until the buffer drains

    # Receiving ----------------------------------------------------------------------

    async def _next(self) -> tuple[str, Incoming | None] | None:
        """The next message as ``(channel, decoded or None)``; ``None`` once closed."""
        if self._ended:
            return None
        try:
            data = await self._ws.recv()
        except ConnectionClosed:
            self._ended = True
            if self._too_big():
                self._report_trouble(None)
            return None
        return self._decode(data)

    def _decode(self, data: str | bytes) -> tuple[str, Incoming | None]:
        if self._v1 and isinstance(data, bytes):
            decoded = decode_v1(data)
            if decoded is None:
                return "", None
            channel, parts = decoded
            incoming = self._codec.decode([DELIMITER, b"", *parts[:4]]) if len(parts) >= 4 \
                else None
            return channel, replace(incoming, size=len(data)) if incoming is not None else None
        if isinstance(data, str):
            return decode_legacy(data)
        return "", None  # legacy binary frames carry buffers, which no message of ours has

    async def recv_iopub(self) -> Incoming | None:
        item = await self._next()
        if item is None:
            await self._never.wait()  # gone or over the cap: the kernel's state says which
        assert item is not None
        channel, message = item
        if channel != "iopub" or message is None:
            return None  # shell replies are not needed past the handshake
        self._observe(message)
        return message

    def _observe(self, message: Incoming) -> None:
        """Notices the gateway (or the kernel) puts on iopub about the kernel's fate."""
        msg_type, content = message.msg_type, message.content
        if msg_type == "status" and content.get("execution_state") in ("restarting", "dead"):
            state = content["execution_state"]
            self._kernel_gone = ("the remote kernel died (the gateway is restarting it)"
                                 if state == "restarting" else
                                 "the remote kernel died and the gateway gave it up")
        elif msg_type == "shutdown_reply":
            self._kernel_gone = "the remote kernel was shut down on the gateway"
        elif msg_type == "stream" and content.get("name") == "stderr":
            text = content.get("text")
            if isinstance(text, str) and text.startswith(RATE_NOTICES):
                kind = "data" if text.startswith(RATE_NOTICES[0]) else "message"
                self._report_trouble(
                    f"the gateway dropped the program's messages: its IOPub {kind} rate limit "
                    "was exceeded (start the gateway with "
                    "--ZMQChannelsWebsocketConnection.limit_rate=False)")

    async def ready_iopub(self) -> list[Incoming]:
        ready: list[Incoming] = []
        loop = asyncio.get_running_loop()
        give_up = loop.time() + DRAIN_MAX_SECONDS  # a kernel that keeps talking is cut off
        while loop.time() < give_up:
            item = await self._next_within(DRAIN_SECONDS)
            if item is None:
                return ready
            channel, message = item
            if channel == "iopub" and message is not None:
                self._observe(message)
                ready.append(message)
        return ready

    async def wait_disconnected(self) -> str | None:
        await self._trouble.wait()
        return self._trouble_reason

    def _report_trouble(self, reason: str | None) -> None:
        if not self._trouble.is_set():
            self._trouble_reason = reason
            self._trouble.set()

    async def _next_within(self, seconds: float) -> tuple[str, Incoming | None] | None:
        """:meth:`_next`, or ``None`` if nothing arrives within ``seconds``."""
        try:
            async with asyncio.timeout(seconds):
                return await self._next()
        except TimeoutError:
            return None

    async def _next_reply(self, seconds: float) -> tuple[str, Incoming | None] | None:
        item = await self._next_within(seconds)
        if item is None and self._ended:
            await self._never.wait()  # closed: the kernel's state says why
        return item

    # Closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop delivering messages: nothing sent afterwards reaches the kernel, nothing
        it sends reaches the host. The close handshake finishes in :meth:`aclose`."""
        self._closed_by_us = True
        self._ended = True
        self._outbox.close()

    async def aclose(self) -> None:
        self.close()
        await self._ws.close()

    def _too_big(self) -> bool:
        sent = self._ws.protocol.close_sent
        return sent is not None and sent.code == CloseCode.MESSAGE_TOO_BIG

    def _describe_close(self) -> str:
        protocol = self._ws.protocol
        close = protocol.close_rcvd or protocol.close_sent
        if close is None:
            return "the connection dropped without a close frame"
        reason = f": {close.reason}" if close.reason else ""
        return f"websocket closed with code {close.code}{reason}"


def encode_v1(channel: str, parts: list[bytes]) -> bytes:
    """One message in the ``v1.kernel.websocket.jupyter.org`` framing."""
    name = channel.encode()
    offsets = [8 * (len(parts) + 3), 8 * (len(parts) + 3) + len(name)]
    for part in parts:
        offsets.append(offsets[-1] + len(part))
    head = len(offsets).to_bytes(8, "little") + b"".join(o.to_bytes(8, "little")
                                                          for o in offsets)
    return b"".join([head, name, *parts])


def decode_v1(data: bytes) -> tuple[str, list[bytes]] | None:
    """``(channel, parts)`` of a v1 frame, or ``None`` if it is malformed."""
    if len(data) < 8:
        return None
    count = int.from_bytes(data[:8], "little")
    if not 2 <= count <= MAX_PARTS + 2 or len(data) < 8 * (count + 1):
        return None
    offsets = [int.from_bytes(data[8 * i:8 * i + 8], "little") for i in range(1, count + 1)]
    if offsets[0] != 8 * (count + 1) or offsets[-1] > len(data) or any(
            a > b for a, b in itertools.pairwise(offsets)):
        return None
    try:
        channel = data[offsets[0]:offsets[1]].decode("ascii")
    except UnicodeDecodeError:
        return None
    return channel, [data[offsets[i]:offsets[i + 1]] for i in range(1, count - 1)]


def encode_legacy(channel: str, parts: list[bytes]) -> str:
    """One message in the legacy JSON framing (``parts`` are already JSON)."""
    header, parent, metadata, content = (part.decode("utf-8", "surrogateescape")
                                         for part in parts)
    return (f'{{"header":{header},"parent_header":{parent},"metadata":{metadata},'
            f'"content":{content},"buffers":[],"channel":{json.dumps(channel)}}}')


def decode_legacy(text: str) -> tuple[str, Incoming | None]:
    """``(channel, message)`` of a legacy JSON frame; junk gives ``("", None)``."""
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        return "", None
    if not isinstance(message, dict):
        return "", None
    channel, header, content = (message.get(k) for k in ("channel", "header", "content"))
    parent = message.get("parent_header")
    if not (isinstance(channel, str) and isinstance(header, dict)
            and isinstance(content, dict) and isinstance(header.get("msg_type"), str)):
        return "", None
    parent_id = parent.get("msg_id") if isinstance(parent, dict) else None
    return channel, Incoming(header["msg_type"],
                             parent_id if isinstance(parent_id, str) else None,
                             content, len(text))
