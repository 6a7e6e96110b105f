"""dsh-jupyter: a Code-Mode tool registry for Jupyter.

Importing this package does nothing but define names: no kernels start, no
comm targets register, no global registry exists.
"""

from .abort import AbortController, AbortSignal
from .errors import (
    CodeModeError,
    CodeRunFailedError,
    DshError,
    HookError,
    InvalidToolOutputError,
    RegistrationError,
    ToolAbortedError,
    ToolArgsError,
    ToolDeniedError,
    ToolError,
    ToolTimeoutError,
    UnknownToolError,
    UnsupportedSchemaError,
)
from .events import JsonlSessionWriter, SessionEvent, iter_session, read_session
from .json_value import JsonValue, snapshot_json
from .registry import (
    Accept,
    AdditionalContext,
    AgentScope,
    Allow,
    Approval,
    ApprovalService,
    Ask,
    Block,
    Deny,
    ExecutionToken,
    RegistryChange,
    ToolCall,
    ToolDefinition,
    ToolErrorInfo,
    ToolExecution,
    ToolFailure,
    ToolOutput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    ToolSchema,
    ToolSuccess,
    default_render,
    define_tool,
    enforce_timeouts,
)
from .registry.presentation import (
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
from .registry.schema import assert_supported_schema, compile_schema
from .runtime import BindingError, CodeRunFailure, CodeRunResult, CodeRuntime

__all__ = [
    "AbortController",
    "AbortSignal",
    "Accept",
    "AdditionalContext",
    "AgentScope",
    "Allow",
    "Approval",
    "ApprovalService",
    "Ask",
    "BindingError",
    "Block",
    "CodeModeError",
    "CodeRunFailedError",
    "CodeRunFailure",
    "CodeRunResult",
    "CodeRuntime",
    "Deny",
    "DiffCallView",
    "DiffResultView",
    "DshError",
    "DurableResult",
    "ExecutionToken",
    "FileDiff",
    "GenericCallView",
    "GenericResultView",
    "HookError",
    "InvalidToolOutputError",
    "JsonValue",
    "JsonlSessionWriter",
    "Location",
    "ReadLine",
    "ReadResultView",
    "RegistrationError",
    "RegistryChange",
    "SearchFileMatches",
    "SearchMatch",
    "SearchResultView",
    "SessionEvent",
    "TerminalCallView",
    "TerminalResultView",
    "ToolAbortedError",
    "ToolArgsError",
    "ToolCall",
    "ToolDefinition",
    "ToolDeniedError",
    "ToolError",
    "ToolErrorInfo",
    "ToolExecution",
    "ToolFailure",
    "ToolOutput",
    "ToolRegistry",
    "ToolResult",
    "ToolRunContext",
    "ToolSchema",
    "ToolSuccess",
    "ToolTimeoutError",
    "UnknownToolError",
    "UnsupportedSchemaError",
    "WebFetchSummary",
    "WebResultView",
    "WebSource",
    "assert_supported_schema",
    "compile_schema",
    "default_render",
    "define_tool",
    "enforce_timeouts",
    "iter_session",
    "read_session",
    "snapshot_json",
]


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext dsh_jupyter``: registers ``%%run_code`` and ``%dsh_sdk``."""
    from .extension import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: object) -> None:
    from .extension import unload_ipython_extension as unload

    unload(ipython)
