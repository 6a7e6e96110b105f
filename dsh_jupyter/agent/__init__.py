"""The agent loop: drive a registry from a chat model, with accounting and events."""

from .accounting import RequestAccounting, RunAccounting, SectionSize, estimate_tokens
from .adapters.anthropic import AnthropicChatModel
from .adapters.openai import OpenAIChatModel, RetryPolicy
from .adapters.scripted import ScriptedModel, dump_script
from .errors import (
    ModelConfigError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ModelUnavailableError,
    ScriptExhaustedError,
    ScriptMismatchError,
)
from .events import AGENT_EVENT_KINDS, AgentEvent, StopReason
from .loop import DEFAULT_INSTRUCTIONS, AgentResult, run_agent, system_prompt
from .model import ChatMessage, ChatModel, ChatRequest, ModelResponse, ModelToolCall
from .runner import Agent, AgentRun

__all__ = [
    "AGENT_EVENT_KINDS",
    "Agent",
    "AgentEvent",
    "AgentResult",
    "AgentRun",
    "AnthropicChatModel",
    "ChatMessage",
    "ChatModel",
    "ChatRequest",
    "DEFAULT_INSTRUCTIONS",
    "ModelConfigError",
    "ModelError",
    "ModelHTTPError",
    "ModelResponse",
    "ModelResponseError",
    "ModelToolCall",
    "ModelUnavailableError",
    "OpenAIChatModel",
    "RequestAccounting",
    "RetryPolicy",
    "RunAccounting",
    "ScriptExhaustedError",
    "ScriptMismatchError",
    "ScriptedModel",
    "SectionSize",
    "StopReason",
    "dump_script",
    "estimate_tokens",
    "run_agent",
    "system_prompt",
]
