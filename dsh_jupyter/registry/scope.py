"""Layers of the registry: the global layer and agent scopes.

Both share one surface (``register``, ``tool``, ``guard``, ``on_*``); agent
scopes add ``restrict`` and ``present_as``. Every registration returns an undo
callable that removes exactly what it added. A scope sees what its parent sees
(globals for a root scope), filtered by its own masks, then overlaid by its own
tools, which shadow same-named inherited ones for this scope (and its children).
"""

from __future__ import annotations

import html
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar, overload

from typing_extensions import Unpack

from ..errors import RegistrationError
from .definition import FunctionToolOptions, ToolDefinition, define_tool
from .policy import (
    ExecuteWrapper,
    Guard,
    HookChain,
    PostExecuteHook,
    PreExecuteHook,
    ResultObserver,
)

RESERVED_NAME = "run_code"
PresentationMode = Literal["native", "code", "both", "discovery"]
MODES: tuple[PresentationMode, ...] = ("native", "code", "both", "discovery")

Undo = Callable[[], None]


class Disposer:
    """What a registration returns: call it to undo exactly that registration (again:
    nothing happens). Its repr says what it undoes, so a notebook cell that ends with a
    registration echoes ``<undo: register 'read_file' (global)>``, not a closure."""

    __slots__ = ("_undo", "what")

    def __init__(self, undo: Callable[[], None], what: str) -> None:
        self._undo = undo
        self.what = what

    def __call__(self) -> None:
        self._undo()

    def __repr__(self) -> str:
        return f"<undo: {self.what}>"

_H = TypeVar("_H")
_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Mask:
    allow: frozenset[str] | None
    deny: frozenset[str] | None

    def admits(self, name: str) -> bool:
        if self.allow is not None and name not in self.allow:
            return False
        return self.deny is None or name not in self.deny


class LayerOwner(Protocol):
    """The registry as one of its layers (the global layer, an agent scope) sees it.

    :class:`~dsh_jupyter.registry.core.RegistryCore` implements it structurally; it is
    declared here, next to the layers, so this module needs neither the registry nor
    ``_view.py``. ``_changed`` and ``_dispose_scope`` are private: a layer reports its
    registrations, masks and disposal through them, users go through the layer's own
    methods (``register``, ``restrict``, ``dispose`` ...)."""

    def visible(self, scope: AgentScope | None = None) -> Mapping[str, ToolDefinition]:
        """Every tool ``scope`` can see, by name."""

    def _changed(self, kind: str, scope: str | None, names: tuple[str, ...]) -> None:
        """Record a change made in a layer and notify ``on_change`` listeners;
        ``scope`` is the scope's name, ``None`` for the global layer."""

    def _dispose_scope(self, scope: AgentScope) -> None:
        """Remove ``scope``, its child scopes and everything registered in them."""

    # What a scope's notebook display shows (``AgentScope._repr_html_``).
    @property
    def scopes(self) -> tuple[AgentScope, ...]:
        """Every live scope."""

    def mode_for(self, scope: AgentScope | None = None) -> PresentationMode:
        """How ``scope`` sees its tools."""

    def _hooks(self, scope: AgentScope | None) -> HookChain:
        """The hooks that apply to ``scope``, in run order."""


class Layer:
    """The registration surface shared by the registry and its agent scopes."""

    def __init__(self, registry: LayerOwner | None) -> None:
        self._registry_ref = registry
        self._tools: dict[str, ToolDefinition] = {}
        self._guards: list[Guard] = []
        self._pre: list[PreExecuteHook] = []
        self._wrappers: list[ExecuteWrapper] = []
        self._post: list[PostExecuteHook] = []
        self._observers: list[ResultObserver] = []
        self._session_key = f"{'registry' if registry is None else 'scope'}-{secrets.token_hex(8)}"

    @property
    def session_key(self) -> str:
        """The key of this layer's conversation on a stateful code runtime: a scope's runs
        share one kernel, the registry's scope-less runs another. Random and unique to
        this object (never its name: two scopes never share a kernel, even named alike)::

            await runtime.reset(scope.session_key)  # its variables are gone
        """
        return self._session_key

    # Implemented by subclasses --------------------------------------------------
    @property
    def _registry(self) -> LayerOwner:
        assert self._registry_ref is not None
        return self._registry_ref

    @property
    def _label(self) -> str:
        return "the global layer"

    @property
    def _scope_name(self) -> str | None:
        return None

    def _check_alive(self) -> None:
        return None

    # Tools --------------------------------------------------------------------------
    def register(self, definition: ToolDefinition) -> Undo:
        """Register ``definition`` in this layer; returns an undo callable."""
        self._check_alive()
        if not isinstance(definition, ToolDefinition):
            raise RegistrationError(
                f"register() takes a ToolDefinition (build one with define_tool), "
                f"got {type(definition).__name__}")
        name = definition.name
        if name == RESERVED_NAME:
            raise RegistrationError(
                f"{RESERVED_NAME!r} is reserved for Code Mode's transport in every mode; "
                "choose another name")
        if name in self._tools:
            raise RegistrationError(
                f"a tool named {name!r} is already registered in {self._label}; "
                "unregister it first (call the undo returned by register)")
        self._tools[name] = definition

        def undo() -> None:
            if self._tools.get(name) is definition:
                del self._tools[name]
                self._registry._changed("unregister", self._scope_name, (name,))

        self._registry._changed("register", self._scope_name, (name,))
        return Disposer(undo, f"register {name!r} (in {self._label})")

    @overload
    def tool(self, fn: _F, /, **options: Unpack[FunctionToolOptions]) -> _F: ...
    @overload
    def tool(self, fn: None = None, /,
             **options: Unpack[FunctionToolOptions]) -> Callable[[_F], _F]: ...

    def tool(self, fn: _F | None = None, /,
             **options: Unpack[FunctionToolOptions]) -> _F | Callable[[_F], _F]:
        """Decorator: ``@registry.tool`` or ``@agent.tool(name=...)`` defines and
        registers a tool from the function; the function itself is returned.
        Takes the options of ``define_tool(fn, ...)`` (:class:`FunctionToolOptions`);
        an unknown one is a ``TypeError``."""
        def decorate(f: _F) -> _F:
            self.register(define_tool(f, **options))
            return f
        return decorate if fn is None else decorate(fn)

    # Policy hooks ---------------------------------------------------------------------
    def guard(self, guard: Guard) -> Undo:
        """Add a monotonic guard: return a reason string to deny, ``None`` to pass."""
        return self._add(self._guards, guard, "guard")

    def on_pre_execute(self, hook: PreExecuteHook) -> Undo:
        return self._add(self._pre, hook, "pre-execute hook")

    def on_execute(self, wrapper: ExecuteWrapper) -> Undo:
        return self._add(self._wrappers, wrapper, "execute wrapper")

    def on_post_execute(self, hook: PostExecuteHook) -> Undo:
        return self._add(self._post, hook, "post-execute hook")

    def on_result(self, observer: ResultObserver) -> Undo:
        return self._add(self._observers, observer, "result observer")

    def _add(self, bucket: list[_H], item: _H, what: str) -> Undo:
        self._check_alive()
        if not callable(item):
            raise RegistrationError(f"a {what} must be callable, got {type(item).__name__}")
        bucket.append(item)
        self._registry._changed("policy", self._scope_name, ())

        def undo() -> None:
            for i, existing in enumerate(bucket):
                if existing is item:
                    del bucket[i]
                    self._registry._changed("policy", self._scope_name, ())
                    return

        return Disposer(undo, f"{what} {_callable_name(item)} (in {self._label})")

    # Scope-only operations (rejected on the global layer) ------------------------------
    def restrict(self, *, allow: Iterable[str] | None = None,
                 deny: Iterable[str] | None = None) -> Undo:
        raise RegistrationError(
            "restrict() masks what an agent scope inherits (globals and ancestor scopes); the "
            "global layer inherits nothing. Call it on a scope: "
            "registry.scope('name').restrict(...)")

    def present_as(self, mode: PresentationMode) -> Undo:
        raise RegistrationError(
            "present_as() selects one agent's presentation; for the whole registry pass "
            "ToolRegistry(mode=...)")


class AgentScope(Layer):
    """An agent's view of the registry. Create with ``registry.scope(name, parent=...)``."""

    def __init__(self, registry: LayerOwner, name: str, parent: AgentScope | None) -> None:
        super().__init__(registry)
        self.name = name
        self.parent = parent
        self._masks: list[Mask] = []
        self._mode: PresentationMode | None = None
        self._disposed = False

    def __repr__(self) -> str:
        parent = f" parent={self.parent.name!r}" if self.parent else ""
        return f"<AgentScope {self.name!r}{parent}{' disposed' if self._disposed else ''}>"

    def _repr_html_(self) -> str:
        """The tools this scope sees (own, inherited, masked), its mode and policies."""
        from .display import table_html

        if self._disposed:
            return f"<code>{html.escape(repr(self))}</code>"
        registry = self._registry
        children = [s.name for s in registry.scopes if s.parent is self]
        return table_html(f"AgentScope {self.name!r}", registry.mode_for(self),
                          registry.visible(self), registry._hooks(self), children)

    @property
    def _label(self) -> str:
        return f"scope {self.name!r}"

    @property
    def _scope_name(self) -> str | None:
        return self.name

    @property
    def chain(self) -> tuple[AgentScope, ...]:
        """This scope's ancestry, outermost first, ending with itself."""
        out: list[AgentScope] = []
        scope: AgentScope | None = self
        while scope is not None:
            out.append(scope)
            scope = scope.parent
        return tuple(reversed(out))

    @property
    def disposed(self) -> bool:
        return self._disposed

    def _check_alive(self) -> None:
        if self._disposed:
            raise RegistrationError(f"scope {self.name!r} was disposed")

    def restrict(self, *, allow: Iterable[str] | None = None,
                 deny: Iterable[str] | None = None) -> Undo:
        """Mask inherited tools: ``allow`` keeps only the named ones (later
        inherited names stay hidden), ``deny`` hides the named ones (later
        unnamed names pass). Masks intersect; the scope's own tools are exempt."""
        self._check_alive()
        if allow is None and deny is None:
            raise RegistrationError("restrict() needs allow=[...] and/or deny=[...]")
        allow_set = _name_set(allow, "allow")
        deny_set = _name_set(deny, "deny")
        if deny_set is not None and not deny_set:
            raise RegistrationError("restrict(deny=[]) hides nothing; name the tools to hide")
        inherited = set(self._registry.visible(self.parent))
        for label, names in (("allow", allow_set), ("deny", deny_set)):
            for tool_name in sorted(names or ()):
                self._check_restrictable(label, tool_name, inherited)
        mask = Mask(allow_set, deny_set)
        self._masks.append(mask)
        self._registry._changed("restrict", self.name, tuple(sorted(
            (allow_set or frozenset()) | (deny_set or frozenset()))))

        def undo() -> None:
            if mask in self._masks:
                self._masks.remove(mask)
                self._registry._changed("restrict", self.name, ())

        shown = ", ".join(f"{label}={sorted(names)}" for label, names
                          in (("allow", allow_set), ("deny", deny_set)) if names is not None)
        return Disposer(undo, f"restrict {shown} (scope {self.name!r})")

    def _check_restrictable(self, label: str, name: str, inherited: Iterable[str]) -> None:
        known = ", ".join(sorted(inherited)) or "(none)"
        if name == RESERVED_NAME:
            raise RegistrationError(
                f"restrict({label}=...): {RESERVED_NAME!r} is reserved and cannot be restricted")
        if name in self._tools:
            raise RegistrationError(
                f"restrict({label}=...): {name!r} is registered in scope {self.name!r} itself; "
                "restrict() masks only inherited tools (unregister it instead)")
        if name not in inherited:
            raise RegistrationError(
                f"restrict({label}=...): scope {self.name!r} does not inherit a tool named "
                f"{name!r}; inherited tools: {known}")

    def present_as(self, mode: PresentationMode) -> Undo:
        """Choose how this agent (and its descendants without their own choice)
        sees its tools: ``"native"``, ``"code"``, ``"both"`` or ``"discovery"``."""
        self._check_alive()
        if mode not in MODES:
            raise RegistrationError(f"present_as({mode!r}): mode must be one of {', '.join(MODES)}")
        if self._mode is not None:
            raise RegistrationError(
                f"scope {self.name!r} already declared present_as({self._mode!r}); "
                "undo that declaration first")
        self._mode = mode
        self._registry._changed("present_as", self.name, ())

        def undo() -> None:
            if self._mode == mode:
                self._mode = None
                self._registry._changed("present_as", self.name, ())

        return Disposer(undo, f"present_as {mode!r} (scope {self.name!r})")

    def dispose(self) -> None:
        """Remove this scope (and its child scopes) with everything registered in it."""
        self._registry._dispose_scope(self)

    def __enter__(self) -> AgentScope:
        return self

    def __exit__(self, *_: object) -> None:
        self.dispose()


def _name_set(names: Iterable[str] | None, label: str) -> frozenset[str] | None:
    if names is None:
        return None
    if isinstance(names, str):
        raise RegistrationError(f"restrict({label}=...) takes a list of names, not one string: "
                                f"use {label}=[{names!r}]")
    out = frozenset(names)
    bad = [n for n in out if not isinstance(n, str)]
    if bad:
        raise RegistrationError(f"restrict({label}=...): tool names must be strings, got {bad!r}")
    return out


def _callable_name(fn: object) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__
