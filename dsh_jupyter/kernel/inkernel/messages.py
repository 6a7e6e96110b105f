"""The messages between the host and the in-kernel package: one definition for both ends.

They travel as the ``data`` of Jupyter comm messages on the comm whose target is
:data:`TARGET_NAME` (and, opt-in, over the socket carrier: one JSON line each, the same
shapes)::

    kernel -> host  {"kind": "hello", "protocol": 1}        (the comm_open's data)
                    {"kind": "call", "id", "name", "args"}
                    {"kind": "call", "id", "name", "framed": true}
                    {"kind": "done", "ok": true, "value"}
                    {"kind": "done", "ok": true, "framed": true}
                    {"kind": "done", "ok": false, "error", "message"}
                    {"kind": "frame", "for": "call", "id", "text"}
                    {"kind": "frame", "for": "done", "text"}
    host -> kernel  {"kind": "result", "id", "ok": true, "value"}
                    {"kind": "result", "id", "ok": false, "message"}

A framed call's arguments or a framed result arrive first, as frames (``frames``): no
message needs to be large. The kernel builds its messages from these TypedDicts; the host
imports them too (``dsh_jupyter.kernel.protocol`` checks every message a kernel sends
against them: the kernel is hostile). Values (``args``, ``value``) are ``object`` here:
each end checks them where they are made or arrive (the kernel with
``values.json_problem``, the host when it snapshots them).
"""

from __future__ import annotations

from typing import Literal, TypedDict

TARGET_NAME = "dsh_jupyter.tools"
"""The target of the tools comm the kernel opens (its ``comm_open`` carries a hello)."""
PROTOCOL = 1
MAX_MESSAGE_BYTES = 2 * 1024 * 1024
"""The largest message a kernel may send. Nothing the in-kernel package sends comes near
it (output goes in 64 KiB chunks, large values as ~64 KiB frames, failure messages are
clipped, displays over it are replaced by a note): a bigger one drops the host's
connection, and the run ends as ``output-limit``."""

DoneError = Literal["exception", "invalid-output", "output-limit"]


class HelloMessage(TypedDict):
    kind: Literal["hello"]
    protocol: int


class CallMessage(TypedDict):
    kind: Literal["call"]
    id: str
    name: str
    args: object


class FramedCallMessage(TypedDict):
    kind: Literal["call"]
    id: str
    name: str
    framed: Literal[True]


# "for" is a keyword: these two can only be spelled the functional way.
CallFrameMessage = TypedDict("CallFrameMessage", {
    "kind": Literal["frame"], "for": Literal["call"], "id": str, "text": str})
DoneFrameMessage = TypedDict("DoneFrameMessage", {
    "kind": Literal["frame"], "for": Literal["done"], "text": str})


class DoneOkMessage(TypedDict):
    kind: Literal["done"]
    ok: Literal[True]
    value: object


class FramedDoneMessage(TypedDict):
    kind: Literal["done"]
    ok: Literal[True]
    framed: Literal[True]


class DoneErrorMessage(TypedDict):
    kind: Literal["done"]
    ok: Literal[False]
    error: DoneError
    message: str


class ResultOkMessage(TypedDict):
    kind: Literal["result"]
    id: str
    ok: Literal[True]
    value: object


class ResultErrorMessage(TypedDict):
    kind: Literal["result"]
    id: str
    ok: Literal[False]
    message: str


FrameMessage = CallFrameMessage | DoneFrameMessage
KernelMessage = (CallMessage | FramedCallMessage | DoneOkMessage | FramedDoneMessage
                 | DoneErrorMessage | FrameMessage)
HostMessage = ResultOkMessage | ResultErrorMessage
