"""One call's lifecycle: the :class:`CallRun` every stage shares, and :class:`CallListener`,
the one interface that is told each stage.

The pipeline (:mod:`.pipeline`) runs a call through the seed's stages and tells the
registry's listeners at each one; it reports to nothing else. Whatever watches or orders
calls is a listener, registered with ``registry.listen(listener)`` (which returns the
undo):

- session events (:mod:`.session_events`): ``tool/call``, ``tool/result``, approvals;
- tracing (:mod:`.tracing`, ``registry.instrument()``): one span per call;
- Code Mode (:mod:`dsh_jupyter.codemode`): the order of a program's sub-calls and their
  ``tool/code-dispatch*`` events;
- yours: metrics, an audit log, a test that counts stages.

The stages, in the order a call meets them. A call that fails before its policy (bad
arguments, an unknown tool, aborted already) goes from ``on_call_start`` to
``on_call_end``; a denied one from its policy stages to ``on_call_end``::

    on_call_start
    around_policy [ on_decision, on_approval_request, on_approval, on_guards ]
    on_dispatch_start, on_trace_attributes*, on_dispatch_end
    around_post [ on_post_decision* ]
    on_call_end

Listeners are told in registration order (those registered with ``first=True`` before
the others). A listener's exception is logged and contained: a call never fails
because of one. A call keeps the listeners it started with, so a listener that saw a
call start sees it end, even when it is removed meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

from ..errors import RegistrationError

if TYPE_CHECKING:
    import asyncio

    from ..abort import AbortSignal
    from ..json_value import JsonObject
    from ..runtime import RunFile
    from .definition import ToolDefinition
    from .execution import (
        ExecutionMode,
        ExecutionToken,
        ScopeView,
        ToolCall,
        ToolExecution,
        TraceValue,
    )
    from .policy import Approval, ApprovalService, PreDecision
    from .results import AdditionalContext, ToolFailure, ToolResult

_log = logging.getLogger(__name__)

Watches: TypeAlias = Literal["all", "top-level", "sub-calls"]
"""Which calls a listener is told about: every call, only calls without a ``parent``
(what a model or a user called), or only calls with one (a ``run_code`` program's)."""

Section: TypeAlias = AbstractAsyncContextManager[None]


class CallRun:
    """One call through the pipeline, from its start to its published result: what every
    listener stage receives. The pipeline writes it; listeners read it, and keep what they
    need for this call in :attr:`state`.

    - ``call``: the :class:`~.execution.ToolCall` as the caller handed it in;
      ``execution``: the frozen view every policy hook receives (``call_id``, ``name``,
      the snapshotted ``arguments``, ``signal``, ``agent``, ``parent`` token);
    - ``definition``: the tool the name resolved to, ``None`` for an unknown one;
      ``parsed``: the validated arguments as the body receives them;
    - ``parent``: the :class:`CallRun` of the call this one was made from (a ``run_code``
      program's), while that call runs; else ``None``;
    - timing (``time.time()``): ``started`` and ``ended``;
    - ``result``: the final result, once :meth:`CallListener.on_call_end` is told;
      ``cancelled``: the task awaiting the call was cancelled (its result is published,
      then ``CancelledError`` propagates);
    - ``trace_ids``: the call's trace and span ids in hex, set by the tracing listener
      when it started the call's span (events carry them);
    - ``attachments``: the files the body attached (``ctx.attach``), kept with a success;
    - ``state``: per-call state, keyed by the listener (or anything else you own): the
      tracing listener keeps the call's span there, Code Mode its schedule entry, and an
      output declaration what ``render_for`` hands ``meta_for``;
    - ``approval``: this call's own approval service, asked in place of the registry's
      when its policy says ``Ask`` (``None``: the registry's); ``before_body``: awaited
      just before the body starts, each time a wrapper calls it; a
      :class:`~dsh_jupyter.errors.DshError` it raises fails the call with its message and
      code, and the body does not run. Whoever prepares the call sets them before it
      runs: a journaled ``run_code`` sub-call records its question and its start there
      (:mod:`dsh_jupyter.codemode.journal`).
    """

    __slots__ = ("_body_done", "_body_started", "_deferred", "_invalid", "_lifecycle",
                 "_malformed", "_unknown", "approval", "attachments", "before_body", "call",
                 "cancelled", "definition", "ended", "execution", "parent", "parsed",
                 "result", "started", "state", "trace_ids")

    def __init__(self, call: ToolCall, execution: ToolExecution,
                 definition: ToolDefinition | None, parent: CallRun | None,
                 unknown: str | None = None, malformed: ToolFailure | None = None) -> None:
        self.call = call
        self.execution = execution
        self.definition = definition
        self.parent = parent
        self.parsed: Any = None
        self.started = 0.0
        self.ended: float | None = None
        self.result: ToolResult | None = None
        self.cancelled = False
        self.trace_ids: tuple[str, str] | None = None
        self.state: dict[object, Any] = {}
        self.attachments: list[RunFile] = []
        self.approval: ApprovalService | None = None
        self.before_body: Callable[[], Awaitable[None]] | None = None
        # The pipeline's own bookkeeping.
        self._unknown = unknown  # the UNKNOWN_TOOL message
        self._malformed = malformed  # arguments that are not a JSON object
        self._invalid: ToolFailure | None = None  # rejected by the schema or the parser
        self._deferred: list[AdditionalContext] = []
        self._body_started = False
        self._body_done: asyncio.Event | None = None
        self._lifecycle: Lifecycle = NO_LISTENERS

    def __repr__(self) -> str:
        return f"<CallRun {self.execution.call_id!r} {self.execution.name!r}>"

    @property
    def call_id(self) -> str:
        return self.execution.call_id

    @property
    def name(self) -> str:
        return self.execution.name

    @property
    def arguments(self) -> JsonObject:
        """The snapshotted arguments (frozen JSON)."""
        return self.execution.arguments

    @property
    def agent(self) -> ScopeView | None:
        return self.execution.agent

    @property
    def token(self) -> ExecutionToken:
        return self.execution.token

    @property
    def signal(self) -> AbortSignal:
        """The caller's signal."""
        return self.execution.signal

    @property
    def is_sub_call(self) -> bool:
        """Made from another call (``parent`` token given): a ``run_code`` program's."""
        return self.execution.parent is not None

    @property
    def execution_mode(self) -> ExecutionMode:
        """``"parallel"`` only when the definition's classifier returns exactly ``True``
        for these (valid) arguments; anything else is ``"exclusive"``."""
        definition = self.definition
        if (definition is None or definition.is_concurrency_safe is None
                or self._malformed is not None or self._invalid is not None):
            return "exclusive"
        try:
            verdict = definition.is_concurrency_safe(self.execution.arguments)
        except Exception:
            return "exclusive"
        return "parallel" if verdict is True else "exclusive"

    def _annotate(self, attributes: Mapping[str, TraceValue]) -> None:
        self._lifecycle.trace_attributes(self, attributes)


class CallListener(Protocol):
    """Told each stage of a call (see the module docstring for their order). Every method
    is optional: subclass this class to inherit a no-op for the stages you leave out, or
    write any object with the methods you need. ``registry.listen`` checks the names (an
    ``on_``/``around_`` name that is no stage is an error, so a typo is not silently
    ignored) and calls only what a listener implements.

    Sync methods run on the event loop inside the call and must be quick; keep what you
    need in ``run.state``. ``watches`` says which calls the listener is told about.
    """

    watches: Watches = "all"

    def on_call_start(self, run: CallRun) -> None:
        """A call starts: its arguments are snapshotted and its name resolved
        (``run.definition`` is ``None`` for an unknown tool), nothing is decided yet. Told
        for every call, also one that fails at once; :meth:`on_call_end` follows exactly
        once."""
        return None

    def around_policy(self, run: CallRun) -> Section | None:
        """An async context manager that the pre-execute waterfall, the approval and the
        guards run inside, or ``None``. For ordering: Code Mode holds one lock per program
        here, so its sub-calls' policy stages never overlap. Only a call that reaches its
        policy (a known tool, valid arguments, not aborted) gets here."""
        return None

    def on_decision(self, run: CallRun, decision: PreDecision) -> None:
        """The pre-execute waterfall decided (``Allow``, ``Deny`` or ``Ask``), before any
        approval. Not told when a hook failed the call."""
        return None

    def on_approval_request(self, run: CallRun, reason: str | None) -> None:
        """An ``Ask`` goes to the approval service (without one it becomes a denial, and
        nothing is asked)."""
        return None

    def on_approval(self, run: CallRun, approval: Approval) -> None:
        """The approval service answered (``answered_by`` is ``error`` when it raised, and
        ``abort`` when the call was stopped first)."""
        return None

    def on_guards(self, run: CallRun, checked: int, stopped_by: str | None) -> None:
        """The guards ran: how many, and the one that denied the call (or failed), if one
        did. Told only when there are guards and the call got to them."""
        return None

    def on_dispatch_start(self, run: CallRun) -> None:
        """The policy let the call through: the execute wrappers and the body run next."""
        return None

    def on_trace_attributes(self, run: CallRun, attributes: Mapping[str, TraceValue]) -> None:
        """The body recorded facts about the call (``ctx.set_trace_attributes``). A body's
        ``ctx.traced`` is true only when some listener takes this stage."""
        return None

    def on_dispatch_end(self, run: CallRun, result: ToolResult) -> None:
        """The body, through the wrappers, settled: its result, checked against the output
        declaration, before post-execute. Not told when the call was cancelled meanwhile."""
        return None

    def around_post(self, run: CallRun) -> Section | None:
        """An async context manager that post-execute runs inside, or ``None`` (Code Mode
        waits here for the program's previous sub-call to settle). Only a call whose
        body was dispatched gets here."""
        return None

    def on_post_decision(self, run: CallRun, kind: str) -> None:
        """A post-execute hook decided: ``accept``, ``replace``, ``block``, or ``invalid``
        (it returned something else; the call fails)."""
        return None

    def on_call_end(self, run: CallRun) -> None:
        """The call is over: ``run.result`` is final (after ``finalize_content`` and the
        result observers) and ``run.ended`` set. ``run.cancelled`` says whether the task
        awaiting it was cancelled (``CancelledError`` propagates next). ``run.result`` is
        ``None`` only when the pipeline itself raised (a bug): the listener is told all
        the same."""
        return None


STAGES: tuple[str, ...] = (
    "on_call_start", "around_policy", "on_decision", "on_approval_request", "on_approval",
    "on_guards", "on_dispatch_start", "on_trace_attributes", "on_dispatch_end",
    "around_post", "on_post_decision", "on_call_end")
"""Every stage, in the order a call meets them."""

WATCHES: tuple[Watches, ...] = ("all", "top-level", "sub-calls")


def stages_of(listener: object) -> dict[str, Callable[..., Any]]:
    """The stages ``listener`` implements, as its bound methods; raises
    :class:`~dsh_jupyter.errors.RegistrationError` for a name that is no stage, a stage
    that is not callable, a listener with no stage, or a bad ``watches``."""
    what = _name(listener)
    unknown = sorted(name for name in dir(listener)
                     if name.startswith(("on_", "around_")) and name not in STAGES)
    if unknown:
        raise RegistrationError(
            f"listener {what}: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} "
            f"not a stage; the stages are {', '.join(STAGES)}")
    watches = getattr(listener, "watches", "all")
    if watches not in WATCHES:
        raise RegistrationError(f"listener {what}: watches={watches!r}; expected one of "
                                f"{', '.join(map(repr, WATCHES))}")
    found: dict[str, Callable[..., Any]] = {}
    for stage in STAGES:
        method = getattr(listener, stage, None)
        if method is None or getattr(type(listener), stage, None) is getattr(CallListener,
                                                                              stage):
            continue  # left out, or the no-op inherited from CallListener
        if not callable(method):
            raise RegistrationError(f"listener {what}: {stage} must be a method")
        found[stage] = method
    if not found:
        raise RegistrationError(f"listener {what} implements no stage; the stages are "
                                f"{', '.join(STAGES)}")
    return found


class Lifecycle:
    """The stages one call is told, each the bound methods of the listeners that implement
    it, in order. Immutable: :class:`Listeners` builds new ones when a listener comes or
    goes, and a call keeps the one it started with."""

    __slots__ = STAGES

    on_call_start: tuple[Callable[[CallRun], None], ...]
    around_policy: tuple[Callable[[CallRun], Section | None], ...]
    on_decision: tuple[Callable[[CallRun, PreDecision], None], ...]
    on_approval_request: tuple[Callable[[CallRun, str | None], None], ...]
    on_approval: tuple[Callable[[CallRun, Approval], None], ...]
    on_guards: tuple[Callable[[CallRun, int, str | None], None], ...]
    on_dispatch_start: tuple[Callable[[CallRun], None], ...]
    on_trace_attributes: tuple[Callable[[CallRun, Mapping[str, TraceValue]], None], ...]
    on_dispatch_end: tuple[Callable[[CallRun, ToolResult], None], ...]
    around_post: tuple[Callable[[CallRun], Section | None], ...]
    on_post_decision: tuple[Callable[[CallRun, str], None], ...]
    on_call_end: tuple[Callable[[CallRun], None], ...]

    def __init__(self, implemented: list[dict[str, Callable[..., Any]]]) -> None:
        for stage in STAGES:
            setattr(self, stage, tuple(methods[stage] for methods in implemented
                                       if stage in methods))

    # Telling: each listener's exception is logged and contained. ------------------------
    def call_start(self, run: CallRun) -> None:
        for method in self.on_call_start:
            try:
                method(run)
            except Exception:
                _failed(method, run)

    def decision(self, run: CallRun, decision: PreDecision) -> None:
        for method in self.on_decision:
            try:
                method(run, decision)
            except Exception:
                _failed(method, run)

    def approval_request(self, run: CallRun, reason: str | None) -> None:
        for method in self.on_approval_request:
            try:
                method(run, reason)
            except Exception:
                _failed(method, run)

    def approval(self, run: CallRun, approval: Approval) -> None:
        for method in self.on_approval:
            try:
                method(run, approval)
            except Exception:
                _failed(method, run)

    def guards(self, run: CallRun, checked: int, stopped_by: str | None) -> None:
        for method in self.on_guards:
            try:
                method(run, checked, stopped_by)
            except Exception:
                _failed(method, run)

    def dispatch_start(self, run: CallRun) -> None:
        for method in self.on_dispatch_start:
            try:
                method(run)
            except Exception:
                _failed(method, run)

    def trace_attributes(self, run: CallRun, attributes: Mapping[str, TraceValue]) -> None:
        for method in self.on_trace_attributes:
            try:
                method(run, attributes)
            except Exception:
                _failed(method, run)

    def dispatch_end(self, run: CallRun, result: ToolResult) -> None:
        for method in self.on_dispatch_end:
            try:
                method(run, result)
            except Exception:
                _failed(method, run)

    def post_decision(self, run: CallRun, kind: str) -> None:
        for method in self.on_post_decision:
            try:
                method(run, kind)
            except Exception:
                _failed(method, run)

    def call_end(self, run: CallRun) -> None:
        for method in self.on_call_end:
            try:
                method(run)
            except Exception:
                _failed(method, run)


NO_LISTENERS = Lifecycle([])


class Listeners:
    """A registry's listeners, in the order they are told, and the :class:`Lifecycle` of
    each kind of call (:attr:`top_level`, :attr:`sub_calls`) built from them."""

    __slots__ = ("_entries", "sub_calls", "top_level")

    def __init__(self) -> None:
        self._entries: list[tuple[object, bool, Watches, dict[str, Callable[..., Any]]]] = []
        self.top_level = NO_LISTENERS
        self.sub_calls = NO_LISTENERS

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, listener: object, *, first: bool = False) -> Callable[[], None]:
        """Add ``listener`` (checked by :func:`stages_of`); returns what removes it."""
        stages = stages_of(listener)
        watches: Watches = getattr(listener, "watches", "all")
        entry = (listener, bool(first), watches, stages)
        self._entries.append(entry)
        self._rebuild()

        def remove() -> None:
            for index, existing in enumerate(self._entries):
                if existing is entry:
                    del self._entries[index]
                    self._rebuild()
                    return

        return remove

    def for_call(self, is_sub_call: bool) -> Lifecycle:
        return self.sub_calls if is_sub_call else self.top_level

    def _rebuild(self) -> None:
        ordered = ([e for e in self._entries if e[1]] + [e for e in self._entries if not e[1]])
        self.top_level = Lifecycle([e[3] for e in ordered if e[2] != "sub-calls"])
        self.sub_calls = Lifecycle([e[3] for e in ordered if e[2] != "top-level"])


def _failed(method: Callable[..., Any], run: CallRun) -> None:
    _log.exception("listener %s failed for call %s", _name(method), run.call_id)


def _name(fn: object) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__
