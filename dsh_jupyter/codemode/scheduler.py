"""The sub-calls of one run_code program: their schedule (:class:`SubCallScheduler`) and
their order and events (:class:`SubCallOrdering`, a lifecycle listener).

Scheduling, per run:

- each call is prepared once (arguments snapshotted, name resolved, arguments validated:
  :func:`~.pipeline.prepare_call`), classified from that, queued, and run from it; ids
  are ``<call_id>:code:<n>`` in submission order;
- calls start in submission order; consecutive concurrency-safe calls overlap up to
  ``max_parallel_sub_calls``; an exclusive call waits for the pool to drain, runs alone,
  and holds later calls until it has finished;
- once the run signal fires (the outer call aborted, or the run settled) nothing new
  starts, and the queued calls are abandoned;
- in a journaled run (:mod:`.journal`) each call is matched to the journal when it is
  submitted: a call the journal answers (a resumed run's) settles in its turn with the
  recorded outcome, its tool not called (``tool/code-dispatch`` says ``replayed``); a
  call that may not go on fails and stops the run; the others are recorded before they
  run and their outcome before the program learns it.

Ordering and events come from the lifecycle: :class:`SubCallOrdering` is registered once
per registry and watches sub-calls. For a call this scheduler started (its
:class:`SubCall` is in ``run.state``):

- pre-execute stages (with guards and approvals) of a program's sub-calls never overlap
  (``around_policy`` holds the run's lock); post-execute waits until the previous
  sub-call has settled (``around_post``), so it runs in submission order;
- it emits ``tool/code-dispatch-start`` when the call starts, ``tool/code-dispatch-running``
  once its policy let it through (the time between is waiting: for a sibling's policy
  stage or an approval), and exactly one ``tool/code-dispatch`` when it has ended and
  every earlier sub-call has settled: context deferral and those events keep submission
  order. Calls abandoned in the queue emit none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._waiting import wait_quietly, wait_uncancelled
from ..durable.replay import Answered, Decided, Stop
from ..events import CodeDispatchEvent, CodeDispatchRunningEvent, CodeDispatchStartEvent
from ..json_dump import dump_json
from ..json_value import JsonObject, JsonValue
from ..registry.execution import ToolCall, ToolRunContext
from ..registry.lifecycle import CallListener, CallRun, Section
from ..registry.pipeline import prepare_call, run_call
from ..registry.results import AdditionalContext, ToolSuccess, failure, text_content
from ..runtime import BindingError
from .journal import JournalStopped

if TYPE_CHECKING:
    from ..abort import AbortSignal
    from ..durable.store import CallOutcome
    from ..events import SessionEvent
    from ..registry.results import ToolResult
    from ._view import CodeModeHost
    from .journal import RunJournal


@dataclass(eq=False, slots=True)
class SubCall:
    """One scheduled call of a program."""

    run: CallRun
    scheduler: SubCallScheduler
    parallel: bool
    future: asyncio.Future[JsonValue]
    previous_done: asyncio.Event | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once it has settled: ended, its contexts deferred, ``tool/code-dispatch`` out."""
    running: float | None = None
    ended: bool = False
    position: int = 0
    """Its position in the run's journal (0: not journaled)."""
    recording: asyncio.Task[None] | None = None
    """Journaling it as issued; awaited before it runs."""
    replayed: CallOutcome | None = None
    """Its outcome from the journal (a resumed run's): it settles with this, uncalled."""


class SubCallScheduler:
    """The queue and pool of one run's sub-calls (see the module docstring)."""

    def __init__(self, registry: CodeModeHost, ctx: ToolRunContext,
                 ordering: SubCallOrdering, signal: AbortSignal,
                 journal: RunJournal | None = None) -> None:
        self._registry = registry
        self._journal = journal
        self._ctx = ctx
        self._ordering = ordering
        self._signal = signal
        self._limit = registry.max_parallel_sub_calls
        self._queue: deque[SubCall] = deque()
        self._running: set[SubCall] = set()
        self._unsettled: deque[SubCall] = deque()  # started, in order, until settled
        self._exclusive = False
        self.policy_lock = asyncio.Lock()
        self._last_done: asyncio.Event | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.count = 0
        self.closed = False
        self.root_call_id = ctx.execution.call_id
        self.agent = ctx.agent.name if ctx.agent is not None else None

    @property
    def ctx(self) -> ToolRunContext:
        return self._ctx

    def submit(self, name: str, args: JsonObject) -> asyncio.Future[JsonValue]:
        """Prepare the call, queue it, and start what may start; its future resolves to
        the call's value or fails with :class:`~dsh_jupyter.runtime.BindingError`."""
        self.count += 1
        ctx = self._ctx
        journal = self._journal
        match = journal.match(name, args, self.count) if journal is not None else None
        if isinstance(match, Stop):  # the journal cannot vouch for it: not called
            stopped: asyncio.Future[JsonValue] = asyncio.get_running_loop().create_future()
            stopped.set_exception(BindingError(f"{name}: {match.message}"))
            stopped.add_done_callback(_retrieve)
            return stopped
        run = prepare_call(self._registry, ToolCall(
            call_id=f"{ctx.call_id}:code:{self.count}", name=name, arguments=args,
            signal=self._signal, agent=ctx.agent, parent=ctx.token))
        sub = SubCall(run=run, scheduler=self, parallel=run.execution_mode == "parallel",
                      future=asyncio.get_running_loop().create_future())
        run.state[self._ordering] = sub
        sub.future.add_done_callback(_retrieve)
        if journal is not None and match is not None:
            sub.position = match.position
            if isinstance(match, Answered):
                sub.replayed = match.outcome
            else:
                journal.gate(run, match.position,
                             match.decision if isinstance(match, Decided) else None)
                sub.recording = asyncio.get_running_loop().create_task(
                    journal.record(match.position, run.name, run.execution.arguments))
        self._queue.append(sub)
        self._pump()
        return sub.future

    def close(self) -> None:
        """Accept no more calls and abandon the queued ones (the caller fires the signal)."""
        self.closed = True
        while self._queue:
            abandoned = self._queue.popleft()
            if abandoned.recording is not None:
                abandoned.recording.add_done_callback(_retrieve_task)
            abandoned.future.set_exception(BindingError(
                f"{abandoned.run.name}: the run settled before this call started"))

    async def settle(self) -> None:
        """Await the calls in flight (re-raises a cancellation of the waiter after)."""
        while self.tasks:
            await wait_quietly(set(self.tasks))

    def _pump(self) -> None:
        while self._queue and not self._exclusive and not self._signal.aborted:
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

    def _start(self, sub: SubCall) -> None:
        sub.previous_done = self._last_done
        self._last_done = sub.done
        self._running.add(sub)
        self._unsettled.append(sub)
        task = asyncio.get_running_loop().create_task(self._run_one(sub))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run_one(self, sub: SubCall) -> None:
        result: ToolResult | None = None
        try:
            journaled = sub.replayed is not None or sub.recording is not None
            result = await self._journaled(sub) if journaled else None
            if result is not None:
                self._settle_uncalled(sub, result)
            else:
                result = await run_call(self._registry, sub.run)
                if self._journal is not None and sub.position:
                    # A store that fails stops the run (the journal says why); the call ran.
                    with contextlib.suppress(JournalStopped):
                        await self._journal.outcome(sub.position, result)
        finally:
            # Its end is reported in submission order (SubCallOrdering): the program
            # learns the outcome once that is done, as it learns the earlier ones'.
            cancelled = await wait_uncancelled((sub.done,))
            self._running.discard(sub)
            if not sub.parallel:
                self._exclusive = False
            if not sub.future.done():
                if result is None:
                    sub.future.set_exception(BindingError(
                        f"{sub.run.name}: the call was cancelled"))
                elif result.is_error:
                    assert result.error is not None
                    sub.future.set_exception(BindingError(result.error.message))
                else:
                    sub.future.set_result(result.value)
            self._pump()
            if cancelled:
                raise asyncio.CancelledError

    async def _journaled(self, sub: SubCall) -> ToolResult | None:
        """The result of a call that is not to be called: its recorded outcome (a resumed
        run's), or the journal's failure to record it. ``None``: run it."""
        if sub.replayed is not None:
            return replayed_result(sub.replayed)
        if sub.recording is not None:
            try:
                await sub.recording
            except JournalStopped as stopped:
                return failure(stopped.message, stopped.code)
        return None

    def _settle_uncalled(self, sub: SubCall, result: ToolResult) -> None:
        """Report a call that did not go through the pipeline as if it had (start, then
        its end in submission order)."""
        run = sub.run
        run.started = run.ended = time.time()
        run.result = result
        self._ordering.on_call_start(run)
        self._ended(sub)

    def _ended(self, sub: SubCall) -> None:
        """``sub`` ended: settle it, and every later one that ended already, in order."""
        sub.ended = True
        while self._unsettled and self._unsettled[0].ended:
            settled = self._unsettled.popleft()
            run = settled.run
            result = None if run.cancelled else run.result
            if result is not None:
                for context in result.additional_contexts:
                    self._ctx.defer_context(context)
            self._ordering.emit(settled_event(settled, result))
            settled.done.set()


class SubCallOrdering(CallListener):
    """Code Mode's listener: orders each program's sub-calls and reports them (see the
    module docstring). Registered once per registry; a sub-call it does not know (no
    :class:`SubCall` in its state) passes untouched."""

    watches = "sub-calls"

    def __init__(self, registry: CodeModeHost) -> None:
        self._registry = registry

    def emit(self, event: SessionEvent) -> None:
        self._registry.emit(event)

    def on_call_start(self, run: CallRun) -> None:
        sub = run.state.get(self)
        if isinstance(sub, SubCall):
            scheduler = sub.scheduler
            self.emit(CodeDispatchStartEvent(
                kind="tool/code-dispatch-start", root_call_id=scheduler.root_call_id,
                parent_call_id=scheduler.ctx.call_id, call_id=run.call_id, name=run.name,
                arguments=run.execution.arguments, agent=scheduler.agent, time=run.started))

    def around_policy(self, run: CallRun) -> Section | None:
        sub = run.state.get(self)
        return sub.scheduler.policy_lock if isinstance(sub, SubCall) else None

    def on_dispatch_start(self, run: CallRun) -> None:
        sub = run.state.get(self)
        if not isinstance(sub, SubCall):
            return
        sub.running = time.time()
        if self._registry._listening:
            scheduler = sub.scheduler
            event = CodeDispatchRunningEvent(
                kind="tool/code-dispatch-running", root_call_id=scheduler.root_call_id,
                parent_call_id=scheduler.ctx.call_id, call_id=run.call_id, name=run.name,
                time=sub.running)
            if run.trace_ids is not None:
                event["trace_id"], event["span_id"] = run.trace_ids
            self.emit(event)

    def around_post(self, run: CallRun) -> Section | None:
        sub = run.state.get(self)
        if not isinstance(sub, SubCall) or sub.previous_done is None:
            return None
        return _After(sub.previous_done)

    def on_call_end(self, run: CallRun) -> None:
        sub = run.state.get(self)
        if isinstance(sub, SubCall):
            sub.scheduler._ended(sub)


def settled_event(sub: SubCall, result: ToolResult | None) -> CodeDispatchEvent:
    """``tool/code-dispatch``: the sub-call's outcome in the ``tool/result`` vocabulary
    (``result`` is ``None`` when the call was cancelled)."""
    run, scheduler = sub.run, sub.scheduler
    event = CodeDispatchEvent(
        kind="tool/code-dispatch", root_call_id=scheduler.root_call_id,
        parent_call_id=scheduler.ctx.call_id, call_id=run.call_id, name=run.name,
        arguments=run.execution.arguments, agent=scheduler.agent,
        is_error=result is None or result.is_error,
        content=[dict(b) for b in result.content] if result is not None
        else [{"type": "text", "text": "Error: the call was cancelled"}],
        started=run.started, ended=time.time())
    if sub.running is not None:
        event["running"] = sub.running
    if sub.replayed is not None:
        event["replayed"] = True
    if result is not None and result.error is not None:
        event["error"] = {"message": result.error.message, "code": result.error.code}
    elif result is None:
        event["error"] = {"message": "the call was cancelled", "code": "ABORTED"}
    if run.trace_ids is not None:
        event["trace_id"], event["span_id"] = run.trace_ids
    return event


class _After:
    """An async context manager entered once ``event`` is set."""

    __slots__ = ("_event",)

    def __init__(self, event: asyncio.Event) -> None:
        self._event = event

    async def __aenter__(self) -> None:
        await self._event.wait()

    async def __aexit__(self, *_: object) -> None:
        return None


def replayed_result(outcome: CallOutcome) -> ToolResult:
    """A call's result as its journal recorded it (what the program saw then)."""
    contexts = tuple(AdditionalContext(source=str(c.get("source", "")), text=str(c.get("text", "")),
                                       meta=c.get("meta")) for c in outcome.contexts)
    if outcome.error is not None:
        return failure(outcome.error, outcome.code, contexts=contexts)
    value = outcome.value
    return ToolSuccess(value=value, content=text_content(
        value if isinstance(value, str) else dump_json(value, indent=2)),
        additional_contexts=contexts)


def _retrieve_task(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


def _retrieve(future: asyncio.Future[JsonValue]) -> None:
    # The program may never await a call (it ended, or fired and forgot it):
    # mark the error as seen so asyncio does not log it.
    if not future.cancelled():
        future.exception()
