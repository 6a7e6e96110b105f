"""The host's channels to one kernel, whatever carries them.

A :class:`~.session.KernelSession` talks to its kernel through
:class:`KernelChannels`: shell requests out, iopub messages in. Local kernels
use :class:`~.connection.KernelConnection` (zmq sockets built from the
connection info). A kernel that brings its own channels — a gateway kernel,
whose channels are one websocket (see ``gateway_connection``) — says so by
being :class:`HasChannels`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from .wire import Incoming


class KernelChannels(Protocol):
    """Shell out, iopub in. Incoming messages are untrusted and already decoded."""

    def send_comm(self, comm_id: str, data: dict[str, Any]) -> None:
        """Send ``data`` on the comm ``comm_id`` (never raises: a gone kernel is the
        watchdog's business)."""

    def execute(self, code: str) -> str:
        """Send an ``execute_request``; returns its ``msg_id``."""

    async def recv_iopub(self) -> Incoming | None:
        """The next iopub message, or ``None`` for junk (dropped). Blocks while nothing
        arrives, also once the channels are gone."""

    async def ready_iopub(self) -> list[Incoming]:
        """The iopub messages already received (without waiting for more)."""

    async def wait_disconnected(self) -> str | None:
        """Return once the channels stopped delivering a live kernel's messages (an
        oversized message, say); the value says why, ``None`` meaning a message over the
        size cap. Does not return when the kernel merely died."""

    async def wait_ready(self, seconds: float) -> None:
        """A ``kernel_info`` handshake proving iopub is live. Raises ``TimeoutError``."""

    def close(self) -> None:
        """Stop delivering messages; idempotent."""


@runtime_checkable
class HasChannels(Protocol):
    """A kernel process that brings its own channels (no zmq connection info)."""

    @property
    def channels(self) -> KernelChannels: ...
