"""The call-reply shortcut's one rule (``inkernel/shortcuts._our_reply``): only a comm_msg
to the tools comm, signed with the kernel's key and never seen before, is taken off
ipykernel's path; everything else is left to it. Messages are made by jupyter-client's
own Session, as the host sends them."""

from __future__ import annotations

from typing import Any

import zmq
from jupyter_client.session import Session

from dsh_jupyter.kernel.inkernel.shortcuts import _our_reply

KEY = b"k" * 32
COMM = "c0ffee"
DATA = {"kind": "result", "id": "1", "ok": True, "value": {"x": 1}}


def wire(session: Session, msg_type: str, content: dict[str, Any]) -> list[zmq.Frame]:
    """The frames as the kernel's shell stream hands them over (``copy=False``)."""
    return frames([b"host-ident", *session.serialize(session.msg(msg_type, content))])


def frames(parts: list[bytes]) -> list[zmq.Frame]:
    return [zmq.Frame(part) for part in parts]


def test_a_signed_reply_to_the_tools_comm_is_taken() -> None:
    kernel = Session(key=KEY)
    frames = wire(Session(key=KEY), "comm_msg", {"comm_id": COMM, "data": DATA})
    assert _our_reply(kernel, frames, COMM.encode()) == DATA


def test_everything_else_is_left_to_ipykernel() -> None:
    kernel = Session(key=KEY)
    host = Session(key=KEY)
    others = [
        wire(host, "comm_msg", {"comm_id": "another", "data": DATA}),  # another comm
        wire(host, "execute_request", {"code": COMM}),  # not a comm message
        wire(Session(key=b"x" * 32), "comm_msg", {"comm_id": COMM, "data": DATA}),  # forged
        frames([b"<IDS|MSG>", b"", b"{}", b"{}", b"{}", b"{}"]),  # unsigned
        frames([b"<IDS|MSG>"]),  # truncated
    ]
    for message in others:
        assert _our_reply(kernel, message, COMM.encode()) is None, message


def test_a_replayed_reply_is_refused() -> None:
    kernel = Session(key=KEY)
    frames = wire(Session(key=KEY), "comm_msg", {"comm_id": COMM, "data": DATA})
    assert _our_reply(kernel, frames, COMM.encode()) == DATA
    assert _our_reply(kernel, frames, COMM.encode()) is None
