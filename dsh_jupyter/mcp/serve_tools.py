"""What a served registry shows an MCP client: its tool list, and results as MCP results.

The list is the scope's presentation (``registry.prompt(scope).tools``): native tools,
``run_code``, or both. Code Mode's prompt sections (the code-only rule and the generated
``tools`` SDK) go into ``run_code``'s description, because a tool's description is the one
text every MCP client hands its model with the tool, and it is re-read on every
``tools/list``; the server's ``instructions`` only point there (see :func:`instructions`).

Imports the MCP SDK: :mod:`~dsh_jupyter.mcp.serve` imports this module when serving starts.
"""

from __future__ import annotations

from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent, Tool
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from ..codemode.model_text import TextLimit
from ..codemode.registry import ToolRegistry
from ..codemode.run_code import model_error_message, model_value
from ..errors import ToolError
from ..json_value import JsonObject, thaw
from ..registry.results import ToolResult
from ..registry.scope import RESERVED_NAME, AgentScope

__all__ = ["ERROR_META_KEY", "RAISED_CODE", "any_json_output", "call_result", "instructions",
           "output_schema", "served_tools"]

SERVED_RUN_CODE_DESCRIPTION = (
    "Run a Python program that calls this server's tools through the `tools` SDK described "
    "below. Only what the program prints or returns comes back."
)
ERROR_META_KEY = "dsh-jupyter/error"
"""``_meta`` key of a failed call's result: ``{"code": ..., "message": ...}``."""
RAISED_CODE = ToolError.default_code
"""The served code of a failure without one: a tool body that raised something other than
a :class:`~dsh_jupyter.errors.DshError` (``TOOL_ERROR``, as for a bare ``ToolError``)."""


def any_json_output(protocol_version: str) -> bool:
    """Whether this protocol version takes any JSON Schema as a tool's output schema (and
    any JSON value as ``structuredContent``): 2026-07-28 on; before it, objects only."""
    return protocol_version in MODERN_PROTOCOL_VERSIONS


def served_tools(registry: ToolRegistry, scope: AgentScope | None, *,
                 any_json: bool) -> list[Tool]:
    """The scope's tools as MCP tools, in presentation order (``run_code`` last)."""
    assembly = registry.prompt(scope)
    tools = []
    for tool in assembly.tools:
        name = str(tool["name"])
        description = str(tool["description"])
        if name == RESERVED_NAME:
            description = f"{SERVED_RUN_CODE_DESCRIPTION}\n\n{assembly.system_text}"
        parameters = tool["parameters"]
        assert isinstance(parameters, dict)
        tools.append(Tool(name=name, description=description, input_schema=parameters,
                          output_schema=output_schema(registry, scope, name,
                                                      any_json=any_json)))
    return tools


def output_schema(registry: ToolRegistry, scope: AgentScope | None, name: str, *,
                  any_json: bool) -> JsonObject | None:
    """The tool's output schema, if a client of this protocol version can take it.

    Handshake-era clients accept only object output schemas (and object
    ``structuredContent``): there a tool returning a string or a number keeps its value
    in the content only. An empty schema (any value) says nothing and is left out.
    """
    definition = registry.get(name, scope)
    if definition is None:
        return None
    schema = thaw(definition.output.schema)
    if not isinstance(schema, dict) or not schema:
        return None
    if any_json or schema.get("type") == "object":
        return schema
    return None


def instructions(registry: ToolRegistry, scope: AgentScope | None) -> str | None:
    """The server's ``instructions``: in a code mode, where the SDK is (``run_code``'s
    description); nothing in native mode, where each tool describes itself."""
    mode = registry.mode_for(scope)
    if mode == "native":
        return None
    only = " Only `run_code` can be called directly." if mode != "both" else ""
    if mode == "discovery":
        return (f"Write Python programs for `{RESERVED_NAME}`: its description lists the "
                "tools; programs find them with `tools.search` and read their arguments and "
                f"result types with `tools.describe`.{only}")
    return (f"Write Python programs for `{RESERVED_NAME}`: its description documents the "
            f"`tools` SDK they call, with every tool's arguments and result types.{only}")


def call_result(result: ToolResult, *, structured: bool,
                limit: TextLimit | None = None) -> CallToolResult:
    """``result`` as an MCP result: its content as text and image blocks; for a failure
    ``isError`` and the error's code (:data:`RAISED_CODE` when it has none) and message
    under ``_meta``; with ``structured`` (the listing declared the tool's output schema),
    the value as ``structuredContent``. ``limit`` is the model cap of a ``run_code``
    result: its structured value and error message are then cut as its content was
    (:func:`~dsh_jupyter.codemode.run_code.model_value`, ``model_error_message``), so a
    client that hands its model either gets no more than the cap."""
    content: list[ContentBlock] = []
    for block in result.content:
        if block["type"] == "image":
            content.append(ImageContent(data=block["data"], mime_type=block["mime_type"]))
        else:
            content.append(TextContent(text=block["text"]))
    if result.is_error:
        error = result.error
        code = error.code if error.code is not None else RAISED_CODE
        message = model_error_message(error.message, error.code, limit)
        return CallToolResult.model_validate({
            "content": content, "isError": True,
            "_meta": {ERROR_META_KEY: {"code": code, "message": message}}})
    if structured:
        value = result.value
        if limit is not None:
            meta = result.meta
            rendered = meta.get("result") if isinstance(meta, dict) else None
            value = model_value(value, rendered if isinstance(rendered, str) else None, limit)
        return CallToolResult(content=content, structured_content=value)
    return CallToolResult(content=content)
