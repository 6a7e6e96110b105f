"""Two shortcuts through ipykernel for what the host sends a prepared kernel most: a run's
cell and the replies to its tool calls (issue [3/5]: measured with ``python bench/kernel.py
--breakdown``; see docs/kernel-runtime.md).

- :func:`run_cells_directly`: the host's program cell starts with :data:`RUN_MARK`; such a
  cell is one ``await`` of this package's ``runtime.execute(...)``, which the kernel's
  ``do_execute`` now evaluates itself instead of handing it to IPython (whose
  ``run_cell`` transforms, parses and compiles the cell, and the program's text inside
  it, three times, and keeps history and display hooks that a run does not use). The
  cell is valid IPython too: a kernel without the shortcut runs it the long way.
- :func:`answer_calls_directly`: a ``comm_msg`` to the tools comm is delivered to the call
  client on ipykernel's shell-channel thread, where it arrives, instead of being
  forwarded to the main thread over an inproc socket, parsed and signature-checked
  again, given a task of its own and dispatched through the comm manager (and the
  streams flushed after it). The message is still verified (signature, replay) by the
  kernel's own session before it is believed; anything else takes ipykernel's way.

Both patch one kernel instance (no class), from :func:`~.runner.start`, and fall back to
ipykernel's own paths wherever its internals are not what they expect.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
from collections.abc import Callable
from typing import Any

RUN_MARK = "# dsh-jupyter run\n"
"""The first line of a program cell the kernel may run directly (see the module docstring)."""

_AWAIT = "await "


def run_cells_directly(kernel: Any) -> bool:
    """Let ``kernel`` (ipykernel's) run marked cells itself; whether it could."""
    original = getattr(kernel, "do_execute", None)
    shell = getattr(kernel, "shell", None)
    if original is None or shell is None or getattr(original, "_dsh_direct", False):
        return False

    async def do_execute(code: Any, silent: Any, *args: Any, **kwargs: Any) -> Any:
        if not (isinstance(code, str) and code.startswith(RUN_MARK)):
            return await original(code, silent, *args, **kwargs)
        return await _run_marked(kernel, shell, code[len(RUN_MARK):])

    do_execute._dsh_direct = True  # type: ignore[attr-defined]
    kernel.do_execute = do_execute
    return True


async def _run_marked(kernel: Any, shell: Any, cell: str) -> dict[str, Any]:
    """Evaluate ``await <call>`` (the host's cell) as ipykernel's asyncio path would: a
    SIGINT cancels it. A failure here is the runtime's (the program's own end in its
    ``done`` message), reported as IPython reports a cell's error."""
    reply: dict[str, Any] = {"status": "ok", "execution_count": kernel.execution_count,
                             "user_expressions": {}, "payload": []}
    try:
        expression = cell.removeprefix(_AWAIT)
        code = compile(expression, "<dsh-jupyter run>", "eval", dont_inherit=True)
        future = asyncio.ensure_future(eval(code, {"__builtins__": builtins}))
        cancel_on_sigint = getattr(kernel, "_cancel_on_sigint", None)
        # IPython's builtins while a cell runs (get_ipython, exit, quit), as for any cell.
        with getattr(shell, "builtin_trap", contextlib.nullcontext()), \
                cancel_on_sigint(future) if cancel_on_sigint else contextlib.nullcontext():
            await future
    except BaseException as error:
        shell.showtraceback()  # the "error" message on iopub, under the cell's parent
        reply.update(status="error", ename=type(error).__name__, evalue=str(error),
                     traceback=[])
    return reply


def answer_calls_directly(kernel: Any, comm_id: str, receive: Callable[[object], None]
                          ) -> bool:
    """Deliver ``comm_msg`` for ``comm_id`` to ``receive`` (thread-safe: the call client's)
    on the kernel's shell-channel thread; whether ``kernel`` allows it."""
    thread = getattr(kernel, "shell_channel_thread", None)
    stream = getattr(kernel, "shell_stream", None)
    session = getattr(kernel, "session", None)
    original = getattr(kernel, "shell_channel_thread_main", None)
    if thread is None or stream is None or session is None or original is None \
            or not hasattr(thread, "io_loop"):
        return False
    ours = comm_id.encode()

    def on_shell(frames: list[Any]) -> Any:
        data = _our_reply(session, frames, ours)
        if data is None:
            return original(frames)
        receive(data)
        return None

    # ZMQStream belongs to its thread's loop: switch the handler there.
    thread.io_loop.add_callback(lambda: stream.on_recv(on_shell, copy=False))
    return True


def _our_reply(session: Any, frames: list[Any], comm_id: bytes) -> object | None:
    """The ``data`` of a verified ``comm_msg`` to ``comm_id``; ``None`` for any other
    message (left to ipykernel, unverified, so its own checks see it first)."""
    try:
        _idents, rest = session.feed_identities(frames, copy=False)
        if len(rest) < 5:
            return None
        header, content = _bytes(rest[1]), _bytes(rest[4])
        # Cheap looks first: most shell messages are not ours and stay unparsed here.
        if b'"comm_msg"' not in header or comm_id not in content:
            return None
        if json.loads(header).get("msg_type") != "comm_msg":
            return None
        if json.loads(content).get("comm_id") != comm_id.decode():
            return None
        message = session.deserialize(rest, content=True, copy=False)  # signature, replay
    except Exception:
        return None  # ipykernel's path reports what is wrong with it
    data: object = message.get("content", {}).get("data")
    return data


def _bytes(frame: Any) -> bytes:
    return frame if isinstance(frame, bytes) else bytes(frame.buffer)
