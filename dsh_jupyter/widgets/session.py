"""Session views: cards for every call of a session, live or replayed.

::

    view = LiveView(registry)          # follows registry.on_event; display it once
    view
    ...
    view.dispose()                     # stops following

    replay("session.jsonl")            # the same cards from a log, nothing runs
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from ..events import (
    CodeDispatchEvent,
    CodeDispatchRunningEvent,
    SessionEvent,
    ToolCallEvent,
    ToolResultEvent,
    read_session,
)
from ..json_value import JsonValue
from ..registry.presentation import DurableResult
from ..registry.results import ToolResult
from ..registry.scope import RESERVED_NAME
from . import _ipw
from .answer import AnswerCard
from .approval_card import ApprovalCard
from .approvals import NotebookApprovals
from .cards import Card, ToolCard, mimebundle
from .presenting import (
    DefinitionLookup,
    durable_from_event,
    durable_from_result,
    no_definitions,
    present_call,
    present_result,
    registry_lookup,
)
from .published import Published
from .run_code import RunCodeCard, SubCallCard

if TYPE_CHECKING:
    from ..codemode.registry import ToolRegistry
    from ..registry.definition import ToolDefinition
    from ..registry.scope import AgentScope


def tool_card(name: str, arguments: JsonValue, *, definition: ToolDefinition | None = None,
              result: ToolResult | DurableResult | None = None,
              duration: float | None = None) -> ToolCard | RunCodeCard:
    """The card for one call, from the definition's presenters (generic without one).
    A :class:`ToolResult` is reduced to its durable part first."""
    card: ToolCard | RunCodeCard
    if name == RESERVED_NAME:
        card = RunCodeCard(arguments=arguments)
    else:
        card = ToolCard(name=name, call=present_call(name, arguments, definition))
    if result is not None:
        durable = result if isinstance(result, DurableResult) else durable_from_result(result)
        if isinstance(card, RunCodeCard):
            card.finish(durable, duration=duration)
        else:
            card.finish(durable, present_result(name, arguments, durable, definition),
                        duration=duration)
    return card


_CLAIMED: set[str] = set()
"""Calls a :class:`CallView` shows: a :class:`LiveView` leaves them out (no duplicate)."""


def _claimed(event: SessionEvent) -> bool:
    if not _CLAIMED:
        return False
    for key in ("call_id", "parent_call_id", "root_call_id"):
        value = event.get(key)
        if isinstance(value, str) and (value in _CLAIMED
                                       or value.partition(":code:")[0] in _CLAIMED):
            return True
    return False


def _traced(card: Card, event: ToolCallEvent | ToolResultEvent | CodeDispatchRunningEvent
            | CodeDispatchEvent) -> None:
    """Give ``card`` the trace and span ids ``event`` carries (tracing on)."""
    trace_id, span_id = event.get("trace_id"), event.get("span_id")
    if trace_id is not None and span_id is not None:
        card.trace = (trace_id, span_id)


class SessionView(Published):
    """Cards in the order their calls started; :meth:`apply` feeds it events."""

    def __init__(self, *, definitions: DefinitionLookup | None = None) -> None:
        super().__init__()
        self._lookup = definitions or no_definitions
        self._cards: dict[str, ToolCard | RunCodeCard] = {}  # the current card per call id
        self._order: list[ToolCard | RunCodeCard] = []
        self._shown: list[Card] = []  # every card in display order (tool and answer cards)
        self._answers: dict[tuple[str, int], AnswerCard] = {}  # by run id and step
        self._sub_calls: dict[str, SubCallCard] = {}
        self._parent_of: dict[str, RunCodeCard] = {}
        self._box: Any = None

    @property
    def cards(self) -> tuple[ToolCard | RunCodeCard, ...]:
        return tuple(self._order)

    def card(self, call_id: str) -> Card | None:
        """The card of a top-level call or of a run_code sub-call."""
        return self._cards.get(call_id) or self._sub_calls.get(call_id)

    def apply(self, event: SessionEvent) -> None:
        """Add or update the card ``event`` is about (unknown kinds are ignored)."""
        if event["kind"] == "tool/call":
            self._retire(self._cards, event["call_id"])
            card = self._top(event["call_id"], event["name"], event["arguments"],
                             event["agent"])
            _traced(card, event)
        elif event["kind"] == "tool/result":
            card = self._top(event["call_id"], event["name"], event["arguments"],
                             event["agent"])
            _traced(card, event)
            durable = durable_from_event(event)
            duration = event["ended"] - event["started"]
            if isinstance(card, RunCodeCard):
                card.finish(durable, duration=duration)
            else:
                view = present_result(event["name"], event["arguments"], durable,
                                      self._lookup(event["name"], event["agent"]))
                card.finish(durable, view, duration=duration)
            self.refresh()
        elif event["kind"] == "tool/code-dispatch-start":
            self._retire(self._sub_calls, event["call_id"])
            self._sub(event["parent_call_id"], event["call_id"], event["name"],
                      event["arguments"])
        elif event["kind"] == "tool/code-dispatch-running":
            sub_call = self._sub_calls.get(event["call_id"])
            if sub_call is not None:
                _traced(sub_call, event)
                sub_call.dispatched(event["time"])
        elif event["kind"] == "tool/code-dispatch":
            sub = self._sub(event["parent_call_id"], event["call_id"], event["name"],
                            event["arguments"])
            _traced(sub, event)
            running = event.get("running")
            began = running if running is not None else event["started"]
            sub.finish(durable_from_event(event), duration=event["ended"] - began,
                       waited=running - event["started"] if running is not None else None,
                       replayed=event.get("replayed", False))
            self._asked(event["call_id"], False)
        elif event["kind"] == "tool/code-output":
            parent = self._cards.get(event["call_id"])
            if isinstance(parent, RunCodeCard):
                parent.add_output(event["logs"], event.get("display"))
        elif event["kind"] == "tool/progress":
            progressing = self._cards.get(event["call_id"])
            if isinstance(progressing, ToolCard) and progressing.durable is None:
                progressing.report_progress(event["progress"], event["total"], event["message"])
        elif event["kind"] == "tool/approval-request":
            self._asked(event["call_id"], True)
        elif event["kind"] == "tool/approval":
            self._asked(event["call_id"], False)
        elif event["kind"] == "agent/text-delta":
            key = (event["run_id"], event["step"])
            answer = self._answers.get(key)
            if answer is None:
                answer = self._answers[key] = AnswerCard(step=event["step"])
                self._show(answer)
            answer.add(event["text"])
        elif event["kind"] == "agent/message" and event["message"].get("role") == "assistant":
            streamed = self._answers.get((event["run_id"], event["step"]))
            if streamed is not None and streamed.streaming:
                content = event["message"].get("content")
                streamed.finish(content if isinstance(content, str) else None)
                self.refresh()

    def _asked(self, call_id: str, asking: bool) -> None:
        sub = self._sub_calls.get(call_id)
        if sub is None or sub.asking == asking:
            return
        parent = self._parent_of.get(call_id)
        if parent is not None:
            parent.approval_asked(call_id, asking)

    def _retire(self, cards: dict[str, Any], call_id: str) -> None:
        """A new call reusing a finished call's id (scripted models number their calls
        call_1, call_2... in every run) gets a card of its own."""
        old = cards.get(call_id)
        if old is not None and old.durable is not None:
            del cards[call_id]  # it stays in self._order (or in its parent's card)

    def _top(self, call_id: str, name: str, arguments: JsonValue,
             agent: str | None) -> ToolCard | RunCodeCard:
        card = self._cards.get(call_id)
        if card is None:
            card = self._cards[call_id] = tool_card(name, arguments,
                                                    definition=self._lookup(name, agent))
            self._order.append(card)
            self._show(card)
        return card

    def _show(self, card: Card) -> None:
        self._shown.append(card)
        if self._box is not None:
            self._box.children = (*self._box.children, card.widget)

    def _sub(self, parent_id: str, call_id: str, name: str, arguments: JsonValue) -> SubCallCard:
        sub = self._sub_calls.get(call_id)
        if sub is None:
            parent = self._cards.get(parent_id)
            if parent is None:  # joined mid-run: a run_code card without its program
                parent = self._top(parent_id, RESERVED_NAME, {}, None)
            if not isinstance(parent, RunCodeCard):
                raise ValueError(f"sub-call {call_id!r} names {parent_id!r} as its parent, "
                                 f"which is a call of {parent.name!r}, not of {RESERVED_NAME}")
            sub = self._sub_calls[call_id] = parent.start_call(call_id, name, arguments)
            self._parent_of[call_id] = parent
        return sub

    def show_approval(self, call_id: str, card: ApprovalCard) -> bool:
        """:class:`~dsh_jupyter.widgets.approvals.ApprovalHost`: show it in the call's card."""
        target = self.card(call_id)
        if target is None:
            return False
        parent = self._parent_of.get(call_id)
        if parent is not None and card.origin is None:
            card.origin = parent.origin(call_id)
        target.attach_approval(card)
        return True

    # Display ---------------------------------------------------------------------
    @property
    def widget(self) -> Any:
        if self._box is None:
            self._box = _ipw.ipywidgets().VBox([card.widget for card in self._shown])
            self._box.add_class("dsh-session")
        return self._box

    def _repr_mimebundle_(self, include: Collection[str] | None = None,
                          exclude: Collection[str] | None = None) -> dict[str, Any]:
        return mimebundle([card.document() for card in self._shown],
                          lambda: self.widget, include=include, exclude=exclude)

    def refresh(self) -> None:
        """Re-publish the text fallbacks of every display of this view (if they changed)."""
        self._republish()


class _FollowingView(SessionView):
    """A view that follows a registry until :meth:`dispose` (or the end of a ``with``)."""

    def __init__(self, *, definitions: DefinitionLookup | None = None) -> None:
        super().__init__(definitions=definitions)
        self._undo: list[Callable[[], None]] = []

    @property
    def following(self) -> bool:
        return bool(self._undo)

    def dispose(self) -> None:
        """Stop following (idempotent); the cards stay as they are."""
        while self._undo:
            self._undo.pop()()
        self.refresh()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.dispose()


class CallView(_FollowingView):
    """The live card of one call, as the output of the cell that runs it (what
    ``%%run_code`` shows). While it follows, the call is *claimed*: a :class:`LiveView`
    leaves it out, so the card is not shown twice. ``stop`` puts a Stop button on a
    run_code card. Dispose of it (or use it as a context manager) when the call is over."""

    def __init__(self, registry: ToolRegistry, call_id: str, name: str, arguments: JsonValue,
                 *, agent: AgentScope | None = None,
                 stop: Callable[[], None] | None = None) -> None:
        super().__init__(definitions=registry_lookup(registry, (agent,) if agent else ()))
        self.call_id = call_id
        card: ToolCard | RunCodeCard
        if name == RESERVED_NAME:
            card = RunCodeCard(arguments=arguments, stop=stop)
        else:
            card = tool_card(name, arguments, definition=self._lookup(
                name, agent.name if agent is not None else None))
        self._cards[call_id] = card
        self._order.append(card)
        self._shown.append(card)
        _CLAIMED.add(call_id)
        self._undo.append(lambda: _CLAIMED.discard(call_id))
        self._undo.append(registry.on_event(self._mine))
        if isinstance(registry.approval, NotebookApprovals):
            self._undo.append(registry.approval.add_host(self))

    @property
    def main(self) -> ToolCard | RunCodeCard:
        """The call's card."""
        return self._order[0]

    def _mine(self, event: SessionEvent) -> None:
        call_id = event.get("call_id")
        if event.get("parent_call_id") == self.call_id or call_id == self.call_id or (
                isinstance(call_id, str) and call_id.startswith(f"{self.call_id}:code:")):
            self.apply(event)


class LiveView(_FollowingView):
    """Follows ``registry``: a card appears when a call starts and updates as it runs.

    ``scopes`` lets calls made in those agent scopes use the scope's definitions.
    Approvals of a :class:`NotebookApprovals` attached to the registry (or given
    as ``approvals``) appear inside the call's card."""

    def __init__(self, registry: ToolRegistry, *, scopes: Iterable[AgentScope] = (),
                 approvals: NotebookApprovals | None = None) -> None:
        super().__init__(definitions=registry_lookup(registry, scopes))
        self._undo.append(registry.on_event(self._follow))
        service = approvals if approvals is not None else registry.approval
        if isinstance(service, NotebookApprovals):
            self._undo.append(service.add_host(self))

    def _follow(self, event: SessionEvent) -> None:
        if not _claimed(event):
            self.apply(event)


def replay(source: str | os.PathLike[str] | Iterable[SessionEvent], *,
           registry: ToolRegistry | None = None,
           scopes: Iterable[AgentScope] = ()) -> SessionView:
    """Cards for a JSON Lines session log (or events), without running anything.
    With ``registry`` the tools' own presenters draw the cards; otherwise, and for
    tools it no longer has, the generic cards do."""
    events = read_session(Path(source)) if isinstance(source, str | os.PathLike) else source
    view = SessionView(definitions=registry_lookup(registry, scopes) if registry else None)
    for event in events:
        view.apply(event)
    return view
