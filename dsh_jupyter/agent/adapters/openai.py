"""OpenAI-compatible chat completions over HTTP: OpenAI, DeepSeek, vLLM, Ollama, ...

::

    # DSH_MODEL_BASE_URL=https://api.deepseek.com  DSH_MODEL=deepseek-chat  DSH_API_KEY=...
    model = OpenAIChatModel.from_env()
    model = OpenAIChatModel(base_url="http://127.0.0.1:11434/v1", model="qwen2.5")  # Ollama

Transient failures are retried with exponential backoff and jitter, at most
``RetryPolicy.max_attempts`` requests in all: connection errors, timeouts, a
dropped connection, and statuses 408, 409, 429 and 5xx. A ``Retry-After`` (or
``retry-after-ms``) header sets the wait; one longer than
``RetryPolicy.max_retry_after`` ends the request instead of stalling the run.
Other statuses fail at once with the server's own message.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...abort import AbortSignal
from ...json_value import JsonValue
from ..errors import (
    ModelConfigError,
    ModelHTTPError,
    ModelResponseError,
    ModelUnavailableError,
)
from ..model import ChatRequest, ModelResponse
from ..wire import describe, encode, parse_chat_completion

if TYPE_CHECKING:
    import httpx

ENV_BASE_URL = "DSH_MODEL_BASE_URL"
ENV_MODEL = "DSH_MODEL"
ENV_API_KEYS = ("DSH_API_KEY", "OPENAI_API_KEY")
DEFAULT_BASE_URL = "https://api.openai.com/v1"
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 300.0
_RETRY_STATUSES = frozenset({408, 409, 429})


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """``max_attempts`` requests at most; the n-th retry waits
    ``min(initial_delay * 2**(n-1), max_delay)``, less up to ``jitter`` of it at random."""

    max_attempts: int = 4
    initial_delay: float = 0.5
    max_delay: float = 8.0
    jitter: float = 0.25
    max_retry_after: float = 60.0

    def backoff(self, retry: int) -> float:
        delay = min(self.initial_delay * 2.0 ** (retry - 1), self.max_delay)
        return delay * (1 - self.jitter * random.random())


class OpenAIChatModel:
    """A :class:`~dsh_jupyter.agent.model.ChatModel` for ``POST {base_url}/chat/completions``.

    ``timeout`` is seconds for every phase or an ``httpx.Timeout`` (default 10 s
    to connect, 300 s to read); ``options`` are extra body fields
    (``temperature``, ``max_tokens``, ...); ``client`` is an ``httpx.AsyncClient``
    the caller owns and closes (by default each request opens and closes its own).
    httpx is imported on first use, so importing dsh_jupyter stays quick.
    """

    provider = "openai"
    """The API it speaks (``gen_ai.provider.name`` on traced requests); which server
    answers is ``server.address``, from ``base_url``."""

    def __init__(self, *, model: str, base_url: str = DEFAULT_BASE_URL,
                 api_key: str | None = None, timeout: float | httpx.Timeout | None = None,
                 retry: RetryPolicy | None = None, options: Mapping[str, JsonValue] | None = None,
                 headers: Mapping[str, str] | None = None,
                 client: httpx.AsyncClient | None = None) -> None:
        if not isinstance(model, str) or not model:
            raise ModelConfigError(f"model must be a non-empty model name, got {model!r}")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ModelConfigError(
                f"base_url must be an http:// or https:// URL, got {base_url!r}")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        if self.retry.max_attempts < 1:
            raise ModelConfigError("RetryPolicy.max_attempts must be at least 1")
        self.options = dict(options or {})
        self._headers = {"Content-Type": "application/json", "Accept": "application/json",
                         **(headers or {})}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._client = client
        self._ssl: ssl.SSLContext | None = None  # built once: it costs tens of ms

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *,
                 timeout: float | httpx.Timeout | None = None,
                 retry: RetryPolicy | None = None, options: Mapping[str, JsonValue] | None = None,
                 headers: Mapping[str, str] | None = None,
                 client: httpx.AsyncClient | None = None) -> OpenAIChatModel:
        """Configure from ``DSH_MODEL`` (required), ``DSH_MODEL_BASE_URL`` (default
        OpenAI's) and ``DSH_API_KEY`` or else ``OPENAI_API_KEY`` (optional: local
        servers need none); the keywords are the constructor's."""
        env = os.environ if environ is None else environ
        model = env.get(ENV_MODEL, "").strip()
        if not model:
            raise ModelConfigError(
                f"set {ENV_MODEL} to the model name (e.g. deepseek-chat), {ENV_BASE_URL} to "
                f"the server's base URL (default {DEFAULT_BASE_URL}) and {ENV_API_KEYS[0]} "
                f"(or {ENV_API_KEYS[1]}) to the key")
        api_key = next((env[k].strip() for k in ENV_API_KEYS if env.get(k, "").strip()), None)
        return cls(model=model, base_url=env.get(ENV_BASE_URL, "").strip() or DEFAULT_BASE_URL,
                   api_key=api_key, timeout=timeout, retry=retry, options=options,
                   headers=headers, client=client)

    @property
    def name(self) -> str:
        return self.model

    def __repr__(self) -> str:
        key = "set" if "Authorization" in self._headers else "none"
        return f"<OpenAIChatModel model={self.model!r} url={self.url!r} key={key}>"

    async def complete(self, request: ChatRequest, *, signal: AbortSignal) -> ModelResponse:
        import httpx

        payload = encode({"model": self.model, **self.options, **request.body()})
        if self._client is not None:
            return await self._send(self._client, payload, signal)
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context()
        async with httpx.AsyncClient(verify=self._ssl) as client:
            return await self._send(client, payload, signal)

    async def _send(self, client: httpx.AsyncClient, payload: bytes,
                    signal: AbortSignal) -> ModelResponse:
        import httpx

        timeout = (httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT) if self.timeout is None
                   else self.timeout)
        transient = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
        attempt = 0
        while True:
            attempt += 1
            last = attempt >= self.retry.max_attempts
            try:
                response = await signal.run(client.post(
                    self.url, content=payload, headers=self._headers, timeout=timeout))
            except transient as exc:
                if last:
                    raise ModelUnavailableError(
                        f"POST {self.url} failed: {type(exc).__name__}: {str(exc) or 'no detail'} "
                        f"(gave up after {attempt} attempts)", attempts=attempt) from None
                await signal.run(asyncio.sleep(self.retry.backoff(attempt)))
                continue
            except httpx.HTTPError as exc:
                raise ModelUnavailableError(f"POST {self.url} failed: {type(exc).__name__}: "
                                            f"{exc}", attempts=attempt) from None
            if response.is_success:
                return _parse(response, attempt)
            status = response.status_code
            if last or not (status in _RETRY_STATUSES or status >= 500):
                tried = f" (gave up after {attempt} attempts)" if attempt > 1 else ""
                raise ModelHTTPError(f"POST {self.url} returned {status} "
                                     f"{response.reason_phrase}: {_detail(response)}{tried}",
                                     status=status, attempts=attempt)
            wait = _retry_after(response)
            if wait is not None and wait > self.retry.max_retry_after:
                raise ModelHTTPError(
                    f"POST {self.url} returned {status} {response.reason_phrase} and asked to "
                    f"retry after {wait:g} s, more than RetryPolicy.max_retry_after "
                    f"({self.retry.max_retry_after:g} s): {_detail(response)}",
                    status=status, attempts=attempt)
            await signal.run(asyncio.sleep(wait if wait is not None
                                           else self.retry.backoff(attempt)))


def _parse(response: httpx.Response, attempts: int) -> ModelResponse:
    try:
        body = json.loads(response.content)
    except ValueError:
        kind = response.headers.get("content-type", "no content-type")
        raise ModelResponseError("", f"expected a JSON body, received {kind} "
                                 f"{describe(response.content.decode('utf-8', 'replace'))}",
                                 attempts=attempts) from None
    return parse_chat_completion(body, attempts=attempts)


def _detail(response: httpx.Response) -> str:
    """The server's error message (OpenAI-style ``error.message`` when present)."""
    try:
        body = json.loads(response.content)
    except ValueError:
        text = response.content.decode("utf-8", "replace").strip()
        return (text[:300] + "...") if len(text) > 300 else (text or "(empty body)")
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        for key in ("error", "message", "detail"):
            if isinstance(body.get(key), str):
                return str(body[key])
    return describe(body)


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds the server asked us to wait, if it said (``retry-after-ms`` first)."""
    millis = response.headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(float(millis) / 1000, 0.0)
        except ValueError:
            pass
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)
