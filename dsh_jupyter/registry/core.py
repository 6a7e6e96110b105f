"""The registry core: layers, visibility, notifications, listeners, and the entry to the
pipeline.

The modules it drives (pipeline, listeners, prompt assembly, scopes) see it through the
Protocols of :mod:`~dsh_jupyter.registry._view`, which also says which of its members
are public API and which exist only for them (``_resolve``, ``_hooks``, ``_listening``,
``_listeners``, ``_running``, ``_changed``, ``_dispose_scope``).

Code Mode is not here: the core knows it through the presentation seam
(:class:`~dsh_jupyter.registry.assembly.CodePresentation`, ``_code_mode``) and the
lifecycle listener it registers, and imports none of it. The ``ToolRegistry`` users
import (``dsh_jupyter.ToolRegistry``) is :class:`RegistryCore` with Code Mode plugged in
(:mod:`dsh_jupyter.codemode.registry`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import RegistrationError
from ..events import EventSink, SessionEvent
from ..json_value import JsonObject, thaw
from .assembly import NOT_PLUGGED, CodePresentation, PromptAssembly, assemble
from .definition import ToolDefinition
from .execution import ExecutionMode, ExecutionToken, ScopeView, ToolCall
from .lifecycle import CallListener, CallRun, Listeners
from .pipeline import prepare_call, run_call
from .policy import ApprovalService, HookChain
from .results import ToolResult
from .scope import MODES, RESERVED_NAME, AgentScope, Disposer, Layer, PresentationMode, Undo
from .session_events import SessionEvents

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from .tracing import CallTracer

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistryChange:
    """A change notification: ``kind`` is register, unregister, restrict,
    present_as, policy, scope or dispose; ``scope`` is ``None`` for globals."""

    kind: str
    scope: str | None
    names: tuple[str, ...]


class RegistryCore(Layer):
    """Tools, agent scopes, policies, listeners, and the execution pipeline; the code
    modes need Code Mode plugged in (``_code_mode``), which
    :class:`dsh_jupyter.ToolRegistry` does."""

    def __init__(self, *, mode: PresentationMode = "native",
                 approval: ApprovalService | None = None) -> None:
        super().__init__(None)
        if mode not in MODES:
            raise RegistrationError(f"mode={mode!r}: expected one of {', '.join(MODES)}")
        self.mode: PresentationMode = mode
        self.approval = approval
        self._scopes: dict[str, AgentScope] = {}
        self._version = 0
        self._visible_cache: dict[AgentScope | None, tuple[int, dict[str, ToolDefinition]]] = {}
        self._hook_cache: dict[AgentScope | None, tuple[int, HookChain]] = {}
        self._change_listeners: list[Callable[[RegistryChange], None]] = []
        self._event_sinks: list[EventSink] = []
        self._tracer: CallTracer | None = None
        self._listeners = Listeners()
        self._running: dict[ExecutionToken, CallRun] = {}
        self._code_mode: CodePresentation | None = None
        self._session_events: Disposer | None = None  # listening while a sink is attached

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} mode={self.mode!r} tools={len(self._tools)} "
                f"scopes={len(self._scopes)}>")

    def _repr_html_(self) -> str:
        """A table of the global tools with their signatures, the mode, the policies and
        the scopes (Jupyter shows it for a cell ending with the registry)."""
        from .display import table_html

        return table_html(type(self).__name__, self.mode, self.visible(), self._hooks(None),
                          sorted(self._scopes))

    @property
    def _registry(self) -> RegistryCore:
        return self

    # Scopes ---------------------------------------------------------------------------
    def scope(self, name: str, parent: AgentScope | None = None) -> AgentScope:
        """Create an agent scope; ``parent`` chains it under another scope."""
        if not isinstance(name, str) or not name:
            raise RegistrationError("a scope needs a non-empty string name")
        if name in self._scopes:
            raise RegistrationError(
                f"a scope named {name!r} already exists; dispose it first or pick another name")
        if parent is not None and (not isinstance(parent, AgentScope) or parent.disposed
                                   or self._scopes.get(parent.name) is not parent):
            raise RegistrationError(f"parent {parent!r} is not a live scope of this registry")
        scope = AgentScope(self, name, parent)
        self._scopes[name] = scope
        self._changed("scope", name, ())
        return scope

    def find_scope(self, name: str) -> AgentScope | None:
        """The live scope called ``name``, if any (event logs carry scope names)."""
        return self._scopes.get(name)

    @property
    def scopes(self) -> tuple[AgentScope, ...]:
        """Every live scope, in creation order."""
        return tuple(self._scopes.values())

    def _dispose_scope(self, scope: AgentScope) -> None:
        if scope.disposed:
            return
        for child in [s for s in self._scopes.values() if s.parent is scope]:
            self._dispose_scope(child)
        scope._disposed = True
        self._scopes.pop(scope.name, None)
        self._visible_cache.pop(scope, None)
        self._hook_cache.pop(scope, None)
        self._changed("dispose", scope.name, tuple(scope._tools))

    # Resolution -------------------------------------------------------------------------
    def visible(self, scope: ScopeView | None = None) -> dict[str, ToolDefinition]:
        """Every tool ``scope`` can see, by name (a fresh dict; definitions shared)."""
        return dict(self._visible(_agent_scope(scope)))

    def _visible(self, scope: AgentScope | None) -> dict[str, ToolDefinition]:
        cached = self._visible_cache.get(scope)
        if cached is not None and cached[0] == self._version:
            return cached[1]
        if scope is None:
            view = dict(self._tools)
        else:
            inherited = self._visible(scope.parent)
            view = {name: d for name, d in inherited.items()
                    if all(mask.admits(name) for mask in scope._masks)}
            view.update(scope._tools)
        self._visible_cache[scope] = (self._version, view)
        return view

    def get(self, name: str, scope: ScopeView | None = None) -> ToolDefinition | None:
        """The definition ``scope`` resolves ``name`` to (shadowing and masks applied;
        ``run_code`` under a code mode)."""
        scope = self._live_scope(scope)
        if name == RESERVED_NAME:
            code = self._code_mode
            return code.transport if code is not None and self.mode_for(scope) != "native" \
                else None
        return self._visible(scope).get(name)

    def mode_for(self, scope: ScopeView | None = None) -> PresentationMode:
        """The presentation for ``scope``: the nearest ``present_as`` on its chain,
        else the registry's ``mode``."""
        scope = _agent_scope(scope)
        while scope is not None:
            if scope._mode is not None:
                return scope._mode
            scope = scope.parent
        return self.mode

    def prompt(self, scope: ScopeView | None = None) -> PromptAssembly:
        """The wire tool list and prompt sections a model request needs for ``scope``."""
        return assemble(self, self._live_scope(scope), self._code_mode)

    def schemas(self, scope: ScopeView | None = None) -> list[JsonObject]:
        """Detached ``{name, description, parameters}`` of every visible tool, by name."""
        view = self._visible(self._live_scope(scope))
        return [{"name": d.name, "description": d.description, "parameters": thaw(d.parameters)}
                for _, d in sorted(view.items())]

    def execution_mode(self, call: ToolCall) -> ExecutionMode:
        """``"parallel"`` only when the definition :meth:`execute` would run for this call
        (the same resolution) has a classifier returning exactly ``True`` for these
        arguments; anything else (unknown, collapsed under ``code``, invalid arguments,
        a classifier that raises) is ``"exclusive"``."""
        return prepare_call(self, call).execution_mode

    def _live_scope(self, scope: ScopeView | None) -> AgentScope | None:
        """``scope`` itself, once it is known to be a live scope of this registry."""
        if scope is not None and (not isinstance(scope, AgentScope)
                                  or self._scopes.get(scope.name) is not scope):
            raise RegistrationError(f"{scope!r} is not a live scope of this registry")
        return scope

    def _hooks(self, scope: ScopeView | None) -> HookChain:
        scope = _agent_scope(scope)
        cached = self._hook_cache.get(scope)
        if cached is not None and cached[0] == self._version:
            return cached[1]
        layers: list[Layer] = [self, *(scope.chain if scope is not None else ())]
        chain = HookChain(
            guards=tuple(g for layer in layers for g in layer._guards),
            pre=tuple(h for layer in layers for h in layer._pre),
            wrappers=tuple(w for layer in layers for w in layer._wrappers),
            post=tuple(h for layer in layers for h in layer._post),
            observers=tuple(o for layer in layers for o in layer._observers),
        )
        self._hook_cache[scope] = (self._version, chain)
        return chain

    # Execution ---------------------------------------------------------------------------
    async def execute(self, call: ToolCall) -> ToolResult:
        """Run ``call`` through the whole pipeline; returns a result, never raises
        for tool failures (``asyncio.CancelledError`` propagates after the body settles)."""
        return await run_call(self, prepare_call(self, call))

    def _resolve(self, call: ToolCall) -> ToolDefinition | str:
        """The definition ``call`` runs, or the UNKNOWN_TOOL message explaining why none
        (a scope that is not live raises ``RegistrationError`` instead).

        Under ``code`` and ``discovery`` a model-direct call (no parent) to any tool but
        ``run_code`` resolves to UNKNOWN_TOOL before any policy sees it; SDK sub-calls are
        exempt.
        """
        scope = self._live_scope(call.agent)
        mode = self.mode_for(scope)
        if call.name == RESERVED_NAME:
            if mode != "native":
                return (self._code_mode.transport if self._code_mode is not None
                        else f"{RESERVED_NAME!r} is not available: {NOT_PLUGGED}")
            return (f"{RESERVED_NAME!r} is not available: this agent's tools are presented "
                    "natively (mode 'native'); call the tools directly")
        definition = self._visible(scope).get(call.name)
        if definition is not None:
            if mode in ("code", "discovery") and call.parent is None:
                return (f"only `{RESERVED_NAME}` is callable directly — call `{call.name}` "
                        f"from inside a `{RESERVED_NAME}` program instead")
            return definition
        known = sorted(self._visible(scope))
        shown = ", ".join(known[:30]) + (f", ... ({len(known)} in all)" if len(known) > 30 else "")
        where = f" in scope {scope.name!r}" if scope is not None else ""
        return f"unknown tool {call.name!r}{where}; available tools: {shown or '(none)'}"

    # Tracing ------------------------------------------------------------------------------
    def instrument(self, tracer_provider: TracerProvider | None = None, *,
                   record_values: bool = False, max_value_bytes: int = 4096) -> Disposer:
        """Emit an OpenTelemetry span for every call through the pipeline (sub-calls of a
        ``run_code`` program are children of its span) and for every agent run over this
        registry (``invoke_agent``, and ``chat`` per model request); returns the undo.

        Needs the ``otel`` extra (``opentelemetry-api``); ``tracer_provider=None`` uses the
        global provider. Argument and result values are recorded only with
        ``record_values=True``, as JSON clipped to ``max_value_bytes``. See
        ``docs/tracing.md``. ::

            undo = registry.instrument(provider)
            ...
            undo()  # calls that start from now on emit no span
        """
        if self._tracer is not None:
            raise RegistrationError("this registry is instrumented already; call the undo "
                                    "that instrument() returned first")
        if (isinstance(max_value_bytes, bool) or not isinstance(max_value_bytes, int)
                or max_value_bytes < 1):
            raise RegistrationError(f"max_value_bytes must be a positive integer, got "
                                    f"{max_value_bytes!r}")
        try:
            from .tracing import CallTracer
        except ImportError as exc:
            raise RegistrationError("tracing needs OpenTelemetry: pip install "
                                    "'dsh-jupyter[otel]'") from exc
        tracer = CallTracer(tracer_provider, record_values=bool(record_values),
                            max_value_bytes=max_value_bytes)
        self._tracer = tracer
        stop_listening = self.listen(tracer, first=True)

        def undo() -> None:
            stop_listening()
            if self._tracer is tracer:
                self._tracer = None

        return Disposer(undo, "instrument (OpenTelemetry spans)")

    @property
    def instrumentation(self) -> CallTracer | None:
        """What :meth:`instrument` switched on (its tracer and settings), else ``None``."""
        return self._tracer

    # Lifecycle ----------------------------------------------------------------------------
    def listen(self, listener: CallListener, *, first: bool = False) -> Disposer:
        """Tell ``listener`` the stages of every call (those its ``watches`` selects), from
        calls that start now on; returns the undo. Subclass
        :class:`~dsh_jupyter.registry.lifecycle.CallListener` and implement the stages you
        need (its docstrings are the contract)::

            class Timings(CallListener):
                def on_call_end(self, run):
                    print(run.name, run.ended - run.started)

            undo = registry.listen(Timings())

        Listeners are told in registration order; ``first=True`` puts this one before
        those registered without it (tracing does, so its span ids are there for the
        rest). A stage name that is no stage (a typo) raises ``RegistrationError``."""
        return Disposer(self._listeners.add(listener, first=first),
                        f"listener {_callable_name(listener)}")

    # Notifications -----------------------------------------------------------------------
    def on_change(self, listener: Callable[[RegistryChange], None]) -> Undo:
        """Notify ``listener`` of every register/unregister/restrict/scope change."""
        return _subscribe(self._change_listeners, listener, "change listener")

    def on_event(self, sink: EventSink) -> Undo:
        """Send durable session events (see :mod:`dsh_jupyter.events`) to ``sink``.

        The calls' ``tool/*`` events come from a listener registered with the first sink
        and removed with the last, so a registry nobody records tells it nothing."""
        unsubscribe = _subscribe(self._event_sinks, sink, "event sink")
        if self._session_events is None:
            self._session_events = self.listen(SessionEvents(self))

        def undo() -> None:
            unsubscribe()
            if not self._event_sinks and self._session_events is not None:
                self._session_events()
                self._session_events = None

        return Disposer(undo, f"event sink {_callable_name(sink)}")

    def emit(self, event: SessionEvent) -> None:
        """Send ``event`` to every sink attached with :meth:`on_event` (the agent loop
        adds its ``agent/*`` events this way); a sink that raises is logged and skipped."""
        for sink in tuple(self._event_sinks):
            try:
                sink(event)
            except Exception:
                _log.exception("event sink %r failed on %s", sink, event.get("kind"))

    @property
    def _listening(self) -> bool:
        return bool(self._event_sinks)

    def _changed(self, kind: str, scope: str | None, names: tuple[str, ...]) -> None:
        self._version += 1
        if not self._change_listeners:
            return
        change = RegistryChange(kind=kind, scope=scope, names=names)
        for listener in tuple(self._change_listeners):
            try:
                listener(change)
            except Exception:
                _log.exception("registry change listener %r failed", listener)


def _subscribe(bucket: list[Callable[..., None]], item: Callable[..., None],
               what: str) -> Undo:
    if not callable(item):
        raise RegistrationError(f"expected a callable, got {type(item).__name__}")
    bucket.append(item)

    def undo() -> None:
        if item in bucket:
            bucket.remove(item)

    return Disposer(undo, f"{what} {_callable_name(item)}")


def _callable_name(item: object) -> str:
    return getattr(item, "__qualname__", None) or type(item).__name__


def _agent_scope(scope: ScopeView | None) -> AgentScope | None:
    """``scope`` as the :class:`AgentScope` every scope a call carries is (``ctx.agent``
    is typed by what a call reads of it, :class:`~.execution.ScopeView`)."""
    if scope is None or isinstance(scope, AgentScope):
        return scope
    raise RegistrationError(f"{scope!r} is not an agent scope (registry.scope(name) makes one)")
