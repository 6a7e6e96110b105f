"""Waiting without cancelling: cleanup that must finish whatever happens.

Work that owns something (a started tool body, a sub-call, a worker thread, a kernel
being started) is awaited to its end even when the waiter itself is cancelled
meanwhile. The one rule, in one place: the work is never cancelled by the waiter, and
the waiter's cancellation is not lost, it is re-raised (:func:`wait_quietly`) or
reported to a caller that must publish something first (:func:`wait_uncancelled`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def wait_uncancelled(waitables: Iterable[asyncio.Future[Any] | asyncio.Event]) -> bool:
    """Wait until every task/future is done and every event is set, without cancelling
    them; ``True`` when the waiter was cancelled meanwhile (the caller re-raises
    ``CancelledError`` once it has done what must happen first)."""
    pending: set[asyncio.Future[Any]] = set()
    watchers: list[asyncio.Future[Any]] = []
    for each in waitables:
        if isinstance(each, asyncio.Event):
            if not each.is_set():
                watcher = asyncio.ensure_future(each.wait())
                watchers.append(watcher)
                pending.add(watcher)
        elif not each.done():
            pending.add(each)
    cancelled = False
    while pending:
        try:
            await asyncio.wait(pending)
        except asyncio.CancelledError:
            cancelled = True
        pending = {each for each in pending if not each.done()}
    return cancelled


async def wait_quietly(waitables: Iterable[asyncio.Future[Any] | asyncio.Event]) -> None:
    """:func:`wait_uncancelled`, then re-raise the waiter's cancellation if there was one."""
    if await wait_uncancelled(waitables):
        raise asyncio.CancelledError
