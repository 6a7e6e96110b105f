"""The registry: tool definitions, scopes, policies and the execution pipeline.

The names a notebook needs most are also exported by :mod:`dsh_jupyter`; this package
adds the rest: definitions and their typed options, the presentation views a
``present_call``/``present_result`` returns, schema checks, ``ApprovalService``,
``RegistryChange``, and the call lifecycle (``CallListener``, ``CallRun``).

``ToolRegistry`` is the registry core (:mod:`.core`) with Code Mode plugged in; it comes
from :mod:`dsh_jupyter.codemode`, imported last: Code Mode imports the registry's
modules, never this package's names.
"""

from .core import RegistryChange
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
from .lifecycle import CallListener, CallRun
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
from .results import AdditionalContext, ToolErrorInfo, ToolFailure, ToolResult, ToolSuccess
from .schema import assert_supported_schema, compile_schema
from .scope import AgentScope
from .timeouts import enforce_timeouts

from ..codemode.registry import ToolRegistry  # isort: skip  (last: see the docstring)

__all__ = [
    "Accept",
    "AdditionalContext",
    "AgentScope",
    "Allow",
    "Approval",
    "ApprovalService",
    "Ask",
    "Block",
    "CallListener",
    "CallRun",
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
