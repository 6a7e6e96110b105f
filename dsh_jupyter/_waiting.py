"""Waiting for tasks without cancelling them: cleanup that must finish whatever happens."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def wait_quietly(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Wait for ``tasks`` without cancelling them, even if the waiter is cancelled
    (the cancellation is re-raised once they are done)."""
    cancelled = False
    tasks = set(tasks)
    while tasks:
        try:
            await asyncio.wait(tasks)
        except asyncio.CancelledError:
            cancelled = True
        tasks = {task for task in tasks if not task.done()}
    if cancelled:
        raise asyncio.CancelledError
