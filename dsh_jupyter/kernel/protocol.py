"""The messages exchanged between the host and the injected kernel module.

They travel as the ``data`` of Jupyter comm messages on the comm whose target is
:data:`TARGET_NAME` (and, opt-in, over a local socket with the same shapes)::

    kernel -> host  {"kind": "call", "id", "name", "args"}
                    {"kind": "call", "id", "name", "framed": true}
                    {"kind": "done", "ok": true, "value"}
                    {"kind": "done", "ok": true, "framed": true}
                    {"kind": "done", "ok": false, "error", "message"}
                    {"kind": "frame", "for": "call" | "done", "id"?, "text"}
    host -> kernel  {"kind": "result", "id", "ok": true, "value"}
                    {"kind": "result", "id", "ok": false, "message"}

A framed call's arguments or a framed result arrive first, as frames (see
``frames``): no message needs to be large.

The kernel is hostile: :func:`parse_kernel_message` accepts only these shapes
and reports anything else as a :class:`Malformed` value the bridge can answer or
drop. The kernel side (``_inkernel.py``) mirrors these definitions; a test keeps
the two in step. :data:`TARGET_NAME` is the kernel side's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypedDict

from ..json_value import JsonValue
from ._inkernel import TARGET_NAME as TARGET_NAME

MAX_MESSAGE_BYTES = 2 * 1024 * 1024
"""The largest message a kernel may send. Nothing the injected module sends comes near
it (output goes in 64 KiB chunks, large values as ~64 KiB frames, failure messages are
clipped): a bigger one drops the connection, and the run ends as ``output-limit``."""
MAX_ID_LENGTH = 64
MAX_NAME_LENGTH = 256

DoneError = Literal["exception", "invalid-output", "output-limit"]


class CallMessage(TypedDict):
    kind: Literal["call"]
    id: str
    name: str
    args: JsonValue


class FramedCallMessage(TypedDict):
    kind: Literal["call"]
    id: str
    name: str
    framed: Literal[True]


class FrameMessage(TypedDict):
    kind: Literal["frame"]
    target: Literal["call", "done"]  # "for" on the wire
    id: str | None
    text: str


class FramedDoneMessage(TypedDict):
    kind: Literal["done"]
    ok: Literal[True]
    framed: Literal[True]


class DoneOkMessage(TypedDict):
    kind: Literal["done"]
    ok: Literal[True]
    value: JsonValue


class DoneErrorMessage(TypedDict):
    kind: Literal["done"]
    ok: Literal[False]
    error: DoneError
    message: str


class ResultOkMessage(TypedDict):
    kind: Literal["result"]
    id: str
    ok: Literal[True]
    value: JsonValue


class ResultErrorMessage(TypedDict):
    kind: Literal["result"]
    id: str
    ok: Literal[False]
    message: str


KernelMessage = (CallMessage | FramedCallMessage | DoneOkMessage | FramedDoneMessage
                 | DoneErrorMessage | FrameMessage)
HostMessage = ResultOkMessage | ResultErrorMessage


@dataclass(frozen=True, slots=True, kw_only=True)
class Malformed:
    """A kernel message that fits no shape. ``call_id`` is set when a reply is possible."""

    problem: str
    call_id: str | None = None


_DONE_ERRORS: dict[object, DoneError] = {
    "exception": "exception", "invalid-output": "invalid-output", "output-limit": "output-limit"}


def parse_kernel_message(data: object) -> KernelMessage | Malformed:
    """Validate one message from the kernel (JSON already decoded, nothing else trusted)."""
    if not isinstance(data, dict):
        return Malformed(problem=f"a message must be an object, not {type(data).__name__}")
    kind = data.get("kind")
    if kind == "call":
        return _parse_call(data)
    if kind == "done":
        return _parse_done(data)
    if kind == "frame":
        return _parse_frame(data)
    return Malformed(problem=f"unknown message kind {str(kind)[:40]!r}")


def _call_id(data: dict[str, object]) -> str | None:
    call_id = data.get("id")
    return call_id if isinstance(call_id, str) and 0 < len(call_id) <= MAX_ID_LENGTH else None


def _parse_call(data: dict[str, object]) -> CallMessage | FramedCallMessage | Malformed:
    call_id = _call_id(data)
    if call_id is None:
        return Malformed(problem="a call needs a string id of 1 to 64 characters")
    name = data.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_LENGTH:
        return Malformed(problem="a call needs a tool name", call_id=call_id)
    if data.get("framed") is True:
        return {"kind": "call", "id": call_id, "name": name, "framed": True}
    if "args" not in data:
        return Malformed(problem="a call needs args", call_id=call_id)
    args: JsonValue = data["args"]  # type: ignore[assignment]  # checked by the bridge
    return {"kind": "call", "id": call_id, "name": name, "args": args}


def _parse_frame(data: dict[str, object]) -> FrameMessage | Malformed:
    target, text = data.get("for"), data.get("text")
    if not isinstance(text, str):
        return Malformed(problem="a frame needs its text")
    if target == "done":
        return {"kind": "frame", "target": "done", "id": None, "text": text}
    call_id = _call_id(data)
    if target == "call" and call_id is not None:
        return {"kind": "frame", "target": "call", "id": call_id, "text": text}
    return Malformed(problem="a frame is for a call (with its id) or for the result",
                     call_id=call_id if target == "call" else None)


def _parse_done(data: dict[str, object]
                ) -> DoneOkMessage | FramedDoneMessage | DoneErrorMessage | Malformed:
    ok = data.get("ok")
    if ok is True and data.get("framed") is True:
        return {"kind": "done", "ok": True, "framed": True}
    if ok is True:
        value: JsonValue = data.get("value")  # type: ignore[assignment]  # checked by the session
        return {"kind": "done", "ok": True, "value": value}
    error = data.get("error")
    message = data.get("message")
    if ok is False and error in _DONE_ERRORS:
        text = message if isinstance(message, str) else "the program failed"
        return {"kind": "done", "ok": False, "error": _DONE_ERRORS[error], "message": text}
    return Malformed(problem="a done message needs ok=true, or ok=false with a known error")


def result_ok(call_id: str, value: JsonValue) -> ResultOkMessage:
    return {"kind": "result", "id": call_id, "ok": True, "value": value}


def result_error(call_id: str, message: str) -> ResultErrorMessage:
    return {"kind": "result", "id": call_id, "ok": False, "message": message}
