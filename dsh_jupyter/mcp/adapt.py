"""One MCP tool as a registry definition, and one MCP result as a canonical value.

Pure functions over the SDK's models, read by attribute so this module never
imports the SDK at run time:

- the input schema is registered raw but for the root ``$schema``/``$id``
  annotations (TypeScript-SDK servers send them; they say nothing about the
  arguments, so the model and the SDK never see them): inside the supported
  subset it validates as usual; outside it, the arguments are validated against
  what of it can be checked (:func:`~dsh_jupyter.registry.schema_checkable.
  checkable_schema`: ``Optional[X]`` as ``X | None``, value bounds left to the
  server); when nothing can, the tool still registers, its SDK types degrade to
  ``Any`` and its description says the server validates the arguments;
- with an ``outputSchema`` the canonical value is ``structuredContent`` (the
  output schema is the server's, or ``{}`` when it is outside the subset);
  without one it is the text of the result's content blocks, and the model and
  cards get the blocks themselves (images, annotations: see :mod:`.content`);
- an ``isError`` result raises :class:`~dsh_jupyter.errors.ToolError` with code
  ``MCP_ERROR`` and the server's text as the message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from ..errors import RegistrationError, ToolError, UnsupportedSchemaError
from ..json_value import JsonObject, JsonValue
from ..registry.definition import Body, ToolDefinition, default_render, define_tool
from ..registry.policy import FinalizeContent
from ..registry.pydantic_schema import subset_from_pydantic
from ..registry.schema import compile_schema, schema_violations
from ..registry.schema_checkable import checkable_schema
from .content import McpContent, mcp_content

if TYPE_CHECKING:
    from mcp.types import CallToolResult, Tool

__all__ = ["UNVALIDATED_NOTE", "ConcurrencySafe", "is_concurrency_safe", "result_value",
           "tool_definition"]

ConcurrencySafe: TypeAlias = "bool | Literal['read-only-hint'] | Callable[[Tool], bool]"
"""Which MCP tools may overlap in Code Mode: ``False`` (none, the default), ``True`` (all),
``"read-only-hint"`` (those the server annotates ``readOnlyHint: true``) or a predicate."""

# What the model needs to know; why (the input schema is outside the subset) is for docs/mcp.md.
UNVALIDATED_NOTE = "(Arguments are checked by the MCP server, not before the call.)"

_TEXT_SCHEMA: JsonObject = {"type": "string"}
_ROOT_ANNOTATIONS = frozenset({"$schema", "$id"})


def tool_definition(tool: Tool, *, name: str, execute: Body,
                    concurrency_safe: ConcurrencySafe = False,
                    finalize_content: FinalizeContent | None = None) -> ToolDefinition:
    """The definition that registers ``tool`` as ``name`` and runs ``execute``."""
    parameters = without_root_annotations(tool.input_schema)
    description = tool.description or ""
    checkable = checkable_schema(parameters)
    if checkable is None:
        description = f"{description}\n\n{UNVALIDATED_NOTE}" if description else UNVALIDATED_NOTE
    output: Mapping[str, Any] = _TEXT_SCHEMA
    if tool.output_schema is not None:
        output = _output_schema(without_root_annotations(tool.output_schema))
    safe = is_concurrency_safe(tool, concurrency_safe)
    try:
        definition: ToolDefinition = define_tool(
            name=name, description=description, parameters=parameters,
            output={"schema": output, "render": default_render}, execute=execute,
            allow_unsupported_schema=True,
            is_concurrency_safe=_always_safe if safe else None,
            finalize_content=finalize_content)
    except RegistrationError as exc:
        raise RegistrationError(f"MCP tool {tool.name!r} cannot be registered: {exc.message}",
                                code=exc.code) from None
    if definition.validator is None and checkable is not None:
        # Outside the subset, but partly checkable: the model still reads the raw schema.
        definition = replace(definition, validator=compile_schema(checkable))
    return definition


def without_root_annotations(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """``schema`` without its root ``$schema`` and ``$id``."""
    if not _ROOT_ANNOTATIONS & schema.keys():
        return schema
    return {key: value for key, value in schema.items() if key not in _ROOT_ANNOTATIONS}


def _output_schema(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """The server's output schema when it is inside the subset; else a looser one that
    is (servers built on pydantic emit ``$defs``/``$ref`` and ``anyOf``, which the
    pydantic conversion inlines), so the SDK can still type the value; else ``{}``."""
    if not schema_violations(schema):
        return schema
    try:
        return subset_from_pydantic(schema)
    except UnsupportedSchemaError:
        return {}


def is_concurrency_safe(tool: Tool, policy: ConcurrencySafe) -> bool:
    """Whether ``policy`` lets calls of ``tool`` overlap (see :data:`ConcurrencySafe`)."""
    if isinstance(policy, bool):
        return policy
    if policy == "read-only-hint":
        return tool.annotations is not None and tool.annotations.read_only_hint is True
    if not callable(policy):
        raise RegistrationError(
            f"concurrency_safe must be True, False, 'read-only-hint' or a function of the MCP "
            f"tool, got {policy!r}")
    try:
        return policy(tool) is True
    except Exception as exc:
        raise RegistrationError(
            f"concurrency_safe({tool.name!r}) raised {type(exc).__name__}: {exc}") from None


def result_value(result: CallToolResult, *, structured: bool, what: str,
                 content: McpContent | None = None) -> JsonValue:
    """The canonical value of ``result``; raises ``ToolError(MCP_ERROR)`` for ``isError``.

    ``what`` names the tool in messages, e.g. ``"MCP server 'files' tool 'read'"``;
    ``content`` is ``mcp_content(result.content)`` when the caller has it already.
    """
    text = (content or mcp_content(result.content)).text
    if result.is_error:
        raise ToolError(f"{what} reported an error: {text or '(no message)'}", code="MCP_ERROR")
    if not structured:
        return text
    if result.structured_content is None:
        raise ToolError(f"{what} declares an output schema but returned no structured content",
                        code="MCP_ERROR")
    value: JsonValue = result.structured_content
    return value


def _always_safe(_args: JsonObject) -> bool:
    return True
