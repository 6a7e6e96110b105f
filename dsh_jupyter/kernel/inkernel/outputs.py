"""The program's output in the kernel: streams flushed before each call and split into
chunks, displays kept below the host's message cap, figures shown before ``done``, and
iopub that queues instead of dropping.

Rich output (``display(obj)``, matplotlib figures) goes to the host as the kernel's own
``display_data`` messages. Two things differ from a notebook cell: figures the program
left open are shown when it ends, *before* its ``done`` message (a cell's
``post_execute`` would show them only after the host has settled the run), and a display
too big for one message (over :data:`MAX_DISPLAY_BYTES`) is replaced by a short note
instead of being sent (the host would end the run for it).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

from .messages import MAX_MESSAGE_BYTES

OUTPUT_CHUNK = 64 * 1024
MAX_DISPLAY_BYTES = MAX_MESSAGE_BYTES - 64 * 1024  # below the host's message cap


def flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        flush = getattr(stream, "flush", None)
        if flush is not None:
            with contextlib.suppress(Exception):
                flush()


def patch_flush(stream: Any) -> None:
    """Make ``stream.flush()`` return at once when nothing is buffered: ipykernel flushes
    both streams after *every* shell message (comm replies included), and each flush
    of an ``OutStream`` is a round trip to the IOPub thread."""
    flush: Callable[[], Any] | None = getattr(stream, "flush", None)
    if flush is None or getattr(flush, "_dsh_quick", False):
        return

    def quick_flush() -> Any:
        if _has_pending_output(stream):
            return flush()
        return None

    quick_flush._dsh_quick = True  # type: ignore[attr-defined]
    with contextlib.suppress(AttributeError, TypeError):
        stream.flush = quick_flush


def patch_write(stream: Any) -> None:
    """Split big writes and flush every :data:`OUTPUT_CHUNK` characters, so no stream
    message grows huge (the host caps message size and counts output line by line).
    Installed per run: IPython wraps and restores ``write`` around every cell."""
    write: Callable[[str], Any] | None = getattr(stream, "write", None)
    if write is None:
        return
    pending = [0]

    def chunked_write(text: str) -> Any:
        if not isinstance(text, str) or len(text) + pending[0] < OUTPUT_CHUNK:
            pending[0] += len(text) if isinstance(text, str) else 0
            return write(text)
        for start in range(0, len(text), OUTPUT_CHUNK):
            piece = text[start:start + OUTPUT_CHUNK]
            write(piece)
            pending[0] += len(piece)
            if pending[0] >= OUTPUT_CHUNK:
                pending[0] = 0
                stream.flush()
        return len(text)

    with contextlib.suppress(AttributeError, TypeError):
        stream.write = chunked_write


def show_open_figures() -> None:
    """Show the matplotlib figures the program left open, as a notebook does after a
    cell (matplotlib's inline backend, when the program used it; nothing else is
    imported). A figure that fails to draw becomes one line on stderr."""
    backend = sys.modules.get("matplotlib_inline.backend_inline")
    flush = getattr(backend, "flush_figures", None)
    if flush is None:
        return
    try:
        flush()
    except Exception as error:
        print(f"(the program's open matplotlib figures could not be shown: "
              f"{type(error).__name__}: {error})", file=sys.stderr)


def guard_display_size() -> None:
    """Replace each display whose content is over :data:`MAX_DISPLAY_BYTES` by a short
    ``text/plain`` note before it is sent (an ipykernel display hook, on this thread:
    the program's). Installed once per kernel: a stateful session's serves several runs."""
    try:
        publisher = sys.modules["IPython"].get_ipython().display_pub
        register: Callable[[Callable[[Any], Any]], None] = publisher.register_hook
    except Exception:
        return  # not ipykernel: nothing to guard

    def hook(message: Any) -> Any:
        try:
            content = message["content"]
            size = len(json.dumps(content, separators=(",", ":")))  # ASCII: bytes >= UTF-8's
        except Exception:
            return message
        if size > MAX_DISPLAY_BYTES:
            content["data"] = {"text/plain": f"[a display of {size} bytes was not sent: over "
                               f"the {MAX_DISPLAY_BYTES} byte limit of one message]"}
            content["metadata"] = {}
        return message

    register(hook)


def _has_pending_output(stream: Any) -> bool:
    """Whether an ipykernel ``OutStream`` holds unsent text (any other stream: assume so).
    A flush costs a round trip to the IOPub thread, so skip it when there is nothing."""
    buffers = getattr(stream, "_buffers", None)
    if not isinstance(buffers, Mapping):
        return True
    try:
        return any(buffer.tell() for buffer in list(buffers.values()))
    except Exception:
        return True


def unlimit_iopub() -> None:
    """Make iopub queue instead of drop. At zmq's default high-water mark (1,000 messages)
    the kernel's PUB socket silently drops what a busy host has not taken yet, tool calls
    included, and a program then waits for a reply until its wall budget. ipykernel's
    IOPub thread owns the socket, so the option is set there (libzmq applies it to the
    host's existing connection too)."""
    try:
        import zmq

        kernel = sys.modules["IPython"].get_ipython().kernel
        thread, socket = kernel.iopub_thread, kernel.iopub_thread.socket
        setsockopt: Callable[[int, int], None] = socket.setsockopt
    except Exception:
        return  # not ipykernel: nothing to do
    thread.schedule(lambda: setsockopt(zmq.SNDHWM, 0))
