"""The opt-in local carrier: tool calls over a private unix socket instead of comms.

Set up while a local kernel is prepared, and only then: the host listens on
``tools.sock`` inside the kernel's root (a 0700 directory; the socket is 0600 and
the kernel's) *before* it sends the setup cell, and the setup cell itself (signed, on
the shell channel, which nobody but the host can write to) carries the path and
a per-kernel token. The kernel connects and sends the token as its first line;
the host accepts the first connection presenting it and closes the listener.
No carrier can be offered to a kernel any other way or at any other time, so a
program cannot redirect another run's calls. Lines are JSON objects with the
same shapes as the comm messages (``call`` from the kernel, ``result`` from the
host). The program's ``done`` still travels over the comm, so it arrives on
iopub after the output. If the kernel cannot connect in time, calls stay on the
comm.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hmac
import json
import os
import secrets
import socket
from typing import Any

from ..run.workspace import Workspace

MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux


class MessageTooLarge(Exception):
    """The kernel sent a line longer than the message size cap."""


class CarrierListener:
    """The listening end, open for one kernel's setup. ``path`` and ``token`` go into the
    setup cell; :meth:`accept` waits for the kernel and closes the listener."""

    def __init__(self, server: asyncio.Server, path: str, token: str,
                 accepted: asyncio.Future[SocketCarrier], seconds: float, *,
                 kernel_path: str) -> None:
        self._server = server
        self.path = path
        self.kernel_path = kernel_path
        """Where the kernel connects (its own view of ``path``)."""
        self.token = token
        self._accepted = accepted
        self._seconds = seconds
        self._handed_out = False

    @classmethod
    async def open(cls, workspace: Workspace, *, max_message_bytes: int, max_buffered_bytes: int,
                   seconds: float) -> CarrierListener | None:
        """Listen in ``workspace``; ``None`` when its path is too long for a unix socket."""
        kernel_path = f"{workspace.kernel.root}/tools.sock"
        path = workspace.host_path(kernel_path)
        if max(len(os.fsencode(path)), len(os.fsencode(kernel_path))) > MAX_SOCKET_PATH:
            return None
        token = secrets.token_hex(32)
        accepted: asyncio.Future[SocketCarrier] = asyncio.get_running_loop().create_future()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                line = await asyncio.wait_for(reader.readline(), seconds)
            except (TimeoutError, ValueError, OSError):
                line = b""
            if accepted.done() or not hmac.compare_digest(line.rstrip(b"\n"), token.encode()):
                writer.close()
                return
            accepted.set_result(SocketCarrier(reader, writer,
                                              max_buffered_bytes=max_buffered_bytes))

        listening = await asyncio.to_thread(_bind, path, workspace.kernel_owner)
        server = await asyncio.start_unix_server(on_connect, sock=listening,
                                                 limit=max_message_bytes)
        return cls(server, str(path), token, accepted, seconds, kernel_path=kernel_path)

    async def accept(self) -> SocketCarrier | None:
        """The kernel's authenticated connection, or ``None`` if none came in time. Closes
        the listener and removes the socket file either way."""
        try:
            carrier = await asyncio.wait_for(asyncio.shield(self._accepted), self._seconds)
            self._handed_out = True
            return carrier
        except TimeoutError:
            return None
        finally:
            self.close()

    def close(self) -> None:
        self._server.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        if not self._accepted.done():
            self._accepted.cancel()
        elif not self._accepted.cancelled() and not self._handed_out:
            self._accepted.result().close()


def _bind(path: str, owner: tuple[int, int] | None) -> socket.socket:
    """A unix socket listening at ``path`` (0600). ``owner``: the ids of a root host's
    confined kernel, which the socket is made as: its ``/workspace`` belongs to a user
    namespace that does not map host root, so root cannot make files there (EOVERFLOW).
    The file-system ids are per thread on Linux: this runs in a worker thread."""
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if owner is None:
            listening.bind(path)
        else:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.setfsgid(owner[1])
            libc.setfsuid(owner[0])
            try:
                listening.bind(path)
            finally:
                libc.setfsuid(0)
                libc.setfsgid(0)
        os.chmod(path, 0o600)
        listening.listen(1)
    except BaseException:
        listening.close()
        raise
    return listening


class SocketCarrier:
    """The host end of an accepted, authenticated carrier connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 max_buffered_bytes: int) -> None:
        self._reader = reader
        self._writer = writer
        self._max_buffered = max_buffered_bytes

    def send(self, data: dict[str, Any]) -> bool:
        """Write one line without blocking; ``False`` (nothing written) once more than
        ``max_buffered_bytes`` wait for a kernel that does not read them."""
        if self._writer.is_closing():
            return True  # the kernel closed it; the run goes back to the comm
        transport = self._writer.transport
        if transport.get_write_buffer_size() > self._max_buffered:
            return False
        line = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        self._writer.write(line.encode("utf-8", "surrogatepass") + b"\n")
        return True

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
