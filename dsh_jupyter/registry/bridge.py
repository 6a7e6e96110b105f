"""The dispatch bridge: every ``await tools.x(args)`` of a run_code program
re-enters the full pipeline as a sub-call.

Scheduling, per run:

- each call's arguments are snapshotted as lossless JSON (a bad value rejects
  that one call and consumes no id); ids are ``<call_id>:code:<n>`` in
  submission order;
- calls start in submission order; consecutive concurrency-safe calls overlap up
  to ``max_parallel_sub_calls``; an exclusive call waits for the pool to drain,
  runs alone, and holds later calls until it has finished;
- pre-execute stages (with guards and approvals) of sub-calls never overlap;
  post-execute stages and context deferral run in submission order;
- every started call emits ``tool/code-dispatch-start``, then
  ``tool/code-dispatch-running`` once its policy let it through (the time between is
  waiting: for a sibling's policy stage or an approval), and exactly one
  ``tool/code-dispatch``; calls abandoned in the queue emit none of them.

Output: the bridge is also the run's :class:`~dsh_jupyter.runtime.OutputObserver`.
Log lines are batched into ``tool/code-output`` events (at once when the last batch
is older than :data:`OUTPUT_BATCH_SECONDS`, else at the end of that interval), and a
display flushes the lines before it, so events keep the program's order. Nothing is
kept or emitted when nobody listens.

Discovery: given a :class:`~.discovery.Catalog` (``mode="discovery"``), the bridge
also offers its helpers as bindings (:attr:`DispatchBridge.helpers`) and answers them
itself, from that catalog: they read what the scope sees and change nothing, so they
take no sub-call id, run no policy and emit no event.

Signatures: outside discovery the bridge is also the run's
:class:`~dsh_jupyter.runtime.SignatureBindings`: each tool's argument dict as the SDK types
it, for a program that calls a tool wrongly (under discovery the catalog can be large, so
the program is pointed at ``tools.describe`` instead).

Session: the bridge is also the run's :class:`~dsh_jupyter.runtime.SessionBindings`: its
key is the calling scope's ``session_key`` (the registry's for a call without a scope), so
on a stateful runtime each scope's programs share one kernel and no other scope's.

Settlement: the bridge is the run's :class:`~dsh_jupyter.runtime.Bindings`. When the
program ends the runtime calls :meth:`DispatchBridge.close`: the run signal aborts
("run_code settled") and queued calls are abandoned; in-flight ones are awaited (when run_code
is cancelled, :meth:`DispatchBridge.stop` aborts them and cancels the ones that do not
stop within a grace period), and
every event has landed before :meth:`DispatchBridge.settle` returns (run_code calls it
after the runtime returned, whatever happened, so a runtime that never closed its
bindings is settled too).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._waiting import wait_quietly, wait_uncancelled
from ..abort import AbortController, AbortSignal, abort_then_cancel
from ..events import (
    CodeDispatchEvent,
    CodeDispatchRunningEvent,
    CodeDispatchStartEvent,
    CodeOutputEvent,
)
from ..json_value import JsonObject, JsonValue, NotJsonError, snapshot_json
from ..runtime import BindingError, Display
from .discovery import Catalog, helper_bindings
from .execution import ToolCall, ToolRunContext
from .pipeline import execute
from .results import ToolResult
from .sdk_python import argument_shape

if TYPE_CHECKING:
    from ._view import RegistryView

SETTLED_REASON = "run_code settled"
OUTPUT_BATCH_SECONDS = 0.1


@dataclass(eq=False, slots=True)
class _SubCall:
    number: int
    call_id: str
    name: str
    arguments: JsonObject
    parallel: bool
    future: asyncio.Future[JsonValue]
    previous_done: asyncio.Event | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    running: float | None = None
    trace: tuple[str, str] | None = None  # trace and span ids, with tracing on


class _Gate:
    """Orders one sub-call's policy stages against its siblings."""

    __slots__ = ("_bridge", "_call")

    def __init__(self, bridge: DispatchBridge, call: _SubCall) -> None:
        self._bridge = bridge
        self._call = call

    @asynccontextmanager
    async def pre(self) -> AsyncIterator[None]:
        async with self._bridge._pre_lock:
            yield

    @asynccontextmanager
    async def post(self) -> AsyncIterator[None]:
        if self._call.previous_done is not None:
            await self._call.previous_done.wait()
        yield

    def dispatching(self) -> None:
        self._bridge._dispatching(self._call)

    def traced(self, trace_id: str, span_id: str) -> None:
        self._call.trace = (trace_id, span_id)


class DispatchBridge:
    """The :class:`~dsh_jupyter.runtime.Bindings` of one run: each call becomes a
    scheduled sub-call of the registry."""

    def __init__(self, registry: RegistryView, ctx: ToolRunContext,
                 names: Collection[str], *, catalog: Catalog | None = None) -> None:
        self._registry = registry
        self._ctx = ctx
        self._catalog = catalog
        self._helpers = helper_bindings(names) if catalog is not None else {}
        self._helper_of = {binding: helper for helper, binding in self._helpers.items()}
        self._names = (*names, *self._helper_of)
        self._limit = registry.max_parallel_sub_calls
        self._run = AbortController()
        self._undo_follow = ctx.signal.add_listener(self._run.abort)
        self._queue: deque[_SubCall] = deque()
        self._running: set[_SubCall] = set()
        self._exclusive = False
        self._pre_lock = asyncio.Lock()
        self._last_done: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._count = 0
        self._settled = False
        root = ctx.execution
        self._root_call_id = root.call_id
        self._lines: list[str] = []
        self._batch_due: asyncio.TimerHandle | None = None
        self._last_batch = 0.0

    @property
    def signal(self) -> AbortSignal:
        """The run signal: follows the outer call's signal, fires at settlement."""
        return self._run.signal

    @property
    def names(self) -> Collection[str]:
        """The tools' names, then the helpers' bindings (see :attr:`helpers`)."""
        return self._names

    @property
    def session_key(self) -> str:
        """The calling scope's session key, else the registry's (see the module docstring)."""
        agent = self._ctx.agent
        return agent.session_key if agent is not None else self._registry.session_key

    @property
    def signatures(self) -> Mapping[str, str]:
        """Each tool's argument dict, one line (``{"a": int, "b": int}``); none under
        discovery. Computed when a runtime asks, once per run."""
        if self._catalog is not None:
            return {}
        visible = self._registry.visible(self._ctx.agent)
        return {name: argument_shape(visible[name].parameters)
                for name in self._names if name in visible}

    @property
    def helpers(self) -> Mapping[str, str]:
        """``{"search": binding, "describe": binding}`` under discovery, else empty: the
        methods a runtime adds to ``tools``, and the binding names they call."""
        return self._helpers

    async def call(self, name: str, args: JsonValue) -> JsonValue:
        helper = self._helper_of.get(name)
        if helper is not None:
            assert self._catalog is not None
            if self._settled:
                raise BindingError(f"{name}: the run has settled")
            return self._catalog.answer(helper, args)
        return await self._submit(name, args)

    def close(self, reason: str = SETTLED_REASON) -> None:
        """The program ended: accept no more calls, fire the run signal, abandon queued
        calls (running ones see the signal; :meth:`settle` awaits them)."""
        self._end()

    def stop(self, reason: str) -> None:
        """Abort the run (the runtime stops the program, keeping what it printed), then
        cancel the sub-calls still running after a grace period: the program was
        cancelled, and a body that never looks at its signal must not run on for it
        (:func:`~dsh_jupyter.abort.abort_then_cancel`). :meth:`settle` awaits them."""
        abort_then_cancel(self._run, reason, self._tasks)

    # Output (OutputObserver) -------------------------------------------------------------
    def on_log(self, line: str) -> None:
        if not self._registry._listening:
            return
        self._lines.append(line)
        if self._batch_due is None:
            loop = asyncio.get_running_loop()
            wait = self._last_batch + OUTPUT_BATCH_SECONDS - loop.time()
            if wait <= 0:
                self._flush_output()
            else:
                self._batch_due = loop.call_later(wait, self._flush_output)

    def on_display(self, display: Display) -> None:
        if self._registry._listening:
            self._flush_output({"data": dict(display.data), "metadata": dict(display.metadata)})

    def _flush_output(self, display: dict[str, Any] | None = None) -> None:
        if self._batch_due is not None:
            self._batch_due.cancel()
            self._batch_due = None
        if not self._lines and display is None:
            return
        self._last_batch = asyncio.get_running_loop().time()
        event = CodeOutputEvent(kind="tool/code-output", root_call_id=self._root_call_id,
                                call_id=self._ctx.call_id, name=self._ctx.name,
                                logs=self._lines, time=time.time())
        if display is not None:
            event["display"] = display
        self._lines = []
        self._registry.emit(event)

    # Scheduling --------------------------------------------------------------------------
    def _end(self) -> None:
        if self._settled:
            return
        self._flush_output()
        self._settled = True
        self._run.abort(SETTLED_REASON)
        while self._queue:
            abandoned = self._queue.popleft()
            abandoned.future.set_exception(BindingError(
                f"{abandoned.name}: the run settled before this call started"))

    async def _submit(self, name: str, arguments: object) -> JsonValue:
        if self._settled:
            raise BindingError(f"{name}: the run has settled; no more tool calls are accepted")
        try:
            args = snapshot_json(arguments)
        except NotJsonError as exc:
            raise BindingError(f"{name}: arguments are not lossless JSON: {exc}") from None
        if not isinstance(args, dict):
            raise BindingError(f"{name}: arguments must be a dict (a JSON object), "
                               f"got {type(args).__name__}")
        self._count += 1
        ctx = self._ctx
        call_id = f"{ctx.call_id}:code:{self._count}"
        mode = self._registry.execution_mode(ToolCall(call_id=call_id, name=name,
                                                      arguments=args, agent=ctx.agent,
                                                      parent=ctx.token))
        sub = _SubCall(number=self._count, call_id=call_id, name=name, arguments=args,
                       parallel=mode == "parallel",
                       future=asyncio.get_running_loop().create_future())
        sub.future.add_done_callback(_retrieve)
        self._queue.append(sub)
        self._pump()
        return await asyncio.shield(sub.future)

    def _pump(self) -> None:
        # Once the run signal fires (outer abort or settlement) nothing new starts.
        while self._queue and not self._exclusive and not self._run.signal.aborted:
            head = self._queue[0]
            if head.parallel:
                if len(self._running) >= self._limit:
                    return
            elif self._running:
                return
            else:
                self._exclusive = True
            self._queue.popleft()
            self._start(head)

    def _start(self, sub: _SubCall) -> None:
        sub.previous_done = self._last_done
        self._last_done = sub.done
        self._running.add(sub)
        task = asyncio.get_running_loop().create_task(self._run_one(sub))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_one(self, sub: _SubCall) -> None:
        ctx = self._ctx
        agent = ctx.agent.name if ctx.agent is not None else None
        started = time.time()
        self._registry.emit(CodeDispatchStartEvent(
            kind="tool/code-dispatch-start", root_call_id=self._root_call_id,
            parent_call_id=ctx.call_id, call_id=sub.call_id, name=sub.name,
            arguments=sub.arguments, agent=agent, time=started))
        result: ToolResult | None = None
        try:
            result = await execute(self._registry, ToolCall(
                call_id=sub.call_id, name=sub.name, arguments=sub.arguments,
                signal=self._run.signal, agent=ctx.agent, parent=ctx.token),
                gate=_Gate(self, sub))
        finally:
            cancelled = False
            if sub.previous_done is not None:
                cancelled = await wait_uncancelled((sub.previous_done,))
            if result is not None:
                for context in result.additional_contexts:
                    ctx.defer_context(context)
            self._emit_settled(sub, result, started, agent)
            sub.done.set()
            self._running.discard(sub)
            if not sub.parallel:
                self._exclusive = False
            if not sub.future.done():
                if result is None:
                    sub.future.set_exception(BindingError(f"{sub.name}: the call was cancelled"))
                elif result.is_error:
                    assert result.error is not None
                    sub.future.set_exception(BindingError(result.error.message))
                else:
                    sub.future.set_result(result.value)
            self._pump()
            if cancelled:
                raise asyncio.CancelledError

    def _dispatching(self, sub: _SubCall) -> None:
        sub.running = time.time()
        if self._registry._listening:
            event = CodeDispatchRunningEvent(
                kind="tool/code-dispatch-running", root_call_id=self._root_call_id,
                parent_call_id=self._ctx.call_id, call_id=sub.call_id, name=sub.name,
                time=sub.running)
            if sub.trace is not None:
                event["trace_id"], event["span_id"] = sub.trace
            self._registry.emit(event)

    def _emit_settled(self, sub: _SubCall, result: ToolResult | None, started: float,
                      agent: str | None) -> None:
        event = CodeDispatchEvent(
            kind="tool/code-dispatch", root_call_id=self._root_call_id,
            parent_call_id=self._ctx.call_id, call_id=sub.call_id, name=sub.name,
            arguments=sub.arguments, agent=agent,
            is_error=result is None or result.is_error,
            content=[dict(b) for b in result.content] if result is not None
            else [{"type": "text", "text": "Error: the call was cancelled"}],
            started=started, ended=time.time())
        if sub.running is not None:
            event["running"] = sub.running
        if result is not None and result.error is not None:
            event["error"] = {"message": result.error.message, "code": result.error.code}
        elif result is None:
            event["error"] = {"message": "the call was cancelled", "code": "ABORTED"}
        if sub.trace is not None:
            event["trace_id"], event["span_id"] = sub.trace
        self._registry.emit(event)

    async def settle(self) -> None:
        """Close (if the runtime did not), await in-flight calls: every event has landed
        when it returns. Re-raises a cancellation of the waiter once they are done."""
        self._end()
        try:
            while self._tasks:
                await wait_quietly(set(self._tasks))
        finally:
            self._undo_follow()

    @property
    def started_calls(self) -> int:
        return self._count


def _retrieve(future: asyncio.Future[JsonValue]) -> None:
    # The program may never await a call (it ended, or fired and forgot it):
    # mark the error as seen so asyncio does not log it.
    if not future.cancelled():
        future.exception()
