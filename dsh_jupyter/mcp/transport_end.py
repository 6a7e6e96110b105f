"""Noticing that an MCP server has gone away while nothing is being asked of it.

The SDK's client reports a closed connection only to requests (``Connection closed``):
a stdio server that exits between calls leaves the client looking open. Here the
transport's read stream is watched instead: when it ends (a stdio server's stdout reached
its end because the process exited, or the transport closed it), ``ended`` is set, so the
connection can close at once rather than on the next call.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, Self

__all__ = ["watch_end"]


@asynccontextmanager
async def watch_end(transport: AbstractAsyncContextManager[tuple[Any, Any]],
                    ended: asyncio.Event) -> AsyncIterator[tuple[Any, Any]]:
    """``transport`` (an SDK transport: ``async with`` yields its read and write streams)
    whose read stream sets ``ended`` when it ends."""
    async with transport as (read, write):
        yield _WatchedReader(read, ended), write


class _WatchedReader:
    """A read stream that sets ``ended`` on its end (the SDK's ``ReadStream`` protocol)."""

    def __init__(self, inner: Any, ended: asyncio.Event) -> None:
        self._inner = inner
        self._ended = ended

    @property
    def last_context(self) -> Any:  # the sender's contextvars, where the stream keeps them
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        import anyio

        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended.set()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()
