"""The dispatch bridge: the :class:`~dsh_jupyter.runtime.Bindings` of one run_code
program. Every ``await tools.x(args)`` becomes a sub-call that re-enters the full
pipeline, scheduled by :class:`~.scheduler.SubCallScheduler` (which says how: order,
pool, exclusive calls, and the events each call emits).

Arguments: each call's arguments are snapshotted as lossless JSON here (a bad value
rejects that one call and consumes no id); what is left is the scheduler's.

The run: :meth:`DispatchBridge.request` is the :class:`~dsh_jupyter.runtime.RunRequest`
run_code hands its runtime, with the bridge as bindings and observer and the fields below.

Output: the bridge is also the run's :class:`~dsh_jupyter.runtime.OutputObserver`.
Log lines are batched into ``tool/code-output`` events (at once when the last batch
is older than :data:`OUTPUT_BATCH_SECONDS`, else at the end of that interval), and a
display flushes the lines before it, so events keep the program's order. Nothing is
kept or emitted when nobody listens.

Discovery: given a :class:`~.discovery.Catalog` (``mode="discovery"``), the bridge
also offers its helpers as bindings (:attr:`DispatchBridge.helpers`) and answers them
itself, from that catalog: they read what the scope sees and change nothing, so they
take no sub-call id, run no policy and emit no event.

Signatures: outside discovery the request carries each tool's argument dict as the SDK types
it, for a program that calls a tool wrongly (under discovery the catalog can be large, so
the program is pointed at ``tools.describe`` instead).

Session: the request's session key is the calling scope's ``session_key`` (the
registry's for a call without a scope), so
on a stateful runtime each scope's programs share one kernel and no other scope's.

Journal: given a :class:`~.journal.RunJournal` (``ToolRegistry(journal=...)``), the
scheduler journals each call, and a call the journal stops stops the run
(:meth:`DispatchBridge.stop`).

Settlement: when the program ends the runtime calls :meth:`DispatchBridge.close`: the run
signal aborts ("run_code settled") and queued calls are abandoned; in-flight ones are
awaited (when run_code is cancelled, :meth:`DispatchBridge.stop` aborts them and cancels
the ones that do not stop within a grace period), and every event has landed before
:meth:`DispatchBridge.settle` returns (run_code calls it after the runtime returned,
whatever happened, so a runtime that never closed its bindings is settled too).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from ..abort import AbortController, AbortSignal, abort_then_cancel
from ..events import CodeOutputEvent
from ..json_value import JsonValue, NotJsonError, snapshot_json
from ..registry.execution import ToolRunContext
from ..runtime import BindingError, Display, RunRequest
from .discovery import Catalog, helper_bindings
from .scheduler import SubCallOrdering, SubCallScheduler
from .sdk_python import argument_shape

if TYPE_CHECKING:
    from ._view import CodeModeHost
    from .journal import RunJournal

SETTLED_REASON = "run_code settled"
OUTPUT_BATCH_SECONDS = 0.1


class DispatchBridge:
    """The :class:`~dsh_jupyter.runtime.Bindings` of one run: each call becomes a
    scheduled sub-call of the registry."""

    def __init__(self, registry: CodeModeHost, ctx: ToolRunContext,
                 names: Collection[str], ordering: SubCallOrdering, *,
                 catalog: Catalog | None = None, journal: RunJournal | None = None) -> None:
        self._registry = registry
        self._ctx = ctx
        self._catalog = catalog
        self._helpers = helper_bindings(names) if catalog is not None else {}
        self._helper_of = {binding: helper for helper, binding in self._helpers.items()}
        self._names = (*names, *self._helper_of)
        self._run = AbortController()
        self._undo_follow = ctx.signal.add_listener(self._run.abort)
        self._scheduler = SubCallScheduler(registry, ctx, ordering, self._run.signal, journal)
        if journal is not None:
            journal.on_stop(self.stop)
        self._settled = False
        self._root_call_id = ctx.execution.call_id
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

    def request(self, program: str) -> RunRequest:
        """The run of ``program`` with this bridge as its bindings and output observer,
        and the session, signatures and helpers above as the request's fields."""
        return RunRequest(program, self, self.signal, session=self.session_key,
                          signatures=self.signatures, helpers=self.helpers, observer=self)

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
        abort_then_cancel(self._run, reason, self._scheduler.tasks)

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

    # Calls -------------------------------------------------------------------------------
    def _end(self) -> None:
        if self._settled:
            return
        self._flush_output()
        self._settled = True
        self._run.abort(SETTLED_REASON)
        self._scheduler.close()

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
        return await asyncio.shield(self._scheduler.submit(name, args))

    async def settle(self) -> None:
        """Close (if the runtime did not), await in-flight calls: every event has landed
        when it returns. Re-raises a cancellation of the waiter once they are done."""
        self._end()
        try:
            await self._scheduler.settle()
        finally:
            self._undo_follow()

    @property
    def started_calls(self) -> int:
        return self._scheduler.count
