"""The host's channels to one kernel, whatever carries them.

A :class:`~.live_kernel.LiveKernel` talks to its kernel through
:class:`KernelChannels`: shell requests out, iopub messages in. Local kernels
use :class:`~.connection.KernelConnection` (zmq sockets built from the
connection info). A kernel that brings its own channels — a gateway kernel,
whose channels are one websocket (see ``gateway_connection``) — says so by
being :class:`HasChannels`.

Sending never blocks and never queues without bound: what the transport cannot
take now (zmq past its high-water mark, a websocket whose write buffer is full)
waits in a bounded per-channel *outbox*, sent in order by one flusher task as
the transport drains. A full outbox drops the message and sets
:attr:`KernelChannels.overflowed`; for a run that means the kernel is not
reading its replies (see ``watch``, failure kind ``call-limit``).

:class:`BaseChannels` is what the two transports share: sending through the
outbox, ``execute`` and the ``kernel_info`` handshake of :meth:`~BaseChannels.wait_ready`.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final, Generic, Protocol, TypeVar, runtime_checkable

from .wire import Incoming

MAX_WAITING: Final = 1024
"""The default bound of a channel's outbox, in messages."""
READY_RETRY_SECONDS: Final = 0.25
"""How often :meth:`BaseChannels.wait_ready` asks again while the kernel is silent."""


class KernelChannels(Protocol):
    """Shell out, iopub in. Incoming messages are untrusted and already decoded."""

    def send_comm(self, comm_id: str, data: dict[str, Any], *,
                  max_waiting: int = MAX_WAITING) -> None:
        """Send ``data`` on the comm ``comm_id`` without blocking. If the transport cannot
        take it now it waits in the outbox; if ``max_waiting`` messages already wait there,
        it is dropped and :attr:`overflowed` set. Never raises: a gone kernel is the
        watchdog's business."""

    @property
    def overflowed(self) -> bool:
        """Whether :meth:`send_comm` dropped a message because its outbox was full: the
        kernel is not reading what the host sends (a channel serves one run)."""

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
        """Stop delivering messages and drop the outbox (its flusher ends); idempotent."""


@runtime_checkable
class HasChannels(Protocol):
    """A kernel process that brings its own channels (no zmq connection info)."""

    @property
    def channels(self) -> KernelChannels: ...


Message = TypeVar("Message")


class Outbox(Generic[Message]):
    """Messages a transport could not take yet, sent in order by one flusher task.

    ``try_send`` hands a message to the transport without blocking and says whether it
    was taken; ``send`` waits until the transport takes one (it is only ever awaited by
    the flusher, one message at a time, so the transport's own machinery never queues
    more than one waiter). Both may raise once the transport is gone: the waiting
    messages are then dropped, as they could never arrive.
    """

    def __init__(self, try_send: Callable[[Message], bool],
                 send: Callable[[Message], Awaitable[None]]) -> None:
        self._try_send = try_send
        self._send = send
        self._waiting: deque[Message] = deque()
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False

    def __len__(self) -> int:
        """How many messages wait for the transport."""
        return len(self._waiting)

    @property
    def flushing(self) -> bool:
        """Whether the flusher task is running (at most one ever is)."""
        return self._flusher is not None

    def post(self, message: Message, max_waiting: int | None) -> bool:
        """Send ``message`` now if nothing waits and the transport takes it, else queue it;
        ``False`` (and ``message`` dropped) when ``max_waiting`` messages already wait
        (``None``: no bound, for the few requests a session sends itself)."""
        if self._closed:
            return True  # the channels are closed: nothing reaches the kernel any more
        if not self._waiting and self._flusher is None:
            try:
                if self._try_send(message):
                    return True
            except Exception:
                return True  # the transport is gone: the watchdog ends the run
        if max_waiting is not None and len(self._waiting) >= max_waiting:
            return False
        self._waiting.append(message)
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        return True

    async def _flush(self) -> None:
        try:
            while self._waiting:
                await self._send(self._waiting.popleft())
        except Exception:
            self._waiting.clear()
        finally:
            self._flusher = None

    def close(self) -> None:
        """Drop what waits and stop the flusher; idempotent."""
        self._closed = True
        self._waiting.clear()
        if self._flusher is not None:
            self._flusher.cancel()


class BaseChannels(ABC, Generic[Message]):
    """The part of :class:`KernelChannels` every transport shares: requests and comm
    messages leave through an :class:`Outbox`, and :meth:`wait_ready` is the handshake.

    A transport says how a request becomes one ``Message`` for it (:meth:`_frame`), how a
    message is handed over without waiting (:meth:`_try_send`) and once the transport can
    take it (:meth:`_send_when_drained`), and what arrives next on shell or iopub
    (:meth:`_next_reply`). Receiving and closing stay the transport's own.
    """

    def __init__(self) -> None:
        self._outbox: Outbox[Message] = Outbox(self._try_send, self._send_when_drained)
        self._overflowed = False

    @abstractmethod
    def _frame(self, msg_type: str, content: dict[str, Any]) -> tuple[str, Message]:
        """A shell request as the transport sends it, and its ``msg_id``."""

    @abstractmethod
    def _try_send(self, message: Message) -> bool:
        """Hand ``message`` to the transport if it takes it now; never waits."""

    @abstractmethod
    async def _send_when_drained(self, message: Message) -> None:
        """Wait until the transport takes ``message`` (only the outbox's flusher calls it)."""

    @abstractmethod
    async def _next_reply(self, seconds: float) -> tuple[str, Incoming | None] | None:
        """The next message on shell or iopub as ``(channel, decoded or None)``, or ``None``
        if none arrives within ``seconds``."""

    def send(self, msg_type: str, content: dict[str, Any]) -> str:
        """Send a request on shell; returns its ``msg_id``. Never blocks; requests are few
        (one per run plus the handshake), so they wait in the outbox without a bound."""
        msg_id, message = self._frame(msg_type, content)
        self._outbox.post(message, None)
        return msg_id

    def send_comm(self, comm_id: str, data: dict[str, Any], *,
                  max_waiting: int = MAX_WAITING) -> None:
        _, message = self._frame("comm_msg", {"comm_id": comm_id, "data": data})
        if not self._outbox.post(message, max_waiting):
            self._overflowed = True

    @property
    def overflowed(self) -> bool:
        return self._overflowed

    def execute(self, code: str) -> str:
        return self.send("execute_request", {
            "code": code, "silent": True, "store_history": False, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True,
        })

    async def wait_ready(self, seconds: float) -> None:
        """A ``kernel_info`` handshake: returns once iopub carries the kernel's status for
        our request, so the subscription is live and no output of the next request is lost.
        Asks again every :data:`READY_RETRY_SECONDS` while the kernel starts or iopub
        subscribes. Raises ``TimeoutError``."""
        async with asyncio.timeout(seconds):
            loop = asyncio.get_running_loop()
            requests: set[str] = set()
            while True:
                requests.add(self.send("kernel_info_request", {}))
                retry = loop.time() + READY_RETRY_SECONDS
                while (wait := retry - loop.time()) > 0:
                    received = await self._next_reply(wait)
                    if received is None:
                        break
                    channel, message = received
                    if message is None or message.parent_id not in requests:
                        continue
                    if channel == "iopub":
                        return  # an answer to our request on iopub proves the subscription
                    # The kernel answered but iopub missed its status: ask again soon.
                    retry = min(retry, loop.time() + 0.01)
