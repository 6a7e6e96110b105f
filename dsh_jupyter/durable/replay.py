"""What a resumed run does with each call its program makes again: :class:`Replay`.

A resume runs the stored program again in a fresh kernel; each sub-call it makes is
matched to the journal by its tool, its canonical arguments and its occurrence (the
*k*-th call with that tool and those arguments), not by issue order, which changes after
a restart in safe programs (docs/approvals-durable.md, "Positions"). For each call,
:meth:`Replay.match` says one of:

- :class:`Answered`: the journal has its outcome; the tool is not called;
- :class:`Decided`: it asked for an approval that has been answered; run it with that
  decision (the call the run paused on, or an earlier one whose end was not recorded);
- :class:`Live`: run it through the pipeline (a call never started, or a new call once
  the run is past the point where it paused), at ``position``;
- :class:`Stop`: the run must stop, with a failure ``kind`` and one line for the model
  (its failure reads ``code run failed (<kind>): <message>``):
  ``journal-divergence`` (a call the journal cannot vouch for before the paused call)
  or ``journal-in-doubt`` (its body had started, no outcome is recorded).

Pure bookkeeping: no I/O, no pipeline; the wiring calls it from the scheduler.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeAlias

from ..errors import JournalError
from ..json_value import JsonObject, JsonValue
from ..registry.definition import ToolDefinition
from ..registry.policy import Approval
from .store import CallOutcome, CallRecord, JournaledRun

__all__ = ["Answered", "Decided", "Live", "Match", "Replay", "Stop", "StopKind",
           "tools_fingerprint"]

StopKind: TypeAlias = Literal["journal-divergence", "journal-in-doubt", "journal-tools-changed",
                              "journal-unavailable"]
"""Why a journaled run stopped: the first two are the replay's (below); the others its
host's (the tools changed since the run paused; the store failed)."""
_SHOWN_ARGUMENTS = 80


@dataclass(frozen=True, slots=True)
class Answered:
    position: int
    outcome: CallOutcome


@dataclass(frozen=True, slots=True)
class Decided:
    position: int
    decision: Approval


@dataclass(frozen=True, slots=True)
class Live:
    position: int


@dataclass(frozen=True, slots=True)
class Stop:
    kind: StopKind
    message: str


Match: TypeAlias = Answered | Decided | Live | Stop


class Replay:
    """The journal of one run, consumed as its program makes its calls again.

    ``run`` must have paused on an approval that has been answered: its last approval has
    a decision and its call never started. Anything else is not resumable
    (:class:`~dsh_jupyter.errors.JournalError`, ``JOURNAL_NOT_RESUMABLE``)."""

    def __init__(self, run: JournaledRun) -> None:
        self.run_id = run.run.run_id
        paused = max(run.approvals, key=lambda a: a.asked) if run.approvals else None
        calls = {call.position: call for call in run.calls}
        if run.status in ("done", "failed") or paused is None \
                or calls[paused.position].state != "issued":
            raise JournalError(f"run {self.run_id} is {run.status} and has no approval to "
                               "resume from", code="JOURNAL_NOT_RESUMABLE")
        if paused.decision is None:
            raise JournalError(f"run {self.run_id} waits for an answer: approve or reject it "
                               "before resuming", code="JOURNAL_NOT_RESUMABLE")
        self.paused: CallRecord = calls[paused.position]
        self._decisions = {a.position: a.decision for a in run.approvals
                           if a.decision is not None}
        self.for_run: dict[str, Approval] = {
            calls[position].tool: decision for position, decision in self._decisions.items()
            if decision.for_run and decision.approved}
        """The run's approvals that cover every later call of their tool, by tool."""
        self._left: dict[str, deque[CallRecord]] = {}
        for call in run.calls:
            self._left.setdefault(_key(call.tool, call.arguments), deque()).append(call)
        self._next_position = max(calls) + 1
        self._made = 0
        self.past_pause = False

    def match(self, tool: str, arguments: JsonObject) -> Match:
        """What to do with the program's next call of ``tool`` with ``arguments``."""
        self._made += 1
        left = self._left.get(_key(tool, arguments))
        record = left.popleft() if left else None
        if record is None:
            if self.past_pause:
                position, self._next_position = self._next_position, self._next_position + 1
                return Live(position)
            return Stop("journal-divergence",
                        f"call {self._made} asks "
                        f"tools.{tool}({_shown(arguments)}), which this run did not make "
                        f"before it paused; no tool was called again")
        if record.position == self.paused.position:
            self.past_pause = True
        if record.state == "done":
            assert record.outcome is not None
            return Answered(record.position, record.outcome)
        if record.state == "started":
            return Stop("journal-in-doubt",
                        f"tools.{tool}({_shown(arguments)}) was running when "
                        "the run stopped and its outcome is unknown; it is not called again")
        decision = self._decisions.get(record.position)
        return Live(record.position) if decision is None else Decided(record.position, decision)

    def finish(self) -> Stop | None:
        """The program ended: a divergence if it never made the paused call again."""
        if self.past_pause:
            return None
        return Stop("journal-divergence",
                    "the program ended without making again the call "
                    f"that waited for approval (tools.{self.paused.tool}); no tool was "
                    "called again")

    @property
    def unused(self) -> tuple[int, ...]:
        """Positions of journaled calls the program has not made again, in order."""
        return tuple(sorted(call.position for left in self._left.values() for call in left))


def tools_fingerprint(definitions: Iterable[ToolDefinition]) -> str:
    """``sha256:<hex>`` of the tools a program may call: each one's name, parameter
    schema and output schema, sorted by name (descriptions change what a model reads,
    not what a call does, and are left out)."""
    tools: list[JsonValue] = [
        {"name": d.name, "parameters": d.parameters, "output": d.output.schema}
        for d in sorted(definitions, key=lambda d: d.name)]
    return "sha256:" + hashlib.sha256(_canonical(tools).encode()).hexdigest()


def _key(tool: str, arguments: JsonObject) -> str:
    return f"{tool}\x00{_canonical(arguments)}"


def _canonical(value: JsonValue) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _shown(arguments: JsonObject) -> str:
    text = json.dumps(arguments, ensure_ascii=False)
    return text if len(text) <= _SHOWN_ARGUMENTS else text[:_SHOWN_ARGUMENTS - 1] + "…"
