"""This process's stdin as the lines of a stdio MCP server, read so that stopping never
waits for the client.

The SDK's ``stdio_server`` reads stdin in a worker thread that cancelling must wait for
(and interpreter exit joins): a server stopped by SIGTERM or Ctrl-C while its client kept
stdin open would hang until the client sent another line. Here a daemon thread reads a
private duplicate of fd 0 and hands each line to the event loop, so cancelling the reader
returns at once. As in the SDK, fd 0 is the null device while serving (a tool body or a
child process that reads stdin gets EOF, not the protocol) and is restored afterwards.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["StdinLines", "claimed_stdin"]

_QUEUED_LINES = 16  # read ahead at most this many lines: a flooding client is held back


@contextmanager
def claimed_stdin() -> Iterator[StdinLines | None]:
    """The lines of stdin for the length of the block; ``None`` where fd 0 cannot be
    duplicated (closed, or no POSIX ``fcntl``): then the SDK reads stdin itself."""
    try:
        import fcntl

        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    except (ImportError, OSError):
        yield None
        return
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        yield StdinLines(private)
    finally:
        # ``private`` stays open: the reading thread may still be blocked on it, and a
        # closed descriptor could be reused under it.
        os.dup2(private, 0)


class StdinLines:
    """``async for line in lines``: the lines read from ``fd`` (UTF-8, text mode)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._queue: asyncio.Queue[str | None] | None = None

    def __aiter__(self) -> StdinLines:
        if self._queue is None:
            self._queue = asyncio.Queue(_QUEUED_LINES)
            loop = asyncio.get_running_loop()
            threading.Thread(target=self._pump, args=(loop, self._queue), daemon=True,
                             name="mcp stdin").start()
        return self

    async def __anext__(self) -> str:
        assert self._queue is not None, "iterate with async for"
        line = await self._queue.get()
        if line is None:
            raise StopAsyncIteration
        return line

    def _pump(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[str | None]) -> None:
        def hand_over(line: str | None) -> bool:
            try:
                asyncio.run_coroutine_threadsafe(queue.put(line), loop).result()
            except (RuntimeError, asyncio.CancelledError):  # the loop has closed
                return False
            return True

        with open(self._fd, encoding="utf-8", errors="replace", closefd=False) as stream:
            for line in stream:
                if not hand_over(line):
                    return
        hand_over(None)
