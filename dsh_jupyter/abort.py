"""Caller-owned cancellation signals for asyncio code.

Task cancellation stops a coroutine from the outside; a signal lets the caller
*ask* and the callee decide how to stop, which is what tool bodies need (a
kernel to interrupt, a subprocess to kill, a server to notify). A tool body
reads ``execution.signal``::

    controller = AbortController()
    result = await registry.execute(ToolCall(call_id="c1", name="slow", arguments={},
                                             signal=controller.signal))
    # elsewhere: controller.abort("user pressed stop")

    async def slow(ctx: ToolRunContext) -> str:
        await ctx.signal.run(asyncio.sleep(10))   # raises ToolAbortedError on abort
        return "done"
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from .errors import ToolAbortedError

_T = TypeVar("_T")
_log = logging.getLogger(__name__)

Listener = Callable[[str], None]


class AbortSignal:
    """Read side of an :class:`AbortController`. Aborts at most once."""

    __slots__ = ("_listeners", "_reason")

    def __init__(self) -> None:
        self._reason: str | None = None
        self._listeners: list[Listener] | None = None

    @property
    def aborted(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        return self._reason

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(reason)`` once on abort (now, if already aborted). Returns an undo."""
        if self._reason is not None:
            listener(self._reason)
            return _noop
        if self._listeners is None:
            self._listeners = []
        self._listeners.append(listener)

        def remove() -> None:
            if self._listeners is not None and listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def raise_if_aborted(self) -> None:
        if self._reason is not None:
            raise ToolAbortedError(f"aborted: {self._reason}")

    async def wait(self) -> str:
        """Wait until aborted; returns the reason."""
        if self._reason is not None:
            return self._reason
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def settle(reason: str) -> None:
            if not future.done():
                future.set_result(reason)

        undo = self.add_listener(settle)
        try:
            return await future
        finally:
            undo()

    async def run(self, awaitable: Awaitable[_T]) -> _T:
        """Await ``awaitable``; on abort, cancel it, wait for it to stop, and raise
        :class:`ToolAbortedError`."""
        self.raise_if_aborted()
        task = asyncio.ensure_future(awaitable)
        def cancel(_reason: str) -> None:
            task.cancel()

        undo = self.add_listener(cancel)
        try:
            return await task
        except asyncio.CancelledError:
            if self._reason is not None and not _current_task_cancelling():
                raise ToolAbortedError(f"aborted: {self._reason}") from None
            raise
        finally:
            undo()

    def _fire(self, reason: str) -> None:
        if self._reason is not None:
            return
        self._reason = reason
        listeners, self._listeners = self._listeners, None
        for listener in listeners or ():
            try:
                listener(reason)
            except Exception:  # a listener must not stop the others
                _log.exception("abort listener failed")

    @staticmethod
    def any(signals: Iterable[AbortSignal]) -> AbortSignal:
        """A signal that aborts when any of ``signals`` does, with that one's reason."""
        controller = AbortController()
        for signal in signals:
            signal.add_listener(controller.abort)
            if controller.signal.aborted:
                break
        return controller.signal

    @staticmethod
    def never() -> AbortSignal:
        """A fresh signal nobody can abort."""
        return AbortSignal()

    def __repr__(self) -> str:
        state = f"aborted: {self._reason!r}" if self._reason is not None else "active"
        return f"<AbortSignal {state}>"


class AbortController:
    """Owns a signal; ``abort(reason)`` fires it (later calls are ignored)."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: str = "aborted") -> None:
        self.signal._fire(reason)


CANCEL_GRACE_SECONDS = 0.25
"""How long work whose signal aborted gets to stop on its own before
:func:`abort_then_cancel` cancels its task."""


def abort_then_cancel(controller: AbortController, reason: str,
                      tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Abort ``controller`` with ``reason``, then cancel whichever of ``tasks`` is still
    running :data:`CANCEL_GRACE_SECONDS` later: a body that watches its signal stops on its
    own and says why (cleaning up as it likes), and one that never looks at it (a plain
    ``async def`` awaiting something else) is stopped all the same, instead of running to
    its end for a caller that has gone."""
    controller.abort(reason)
    running = [task for task in tasks if not task.done()]
    if running:
        asyncio.get_running_loop().call_later(CANCEL_GRACE_SECONDS, _cancel, running)


def _cancel(tasks: list[asyncio.Future[Any]]) -> None:
    for task in tasks:
        task.cancel()


def _current_task_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _noop() -> None:
    return None
