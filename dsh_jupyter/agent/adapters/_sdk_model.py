"""The part of a model adapter on an official SDK that does not depend on the SDK: its
settings, its checks, and the HTTP client each request goes through."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...abort import AbortSignal
from ...json_value import JsonValue
from ..errors import ModelConfigError
from ..model import ChatRequest, ModelResponse
from ._http import RetryPolicy, check_client, require_sdk

if TYPE_CHECKING:
    import httpx2


def first_env(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    """The first of ``names`` set to something other than blanks in ``env``, stripped."""
    return next((env[n].strip() for n in names if env.get(n, "").strip()), None)


class SdkChatModel:
    """Settings shared by the adapters: ``model``, ``base_url``, ``url`` (the endpoint
    requests go to), ``timeout``, ``retry``, ``options``, headers, the key and the
    caller's ``client``. A subclass names its SDK package (``sdk``), opens the SDK's
    default HTTP client (:meth:`_open_http`) and sends one request (:meth:`_send`)."""

    sdk = ""
    """The package the adapter needs (its extra has the same name)."""

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

    @property
    def name(self) -> str:
        return self.model

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"<{type(self).__name__} model={self.model!r} url={self.url!r} key={key}>"

    async def complete(self, request: ChatRequest, *, signal: AbortSignal) -> ModelResponse:
        """Send ``request`` through the caller's client, else through a client of the
        SDK's defaults opened for it (and closed after)."""
        if self._client is not None:
            return await self._send(self._client, request, signal)
        if self._ssl is None:
            import httpx2

            self._ssl = httpx2.create_ssl_context()
        async with self._open_http(self._ssl) as http:
            return await self._send(http, request, signal)

    def _open_http(self, ssl: Any) -> httpx2.AsyncClient:
        raise NotImplementedError

    async def _send(self, http: httpx2.AsyncClient, request: ChatRequest,
                    signal: AbortSignal) -> ModelResponse:
        raise NotImplementedError
