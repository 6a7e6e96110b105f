"""A run's tool-call transport: how the program's messages reach the run, and the host's
replies reach the program.

A run (``run.watch.RunWatch``) knows its transport only as a :class:`CallTransport`. Two
exist for a real kernel:

- :class:`CommCalls`: the tools comm the setup cell opened. The program's messages arrive
  on iopub among its output, so the run's iopub reader offers each message to
  :meth:`~CallTransport.claim`; replies are ``comm_msg`` on the shell channel.
- :class:`SocketCalls`: the opt-in local socket (see ``carrier``), read by its own task
  through :meth:`~CallTransport.receive`. The comm stays open beside it: the program's
  ``done`` travels there, and when the kernel closes the socket the replies go back to
  the comm.

Either way an event is a message for the bridge (:class:`Arrived`) or a
:class:`~dsh_jupyter.runtime.CodeRunFailure` that ends the run: the program closed its
comm (``kernel-exit``), a message over the size cap (``output-limit``) or replies the
program does not read (``call-limit``).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from ...runtime import CodeRunFailure
from ..inkernel.messages import HostMessage
from .carrier import MessageTooLarge, SocketCarrier
from .channels import KernelChannels
from .wire import Incoming

CLOSED_COMM = ("the program closed its tools channel: tool calls and its result can no "
               "longer reach the host")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Arrived:
    """A message from the program for the bridge (still untrusted), ``size`` its encoded
    size in bytes."""

    data: object
    size: int


CallEvent = Arrived | CodeRunFailure


class CallTransport(Protocol):
    """Carries one run's tool calls. Never raises: a transport that cannot carry on
    says so with a :class:`~dsh_jupyter.runtime.CodeRunFailure`."""

    def send(self, message: HostMessage) -> CodeRunFailure | None:
        """Send ``message`` to the program without blocking; a failure (``call-limit``)
        when the program does not read its replies."""

    def claim(self, message: Incoming) -> CallEvent | None:
        """``message`` from iopub as an event of this transport, or ``None`` when it is
        not the transport's (output and the like, for the run to read)."""

    async def receive(self) -> CallEvent | None:
        """The next event from a channel of the transport's own; ``None`` once there is
        none (never had one, or the kernel closed it)."""


def too_large(max_message_bytes: int) -> str:
    return (f"the kernel sent a message larger than the "
            f"{max_message_bytes // 2**20} MiB message limit")


class CommCalls:
    """Calls on the tools comm ``comm_id`` (see the module docstring). ``max_waiting``: the
    replies that may wait for a kernel that does not read them."""

    def __init__(self, connection: KernelChannels, comm_id: str, *, max_waiting: int) -> None:
        self._connection = connection
        self._comm_id = comm_id
        self._max_waiting = max_waiting

    def send(self, message: HostMessage) -> CodeRunFailure | None:
        self._connection.send_comm(self._comm_id, dict(message), max_waiting=self._max_waiting)
        if not self._connection.overflowed:
            return None
        return CodeRunFailure(kind="call-limit", message=(
            f"the program sent tool calls faster than it read their replies (more than "
            f"{self._max_waiting} waiting): await the calls, or gather them in smaller "
            "batches"))

    def claim(self, message: Incoming) -> CallEvent | None:
        if message.msg_type not in ("comm_msg", "comm_close") \
                or message.content.get("comm_id") != self._comm_id:
            return None
        if message.msg_type == "comm_close":
            # The kernel drops what is sent on a closed comm: calls would wait for
            # replies, and the result for the host, until the wall budget.
            return CodeRunFailure(kind="kernel-exit", message=CLOSED_COMM)
        return Arrived(data=message.content.get("data"), size=message.size)

    async def receive(self) -> CallEvent | None:
        return None  # the comm's messages come on iopub: see claim


class SocketCalls:
    """Calls on the socket ``carrier``, with ``comm`` beside it (see the module
    docstring)."""

    def __init__(self, carrier: SocketCarrier, comm: CommCalls, *,
                 max_message_bytes: int) -> None:
        self._carrier = carrier
        self._comm = comm
        self._max_message_bytes = max_message_bytes
        self._closed = False

    def send(self, message: HostMessage) -> CodeRunFailure | None:
        if self._closed:
            return self._comm.send(message)
        if self._carrier.send(dict(message)):
            return None
        return CodeRunFailure(kind="call-limit", message=(
            "the program sent tool calls faster than it read their replies (the socket's "
            "buffer is full): await the calls, or gather them in smaller batches"))

    def claim(self, message: Incoming) -> CallEvent | None:
        return self._comm.claim(message)

    async def receive(self) -> CallEvent | None:
        if self._closed:
            return None
        try:
            incoming = await self._carrier.receive()
        except MessageTooLarge:
            return CodeRunFailure(kind="output-limit",
                                  message=too_large(self._max_message_bytes))
        if incoming is None:
            self._closed = True  # the kernel closed it: back to the comm
            return None
        data, size = incoming
        return Arrived(data=data, size=size)
