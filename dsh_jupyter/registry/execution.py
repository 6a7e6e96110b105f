"""The call a caller hands in, and the frozen view of it every stage sees."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias

from ..abort import AbortSignal
from ..json_value import JsonObject
from .results import AdditionalContext

if TYPE_CHECKING:
    from .definition import ToolDefinition
    from .scope import AgentScope


ExecutionMode: TypeAlias = Literal["parallel", "exclusive"]
"""How a call may be scheduled next to its siblings (``ToolRegistry.execution_mode``)."""


class ExecutionToken:
    """Opaque identity of one execution: compare with ``is``/``==``, nothing else.
    Pass it as ``parent`` to correlate nested calls; it never crosses a model,
    log or kernel boundary."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<ExecutionToken {id(self):#x}>"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """What a caller asks the registry to run. ``arguments`` may be any Python
    value; it is snapshotted as lossless JSON before anything else happens.
    ``signal`` defaults to one that never aborts."""

    call_id: str
    name: str
    arguments: object = field(default_factory=dict)
    signal: AbortSignal | None = None
    agent: AgentScope | None = None
    parent: ExecutionToken | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolExecution:
    """The immutable view of one call that every pipeline stage receives."""

    token: ExecutionToken
    call_id: str
    name: str
    arguments: JsonObject
    signal: AbortSignal
    agent: AgentScope | None = None
    parent: ExecutionToken | None = None
    definition: ToolDefinition | None = field(default=None, repr=False, compare=False)
    """The visible definition resolved when the call started (``None`` if unknown)."""

    @property
    def is_top_level(self) -> bool:
        return self.parent is None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolRunContext(ToolExecution):
    """What a tool body receives: the execution itself (``ctx.call_id``, ``ctx.parent``,
    ``ctx.agent``, ``ctx.arguments`` ...) plus :meth:`defer_context`.

    ``signal`` is the operational signal (the caller's, fused with any signal a
    wrapper substituted); a body must observe it and settle only after the work
    it started has stopped. ``execution`` is the view the other stages saw (its
    ``signal`` is the caller's).
    """

    execution: ToolExecution = field(repr=False, compare=False)
    _defer: Callable[[AdditionalContext], None] = field(repr=False, compare=False)

    @classmethod
    def of(cls, execution: ToolExecution, signal: AbortSignal,
           defer: Callable[[AdditionalContext], None]) -> ToolRunContext:
        return cls(token=execution.token, call_id=execution.call_id, name=execution.name,
                   arguments=execution.arguments, signal=signal, agent=execution.agent,
                   parent=execution.parent, definition=execution.definition,
                   execution=execution, _defer=defer)

    def defer_context(self, context: AdditionalContext) -> None:
        """Deliver ``context`` after this call's final result, even if the body
        later fails or is cancelled (a blocking post-execute decision drops it)."""
        self._defer(context)
