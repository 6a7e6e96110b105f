"""OpenAI-compatible models on the official ``openai`` client: OpenAI, DeepSeek, vLLM, Ollama, ...

Needs the ``openai`` extra (``pip install 'dsh-jupyter[openai]'``)::

    # DSH_MODEL_BASE_URL=https://api.deepseek.com  DSH_MODEL=deepseek-chat  DSH_API_KEY=...
    model = OpenAIChatModel.from_env()
    model = OpenAIChatModel(base_url="http://127.0.0.1:11434/v1", model="qwen2.5")  # Ollama
    model = OpenAIChatModel(model="gpt-5-mini", api="responses")  # the Responses API

Chat Completions is the default (``api="chat"``): it is the API compatible servers
speak. ``api="responses"`` speaks OpenAI's Responses API instead; the messages and
tools are mapped to input items and function tools (see ``_responses_wire``).

Transient failures are retried with exponential backoff and jitter, at most
``RetryPolicy.max_attempts`` requests in all: connection errors, timeouts, a
dropped connection, and statuses 408, 409, 429 and 5xx. A ``Retry-After`` (or
``retry-after-ms``) header sets the wait; one longer than
``RetryPolicy.max_retry_after`` ends the request instead of stalling the run.
Other statuses fail at once with the server's own message. The retrying is the
client's own, on the policy (see ``_http``), as for every adapter.

``stream=True`` reads the SDK's typed stream: chat-completion chunks folded by its
``ChatCompletionStreamState``, or Responses events up to the one that carries the
whole response (see ``_streams``).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from ...json_value import JsonValue
from ..errors import ModelConfigError, ModelResponseError
from ..model import ChatRequest, ModelResponse
from ..wire import parse_chat_completion
from ._http import RetryPolicy, attempts, json_body
from ._responses_wire import KIND as RESPONSES
from ._responses_wire import parse_response, responses_body
from ._sdk_model import SdkChatModel, first_env
from ._streams import StreamReader, TextSink

if TYPE_CHECKING:
    import httpx2
    import openai
    from openai import AsyncStream
    from openai.types.chat import ChatCompletionChunk
    from openai.types.responses import ResponseStreamEvent

__all__ = ["OpenAIChatModel", "RetryPolicy"]

ENV_BASE_URL = "DSH_MODEL_BASE_URL"
ENV_MODEL = "DSH_MODEL"
ENV_API = "DSH_MODEL_API"
ENV_API_KEYS = ("DSH_API_KEY", "OPENAI_API_KEY")
DEFAULT_BASE_URL = "https://api.openai.com/v1"
_PATHS = {"chat": "chat/completions", "responses": "responses"}


class OpenAIChatModel(SdkChatModel):
    """A :class:`~dsh_jupyter.agent.model.ChatModel` for ``POST {base_url}/chat/completions``
    (or ``{base_url}/responses`` with ``api="responses"``).

    ``timeout`` is seconds for every phase or an ``httpx2.Timeout`` (default 10 s
    to connect, 300 s to read); ``options`` are extra body fields
    (``temperature``, ``max_tokens``, ...); ``client`` is an ``httpx2.AsyncClient``
    (the HTTP client the ``openai`` package uses) that the caller owns and closes; by
    default each request opens and closes its own. ``openai`` is imported on first
    use, so importing dsh_jupyter stays quick.

    ``stream=True`` asks for a streamed response and passes each piece of text to
    the request's ``on_text`` as it arrives (the loop emits them as
    ``agent/text-delta`` events); the response returned is the same.
    """

    provider = "openai"
    """The API it speaks (``gen_ai.provider.name`` on traced requests); which server
    answers is ``server.address``, from ``base_url``."""

    sdk = "openai"
    sdk_client = "AsyncOpenAI"

    def __init__(self, *, model: str, base_url: str = DEFAULT_BASE_URL,
                 api_key: str | None = None, api: Literal["chat", "responses"] = "chat",
                 stream: bool = False, timeout: float | httpx2.Timeout | None = None,
                 retry: RetryPolicy | None = None, options: Mapping[str, JsonValue] | None = None,
                 headers: Mapping[str, str] | None = None,
                 client: httpx2.AsyncClient | None = None) -> None:
        if api not in _PATHS:
            raise ModelConfigError(f'api must be "chat" or "responses", got {api!r}')
        super().__init__(model=model, base_url=base_url, path=_PATHS[api], api_key=api_key,
                         timeout=timeout, retry=retry, options=options, headers=headers,
                         client=client)
        self.api = api
        self.stream = stream

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *,
                 timeout: float | httpx2.Timeout | None = None,
                 retry: RetryPolicy | None = None, options: Mapping[str, JsonValue] | None = None,
                 headers: Mapping[str, str] | None = None,
                 client: httpx2.AsyncClient | None = None) -> OpenAIChatModel:
        """Configure from ``DSH_MODEL`` (required), ``DSH_MODEL_BASE_URL`` (default
        OpenAI's), ``DSH_API_KEY`` or else ``OPENAI_API_KEY`` (optional: local
        servers need none) and ``DSH_MODEL_API`` (``chat``, the default, or
        ``responses``); the keywords are the constructor's."""
        env = os.environ if environ is None else environ
        model = env.get(ENV_MODEL, "").strip()
        if not model:
            raise ModelConfigError(
                f"set {ENV_MODEL} to the model name (e.g. deepseek-chat), {ENV_BASE_URL} to "
                f"the server's base URL (default {DEFAULT_BASE_URL}) and {ENV_API_KEYS[0]} "
                f"(or {ENV_API_KEYS[1]}) to the key")
        api = env.get(ENV_API, "").strip() or "chat"
        if api not in _PATHS:
            raise ModelConfigError(f'{ENV_API} must be "chat" or "responses", got {api!r}')
        return cls(model=model, base_url=env.get(ENV_BASE_URL, "").strip() or DEFAULT_BASE_URL,
                   api_key=first_env(env, ENV_API_KEYS), api=api,  # type: ignore[arg-type]  # checked above
                   timeout=timeout, retry=retry, options=options, headers=headers,
                   client=client)

    async def _send(self, client: openai.AsyncOpenAI, request: ChatRequest) -> ModelResponse:
        import openai

        read: Callable[..., Awaitable[object]]
        if self.api == "chat":
            create: Any = client.chat.completions.with_raw_response.create
            body, kind, parse, read = (request.body(), "chat-completions",
                                       parse_chat_completion, _read_chat)
            if self.stream:
                body.update(stream=True, stream_options={"include_usage": True})
        else:
            create = client.responses.with_raw_response.create
            body, kind, parse, read = (responses_body(request), RESPONSES, parse_response,
                                       _read_responses)
            if self.stream:
                body["stream"] = True
        # Without a key, a local server expects no Authorization header at all.
        raw = await create(**body, model=self.model, extra_body=self.options or None,
                           extra_headers=None if self._api_key else {"Authorization": openai.omit},
                           timeout=self.request_timeout)
        tried = attempts(raw.http_response.request)
        if not self.stream:
            return parse(json_body(raw.http_response, attempts=tried, kind=kind), attempts=tried)
        async with raw.parse() as stream:
            reader = StreamReader(stream.response, sdk=openai, attempts=tried, kind=kind,
                                  what=self.what)
            received = await reader.plain_body()
            if received is None:
                received = await read(reader, stream, request.on_text)
        return parse(received, attempts=tried)


async def _read_chat(reader: StreamReader, stream: AsyncStream[ChatCompletionChunk],
                     on_text: TextSink | None) -> object:
    """Chunks folded by the SDK's ``ChatCompletionStreamState``; the first choice's
    content deltas to ``on_text``."""
    from openai.lib.streaming.chat import ChatCompletionStreamState

    state: ChatCompletionStreamState[None] = ChatCompletionStreamState()

    def handle(at: str, chunk: ChatCompletionChunk) -> str | None:
        state.handle_chunk(chunk)
        texts = [reader.parser.text(choice.delta.content, f"{at}.choices[{i}].delta.content")
                 for i, choice in enumerate(chunk.choices)
                 if choice.index == 0 and choice.delta.content is not None]
        return "".join(texts)

    await reader.read(stream, handle, on_text)
    if reader.error is not None:
        return {"error": reader.error}
    if not reader.count:
        return {}  # not one chunk: the parser says what is missing
    return state.current_completion_snapshot.to_dict(mode="json", warnings=False)


async def _read_responses(reader: StreamReader, stream: AsyncStream[ResponseStreamEvent],
                          on_text: TextSink | None) -> object:
    """Text deltas to ``on_text``; the response is the closing event's."""
    from openai.types.responses import (
        ResponseCompletedEvent,
        ResponseFailedEvent,
        ResponseIncompleteEvent,
    )

    final: object = None
    error: object = None

    def handle(at: str, event: ResponseStreamEvent) -> str | None:
        nonlocal final, error
        if event.type == "response.output_text.delta":
            return reader.parser.text(event.delta, f"{at}.delta")
        if isinstance(event, ResponseCompletedEvent | ResponseIncompleteEvent
                      | ResponseFailedEvent):
            final = event.response.to_dict(mode="json", warnings=False)
        elif event.type == "error":
            error = event.message
        return None

    await reader.read(stream, handle, on_text)
    if final is not None:
        return final
    if error is not None or reader.error is not None:
        return {"error": {"message": error} if error is not None else reader.error,
                "output": []}
    raise ModelResponseError("", "the stream ended without a response.completed event",
                             attempts=reader.parser.attempts, kind=RESPONSES)
