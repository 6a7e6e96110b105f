"""Code Mode plugged into one registry: what the registry core sees of it.

The core knows Code Mode through two seams and imports none of it:

- the presentation seam (:class:`~dsh_jupyter.registry.assembly.CodePresentation`):
  :attr:`CodeMode.transport` is what ``run_code`` resolves to under a code mode, and
  :meth:`CodeMode.sections` the prompt sections of the code modes;
- the lifecycle: :class:`~.scheduler.SubCallOrdering`, registered with
  ``registry.listen`` like any listener, orders each program's sub-calls and reports
  them.

:class:`~dsh_jupyter.codemode.registry.ToolRegistry` plugs one in when it is made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .checker import ProgramChecker
from .discovery import Catalogs
from .journal import Resumption
from .prompt import code_sections
from .run_code import CodeModeParts, run_code_definition
from .scheduler import SubCallOrdering

if TYPE_CHECKING:
    from ..registry.assembly import PromptSection
    from ..registry.definition import ToolDefinition
    from ..registry.scope import AgentScope, PresentationMode
    from ._view import CodeModeHost


class CodeMode:
    """Code Mode for ``registry``: the ``run_code`` transport, the prompt sections, the
    discovery catalogs, the program checker (idle until a program is checked), and the
    listener ordering each program's sub-calls (registered when this is made, for the
    registry's life)."""

    __slots__ = ("_registry", "catalogs", "checker", "ordering", "resumptions", "transport")

    def __init__(self, registry: CodeModeHost) -> None:
        self._registry = registry
        self.catalogs = Catalogs(registry)
        self.ordering = SubCallOrdering(registry)
        registry.listen(self.ordering)
        self.checker = ProgramChecker(registry)
        self.resumptions: dict[str, Resumption] = {}
        self.transport: ToolDefinition = run_code_definition(registry, CodeModeParts(
            self.ordering, self.catalogs, self.checker, self.resumptions))

    def sections(self, scope: AgentScope | None,
                 mode: PresentationMode) -> list[PromptSection]:
        return code_sections(self._registry, scope, mode, self.catalogs)
