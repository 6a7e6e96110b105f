"""Large tool values leave the event loop: which values count as large, and the hop.

Snapshotting, validating and rendering a value of millions of elements takes
seconds, and on the event loop that would stall every other call, widget and
kernel channel meanwhile. The pipeline runs those steps in a worker thread when
:func:`is_large` says the value is large, and inline otherwise: for a small value
the hop would cost more than the work. The work itself keeps every C-level step
short (see :mod:`dsh_jupyter.json_value`), so the thread hands the GIL back to the
loop every few milliseconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from .._waiting import wait_quietly

_T = TypeVar("_T")

LARGE_NODES = 2_000
"""A value with more elements than this (keys, items and scalars, at any depth) is large."""

LARGE_TEXT = 1_000_000
"""So is a value holding a string longer than this (in characters)."""


def is_large(value: object) -> bool:
    """Whether ``value`` has more than ``LARGE_NODES`` elements or a string of more than
    ``LARGE_TEXT`` characters. Bounded: it looks at no more than ``LARGE_NODES`` elements.
    Lists, tuples and dicts are looked into; any other object (a pydantic model before
    ``dump_output``, say) counts as one element."""
    if isinstance(value, str):
        return len(value) > LARGE_TEXT
    budget = LARGE_NODES
    pending = [value] if isinstance(value, list | tuple | dict) else []
    while pending:
        node = pending.pop()
        children: Any = node.values() if isinstance(node, dict) else node
        budget -= len(children)
        if budget < 0:
            return True
        if len(children) > 16 and set(map(type, children)) <= _NUMBERS:
            continue  # a column of numbers: looked at in C
        for child in children:
            if isinstance(child, str):
                if len(child) > LARGE_TEXT:
                    return True
            elif isinstance(child, list | tuple | dict):
                pending.append(child)
    return False


_NUMBERS = frozenset({int, float, bool, type(None)})


async def in_worker_thread(work: Callable[[], _T]) -> _T:
    """``work()`` in the loop's default executor. A thread cannot be stopped: if the
    caller is cancelled meanwhile, the work is still awaited to the end (nothing the
    call started outlives it), then ``CancelledError`` propagates and the work's own
    outcome is dropped. ``work`` must not touch the event loop or its objects."""
    future = asyncio.ensure_future(asyncio.to_thread(work))
    try:
        await wait_quietly((future,))
    except asyncio.CancelledError:
        future.exception()  # retrieved, so a failure is not reported as never retrieved
        raise
    return future.result()
