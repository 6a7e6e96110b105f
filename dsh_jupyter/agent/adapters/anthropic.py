"""Anthropic's Messages API on the official ``anthropic`` client.

Needs the ``anthropic`` extra (``pip install 'dsh-jupyter[anthropic]'``)::

    # DSH_MODEL=claude-sonnet-4-5  ANTHROPIC_API_KEY=sk-ant-...
    model = AnthropicChatModel.from_env()
    model = AnthropicChatModel(model="claude-haiku-4-5", max_tokens=4096)

The loop's chat messages are mapped to content blocks (``tool_use``, and the
``tool_result`` blocks of one step's calls in one user message), and prompt-cache
breakpoints are placed on the last tool and the system prompt (see
``_messages_wire``). Retries, timeouts, abort and errors are those of
:class:`~dsh_jupyter.agent.OpenAIChatModel`; 529 (overloaded) is a 5xx, so it is
retried like the others. ``stream=True`` reads the SDK's ``MessageStream``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...json_value import JsonValue
from ..errors import ModelConfigError, ModelResponseError
from ..model import ChatRequest, ModelResponse
from ._http import RetryPolicy, attempts, json_body
from ._messages_wire import KIND, messages_body, parse_message
from ._sdk_model import SdkChatModel, first_env
from ._streams import StreamReader, TextSink

if TYPE_CHECKING:
    import anthropic
    import httpx2
    from anthropic.lib.streaming import AsyncMessageStream, ParsedMessageStreamEvent

ENV_MODEL = "DSH_MODEL"
ENV_BASE_URLS = ("DSH_MODEL_BASE_URL", "ANTHROPIC_BASE_URL")
ENV_API_KEYS = ("DSH_API_KEY", "ANTHROPIC_API_KEY")
ENV_MAX_TOKENS = "DSH_MAX_TOKENS"
DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 8192
# What the SDK's MessageStream adds after the event it comes from.
_HELPER_EVENTS = frozenset({"text", "citation", "thinking", "signature", "input_json"})


class AnthropicChatModel(SdkChatModel):
    """A :class:`~dsh_jupyter.agent.model.ChatModel` for ``POST {base_url}/v1/messages``.

    ``max_tokens`` bounds each response (the API requires a bound);
    ``cache=False`` leaves out the prompt-cache breakpoints; ``stream=True`` streams
    the answer's text to the request's ``on_text``. ``timeout``,
    ``retry``, ``options`` (extra body fields: ``temperature``, ``thinking``, ...),
    ``headers`` and ``client`` (an ``httpx2.AsyncClient`` the caller owns) are as
    for :class:`~dsh_jupyter.agent.OpenAIChatModel`.
    """

    provider = "anthropic"
    """The API it speaks (``gen_ai.provider.name`` on traced requests)."""

    sdk = "anthropic"
    sdk_client = "AsyncAnthropic"

    def __init__(self, *, model: str, api_key: str | None = None,
                 base_url: str = DEFAULT_BASE_URL, max_tokens: int = DEFAULT_MAX_TOKENS,
                 cache: bool = True, stream: bool = False,
                 timeout: float | httpx2.Timeout | None = None,
                 retry: RetryPolicy | None = None, options: Mapping[str, JsonValue] | None = None,
                 headers: Mapping[str, str] | None = None,
                 client: httpx2.AsyncClient | None = None) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ModelConfigError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        super().__init__(model=model, base_url=base_url, path="v1/messages", api_key=api_key,
                         timeout=timeout, retry=retry, options=options, headers=headers,
                         client=client)
        self.max_tokens = max_tokens
        self.cache = cache
        self.stream = stream

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *,
                 timeout: float | httpx2.Timeout | None = None,
                 retry: RetryPolicy | None = None, options: Mapping[str, JsonValue] | None = None,
                 headers: Mapping[str, str] | None = None,
                 client: httpx2.AsyncClient | None = None) -> AnthropicChatModel:
        """Configure from ``DSH_MODEL`` (required), ``DSH_API_KEY`` or else
        ``ANTHROPIC_API_KEY``, ``DSH_MODEL_BASE_URL`` or else ``ANTHROPIC_BASE_URL``
        (default Anthropic's) and ``DSH_MAX_TOKENS`` (default 8192); the keywords
        are the constructor's."""
        env = os.environ if environ is None else environ
        model = env.get(ENV_MODEL, "").strip()
        if not model:
            raise ModelConfigError(
                f"set {ENV_MODEL} to the model name (e.g. claude-sonnet-4-5) and "
                f"{ENV_API_KEYS[1]} (or {ENV_API_KEYS[0]}) to the key")
        max_tokens = env.get(ENV_MAX_TOKENS, "").strip() or str(DEFAULT_MAX_TOKENS)
        if not max_tokens.isdigit():
            raise ModelConfigError(f"{ENV_MAX_TOKENS} must be a positive integer, "
                                   f"got {max_tokens!r}")
        return cls(model=model, api_key=first_env(env, ENV_API_KEYS),
                   base_url=first_env(env, ENV_BASE_URLS) or DEFAULT_BASE_URL,
                   max_tokens=int(max_tokens),
                   timeout=timeout, retry=retry, options=options, headers=headers,
                   client=client)

    async def _send(self, client: anthropic.AsyncAnthropic,
                    request: ChatRequest) -> ModelResponse:
        import anthropic

        # Without a key (a local gateway), the credential headers are left out.
        no_key = {"Authorization": anthropic.omit, "X-Api-Key": anthropic.omit}
        args: dict[str, Any] = {
            "model": self.model, "max_tokens": self.max_tokens,
            **messages_body(request, cache=self.cache), "extra_body": self.options or None,
            "extra_headers": None if self._api_key else no_key, "timeout": self.request_timeout}
        if not self.stream:
            raw = await client.messages.with_raw_response.create(**args)
            tried = attempts(raw.http_response.request)
            return parse_message(json_body(raw.http_response, attempts=tried, kind=KIND),
                                 attempts=tried)
        async with client.messages.stream(**args) as stream:
            tried = attempts(stream.response.request)
            reader = StreamReader(stream.response, sdk=anthropic, attempts=tried, kind=KIND,
                                  what=self.what, helpers=_HELPER_EVENTS)
            received = await reader.plain_body()
            if received is None:
                received = await _read_messages(reader, stream, request.on_text)
        return parse_message(received, attempts=tried)


async def _read_messages(reader: StreamReader, stream: AsyncMessageStream[None],
                         on_text: TextSink | None) -> object:
    """Events folded by the SDK's ``MessageStream``; text deltas to ``on_text``.

    The SDK reads a ``tool_use`` block's input leniently from the JSON pieces it has so
    far (``{"x": `` is ``{}``), so the pieces are also kept and checked whole when the
    block stops: a call cut short must not run with part of its arguments."""
    started = False
    pieces: dict[int, str] = {}

    def handle(at: str, event: ParsedMessageStreamEvent[None]) -> str | None:
        nonlocal started
        if not started and event.type != "message_start":
            reader.parser.fail(f"{at}.type", "expected message_start first", event.type)
        started = True
        if event.type == "content_block_delta":
            if event.delta.type == "text_delta":
                return reader.parser.text(event.delta.text, f"{at}.delta.text")
            if event.delta.type == "input_json_delta":
                pieces[event.index] = pieces.get(event.index, "") + event.delta.partial_json
        elif event.type == "content_block_stop" and event.index in pieces:
            text = pieces.pop(event.index)
            try:
                json.loads(text or "{}")
            except ValueError:
                reader.parser.fail(f"{at}.input", "expected the input_json_delta pieces to "
                                   "make JSON", text)
        return None

    await reader.read(stream, handle, on_text)
    if reader.error is not None:
        return {"type": "error", "error": reader.error}
    if not started:
        raise ModelResponseError("", "the stream ended before message_start",
                                 attempts=reader.parser.attempts, kind=KIND)
    message = await stream.get_final_message()
    return message.to_dict(mode="json", warnings=False)
