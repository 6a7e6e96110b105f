"""What the SDK adapters share: the retry loop around one request, and the SDK import.

Both official clients (``openai``, ``anthropic``) are built with ``max_retries=0``
and this loop does the retrying, so the policy is the same for every adapter and
ours to test: Retry-After with a bound (``RetryPolicy.max_retry_after``), which
the SDKs cap silently; the attempt count reported on responses and errors; the
abort signal honoured during a backoff wait; the same error messages and codes.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib.util
import json
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from ...abort import AbortSignal
from ..errors import ModelConfigError, ModelHTTPError, ModelResponseError, ModelUnavailableError
from ..wire import describe

if TYPE_CHECKING:
    import httpx2

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


async def send_with_retries(send: Callable[[], Awaitable[httpx2.Response]], *, sdk: ModuleType,
                            what: str, retry: RetryPolicy,
                            signal: AbortSignal) -> tuple[httpx2.Response, int]:
    """Call ``send`` (one request through the SDK, returning the raw HTTP response)
    until it succeeds or ``retry`` gives up; returns the response and the attempts.

    ``sdk`` is the client package: its ``APIStatusError`` carries the response of a
    non-2xx status, its ``APIConnectionError`` the transport error as its cause.
    """
    import httpx2

    transient = (httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError)
    attempt = 0
    while True:
        attempt += 1
        last = attempt >= retry.max_attempts
        try:
            return await signal.run(send()), attempt
        except sdk.APIStatusError as exc:
            response: httpx2.Response = exc.response
        except sdk.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            if not isinstance(cause, transient) and not isinstance(exc, sdk.APITimeoutError):
                raise ModelUnavailableError(f"{what} failed: {type(cause).__name__}: {cause}",
                                            attempts=attempt) from None
            if last:
                raise ModelUnavailableError(
                    f"{what} failed: {type(cause).__name__}: {str(cause) or 'no detail'} "
                    f"(gave up after {attempt} attempts)", attempts=attempt) from None
            await signal.run(asyncio.sleep(retry.backoff(attempt)))
            continue
        status = response.status_code
        if last or not (status in _RETRY_STATUSES or status >= 500):
            tried = f" (gave up after {attempt} attempts)" if attempt > 1 else ""
            raise ModelHTTPError(f"{what} returned {status} {response.reason_phrase}: "
                                 f"{error_detail(response)}{tried}",
                                 status=status, attempts=attempt)
        wait = retry_after(response)
        if wait is not None and wait > retry.max_retry_after:
            raise ModelHTTPError(
                f"{what} returned {status} {response.reason_phrase} and asked to retry after "
                f"{wait:g} s, more than RetryPolicy.max_retry_after "
                f"({retry.max_retry_after:g} s): {error_detail(response)}",
                status=status, attempts=attempt)
        await signal.run(asyncio.sleep(wait if wait is not None else retry.backoff(attempt)))


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


def retry_after(response: httpx2.Response) -> float | None:
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
