"""The host end of one run's tool calls, their server: validate, dispatch to bindings,
reply (the program's end, in the kernel, is ``inkernel/call_client.py``).

The kernel is hostile, so every message is checked (see ``protocol``): junk
without an id is dropped; a call that cannot be served (unknown name, arguments
that are not lossless JSON, too large, too many in flight) is answered with an
error; a call reusing the id of a call still in flight is dropped. Each valid
call runs its binding in its own task, so calls overlap when the program
gathers them; how much they overlap is the bindings' business.

Large arguments and results arrive as frames first (see ``frames``): each frame
is applied as it comes, so no step costs more than one frame. The frames of all
calls being assembled share ``max_call_bytes``; a result's frames are bounded by
``max_value_bytes``.

Quiescence: when the run ends, :meth:`CallServer.stop` stops dispatching and
replying and closes the bindings (their calls in flight stop); :meth:`CallServer.drain`
waits for them to finish. Bindings are cooperative: they are never cancelled, so
a run returns only after every binding call it started has returned, and no binding is called
after that.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from ..._waiting import wait_quietly
from ...json_value import JsonValue, NotJsonError, snapshot_json
from ...runtime import BindingError, Bindings, CodeRunFailure, CodeRunResult
from ..inkernel.messages import DoneErrorMessage, DoneOkMessage, FrameMessage, HostMessage
from ..protocol import Malformed, parse_kernel_message, result_error, result_ok
from ..transport.frames import MAX_DEPTH, FrameError, FrameTooLarge, ValueBuilder
from .logs import OutputLog

MAX_FAILED_FRAMES = 4096


@dataclass(frozen=True, slots=True)
class BuiltResult:
    """A result that arrived as frames: already a snapshot, and its compact JSON size."""

    value: JsonValue
    size: int


Done = DoneOkMessage | DoneErrorMessage | BuiltResult


class CallServer:
    """Answers the calls of one run with ``bindings``; ``send`` carries replies to the kernel."""

    def __init__(self, bindings: Bindings, send: Callable[[HostMessage], None], *,
                 max_pending_calls: int, max_call_bytes: int, max_value_bytes: int) -> None:
        self._bindings = bindings
        self._names = frozenset(bindings.names)
        self._send = send
        self._max_pending = max_pending_calls
        self._max_call_bytes = max_call_bytes
        self._result = ValueBuilder(max_value_bytes)
        self._arguments: dict[str, ValueBuilder] = {}
        self._failed_frames: set[str] = set()  # calls already answered with an error
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self._closed = False
        self.calls_started = 0
        self.dropped = 0

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    def receive(self, data: object, size: int) -> Done | None:
        """Handle one message from the kernel (``size`` is its encoded size in bytes).
        Returns how the run ended if this message says so; calls are dispatched."""
        if self._closed:
            return None
        message = parse_kernel_message(data)
        if isinstance(message, Malformed):
            if message.call_id is not None and message.call_id not in self._inflight:
                self._reply(result_error(message.call_id, f"malformed call: {message.problem}"))
            else:
                self.dropped += 1
            return None
        if message["kind"] == "frame":
            return self._frame(message)
        if message["kind"] == "done":
            if "framed" not in message:
                return message
            try:
                return BuiltResult(self._result.result(), self._result.size)
            except FrameError as error:
                return _result_failure(error)
        call_id = message["id"]
        if "framed" not in message:
            self._dispatch(call_id, message["name"], message["args"], size, frozen=False)
            return None
        builder = self._arguments.pop(call_id, None)
        if call_id in self._failed_frames:
            self._failed_frames.discard(call_id)  # answered when its frame failed
        elif builder is None or not builder.complete:
            self._reply(result_error(call_id, "malformed call: its argument frames are "
                                     "missing or incomplete"))
        else:
            self._dispatch(call_id, message["name"], builder.result(), builder.size, frozen=True)
        return None

    def _frame(self, frame: FrameMessage) -> Done | None:
        if frame["for"] == "done":
            try:
                self._result.feed(frame["text"])
            except FrameError as error:
                return _result_failure(error)
            return None
        call_id = frame["id"]
        if call_id in self._failed_frames:
            return None
        builder = self._arguments.get(call_id)
        if builder is None:
            if len(self._arguments) >= self._max_pending:
                self._fail_frames(call_id, f"too many calls in flight (limit "
                                  f"{self._max_pending})")
                return None
            builder = self._arguments[call_id] = ValueBuilder(self._max_call_bytes)
        assembling = sum(b.size for b in self._arguments.values())
        builder.limit = max(0, self._max_call_bytes - (assembling - builder.size))
        try:
            builder.feed(frame["text"])
        except FrameTooLarge:
            self._fail_frames(call_id, f"the call's arguments passed the "
                              f"{self._max_call_bytes} byte limit (calls being sent at the "
                              "same time share it)")
        except FrameError as error:
            self._fail_frames(call_id, f"malformed call: {error}")
        return None

    def _fail_frames(self, call_id: str, problem: str) -> None:
        self._arguments.pop(call_id, None)
        if len(self._failed_frames) >= MAX_FAILED_FRAMES:
            self._failed_frames.clear()  # a hostile kernel's ids: a second answer is harmless
        self._failed_frames.add(call_id)
        self._reply(result_error(call_id, problem))

    def _dispatch(self, call_id: str, name: str, raw_args: object, size: int, *,
                  frozen: bool) -> None:
        if call_id in self._inflight:
            self.dropped += 1  # a duplicate id: answering would settle the first call
            return
        problem: str | None = None
        if name not in self._names:
            known = ", ".join(repr(n) for n in sorted(self._names)) or "none"
            problem = f"no tool named {name[:80]!r} in this run; known tools: {known}"
        elif size > self._max_call_bytes:
            problem = f"the call is {size} bytes, over the {self._max_call_bytes} byte limit"
        elif len(self._inflight) >= self._max_pending:
            problem = f"too many calls in flight (limit {self._max_pending})"
        if problem is not None:
            self._reply(result_error(call_id, problem))
            return
        try:
            # Frozen: the registry's stages take the snapshot as it is, without a copy.
            args = cast(JsonValue, raw_args) if frozen else snapshot_json(raw_args)
        except (NotJsonError, RecursionError) as error:
            self._reply(result_error(call_id, f"arguments are not lossless JSON: {error}"))
            return
        self.calls_started += 1
        task = asyncio.create_task(self._answer(call_id, name, args))
        self._inflight[call_id] = task
        task.add_done_callback(lambda _task: self._inflight.pop(call_id, None))

    async def _answer(self, call_id: str, name: str, args: JsonValue) -> None:
        try:
            value = await self._bindings.call(name, args)
        except BindingError as error:
            self._reply(result_error(call_id, error.message))
            return
        except asyncio.CancelledError:
            self._reply(result_error(call_id, "the call was cancelled"))
            raise
        except Exception as error:
            self._reply(result_error(call_id, str(error) or type(error).__name__))
            return
        try:
            result = snapshot_json(value, freeze=False, max_depth=MAX_DEPTH)
        except (NotJsonError, RecursionError) as error:
            self._reply(result_error(call_id, f"the tool's value is not lossless JSON: {error}"))
            return
        self._reply(result_ok(call_id, result))

    def _reply(self, message: HostMessage) -> None:
        if self._closed:
            return
        try:
            self._send(message)
        except (UnicodeError, RecursionError) as error:
            # The value cannot be encoded: fail the call rather than leave the program waiting
            # for its reply until the wall budget (the message names no content).
            why = ("it holds a string that is not valid Unicode (a lone surrogate)"
                   if isinstance(error, UnicodeError) else "it is nested too deeply to encode")
            with contextlib.suppress(Exception):
                self._send(result_error(message["id"], f"the tool's reply cannot be sent to "
                                        f"the kernel: {why}"))
        except Exception:
            pass  # a failed send means the kernel is gone: the watchdog ends the run

    def stop(self, reason: str) -> None:
        """Stop dispatching and replying, and close the bindings (the program has ended:
        their calls in flight stop). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._bindings.close(reason)

    async def drain(self) -> None:
        """Wait (without cancelling them) until no binding call is in flight."""
        await wait_quietly(set(self._inflight.values()))


def _result_failure(error: FrameError) -> DoneErrorMessage:
    if isinstance(error, FrameTooLarge):
        return {"kind": "done", "ok": False, "error": "output-limit",
                "message": f"the program's return value {error}"}
    return {"kind": "done", "ok": False, "error": "invalid-output",
            "message": f"the kernel sent a malformed return value: {error}"}


def done_result(done: Done, logs: tuple[str, ...], log: OutputLog,
                max_output_bytes: int) -> CodeRunResult:
    """The result a ``done`` message reports: the value (charged to ``log`` with the
    log array) or the program's failure."""
    if isinstance(done, BuiltResult):  # arrived as frames: already a snapshot
        value, charged = done.value, log.add_value_size(done.size)
    elif not done["ok"]:
        return CodeRunResult(logs=logs, failure=CodeRunFailure(kind=done["error"],
                                                               message=done["message"]))
    else:
        try:
            value = snapshot_json(done["value"])
        except (NotJsonError, RecursionError) as error:
            return CodeRunResult(logs=logs, failure=CodeRunFailure(
                kind="invalid-output", message=f"the program's return value {error}"))
        charged = log.add_value(value)
    if not charged:
        reason = (log.limit_message() if log.over_budget else
                  f"the program's output and return value passed the {max_output_bytes} "
                  "byte limit")
        return CodeRunResult(logs=logs, failure=CodeRunFailure(kind="output-limit",
                                                               message=reason))
    return CodeRunResult(logs=logs, value=value)
