"""The kernel end of the tool calls, their client: :class:`CallClient` sends calls and
resolves their futures from the host's replies (the host's call server answers them); a
failed call raises :class:`ToolCallError` in the program.

A call awaits a future that the comm's ``on_msg`` handler resolves, so the program must
await on the kernel's event loop (ipykernel >= 7.4 delivers comm messages to a cell that
is awaiting; a thread-blocking wait would deadlock).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from .frames import FRAME_BYTES, frame_texts
from .messages import (
    CallFrameMessage,
    CallMessage,
    DoneErrorMessage,
    DoneFrameMessage,
    DoneOkMessage,
    FramedCallMessage,
    FramedDoneMessage,
    KernelMessage,
)
from .outputs import flush_streams
from .values import JsonValue, compact_json, json_problem

Send = Callable[[KernelMessage], None]
"""How a message reaches the host (the comm's ``send``)."""


class ToolCallError(Exception):
    """A tool call failed on the host; ``tool_name`` and ``message`` say which and why."""

    __module__ = "builtins"  # tracebacks say ToolCallError, not this private module

    def __init__(self, tool_name: str, message: str) -> None:
        super().__init__(message)  # str(error) is the message
        self.add_note(f"tool: {tool_name}")  # an uncaught one's traceback names the tool
        self.tool_name = tool_name
        self.message = message


class _Pending:
    __slots__ = ("future", "loop", "name", "thread")

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self.loop = loop
        self.thread = threading.get_ident()
        self.future: asyncio.Future[JsonValue] = loop.create_future()


class CallClient:
    """The kernel end of the tool calls: sends calls, resolves their futures from replies.

    Calls travel over the comm unless the host offered a local socket (``carrier``)
    and the kernel could connect to it; ``done`` always goes over the comm, so it
    arrives on iopub after the program's output."""

    def __init__(self, send: Send) -> None:
        self._comm_send = send
        self._send = send
        self._pending: dict[str, _Pending] = {}
        self._ids = itertools.count(1)
        self._carrier: asyncio.Task[None] | None = None

    async def call(self, name: str, args: JsonValue) -> JsonValue:
        problem = json_problem(args)
        text = None
        if problem is None:
            try:
                text = compact_json(args)
            except (ValueError, RecursionError) as error:
                problem = f"they cannot be encoded ({type(error).__name__}: {error})"
        if problem is not None or text is None:
            # Like every call the host refuses: the program catches ToolCallError.
            raise ToolCallError(
                name, f"arguments for tool {name!r} are not lossless JSON: {problem}")
        # What the program printed before this call reaches the host before the call
        # (cards show it in order; an abort while the call runs keeps it).
        flush_streams()
        call_id = str(next(self._ids))
        pending = _Pending(name, asyncio.get_running_loop())
        self._pending[call_id] = pending
        try:
            if len(text) > FRAME_BYTES:
                for frame in frame_texts(args):
                    piece: CallFrameMessage = {"kind": "frame", "for": "call", "id": call_id,
                                               "text": frame}
                    self._send(piece)
                framed: FramedCallMessage = {"kind": "call", "id": call_id, "name": name,
                                             "framed": True}
                self._send(framed)
            else:
                message: CallMessage = {"kind": "call", "id": call_id, "name": name,
                                        "args": args}
                self._send(message)
            return await pending.future
        finally:
            self._pending.pop(call_id, None)

    def on_msg(self, msg: Mapping[str, Any]) -> None:
        """The comm's ``on_msg`` handler."""
        content = msg.get("content") if isinstance(msg, Mapping) else None
        self.receive(content.get("data") if isinstance(content, Mapping) else None)

    def use_carrier(self, path: str, token: str) -> None:
        """Connect to the host's socket (named by the setup cell, and only there)."""
        if self._carrier is None:
            self._carrier = asyncio.ensure_future(self._connect(path, token))

    def receive(self, data: object) -> None:
        """A message from the host: anything that is not a reply we wait for is ignored."""
        if not isinstance(data, Mapping) or data.get("kind") != "result":
            return
        call_id = data.get("id")
        pending = self._pending.get(call_id) if isinstance(call_id, str) else None
        if pending is None:
            return
        if data.get("ok") is True:
            settle: Callable[[], None] = _resolver(pending.future, data.get("value"))
        else:
            text = data.get("message")
            error = ToolCallError(pending.name, text if isinstance(text, str) else "failed")
            settle = _rejecter(pending.future, error)
        if threading.get_ident() == pending.thread:
            settle()  # ipykernel >= 7.4 dispatches comm messages on the awaiting loop
        else:
            pending.loop.call_soon_threadsafe(settle)

    def done(self, message: DoneOkMessage | DoneErrorMessage, text: str | None = None) -> None:
        """Report the end of the run (over the comm, after the output); ``text`` is the
        value's compact JSON when it is large enough to go as frames."""
        if message.get("ok") is True and text is not None and len(text) > FRAME_BYTES:
            for frame in frame_texts(message.get("value")):
                piece: DoneFrameMessage = {"kind": "frame", "for": "done", "text": frame}
                self._comm_send(piece)
            framed: FramedDoneMessage = {"kind": "done", "ok": True, "framed": True}
            self._comm_send(framed)
            return
        self._comm_send(message)

    async def _connect(self, path: str, token: str) -> None:
        """Switch calls to the host's unix socket: newline-delimited JSON, same shapes."""
        try:
            reader, writer = await asyncio.open_unix_connection(path, limit=1 << 30)
        except OSError:
            return  # stay on the comm
        writer.write(token.encode() + b"\n")

        def send_line(data: KernelMessage) -> None:
            if writer.is_closing():
                self._send = self._comm_send
                self._comm_send(data)
                return
            writer.write(json.dumps(data, allow_nan=False, separators=(",", ":")).encode() + b"\n")

        self._send = send_line
        try:
            while line := await reader.readline():
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                self.receive(data)
        finally:
            self._send = self._comm_send
            writer.close()


def _resolver(future: asyncio.Future[JsonValue], value: JsonValue) -> Callable[[], None]:
    def settle() -> None:
        if not future.done():
            future.set_result(value)

    return settle


def _rejecter(future: asyncio.Future[JsonValue], error: BaseException) -> Callable[[], None]:
    def settle() -> None:
        if not future.done():
            future.set_exception(error)

    return settle
