"""Prompt assembly: what a model request needs for one scope, and the presentation seam
Code Mode plugs into.

- ``native``: the wire tools are every visible schema; no sections.
- ``code``, ``both``, ``discovery``: the registry's :class:`CodePresentation` (Code
  Mode, :mod:`dsh_jupyter.codemode`) supplies the transport tool (``run_code``) and the
  prompt sections; the wire tools are exactly the transport under ``code`` and
  ``discovery``, every visible schema and then the transport under ``both``. Sections
  come sorted by their ``order``.

The registry core knows Code Mode only through this seam and the lifecycle listener it
registers (:mod:`~dsh_jupyter.registry.lifecycle`); it imports nothing of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..errors import CodeModeError
from ..json_value import JsonObject, thaw

if TYPE_CHECKING:
    from ._view import RegistryView
    from .definition import ToolDefinition
    from .scope import AgentScope, PresentationMode


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptSection:
    id: str
    order: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptAssembly:
    """The wire tool list (``{name, description, parameters}`` dicts, detached) and
    the ordered prompt sections for one scope."""

    mode: PresentationMode
    tools: list[JsonObject]
    sections: tuple[PromptSection, ...]

    @property
    def system_text(self) -> str:
        """The non-empty sections joined, in order."""
        return "\n\n".join(s.text for s in self.sections if s.text)

    def section(self, section_id: str) -> PromptSection | None:
        return next((s for s in self.sections if s.id == section_id), None)


class CodePresentation(Protocol):
    """How the code modes present a registry's tools (Code Mode implements it)."""

    @property
    def transport(self) -> ToolDefinition:
        """The reserved ``run_code`` tool, bound to the registry: what a call to
        ``run_code`` resolves to under a code mode."""

    def sections(self, scope: AgentScope | None,
                 mode: PresentationMode) -> list[PromptSection]:
        """The prompt sections of ``mode`` (``code``, ``both`` or ``discovery``) for
        ``scope``; raises :class:`~dsh_jupyter.errors.CodeModeError` when they cannot
        be made (no code runtime, a language without an SDK renderer)."""


NOT_PLUGGED = ("Code Mode is not plugged into this registry: use dsh_jupyter.ToolRegistry, "
               "which plugs it in, or mode='native'")


def assemble(registry: RegistryView, scope: AgentScope | None,
             code: CodePresentation | None) -> PromptAssembly:
    mode = registry.mode_for(scope)
    schemas = registry.schemas(scope)
    if mode == "native":
        return PromptAssembly(mode=mode, tools=schemas, sections=())
    if code is None:
        raise CodeModeError(NOT_PLUGGED)
    sections = code.sections(scope, mode)
    transport = wire_schema(code.transport)
    tools = [*schemas, transport] if mode == "both" else [transport]
    return PromptAssembly(mode=mode, tools=tools,
                          sections=tuple(sorted(sections, key=lambda s: s.order)))


def wire_schema(definition: ToolDefinition) -> JsonObject:
    """``{name, description, parameters}`` of ``definition``, detached."""
    return {"name": definition.name, "description": definition.description,
            "parameters": thaw(definition.parameters)}
