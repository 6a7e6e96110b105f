"""What Code Mode asks of the registry it is plugged into: one Protocol.

:class:`CodeModeHost` is the pipeline's :class:`~dsh_jupyter.registry._view.RegistryView`
(Code Mode prepares and runs sub-calls through the pipeline) plus what only Code Mode
reads: its settings (``code_runtime``, ``max_parallel_sub_calls``, ``run_code_images``,
``run_code_max_chars``, ``check_programs``, ``journal``: the constructor arguments of
:class:`~dsh_jupyter.codemode.registry.ToolRegistry`), its live scopes (a resumed run's
is found among them), the session key of scope-less runs, ``listen`` (its sub-call
listener is registered like any other), ``execute`` (a resumed run's ``run_code`` is a
call like any other) and ``_version`` (a counter every change bumps, for the discovery
catalogs' cache).
Nothing in :mod:`dsh_jupyter.codemode` imports the registry class itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..registry._view import RegistryView

if TYPE_CHECKING:
    from ..durable.store import JournalStore
    from ..registry.execution import ScopeView, ToolCall
    from ..registry.lifecycle import CallListener
    from ..registry.results import ToolResult
    from ..registry.scope import Disposer
    from ..runtime import CodeRuntime
    from .check import CheckPrograms


class CodeModeHost(RegistryView, Protocol):
    """The registry as Code Mode sees it."""

    @property
    def code_runtime(self) -> CodeRuntime | None:
        """Runs ``run_code`` programs; ``None`` when none is attached yet."""

    @property
    def max_parallel_sub_calls(self) -> int:
        """How many concurrency-safe sub-calls of one program may overlap."""

    @property
    def run_code_images(self) -> bool:
        """Whether a ``run_code`` result also carries the program's images."""

    @property
    def run_code_max_chars(self) -> int | None:
        """The most characters of a ``run_code`` result's text the model reads."""

    @property
    def check_programs(self) -> CheckPrograms:
        """Whether ``run_code`` type-checks a program first: off, warn or error."""

    @property
    def session_key(self) -> str:
        """The stateful-runtime session of ``run_code`` calls made without a scope."""

    @property
    def scopes(self) -> tuple[ScopeView, ...]:
        """Every live agent scope (a resumed run's is found among them)."""

    @property
    def _version(self) -> int:
        """Bumped on every change of tools, masks, modes or scopes."""

    @property
    def journal(self) -> JournalStore | None:
        """Where ``run_code`` journals its runs (``None``: not journaled)."""

    def listen(self, listener: CallListener, *, first: bool = False) -> Disposer:
        """Tell ``listener`` the stages of every call; returns the undo."""

    async def execute(self, call: ToolCall) -> ToolResult:
        """Run ``call`` through the whole pipeline (a resumed run's ``run_code``)."""
