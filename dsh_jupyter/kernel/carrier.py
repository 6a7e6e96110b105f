"""The opt-in local carrier: tool calls over a private unix socket instead of comms.

Negotiated over the comm while a local kernel is prepared: the host listens on
``tools.sock`` inside the kernel's workspace (a 0700 directory; the socket is
0600), sends ``{"kind": "carrier", "path", "token"}`` on the comm, and accepts
the first connection whose first line is the per-kernel token; the listener is
closed right after. Lines are JSON objects with the same shapes as the comm
messages (``call`` from the kernel, ``result`` from the host). The program's
``done`` still travels over the comm, so it arrives on iopub after the output.
If the kernel cannot connect in time, calls stay on the comm.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import secrets
from collections.abc import Callable
from typing import Any

from .workspace import Workspace

MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux


class MessageTooLarge(Exception):
    """The kernel sent a line longer than the message size cap."""


class SocketCarrier:
    """The host end of an accepted, authenticated carrier connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def offer(cls, workspace: Workspace, send_offer: Callable[[dict[str, Any]], None], *,
                    max_message_bytes: int, seconds: float) -> SocketCarrier | None:
        """Listen, offer the socket over the comm, and wait for the kernel to connect.
        ``None`` when the path is too long or the kernel did not connect in time."""
        path = workspace.root / "tools.sock"
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            return None
        token = secrets.token_hex(16).encode()
        accepted: asyncio.Future[SocketCarrier] = asyncio.get_running_loop().create_future()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                line = await asyncio.wait_for(reader.readline(), seconds)
            except (TimeoutError, ValueError, OSError):
                line = b""
            if accepted.done() or not hmac.compare_digest(line.rstrip(b"\n"), token):
                writer.close()
                return
            accepted.set_result(cls(reader, writer))

        server = await asyncio.start_unix_server(on_connect, path=str(path),
                                                 limit=max_message_bytes)
        try:
            os.chmod(path, 0o600)
            send_offer({"kind": "carrier", "path": str(path), "token": token.decode()})
            return await asyncio.wait_for(asyncio.shield(accepted), seconds)
        except TimeoutError:
            return None
        finally:
            server.close()
            with contextlib.suppress(OSError):
                path.unlink()

    def send(self, data: dict[str, Any]) -> None:
        if not self._writer.is_closing():
            line = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
            self._writer.write(line.encode("utf-8", "surrogatepass") + b"\n")

    async def receive(self) -> tuple[object, int] | None:
        """The next message and its size in bytes; ``None`` at EOF; junk decodes to
        ``None`` data (the bridge drops it). Raises :class:`MessageTooLarge`."""
        try:
            line = await self._reader.readline()
        except ValueError as error:  # asyncio reports a line over the limit as ValueError
            raise MessageTooLarge(str(error)) from None
        if not line:
            return None
        try:
            data: object = json.loads(line, parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            data = None
        return data, len(line)

    def close(self) -> None:
        self._writer.close()


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")
