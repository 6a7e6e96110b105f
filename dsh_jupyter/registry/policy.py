"""Policy decisions and the typed signatures of every plug point.

Each plug point is registered with ``registry.on_*`` / ``registry.guard`` (or on
an agent scope) and returns an undo callable. The contract of each is its
docstring here. Hooks may be plain functions or coroutine functions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Protocol, TypeAlias

from ..abort import AbortSignal
from ..json_value import JsonValue
from .execution import ToolExecution
from .results import AdditionalContext, Content, ToolResult

# --- pre-execute ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Allow:
    pass


@dataclass(frozen=True, slots=True)
class Deny:
    reason: str


@dataclass(frozen=True, slots=True)
class Ask:
    reason: str | None = None


PreDecision: TypeAlias = Allow | Deny | Ask


class PreExecuteHook(Protocol):
    """Waterfall gate before dispatch. Receives the decision so far (``Allow()``
    first) and returns the next one, or ``None`` to keep it. Arguments cannot be
    rewritten: what is logged is what runs. ``Ask`` goes to the registry's
    approval service, or becomes a denial when none is attached."""

    def __call__(
        self, execution: ToolExecution, decision: PreDecision
    ) -> PreDecision | Awaitable[PreDecision | None] | None: ...


Guard: TypeAlias = Callable[[ToolExecution], "str | None"]
"""Monotonic owner policy after pre-execute: a returned string denies the call
with that reason; ``None`` leaves it unchanged. Global guards run first, then
each scope's from the outermost ancestor inward."""


# --- approval ---------------------------------------------------------------------


ANSWERED_BY_ABORT = "abort"
"""``Approval.answered_by`` when the call was stopped before anyone answered."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Approval:
    approved: bool
    answered_by: str = "user"
    """``"user"``, a non-interactive policy (``"policy 'reject'"``), or
    :data:`ANSWERED_BY_ABORT` when the call was stopped first."""
    note: str | None = None
    for_run: bool = False
    """An approval that also covers the later calls of the same tool in the same
    ``run_code`` run (the card's "Approve all <tool> calls in this run", ``dsh-jupyter
    approvals approve --all-in-run``). A journaled run keeps it across a resume."""


class ApprovalService(Protocol):
    """Answers ``Ask`` decisions (the widgets provide one with buttons)."""

    async def request(self, execution: ToolExecution, reason: str | None) -> Approval | bool: ...


# --- execute (around dispatch) ----------------------------------------------------


class CallNext(Protocol):
    async def __call__(self, *, signal: AbortSignal | None = None) -> ToolResult: ...


class ExecuteWrapper(Protocol):
    """Around-dispatch middleware (timeouts, retries, metrics). Call
    ``await call_next()`` to continue, optionally with a substitute ``signal``
    (the only thing a wrapper may replace; the caller's signal stays fused in).
    A wrapper may also return its own result; a success is normalised through
    the tool's output declaration like the body's."""

    def __call__(self, execution: ToolExecution, call_next: CallNext) -> Awaitable[ToolResult]: ...


# --- post-execute -----------------------------------------------------------------


class _NoValue:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_VALUE"


NO_VALUE = _NoValue()


@dataclass(frozen=True, slots=True, kw_only=True)
class Accept:
    """Keep the result, replacing either its content or its value (never both),
    and optionally attaching contexts. A replaced value is revalidated against
    the output schema and re-rendered."""

    content: Content | str | None = None
    value: JsonValue | _NoValue = NO_VALUE
    contexts: Sequence[AdditionalContext] = field(default=())


@dataclass(frozen=True, slots=True)
class Block:
    """Turn the result into a failure carrying ``feedback``; tool-deferred
    contexts are dropped, only ``contexts`` given here are kept."""

    feedback: str
    _: KW_ONLY
    contexts: Sequence[AdditionalContext] = field(default=())


PostDecision: TypeAlias = Accept | Block


class PostExecuteHook(Protocol):
    """Waterfall after dispatch: sees the current result, returns ``Accept``,
    ``Block`` or ``None`` (no change)."""

    def __call__(
        self, execution: ToolExecution, result: ToolResult
    ) -> PostDecision | Awaitable[PostDecision | None] | None: ...


ResultObserver: TypeAlias = Callable[[ToolExecution, ToolResult], None]
"""Observe-only, after ``finalize_content``. Exceptions are logged and contained."""

FinalizeContent: TypeAlias = Callable[[ToolExecution, ToolResult], "Content | str | None"]
"""Definition-owned, synchronous, runs exactly once per call on every outcome;
may replace only the content (``None`` keeps it). One that raises turns the result into
``HOOK_FAILED`` with content ``Error: <its message>``."""


# --- the chain that applies to one scope ----------------------------------------------


@dataclass(frozen=True, slots=True)
class HookChain:
    """The hooks that apply to one scope, in run order (global, then outermost scope inward)."""

    guards: tuple[Guard, ...]
    pre: tuple[PreExecuteHook, ...]
    wrappers: tuple[ExecuteWrapper, ...]
    post: tuple[PostExecuteHook, ...]
    observers: tuple[ResultObserver, ...]
