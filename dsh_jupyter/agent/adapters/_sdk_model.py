"""The part of a model adapter on an official SDK that does not depend on the SDK: its
settings, its checks, the HTTP client each request goes through, the SDK's client on
the retry policy, and the SDK's errors as ours."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ...abort import AbortSignal
from ...json_value import JsonValue
from ..errors import ModelConfigError
from ..model import ChatRequest, ModelResponse
from ._http import (
    RetryPolicy,
    check_client,
    default_timeout,
    model_error,
    require_sdk,
    with_policy,
)

if TYPE_CHECKING:
    import httpx2


def first_env(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    """The first of ``names`` set to something other than blanks in ``env``, stripped."""
    return next((env[n].strip() for n in names if env.get(n, "").strip()), None)


class SdkChatModel:
    """Settings shared by the adapters: ``model``, ``base_url``, ``url`` (the endpoint
    requests go to), ``timeout``, ``retry``, ``options``, headers, the key and the
    caller's ``client``. A subclass names its SDK package (``sdk``) and the package's
    client class (``sdk_client``), and sends one request with that client
    (:meth:`_send`)."""

    sdk = ""
    """The package the adapter needs (its extra has the same name)."""

    sdk_client = ""
    """The package's async client class (``AsyncOpenAI``)."""

    def __init__(self, *, model: str, base_url: str, path: str, api_key: str | None,
                 timeout: float | httpx2.Timeout | None, retry: RetryPolicy | None,
                 options: Mapping[str, JsonValue] | None, headers: Mapping[str, str] | None,
                 client: httpx2.AsyncClient | None) -> None:
        if not isinstance(model, str) or not model:
            raise ModelConfigError(f"model must be a non-empty model name, got {model!r}")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ModelConfigError(
                f"base_url must be an http:// or https:// URL, got {base_url!r}")
        require_sdk(self.sdk, type(self).__name__)
        check_client(client)
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/{path}"
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        if self.retry.max_attempts < 1:
            raise ModelConfigError("RetryPolicy.max_attempts must be at least 1")
        self.options = dict(options or {})
        self._headers = dict(headers or {})
        self._api_key = api_key or None
        self._client = client
        self._ssl: Any = None  # an ssl.SSLContext, built once: it costs tens of ms
        self._sdk_class: type[Any] | None = None

    @property
    def name(self) -> str:
        return self.model

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"<{type(self).__name__} model={self.model!r} url={self.url!r} key={key}>"

    async def complete(self, request: ChatRequest, *, signal: AbortSignal) -> ModelResponse:
        """Send ``request`` (retries included) and read its response; an abort cancels
        the request, the wait before a retry or the stream."""
        return await signal.run(self._complete(request))

    async def _complete(self, request: ChatRequest) -> ModelResponse:
        """Through the caller's client, else through a client of the SDK's defaults
        opened for this request (and closed after)."""
        sdk = importlib.import_module(self.sdk)
        if self._client is not None:
            return await self._request(sdk, self._client, request)
        if self._ssl is None:
            import httpx2

            self._ssl = httpx2.create_ssl_context()
        async with sdk.DefaultAsyncHttpxClient(verify=self._ssl) as http:
            return await self._request(sdk, http, request)

    async def _request(self, sdk: ModuleType, http: httpx2.AsyncClient,
                       request: ChatRequest) -> ModelResponse:
        if self._sdk_class is None:
            self._sdk_class = with_policy(getattr(sdk, self.sdk_client))
        # Without a key (a local server), a placeholder satisfies the client and _send
        # leaves the credential headers out.
        client = self._sdk_class(api_key=self._api_key or "unused", base_url=self.base_url,
                                 max_retries=self.retry.max_attempts - 1,
                                 default_headers=self._headers, http_client=http)
        client.policy = self.retry
        try:
            return await self._send(client, request)
        except (sdk.APIStatusError, sdk.APIConnectionError) as exc:
            raise model_error(exc, sdk=sdk, what=self.what, client=client) from None

    @property
    def what(self) -> str:
        """The request, as errors name it."""
        return f"POST {self.url}"

    @property
    def request_timeout(self) -> float | httpx2.Timeout:
        return default_timeout() if self.timeout is None else self.timeout

    async def _send(self, client: Any, request: ChatRequest) -> ModelResponse:
        """One request through ``client``, the SDK's client on the retry policy."""
        raise NotImplementedError
