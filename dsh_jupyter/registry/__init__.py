"""The registry: tool definitions, scopes, policies and the execution pipeline."""

from .definition import ToolDefinition, ToolOutput, ToolSchema, default_render, define_tool
from .execution import ExecutionToken, ToolCall, ToolExecution, ToolRunContext
from .policy import Accept, Allow, Approval, ApprovalService, Ask, Block, Deny
from .registry import RegistryChange, ToolRegistry
from .results import AdditionalContext, ToolErrorInfo, ToolFailure, ToolResult, ToolSuccess
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
    "ExecutionToken",
    "RegistryChange",
    "ToolCall",
    "ToolDefinition",
    "ToolErrorInfo",
    "ToolExecution",
    "ToolFailure",
    "ToolOutput",
    "ToolRegistry",
    "ToolResult",
    "ToolRunContext",
    "ToolSchema",
    "ToolSuccess",
    "default_render",
    "define_tool",
    "enforce_timeouts",
]
