"""What the registry's own modules may ask of the registry: :class:`RegistryView`.

The pipeline (``pipeline.py``), the session events (``session_events.py``) and prompt
assembly (``assembly.py``) take a :class:`RegistryView`; Code Mode
(:mod:`dsh_jupyter.codemode`) takes its own extension of it. The layers take
:class:`~.scope.LayerOwner`, which lives with them in ``scope.py`` (so ``scope`` needs
nothing of this module). :class:`~dsh_jupyter.registry.core.RegistryCore` implements
both structurally and is the only module that knows the concrete class, so none of
those modules imports it (not even for type checking) and the package has no import
cycle (``tests/unit/test_import_cycles.py``).

Which members are public API, and why:

- ``execution_mode(call)``: public and documented; the agent loop groups a response's
  calls with it (``dsh_jupyter.agent.scheduling``).
- ``emit(event)``: public; the agent loop writes its ``agent/*`` events to the
  registry's event sinks through it, and a host may add its own events the same way.
- ``visible``, ``mode_for``, ``schemas`` and the attribute ``approval``: public already
  (documented reads and a constructor argument); the seam only reads them.
- ``_resolve(call)`` and ``_hooks(scope)``: private. They were public (``resolve``,
  ``hooks``) only so the pipeline could reach them; a user asks ``get(name, scope)``
  or ``execution_mode(call)`` instead. ``_resolve`` also rejects a scope that is not a
  live scope of the registry, the check every call starts with.
- ``_listening``: private; whether any event sink is attached, so a listener builds an
  event only when someone will read it.
- ``_listeners`` and ``_running``: private; the lifecycle listeners each call is told
  (``listen()`` adds one), and the calls running now by token, so a sub-call finds its
  parent's :class:`~.lifecycle.CallRun`.
- ``_changed`` and ``_dispose_scope`` (:class:`~.scope.LayerOwner`): private; a layer reports
  its registrations, masks and disposal through them, users go through the layer's
  own methods (``register``, ``restrict``, ``dispose`` ...).

A member whose name starts with ``_`` is part of this seam and of nothing else: the
Protocol names it so mypy checks it like any other member, but it is not API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..events import SessionEvent
    from ..json_value import JsonObject
    from .definition import ToolDefinition
    from .execution import ExecutionMode, ExecutionToken, ScopeView, ToolCall
    from .lifecycle import CallRun, Listeners
    from .policy import ApprovalService, HookChain
    from .scope import PresentationMode


class RegistryView(Protocol):
    """The registry as one call through the pipeline, its listeners and a prompt
    assembly see it."""

    @property
    def approval(self) -> ApprovalService | None:
        """Answers ``Ask`` decisions; ``None`` denies them."""

    def visible(self, scope: ScopeView | None = None) -> Mapping[str, ToolDefinition]:
        """Every tool ``scope`` can see, by name (``run_code`` is never among them)."""

    def mode_for(self, scope: ScopeView | None = None) -> PresentationMode:
        """How ``scope`` sees its tools: ``native``, ``code``, ``both`` or ``discovery``."""

    def schemas(self, scope: ScopeView | None = None) -> list[JsonObject]:
        """Detached ``{name, description, parameters}`` of the visible tools, by name."""

    def execution_mode(self, call: ToolCall) -> ExecutionMode:
        """``"parallel"`` or ``"exclusive"``, from the same resolution as ``_resolve``."""

    def emit(self, event: SessionEvent) -> None:
        """Send ``event`` to every event sink; a failing sink is logged, not raised."""

    @property
    def _listening(self) -> bool:
        """True when at least one event sink is attached."""

    @property
    def _listeners(self) -> Listeners:
        """The lifecycle listeners, as each kind of call is told them."""

    @property
    def _running(self) -> dict[ExecutionToken, CallRun]:
        """The calls running now, by token."""

    def _resolve(self, call: ToolCall) -> ToolDefinition | str:
        """The definition ``call`` runs, or the ``UNKNOWN_TOOL`` message saying why
        none. Raises :class:`~dsh_jupyter.errors.RegistrationError` when
        ``call.agent`` is not a live scope of this registry."""

    def _hooks(self, scope: ScopeView | None) -> HookChain:
        """The hooks that apply to a call in ``scope``, in run order."""
