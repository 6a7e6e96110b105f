"""The session events of calls, told by the lifecycle: a :class:`CallListener`.

- ``tool/call`` when a top-level call starts, ``tool/result`` when it ends (with
  ``stopped`` when its caller stopped it, and the trace and span ids when tracing is on);
- ``tool/approval-request`` and ``tool/approval`` around every ``Ask`` that goes to the
  approval service, top-level call or sub-call.

A program's sub-calls get their own events from Code Mode
(:mod:`dsh_jupyter.codemode`, ``tool/code-dispatch*``). The registry registers this
listener when it is made; it builds an event only while a sink is attached
(``registry.on_event``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

from ..events import ApprovalEvent, ApprovalRequestEvent, ToolCallEvent, ToolResultEvent
from .lifecycle import CallListener, CallRun
from .pipeline import CANCELLED_REASON

if TYPE_CHECKING:
    from ..events import SessionEvent
    from .policy import Approval
    from .results import ToolResult


class EventSinks(Protocol):
    """Where the events go: the registry's sinks."""

    @property
    def _listening(self) -> bool:
        """True when at least one event sink is attached."""

    def emit(self, event: SessionEvent) -> None:
        """Send ``event`` to every sink."""


class SessionEvents(CallListener):
    """Writes the ``tool/*`` events of calls to the registry's sinks."""

    def __init__(self, sinks: EventSinks) -> None:
        self._sinks = sinks

    def on_call_start(self, run: CallRun) -> None:
        if run.execution.parent is not None or not self._sinks._listening:
            return
        event = ToolCallEvent(kind="tool/call", call_id=run.call_id, name=run.name,
                              arguments=run.execution.arguments, agent=agent_name(run),
                              time=run.started)
        if run.trace_ids is not None:
            event["trace_id"], event["span_id"] = run.trace_ids
        self._sinks.emit(event)

    def on_approval_request(self, run: CallRun, reason: str | None) -> None:
        if self._sinks._listening:
            self._sinks.emit(ApprovalRequestEvent(
                kind="tool/approval-request", call_id=run.call_id, name=run.name,
                reason=reason, agent=agent_name(run), time=time.time()))

    def on_approval(self, run: CallRun, approval: Approval) -> None:
        if self._sinks._listening:
            self._sinks.emit(ApprovalEvent(
                kind="tool/approval", call_id=run.call_id, name=run.name,
                approved=approval.approved, answered_by=approval.answered_by,
                note=approval.note, time=time.time()))

    def on_call_end(self, run: CallRun) -> None:
        if run.execution.parent is not None or run.result is None or not self._sinks._listening:
            return
        self._sinks.emit(result_event(run, run.result))


def result_event(run: CallRun, result: ToolResult) -> ToolResultEvent:
    """``tool/result``: the call's durable outcome, as a card shows it."""
    event = ToolResultEvent(
        kind="tool/result", call_id=run.call_id, name=run.name,
        arguments=run.execution.arguments, agent=agent_name(run), is_error=result.is_error,
        content=[dict(block) for block in result.content], started=run.started,
        ended=run.ended if run.ended is not None else time.time())
    if result.error is not None:
        event["error"] = {"message": result.error.message, "code": result.error.code}
    if result.meta is not None:
        event["meta"] = result.meta
    if result.additional_contexts:
        event["additional_contexts"] = [dict(c.to_json()) for c in result.additional_contexts]
    stopped = stop_reason(run, result)
    if stopped is not None:
        event["stopped"] = stopped
    if run.trace_ids is not None:
        event["trace_id"], event["span_id"] = run.trace_ids
    return event


def stop_reason(run: CallRun, result: ToolResult) -> str | None:
    """Why a call that failed was stopped by its caller, if it was: its signal's abort
    reason (``"stopped by the user"`` from a card's Stop button), or
    :data:`~.pipeline.CANCELLED_REASON` when the task awaiting it was cancelled."""
    if not result.is_error:
        return None
    if run.signal.aborted:
        return run.signal.reason
    return CANCELLED_REASON if run.cancelled else None


def agent_name(run: CallRun) -> str | None:
    agent = run.execution.agent
    return agent.name if agent is not None else None
