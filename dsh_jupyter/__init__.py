"""dsh-jupyter: a Code-Mode tool registry for Jupyter.

The top level holds what the quickstart, the tutorials and the how-tos import (the
registry, tools, calls and results, policies, cancellation, the session log) and the
types of the values those give back. Everything else lives in the subpackage that owns
it (docs/api.md, "Where names live"):

- ``dsh_jupyter.registry``: definitions and their options, presentation views, schemas,
  ``ApprovalService``, ``RegistryChange``;
- ``dsh_jupyter.errors``: every error (``DshError`` and ``ToolError`` are here too);
- ``dsh_jupyter.events``: event types, ``iter_session``;
- ``dsh_jupyter.runtime``: the Code Mode runtime contract; ``dsh_jupyter.kernel``: the
  kernel runtime;
- ``dsh_jupyter.agent``, ``dsh_jupyter.mcp``, ``dsh_jupyter.widgets``,
  ``dsh_jupyter.evaluation``: the agent loop, MCP, notebook widgets, the evaluation;
- ``dsh_jupyter.json_value``: ``JsonValue``, ``snapshot_json``;
- ``dsh_jupyter.sessions``: a session log exported to a notebook (``export_notebook``
  is here too).

A name that 0.1.0 exported here still resolves, with a ``DeprecationWarning`` naming its
new home.

Importing this package does nothing but define names: no kernels start, no
comm targets register, no global registry exists, and nothing heavier than pydantic
is imported.
"""

from __future__ import annotations

import importlib
import warnings

from .abort import AbortController, AbortSignal
from .errors import DshError, ToolError
from .events import JsonlSessionWriter, read_session
from .registry import (
    Accept,
    AdditionalContext,
    AgentScope,
    Allow,
    Approval,
    Ask,
    Block,
    Deny,
    ToolCall,
    ToolErrorInfo,
    ToolExecution,
    ToolFailure,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    ToolSuccess,
    default_render,
    define_tool,
    enforce_timeouts,
)
from .sessions import export_notebook

__all__ = [
    "AbortController",
    "AbortSignal",
    "Accept",
    "AdditionalContext",
    "AgentScope",
    "Allow",
    "Approval",
    "Ask",
    "Block",
    "Deny",
    "DshError",
    "JsonlSessionWriter",
    "ToolCall",
    "ToolError",
    "ToolErrorInfo",
    "ToolExecution",
    "ToolFailure",
    "ToolRegistry",
    "ToolResult",
    "ToolRunContext",
    "ToolSuccess",
    "default_render",
    "define_tool",
    "enforce_timeouts",
    "export_notebook",
    "read_session",
]

# Names that 0.1.0 exported here, and where they live now.
_MOVED: dict[str, str] = {
    **dict.fromkeys((
        "ApprovalService", "ExecutionToken", "RegistryChange", "ToolDefinition", "ToolOutput",
        "ToolSchema", "assert_supported_schema", "compile_schema",
        "DiffCallView", "DiffResultView", "DurableResult", "FileDiff", "GenericCallView",
        "GenericResultView", "Location", "ReadLine", "ReadResultView", "SearchFileMatches",
        "SearchMatch", "SearchResultView", "TerminalCallView", "TerminalResultView",
        "WebFetchSummary", "WebResultView", "WebSource"), "dsh_jupyter.registry"),
    **dict.fromkeys((
        "CodeModeError", "CodeRunFailedError", "HookError", "InvalidToolOutputError",
        "McpConnectError", "ModelError", "RegistrationError", "ToolAbortedError",
        "ToolArgsError", "ToolDeniedError", "ToolTimeoutError", "UnknownToolError",
        "UnsupportedSchemaError"), "dsh_jupyter.errors"),
    **dict.fromkeys(("SessionEvent", "iter_session"), "dsh_jupyter.events"),
    **dict.fromkeys(("JsonValue", "snapshot_json"), "dsh_jupyter.json_value"),
    **dict.fromkeys(("BindingError", "CodeRunFailure", "CodeRunResult", "CodeRuntime"),
                    "dsh_jupyter.runtime"),
    **dict.fromkeys((
        "Agent", "AgentResult", "AgentRun", "ChatModel", "OpenAIChatModel",
        "RequestAccounting", "RetryPolicy", "RunAccounting", "ScriptedModel", "run_agent"),
        "dsh_jupyter.agent"),
    **dict.fromkeys(("McpConnection", "connect_mcp"), "dsh_jupyter.mcp"),
    **dict.fromkeys(("LiveView", "NotebookApprovals", "replay", "tool_card"),
                    "dsh_jupyter.widgets"),
}


def __getattr__(name: str) -> object:
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'dsh_jupyter' has no attribute {name!r}")
    warnings.warn(f"dsh_jupyter.{name} moved: import it from {home} "
                  f"(from {home} import {name})", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(home), name)


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext dsh_jupyter``: registers ``%%run_code`` and ``%dsh_sdk``."""
    from .extension import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: object) -> None:
    from .extension import unload_ipython_extension as unload

    unload(ipython)
