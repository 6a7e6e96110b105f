"""Durable session events: what a session log keeps, and how to write and read it.

The registry emits ``tool/call`` and ``tool/result`` for top-level calls, and
``tool/approval-request`` / ``tool/approval`` around every ``Ask`` (top-level or
sub-call); an MCP tool emits ``tool/progress`` whenever its server reports progress
(top-level or sub-call); Code Mode adds ``tool/code-dispatch-start``, ``tool/code-dispatch-running``
and ``tool/code-dispatch`` for each sub-call of a ``run_code`` program, and
``tool/code-output`` for what the program prints and displays while it runs (the
result still carries its logs: these are for live cards and replays); the agent
loop adds ``agent/*`` events around them (see :mod:`dsh_jupyter.agent.events` for
their order). Events are plain JSON (TypedDicts with a ``kind``), so a JSON Lines
log replays into the same cards without running anything::

    with JsonlSessionWriter("session.jsonl") as writer:
        undo = registry.on_event(writer)
        ...
    events = read_session("session.jsonl")
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Literal, NotRequired, TypeAlias, TypedDict, cast

from .json_dump import dump_json
from .json_value import JsonValue

__all__ = [
    "ApprovalEvent",
    "ApprovalRequestEvent",
    "CodeDispatchEvent",
    "CodeDispatchRunningEvent",
    "CodeDispatchStartEvent",
    "CodeOutputEvent",
    "EVENT_KINDS",
    "EventSink",
    "JsonlSessionWriter",
    "SessionEvent",
    "ToolCallEvent",
    "ToolProgressEvent",
    "ToolResultEvent",
    "iter_session",
    "read_session",
]

_log = logging.getLogger(__name__)


class ErrorJson(TypedDict):
    message: str
    code: str | None


class ToolCallEvent(TypedDict):
    """A top-level call started (``time`` in seconds since the epoch)."""

    kind: Literal["tool/call"]
    call_id: str
    name: str
    arguments: JsonValue
    agent: str | None
    time: float
    trace_id: NotRequired[str]
    """With tracing on (``registry.instrument()``): the call's OpenTelemetry trace and
    span ids, in hex, to find it in a trace backend."""
    span_id: NotRequired[str]


class ToolResultEvent(TypedDict):
    """A top-level call ended: its content, error and meta, as a card shows them."""

    kind: Literal["tool/result"]
    call_id: str
    name: str
    arguments: JsonValue
    agent: str | None
    is_error: bool
    content: list[dict[str, Any]]
    error: NotRequired[ErrorJson]
    meta: NotRequired[JsonValue]
    additional_contexts: NotRequired[list[dict[str, Any]]]
    started: float
    ended: float
    stopped: NotRequired[str]
    """Present when the call was stopped before it ended (its result is then a failure):
    the abort reason of the caller's signal (``"stopped by the user"``: a card's Stop
    button, an agent run's ``abort()``), or ``"the call was cancelled"`` when the task
    awaiting it was cancelled (Kernel > Interrupt)."""
    trace_id: NotRequired[str]
    span_id: NotRequired[str]


class ToolProgressEvent(TypedDict):
    """A running call (top-level or a ``run_code`` sub-call) reported progress: an MCP
    server's ``notifications/progress`` for the call's progress token. ``progress``
    increases; ``total`` and ``message`` are there when the server sent them."""

    kind: Literal["tool/progress"]
    call_id: str
    name: str
    progress: float
    total: float | None
    message: str | None
    time: float


class CodeDispatchStartEvent(TypedDict):
    """A ``run_code`` program's ``await tools.x(...)`` started."""

    kind: Literal["tool/code-dispatch-start"]
    root_call_id: str
    parent_call_id: str
    call_id: str
    name: str
    arguments: JsonValue
    agent: str | None
    time: float


class CodeDispatchRunningEvent(TypedDict):
    """A started sub-call passed its pre-execute stage (policy, approval, guards): its
    body runs now. Until then it was waiting (for a sibling's stage or an approval)."""

    kind: Literal["tool/code-dispatch-running"]
    root_call_id: str
    parent_call_id: str
    call_id: str
    name: str
    time: float
    trace_id: NotRequired[str]
    """With tracing on: the sub-call's trace and span ids (a child of the run's span)."""
    span_id: NotRequired[str]


class CodeOutputEvent(TypedDict):
    """Output of a running ``run_code`` program (``call_id`` is the run_code call):
    completed log lines in order, then at most one display (a Jupyter MIME bundle
    ``{"data": {...}, "metadata": {...}}``) that came after them."""

    kind: Literal["tool/code-output"]
    root_call_id: str
    call_id: str
    name: str
    logs: list[str]
    display: NotRequired[dict[str, Any]]
    time: float


class ApprovalRequestEvent(TypedDict):
    """A call's pre-execute stage asked for approval (``reason`` as the policy gave it)."""

    kind: Literal["tool/approval-request"]
    call_id: str
    name: str
    reason: str | None
    agent: str | None
    time: float


class ApprovalEvent(TypedDict):
    """The answer to an approval request (``answered_by``: ``user``, ``policy '...'``,
    ``abort`` when the call was stopped first)."""

    kind: Literal["tool/approval"]
    call_id: str
    name: str
    approved: bool
    answered_by: str
    note: str | None
    time: float


class CodeDispatchEvent(TypedDict):
    """A ``run_code`` program's ``await tools.x(...)`` ended. ``running`` is when its
    body started (absent when it never did, and in logs of earlier versions)."""

    kind: Literal["tool/code-dispatch"]
    root_call_id: str
    parent_call_id: str
    call_id: str
    name: str
    arguments: JsonValue
    agent: str | None
    is_error: bool
    content: list[dict[str, Any]]
    error: NotRequired[ErrorJson]
    started: float
    running: NotRequired[float]
    ended: float
    trace_id: NotRequired[str]
    """With tracing on: the sub-call's trace and span ids (a child of the run's span)."""
    span_id: NotRequired[str]
    replayed: NotRequired[bool]
    """``True`` when a resumed run's journal answered it: the tool was not called again
    (docs/approvals-durable.md)."""


StopReason = Literal["answered", "step_limit", "aborted", "model_error"]


class AgentRunStartEvent(TypedDict):
    kind: Literal["agent/run-start"]
    run_id: str
    agent: str | None
    mode: str
    model: str
    task: str
    max_steps: int
    time: float
    trace_id: NotRequired[str]
    """With tracing on: the run's ``invoke_agent`` trace and span ids."""
    span_id: NotRequired[str]


class AgentMessageEvent(TypedDict):
    kind: Literal["agent/message"]
    run_id: str
    step: int
    index: int
    message: dict[str, Any]
    time: float


class AgentRequestEvent(TypedDict):
    kind: Literal["agent/request"]
    run_id: str
    step: int
    messages: int
    tools: list[str]
    sizes: dict[str, Any]
    time: float
    trace_id: NotRequired[str]
    """With tracing on: the request's ``chat`` trace and span ids."""
    span_id: NotRequired[str]


class AgentResponseEvent(TypedDict):
    kind: Literal["agent/response"]
    run_id: str
    step: int
    finish_reason: str | None
    tool_calls: list[str]
    schedule: list[list[str]]
    """Call ids grouped as they run: a group of several runs concurrently."""
    prompt_tokens: int | None
    completion_tokens: int | None
    attempts: int
    seconds: float
    time: float


class AgentTextDeltaEvent(TypedDict):
    """A piece of the answer's text as it streams in (only from a model that streams;
    the whole text follows in the assistant ``agent/message``)."""

    kind: Literal["agent/text-delta"]
    run_id: str
    step: int
    text: str
    time: float


class AgentRunEndEvent(TypedDict):
    kind: Literal["agent/run-end"]
    run_id: str
    stop: StopReason | Literal["cancelled", "raised"]
    """A result's stop reason; ``cancelled`` when the task was cancelled, ``raised``
    when the loop raised (misuse, e.g. a scope disposed mid-run)."""
    steps: int
    tool_calls: int
    sub_calls: int
    wall_seconds: float
    answer: str | None
    error: NotRequired[ErrorJson]
    time: float


AgentEvent: TypeAlias = (
    AgentRunStartEvent | AgentMessageEvent | AgentRequestEvent | AgentTextDeltaEvent
    | AgentResponseEvent | AgentRunEndEvent
)
SessionEvent: TypeAlias = (
    ToolCallEvent | ToolResultEvent | ToolProgressEvent | CodeDispatchStartEvent
    | CodeDispatchRunningEvent | CodeDispatchEvent | CodeOutputEvent | ApprovalRequestEvent
    | ApprovalEvent | AgentEvent
)
EventSink: TypeAlias = Callable[[SessionEvent], None]
AGENT_EVENT_KINDS = ("agent/run-start", "agent/message", "agent/request", "agent/text-delta",
                     "agent/response", "agent/run-end")
EVENT_KINDS = ("tool/call", "tool/result", "tool/progress", "tool/code-dispatch-start",
               "tool/code-dispatch-running", "tool/code-dispatch", "tool/code-output",
               "tool/approval-request", "tool/approval", *AGENT_EVENT_KINDS)


class JsonlSessionWriter:
    """An event sink appending one JSON object per line; flushes each event."""

    def __init__(self, target: str | Path | IO[str]) -> None:
        if isinstance(target, str | Path):
            self._file: IO[str] = open(target, "a", encoding="utf-8")  # noqa: SIM115
            self._owned = True
        else:
            self._file = target
            self._owned = False

    def __call__(self, event: SessionEvent) -> None:
        self._file.write(dump_json(cast(JsonValue, event)) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._owned and not self._file.closed:
            self._file.close()

    def __enter__(self) -> JsonlSessionWriter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def iter_session(path: str | Path) -> Iterator[SessionEvent]:
    """Events from a JSON Lines log; unknown kinds and blank lines are skipped,
    a malformed line raises ``ValueError`` naming its line number."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not a JSON line ({exc.msg})") from None
            if not isinstance(event, dict) or event.get("kind") not in EVENT_KINDS:
                _log.debug("%s:%d: skipping unknown event", path, number)
                continue
            yield cast(SessionEvent, event)


def read_session(path: str | Path) -> list[SessionEvent]:
    return list(iter_session(path))
