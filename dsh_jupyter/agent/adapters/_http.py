"""What the SDK adapters share about HTTP: the retry policy on the SDKs' own retry
loop, and the SDKs' errors as ours.

Both official clients (``openai``, ``anthropic``) retry connection errors, timeouts
and statuses 408, 409, 429 and 5xx, ``max_retries = RetryPolicy.max_attempts - 1``
times. :class:`PolicyRetries`, mixed into the SDK's client class, sets two hooks of
that loop from the policy: the wait before each retry (the server's ``Retry-After``
or ``retry-after-ms`` as the SDK reads it, else the policy's backoff), and a wait
asked for beyond ``RetryPolicy.max_retry_after``, which ends the request instead of
stalling the run (alone, the openai client waits up to two minutes, the anthropic
client as long as asked). Those two methods, and ``_parse_retry_after_header`` that
reads the header as the SDK does, belong to the SDKs' base client, not to their public
API: ``openai<4`` and ``anthropic<3`` are pinned, and the tests time the retries.

:func:`model_error` turns the SDK's error of a failed request into ours, with the
server's own message and the attempts made (the SDK numbers its retries on each
request, ``x-stainless-retry-count``).
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, cast

from ..errors import (
    ModelConfigError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ModelUnavailableError,
)
from ..wire import describe

if TYPE_CHECKING:
    import httpx2

CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 300.0


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


class _SdkRetries(Protocol):
    """What :class:`PolicyRetries` uses of the SDK client it is mixed into."""

    def _parse_retry_after_header(self, response_headers: httpx2.Headers | None = None
                                  ) -> float | None: ...

    def _should_retry(self, response: httpx2.Response) -> bool: ...


class PolicyRetries:
    """Mixed in before an SDK's client class: its retry loop on ``policy``.
    ``refused_wait`` is the ``Retry-After`` a retry was refused for, if one was."""

    policy = RetryPolicy()
    refused_wait: float | None = None

    def _should_retry(self, response: httpx2.Response) -> bool:
        wait = cast(_SdkRetries, self)._parse_retry_after_header(response.headers)
        if wait is not None and wait > self.policy.max_retry_after:
            self.refused_wait = wait
            return False
        return cast(_SdkRetries, super())._should_retry(response)

    def _calculate_retry_timeout(self, remaining_retries: int, options: object,
                                 response_headers: httpx2.Headers | None = None) -> float:
        wait = cast(_SdkRetries, self)._parse_retry_after_header(response_headers)
        if wait is not None:
            return max(wait, 0.0)
        return self.policy.backoff(self.policy.max_attempts - remaining_retries)


def with_policy(client_class: type[Any]) -> type[Any]:
    """``client_class`` (``openai.AsyncOpenAI``, ``anthropic.AsyncAnthropic``) with
    :class:`PolicyRetries` mixed in; set ``policy`` on each client made."""
    return type(client_class.__name__, (PolicyRetries, client_class), {"__module__": __name__})


def require_sdk(package: str, adapter: str) -> None:
    """Fail at construction, not at the first request, when the extra is missing."""
    installed = (sys.modules[package] is not None if package in sys.modules
                 else importlib.util.find_spec(package) is not None)
    if not installed:
        raise ModelConfigError(f"{adapter} needs the {package} package: "
                               f"pip install 'dsh-jupyter[{package}]'")


def check_client(client: object) -> None:
    """A caller's client must be what the SDKs send through (an ``httpx.AsyncClient``,
    what the hand-written adapter took, is not)."""
    if client is None:
        return
    import httpx2

    if not isinstance(client, httpx2.AsyncClient):
        kind = f"{type(client).__module__}.{type(client).__qualname__}"
        raise ModelConfigError(f"client must be an httpx2.AsyncClient (the HTTP client of the "
                               f"openai and anthropic packages), got {kind}")


def default_timeout() -> httpx2.Timeout:
    import httpx2

    return httpx2.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT)


def attempts(request: httpx2.Request) -> int:
    """The requests made up to ``request``, which the SDK numbered."""
    retries = request.headers.get("x-stainless-retry-count", "0")
    return int(retries) + 1 if retries.isdigit() else 1


def model_error(exc: Exception, *, sdk: ModuleType, what: str,
                client: PolicyRetries) -> ModelError:
    """The SDK's error of a request ``client`` sent as ours: ``exc`` is the package
    ``sdk``'s ``APIStatusError`` (the response of a non-2xx status) or its
    ``APIConnectionError`` (the transport error is its cause)."""
    if not isinstance(exc, sdk.APIStatusError):
        tried = attempts(exc.request) if isinstance(exc, sdk.APIConnectionError) else 1
        cause = exc.__cause__ or exc
        gave_up = f" (gave up after {tried} attempts)" if tried > 1 else ""
        return ModelUnavailableError(f"{what} failed: {type(cause).__name__}: "
                                     f"{str(cause) or 'no detail'}{gave_up}", attempts=tried)
    response: httpx2.Response = exc.response
    tried = attempts(response.request)
    status = response.status_code
    wait = client.refused_wait
    if wait is not None:
        return ModelHTTPError(
            f"{what} returned {status} {response.reason_phrase} and asked to retry after "
            f"{wait:g} s, more than RetryPolicy.max_retry_after "
            f"({client.policy.max_retry_after:g} s): {error_detail(response)}",
            status=status, attempts=tried)
    gave_up = f" (gave up after {tried} attempts)" if tried > 1 else ""
    return ModelHTTPError(f"{what} returned {status} {response.reason_phrase}: "
                          f"{error_detail(response)}{gave_up}", status=status, attempts=tried)


def json_body(response: httpx2.Response, *, attempts: int, kind: str) -> object:
    """The decoded JSON body of a successful response."""
    try:
        return json.loads(response.content)
    except ValueError:
        content_type = response.headers.get("content-type", "no content-type")
        raise ModelResponseError("", f"expected a JSON body, received {content_type} "
                                 f"{describe(response.content.decode('utf-8', 'replace'))}",
                                 attempts=attempts, kind=kind) from None


def error_detail(response: httpx2.Response) -> str:
    """The server's error message (``error.message`` as OpenAI and Anthropic send it)."""
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
