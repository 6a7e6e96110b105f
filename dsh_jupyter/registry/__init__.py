"""The registry: tool definitions, scopes, policies and the execution pipeline.

The names a notebook needs most are also exported by :mod:`dsh_jupyter`; this package
adds the rest: definitions and their typed options, the presentation views a
``present_call``/``present_result`` returns, schema checks, ``ApprovalService`` and
``RegistryChange``.
"""

from .definition import (
    FunctionToolOptions,
    SchemaToolOptions,
    ToolDefinition,
    ToolOptions,
    ToolOutput,
    ToolSchema,
    default_render,
    define_tool,
)
from .execution import ExecutionToken, ToolCall, ToolExecution, ToolRunContext
from .policy import Accept, Allow, Approval, ApprovalService, Ask, Block, Deny
from .presentation import (
    DiffCallView,
    DiffResultView,
    DurableResult,
    FileDiff,
    GenericCallView,
    GenericResultView,
    Location,
    ReadLine,
    ReadResultView,
    SearchFileMatches,
    SearchMatch,
    SearchResultView,
    TerminalCallView,
    TerminalResultView,
    WebFetchSummary,
    WebResultView,
    WebSource,
)
from .registry import RegistryChange, ToolRegistry
from .results import AdditionalContext, ToolErrorInfo, ToolFailure, ToolResult, ToolSuccess
from .schema import assert_supported_schema, compile_schema
from .scope import AgentScope
from .timeouts import enforce_timeouts

__all__ = [
    "Accept",
    "AdditionalContext",
    "AgentScope",
    "Allow",
    "Approval",
    "ApprovalService",
    "Ask",
    "Block",
    "Deny",
    "DiffCallView",
    "DiffResultView",
    "DurableResult",
    "ExecutionToken",
    "FileDiff",
    "FunctionToolOptions",
    "GenericCallView",
    "GenericResultView",
    "Location",
    "ReadLine",
    "ReadResultView",
    "RegistryChange",
    "SchemaToolOptions",
    "SearchFileMatches",
    "SearchMatch",
    "SearchResultView",
    "TerminalCallView",
    "TerminalResultView",
    "ToolCall",
    "ToolDefinition",
    "ToolErrorInfo",
    "ToolExecution",
    "ToolFailure",
    "ToolOptions",
    "ToolOutput",
    "ToolRegistry",
    "ToolResult",
    "ToolRunContext",
    "ToolSchema",
    "ToolSuccess",
    "WebFetchSummary",
    "WebResultView",
    "WebSource",
    "assert_supported_schema",
    "compile_schema",
    "default_render",
    "define_tool",
    "enforce_timeouts",
]
