"""The call a caller hands in, and the frozen view of it every stage sees.

A call carries its agent scope and, once resolved, its tool definition; this module
names them by what a call reads of them, :class:`ScopeView` and :class:`DefinitionView`,
not by their classes (:class:`~.scope.AgentScope`,
:class:`~.definition.ToolDefinition`). Both classes depend on this module (a
definition's body takes a :class:`ToolRunContext`, a scope holds hooks that take a
:class:`ToolExecution`), so naming them here would close an import cycle, even one only
mypy follows (``tests/unit/test_import_cycles.py``). Every scope and definition satisfies
its view (``tests/unit/registry/test_scopes.py``, ``test_definitions.py`` beside it), and
the registry's reads (``registry.visible(ctx.agent)``, ``registry.get(name, ctx.agent)``
...) take a :class:`ScopeView`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeAlias, runtime_checkable

from ..abort import AbortSignal
from ..json_value import JsonObject
from ..runtime import RunFile
from .results import AdditionalContext


@runtime_checkable
class ScopeView(Protocol):
    """An agent scope as a call carries it (``ctx.agent``, ``execution.agent``): what
    a hook or a body may read of it. The scope is an
    :class:`~dsh_jupyter.registry.AgentScope`; pass it back to the registry's reads
    as it is, or narrow it with ``isinstance`` to register in it."""

    @property
    def name(self) -> str:
        """The scope's name, unique among the registry's live scopes."""

    @property
    def parent(self) -> ScopeView | None:
        """The scope it was created under, ``None`` for a root scope."""

    @property
    def chain(self) -> tuple[ScopeView, ...]:
        """Its ancestry, outermost first, ending with itself."""

    @property
    def session_key(self) -> str:
        """The key of its conversation on a stateful code runtime."""

    @property
    def disposed(self) -> bool:
        """Whether it was disposed (a call may outlive its scope)."""


@runtime_checkable
class DefinitionView(Protocol):
    """A tool definition as a call carries it (``execution.definition``): what a hook
    may read of it. The definition is a :class:`~dsh_jupyter.registry.ToolDefinition`;
    a lifecycle listener has it as such in ``run.definition``."""

    @property
    def name(self) -> str:
        """The tool's name."""

    @property
    def description(self) -> str:
        """What the model reads about the tool."""

    @property
    def parameters(self) -> JsonObject:
        """The JSON Schema of its arguments."""

    @property
    def timeout_ms(self) -> float | None:
        """Its declared time limit (enforced by ``enforce_timeouts``)."""


TraceValue: TypeAlias = str | bool | int | float
"""A value :meth:`ToolRunContext.set_trace_attributes` records on a call's span."""

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
    agent: ScopeView | None = None
    parent: ExecutionToken | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolExecution:
    """The immutable view of one call that every pipeline stage receives."""

    token: ExecutionToken
    call_id: str
    name: str
    arguments: JsonObject
    signal: AbortSignal
    agent: ScopeView | None = None
    parent: ExecutionToken | None = None
    definition: DefinitionView | None = field(default=None, repr=False, compare=False)
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
    _annotate: Callable[[Mapping[str, TraceValue]], None] | None = field(
        default=None, repr=False, compare=False)
    _attach: Callable[[RunFile], None] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, execution: ToolExecution, signal: AbortSignal,
           defer: Callable[[AdditionalContext], None],
           annotate: Callable[[Mapping[str, TraceValue]], None] | None = None,
           attach: Callable[[RunFile], None] | None = None) -> ToolRunContext:
        if cls is not ToolRunContext:
            return cls(token=execution.token, call_id=execution.call_id, name=execution.name,
                       arguments=execution.arguments, signal=signal, agent=execution.agent,
                       parent=execution.parent, definition=execution.definition,
                       execution=execution, _defer=defer, _annotate=annotate, _attach=attach)
        context: ToolRunContext = _new(ToolRunContext)
        _c_token(context, execution.token)
        _c_call_id(context, execution.call_id)
        _c_name(context, execution.name)
        _c_arguments(context, execution.arguments)
        _c_signal(context, signal)
        _c_agent(context, execution.agent)
        _c_parent(context, execution.parent)
        _c_definition(context, execution.definition)
        _c_execution(context, execution)
        _c_defer(context, defer)
        _c_annotate(context, annotate)
        _c_attach(context, attach)
        return context

    @property
    def traced(self) -> bool:
        """Whether this call has a trace span (``registry.instrument()``): a body can skip
        preparing attributes otherwise."""
        return self._annotate is not None

    def set_trace_attributes(self, attributes: Mapping[str, TraceValue]) -> None:
        """Record facts about this call on its span when tracing is on (else nothing).

        Keys are strings (use a prefix of your own); values are ``str``, ``bool``,
        ``int`` or ``float``, recorded as given even without ``record_values``, so pass
        counts, sizes and names, never secrets. The pipeline's own attributes win on a
        clash. Raises ``TypeError`` for another key or value type, traced or not."""
        for key, value in attributes.items():
            if not isinstance(key, str) or not isinstance(value, (str, bool, int, float)):
                raise TypeError(f"trace attribute {key!r}: keys must be str and values str, "
                                f"bool, int or float, not {type(value).__name__}")
        if self._annotate is not None:
            self._annotate(attributes)

    def attach(self, file: RunFile) -> None:
        """Keep ``file`` with this call's successful result, for the user
        (:attr:`~.results.ToolSuccess.attachments`); the model never sees its bytes. A
        failed call keeps none."""
        if self._attach is not None:
            self._attach(file)

    def defer_context(self, context: AdditionalContext) -> None:
        """Deliver ``context`` after this call's final result, even if the body
        later fails or is cancelled (a blocking post-execute decision drops it)."""
        self._defer(context)


def new_execution(token: ExecutionToken, call_id: str, name: str, arguments: JsonObject,
                  signal: AbortSignal, agent: ScopeView | None, parent: ExecutionToken | None,
                  definition: DefinitionView | None) -> ToolExecution:
    """``ToolExecution(...)`` with these fields, built as fast as the pipeline needs it.

    The pipeline builds one execution and one run context per call. A frozen dataclass's
    generated ``__init__`` (keyword parsing, then ``object.__setattr__`` per field) costs
    about a microsecond for each, a tenth of a whole call through the pipeline; setting
    the slots through their own descriptors, as that ``__init__`` ends up doing, costs
    half as much. Same object (``tests/unit/registry/test_pipeline.py`` compares the two,
    field by field).
    """
    execution: ToolExecution = _new(ToolExecution)
    _e_token(execution, token)
    _e_call_id(execution, call_id)
    _e_name(execution, name)
    _e_arguments(execution, arguments)
    _e_signal(execution, signal)
    _e_agent(execution, agent)
    _e_parent(execution, parent)
    _e_definition(execution, definition)
    return execution


def _setter(cls: type, name: str) -> Callable[[object, object], None]:
    setter: Callable[[object, object], None] = getattr(cls, name).__set__
    return setter


_new = object.__new__
_e_token = _setter(ToolExecution, "token")
_e_call_id = _setter(ToolExecution, "call_id")
_e_name = _setter(ToolExecution, "name")
_e_arguments = _setter(ToolExecution, "arguments")
_e_signal = _setter(ToolExecution, "signal")
_e_agent = _setter(ToolExecution, "agent")
_e_parent = _setter(ToolExecution, "parent")
_e_definition = _setter(ToolExecution, "definition")
_c_token = _setter(ToolRunContext, "token")
_c_call_id = _setter(ToolRunContext, "call_id")
_c_name = _setter(ToolRunContext, "name")
_c_arguments = _setter(ToolRunContext, "arguments")
_c_signal = _setter(ToolRunContext, "signal")
_c_agent = _setter(ToolRunContext, "agent")
_c_parent = _setter(ToolRunContext, "parent")
_c_definition = _setter(ToolRunContext, "definition")
_c_execution = _setter(ToolRunContext, "execution")
_c_defer = _setter(ToolRunContext, "_defer")
_c_annotate = _setter(ToolRunContext, "_annotate")
_c_attach = _setter(ToolRunContext, "_attach")
