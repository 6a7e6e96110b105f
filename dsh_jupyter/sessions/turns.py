"""A session log read as a conversation: runs, model turns, native calls and programs.

The log is a flat stream (:mod:`dsh_jupyter.events`); a notebook wants it as what a
reader follows: a run (its task and model), then per model turn the text the model
wrote, the native calls it made with their outcomes and approvals, and its
``run_code`` programs, each with every event of its call (to replay its card)::

    session = read_turns(events)
    for item in session.items:     # Run, Turn, Program, RunEnd, in log order
        ...

Only the log is read: nothing runs, no registry is needed. A log without agent
events (``%%run_code`` cells, ``registry.execute``) still reads: its calls become
turns of their own. Pure data, so the notebook builder stays about cells.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ..events import (
    AgentRunEndEvent,
    AgentRunStartEvent,
    ApprovalEvent,
    ApprovalRequestEvent,
    SessionEvent,
    ToolResultEvent,
)
from ..json_value import JsonValue
from ..registry.scope import RESERVED_NAME

__all__ = ["Approval", "NativeCall", "Program", "Run", "RunEnd", "Session", "Stop", "Turn",
           "read_turns", "stop_of"]

# code_mode.failure_message of a program stopped by its signal: "code run failed (abort):
# <reason>[\nCaptured output:\n...]".
_ABORTED = re.compile(r"code run failed \(abort\): ([^\n]*)")


@dataclass(slots=True, kw_only=True)
class Approval:
    """An approval asked for a call, and its answer (``None`` while unanswered)."""

    tool: str
    reason: str | None
    approved: bool | None = None
    answered_by: str | None = None
    note: str | None = None
    arguments: JsonValue = None
    """The arguments of the call that asked (``None`` when the log does not say)."""


@dataclass(slots=True, kw_only=True)
class NativeCall:
    """A top-level call of a tool other than ``run_code`` and how it ended."""

    call_id: str
    name: str
    arguments: JsonValue
    result: ToolResultEvent | None = None
    approvals: list[Approval] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class Program:
    """A ``run_code`` call: its program, scope and every event of it (for its card)."""

    call_id: str
    code: str | None
    """``None`` when the arguments held no program (the call failed validation)."""
    description: str
    scope: str | None
    arguments: JsonValue
    events: list[SessionEvent] = field(default_factory=list)
    result: ToolResultEvent | None = None
    approvals: list[Approval] = field(default_factory=list)
    """Approvals asked by the program's sub-calls."""

    @property
    def stopped(self) -> Stop | None:
        """How the program was stopped before it ended (Stop, Kernel > Interrupt, an
        agent run aborted), if it was."""
        return stop_of(self.result)


@dataclass(frozen=True, slots=True, kw_only=True)
class Stop:
    """A call stopped before it ended: why, and after how long."""

    reason: str
    """The log's ``stopped`` (``"stopped by the user"``, ``"the call was cancelled"``)."""
    seconds: float

    def describe(self) -> str:
        """``stopped by the user after 5.2 s``, or ``stopped (<reason>) after ...``."""
        what = self.reason if self.reason.startswith("stopped") else f"stopped ({self.reason})"
        return f"{what} after {self.seconds:.1f} s"


def stop_of(result: ToolResultEvent | None) -> Stop | None:
    """How the call ``result`` ended was stopped, if it was: its ``stopped`` reason, or in
    a log written before results said so, a ``run_code`` program's abort."""
    if result is None or not result["is_error"]:
        return None
    reason = result.get("stopped")
    if reason is None:
        error = result.get("error") or {"message": "", "code": None}
        aborted = _ABORTED.match(error["message"])
        if error["code"] != "CODE_RUN_FAILED" or aborted is None:
            return None
        reason = aborted.group(1)
    return Stop(reason=reason, seconds=max(0.0, result["ended"] - result["started"]))


@dataclass(slots=True, kw_only=True)
class Turn:
    """One model turn (``step`` from the agent loop), or calls made outside any turn
    (``step`` is ``None``): the text written and the calls, in order."""

    step: int | None
    text: str | None
    calls: list[NativeCall | Program] = field(default_factory=list)

    @property
    def native(self) -> list[NativeCall]:
        return [call for call in self.calls if isinstance(call, NativeCall)]

    @property
    def programs(self) -> list[Program]:
        return [call for call in self.calls if isinstance(call, Program)]


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    start: AgentRunStartEvent


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEnd:
    end: AgentRunEndEvent


Item: TypeAlias = Run | Turn | RunEnd


@dataclass(slots=True, kw_only=True)
class Session:
    items: list[Item]
    first_time: float | None
    """The earliest ``time``/``started`` in the log (seconds since the epoch)."""
    events: int

    @property
    def runs(self) -> list[AgentRunStartEvent]:
        return [item.start for item in self.items if isinstance(item, Run)]

    @property
    def programs(self) -> list[Program]:
        return [p for item in self.items if isinstance(item, Turn) for p in item.programs]

    @property
    def scopes(self) -> list[str]:
        """The scopes programs ran in, sorted."""
        return sorted({p.scope for p in self.programs if p.scope is not None})

    @property
    def stateful(self) -> bool:
        """Whether its programs ran on a stateful runtime (their results say so), so
        a program may use what an earlier one of its conversation defined."""
        return any(p.result is not None and isinstance(meta := p.result.get("meta"), dict)
                   and meta.get("stateful") is True for p in self.programs)


def read_turns(events: Iterable[SessionEvent]) -> Session:
    """The conversation in ``events`` (one or several agent runs, or bare calls)."""
    items: list[Item] = []
    turn: Turn | None = None  # the model turn whose calls are still coming
    expected: set[str] = set()  # call ids the current turn's message announced
    calls: dict[str, NativeCall | Program] = {}
    programs: dict[str, Program] = {}  # sub-call id -> its program, too
    sub_arguments: dict[str, JsonValue] = {}  # sub-call id -> its arguments
    first: float | None = None
    count = 0
    for event in events:
        count += 1
        when = event.get("time", event.get("started"))
        if isinstance(when, int | float) and (first is None or when < first):
            first = float(when)
        if event["kind"] == "agent/run-start":
            items.append(Run(start=event))
            turn, expected = None, set()
        elif event["kind"] == "agent/run-end":
            items.append(RunEnd(end=event))
            turn, expected = None, set()
        elif event["kind"] == "agent/message":
            message = event["message"]
            if message.get("role") != "assistant":
                continue
            content = message.get("content")
            turn = Turn(step=event["step"], text=content if isinstance(content, str) else None)
            expected = {str(c.get("id")) for c in message.get("tool_calls") or ()
                        if isinstance(c, Mapping)}
            items.append(turn)
        elif event["kind"] == "tool/call":
            call = _call(event["call_id"], event["name"], event["arguments"], event["agent"])
            calls[call.call_id] = call
            if isinstance(call, Program):
                programs[call.call_id] = call
                call.events.append(event)
            if turn is None or call.call_id not in expected:
                turn, expected = Turn(step=None, text=None), set()
                items.append(turn)
            turn.calls.append(call)
        elif event["kind"] == "tool/result":
            found = calls.get(event["call_id"])
            if found is not None:
                found.result = event
                if isinstance(found, Program):
                    found.events.append(event)
        elif event["kind"] == "tool/approval-request" or event["kind"] == "tool/approval":
            _approval(event, calls, programs, sub_arguments)
        else:
            root = event.get("root_call_id", event.get("parent_call_id"))
            program = programs.get(str(root)) if root is not None else None
            if program is not None:
                program.events.append(event)
                sub_id = event.get("call_id")
                if isinstance(sub_id, str) and sub_id != program.call_id:
                    programs[sub_id] = program
                if event["kind"] == "tool/code-dispatch-start":
                    sub_arguments[event["call_id"]] = event["arguments"]
    return Session(items=items, first_time=first, events=count)


def _call(call_id: str, name: str, arguments: JsonValue,
          scope: str | None) -> NativeCall | Program:
    if name != RESERVED_NAME:
        return NativeCall(call_id=call_id, name=name, arguments=arguments)
    args: dict[str, Any] = arguments if isinstance(arguments, dict) else {}
    code, description = args.get("code"), args.get("description")
    return Program(call_id=call_id, code=code if isinstance(code, str) else None,
                   description=description if isinstance(description, str)
                   and description.strip() else "Run code",
                   scope=scope, arguments=arguments)


def _approval(event: ApprovalRequestEvent | ApprovalEvent,
              calls: Mapping[str, NativeCall | Program],
              programs: Mapping[str, Program],
              sub_arguments: Mapping[str, JsonValue]) -> None:
    call_id = event["call_id"]
    call = calls.get(call_id)
    owner: NativeCall | Program | None = call or programs.get(call_id)
    if owner is None:
        return
    arguments = call.arguments if call is not None else sub_arguments.get(call_id)
    if event["kind"] == "tool/approval-request":
        owner.approvals.append(Approval(tool=event["name"], reason=event["reason"],
                                        arguments=arguments))
        return
    pending = next((a for a in reversed(owner.approvals)
                    if a.tool == event["name"] and a.approved is None), None)
    if pending is None:  # an answer without its request (a truncated log)
        pending = Approval(tool=event["name"], reason=None, arguments=arguments)
        owner.approvals.append(pending)
    pending.approved = event["approved"]
    pending.answered_by = event["answered_by"]
    pending.note = event["note"]


def compact_json(value: JsonValue) -> str:
    """One line of JSON, keys in the order given (for tables)."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
