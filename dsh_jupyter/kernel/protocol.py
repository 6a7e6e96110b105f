"""Checking what a kernel sends: the host's end of the messages of
:mod:`~.inkernel.messages` (their shapes are defined there, for both ends).

The kernel is hostile: :func:`parse_kernel_message` accepts only those shapes and reports
anything else as a :class:`Malformed` value the bridge can answer or drop.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..json_value import JsonValue
from .inkernel.messages import (
    CallFrameMessage,
    CallMessage,
    DoneError,
    DoneErrorMessage,
    DoneFrameMessage,
    DoneOkMessage,
    FramedCallMessage,
    FramedDoneMessage,
    FrameMessage,
    KernelMessage,
    ResultErrorMessage,
    ResultOkMessage,
)

MAX_ID_LENGTH = 64
MAX_NAME_LENGTH = 256


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
    return {"kind": "call", "id": call_id, "name": name, "args": data["args"]}


def _parse_frame(data: dict[str, object]) -> FrameMessage | Malformed:
    target, text = data.get("for"), data.get("text")
    if not isinstance(text, str):
        return Malformed(problem="a frame needs its text")
    if target == "done":
        done: DoneFrameMessage = {"kind": "frame", "for": "done", "text": text}
        return done
    call_id = _call_id(data)
    if target == "call" and call_id is not None:
        call: CallFrameMessage = {"kind": "frame", "for": "call", "id": call_id, "text": text}
        return call
    return Malformed(problem="a frame is for a call (with its id) or for the result",
                     call_id=call_id if target == "call" else None)


def _parse_done(data: dict[str, object]
                ) -> DoneOkMessage | FramedDoneMessage | DoneErrorMessage | Malformed:
    ok = data.get("ok")
    if ok is True and data.get("framed") is True:
        return {"kind": "done", "ok": True, "framed": True}
    if ok is True:
        return {"kind": "done", "ok": True, "value": data.get("value")}
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
