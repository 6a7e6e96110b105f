"""The model seam: what the loop sends, what an adapter returns, and the protocol.

Messages are the OpenAI chat-completions wire format (``role`` discriminates),
because every adapter here speaks it or replays it. An adapter implements
:class:`ChatModel`::

    class EchoModel:
        name = "echo"

        async def complete(self, request: ChatRequest, *, signal: AbortSignal) -> ModelResponse:
            last = request.messages[-1]
            return ModelResponse(content=str(last.get("content")))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, Protocol, TypeAlias, TypedDict

from ..abort import AbortSignal
from ..json_value import JsonObject, JsonValue


class SystemMessage(TypedDict):
    role: Literal["system"]
    content: str


class UserMessage(TypedDict):
    role: Literal["user"]
    content: str


class FunctionCall(TypedDict):
    name: str
    arguments: str


class WireToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class AssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: str | None
    tool_calls: NotRequired[list[WireToolCall]]


class ToolMessage(TypedDict):
    role: Literal["tool"]
    tool_call_id: str
    content: str


ChatMessage: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolMessage


class FunctionSpec(TypedDict):
    name: str
    description: str
    parameters: JsonObject


class FunctionTool(TypedDict):
    """An OpenAI function tool: ``{"type": "function", "function": {...}}``."""

    type: Literal["function"]
    function: FunctionSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatRequest:
    """One chat-completions request: the messages (system first) and the tools.

    ``on_text``, when set, is called with each piece of the answer's text as it
    arrives, by a model that streams (the others ignore it); the response still
    carries the whole text. The loop sets it to emit ``agent/text-delta`` events.
    """

    messages: tuple[ChatMessage, ...]
    tools: tuple[FunctionTool, ...] = ()
    on_text: Callable[[str], None] | None = field(default=None, compare=False, repr=False)

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(t["function"]["name"] for t in self.tools)

    def body(self) -> dict[str, Any]:
        """The JSON body without ``model`` (adapters add it and their options)."""
        body: dict[str, Any] = {"messages": list(self.messages)}
        if self.tools:
            body["tools"] = list(self.tools)
        return body


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelToolCall:
    """A tool call as the model sent it: ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str

    def to_wire(self) -> WireToolCall:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    """The assistant turn of one response. ``raw`` is the body as received (for
    recording scripts); ``attempts`` counts HTTP requests including retries."""

    content: str | None = None
    tool_calls: tuple[ModelToolCall, ...] = ()
    finish_reason: str | None = None
    reasoning: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str | None = None
    attempts: int = 1
    raw: JsonValue = field(default=None, repr=False)

    def message(self) -> AssistantMessage:
        """The assistant message to append to the transcript."""
        message: AssistantMessage = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [call.to_wire() for call in self.tool_calls]
        return message


class ChatModel(Protocol):
    """A chat model. ``complete`` raises :class:`~dsh_jupyter.agent.errors.ModelError`
    when the request fails, and :class:`~dsh_jupyter.errors.ToolAbortedError` when
    ``signal`` aborts it; it must stop its work before returning either way."""

    @property
    def name(self) -> str: ...

    async def complete(self, request: ChatRequest, *, signal: AbortSignal) -> ModelResponse: ...
