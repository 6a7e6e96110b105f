"""Kernels on a Jupyter Kernel Gateway or Enterprise Gateway (``KernelRuntimeConfig.gateway``).

:class:`GatewayLauncher` is a :class:`~.launch.KernelLauncher`: each start is
``POST /api/kernels`` (with ``extra_env`` as the kernel's environment request),
then a websocket to ``/api/kernels/<id>/channels``; the kernel it returns,
:class:`GatewayKernel`, brings those channels (:class:`~.channels.HasChannels`),
so the session injects the runtime and runs programs exactly as on a local
kernel, over comms. Interrupt is ``POST .../interrupt``; kill closes the
websocket at once and deletes the kernel (``DELETE /api/kernels/<id>``, retried
while the gateway is busy restarting it).

A remote kernel has no local process tree: liveness is the websocket (closed,
``restarting``/``dead`` status, a foreign ``shutdown_reply``) plus a REST check
every ``liveness_seconds`` (deleted or culled on the gateway); budgets are the
wall clock's. Everything that goes wrong talking to the gateway becomes a
:class:`GatewayError` whose message names the gateway and the cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Coroutine
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import httpx
from websockets.exceptions import InvalidHandshake, InvalidStatus

from ..gateway_config import GatewayConfig
from ..transport.gateway_connection import GatewayConnection

if TYPE_CHECKING:
    from ..config import KernelRuntimeConfig
    from ..run.workspace import Workspace

_log = logging.getLogger(__name__)

RETRY_FIRST_SECONDS = 0.1
KERNEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class GatewayError(Exception):
    """The gateway could not be reached, refused a request, or failed it."""


class GatewayLauncher:
    """Starts every kernel on the gateway in ``config.gateway`` (see the module docstring).
    The local workspace and environment a launcher is given do not apply: the kernel's
    environment is what the gateway allows of ``config.extra_env``."""

    preloads_runtime = False

    def __init__(self, config: KernelRuntimeConfig) -> None:
        if config.gateway is None:
            raise ValueError("GatewayLauncher needs config.gateway")
        self.config = config
        self.gateway: GatewayConfig = config.gateway
        self._http = httpx.AsyncClient(
            base_url=self.gateway.url, headers=self.gateway.auth_headers,
            verify=self.gateway.ssl_context(), timeout=self.gateway.request_seconds)
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, workspace: Workspace, env: dict[str, str]) -> GatewayKernel:
        """Create a kernel on the gateway and open its channels. Raises :class:`GatewayError`;
        a kernel created before a failure or cancellation is deleted."""
        seconds = self.config.startup_seconds
        creating = asyncio.ensure_future(self._create(seconds))
        try:
            kernel_id = await asyncio.shield(creating)
        except asyncio.CancelledError:
            self.background(self._delete_once_created(creating))  # close() waits for it
            raise
        try:
            async with asyncio.timeout(seconds):
                channels = await GatewayConnection.open(
                    self.gateway, kernel_id, max_message_bytes=self.config.max_message_bytes)
        except BaseException as error:
            self.background(self.delete(kernel_id))
            if isinstance(error, Exception):
                raise self._channels_error(error, seconds) from error
            raise
        return GatewayKernel(self, kernel_id, channels)

    async def _create(self, seconds: float) -> str:
        body: dict[str, Any] = {"env": dict(self.config.extra_env)}  # always sent: see docs
        if self.config.kernel_name is not None:
            body["name"] = self.config.kernel_name
        response = await self._request("POST", "/api/kernels", body=body, seconds=seconds,
                                       doing="start a kernel")
        try:
            kernel_id = response.json()["id"]
        except (ValueError, KeyError, TypeError):
            kernel_id = None
        if not isinstance(kernel_id, str) or not KERNEL_ID.fullmatch(kernel_id):
            raise GatewayError(f"the gateway at {self.gateway.url} answered the kernel start "
                               f"without a kernel id: {response.text[:200]!r}")
        return kernel_id

    async def _request(self, method: str, path: str, *, doing: str,
                       seconds: float | None = None, body: Any = None,
                       expect_gone: bool = False) -> httpx.Response:
        """One REST call; non-2xx answers (but 404 when ``expect_gone``) raise GatewayError."""
        url = self.gateway.url
        try:
            response = await self._http.request(
                method, path, json=body,
                timeout=seconds if seconds is not None else httpx.USE_CLIENT_DEFAULT)
        except httpx.TimeoutException:
            raise GatewayError(f"the gateway at {url} did not answer in time trying to "
                               f"{doing}") from None
        except httpx.HTTPError as error:
            raise GatewayError(f"cannot reach the gateway at {url} to {doing}: "
                               f"{error!r}") from None
        if response.is_success or (expect_gone and response.status_code == 404):
            return response
        raise GatewayError(describe_refusal(url, doing, response.status_code,
                                            response.reason_phrase, response.text))

    def _channels_error(self, error: Exception, seconds: float) -> GatewayError:
        where = f"the gateway at {self.gateway.url}"
        if isinstance(error, TimeoutError):
            return GatewayError(f"{where} did not connect the kernel's channels within "
                                f"{seconds:g} s")
        if isinstance(error, InvalidStatus):
            response = error.response
            body = response.body.decode("utf-8", "replace") if response.body else ""
            return GatewayError(describe_refusal(self.gateway.url, "open the kernel's websocket",
                                                 response.status_code, response.reason_phrase,
                                                 body))
        if isinstance(error, InvalidHandshake | OSError):
            return GatewayError(f"cannot open the kernel's websocket on {where}: {error}")
        return GatewayError(f"{where}: opening the kernel's websocket failed: {error!r}")

    async def interrupt(self, kernel_id: str) -> None:
        await self._request("POST", f"/api/kernels/{kernel_id}/interrupt",
                            doing="interrupt a kernel")

    async def exists(self, kernel_id: str) -> str | None:
        """``None`` while the gateway has the kernel alive, else why not. Unanswered
        checks count as alive (a gateway that is gone closes the websocket)."""
        try:
            response = await self._request("GET", f"/api/kernels/{kernel_id}",
                                           doing="check a kernel", expect_gone=True)
        except GatewayError:
            return None
        if response.status_code == 404:
            return "the remote kernel no longer exists on the gateway (deleted or culled)"
        with contextlib.suppress(ValueError, AttributeError):
            if response.json().get("execution_state") == "dead":
                return "the gateway reports the remote kernel dead"
        return None

    async def delete(self, kernel_id: str) -> None:
        """Delete the kernel, retrying while the gateway fails the request (it does while
        restarting a kernel that died) until ``shutdown_seconds``; never raises."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.gateway.shutdown_seconds
        delay = RETRY_FIRST_SECONDS
        while True:
            try:
                await self._request("DELETE", f"/api/kernels/{kernel_id}",
                                    doing="delete a kernel", expect_gone=True)
                return
            except GatewayError as error:
                if loop.time() + delay > give_up:
                    _log.warning("could not delete remote kernel %s (%s); the gateway's culler "
                                 "must reclaim it", kernel_id, error)
                    return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    def background(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run cleanup ``work`` as a task :meth:`close` waits for."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _delete_once_created(self, creating: asyncio.Future[str]) -> None:
        try:
            kernel_id = await creating
        except (Exception, asyncio.CancelledError):
            return
        await self.delete(kernel_id)

    async def close(self) -> None:
        """Wait for deletions in progress, then close the HTTP client."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))
        await self._http.aclose()


class GatewayKernel:
    """One kernel on the gateway (a :class:`~.launch.KernelProcess` with its own channels)."""

    def __init__(self, launcher: GatewayLauncher, kernel_id: str,
                 channels: GatewayConnection) -> None:
        self._launcher = launcher
        self.kernel_id = kernel_id
        self._channels = channels
        self._gone: str | None = None
        self._killed = False
        self._probe: asyncio.Task[None] | None = None
        self._next_probe = asyncio.get_running_loop().time() + launcher.gateway.liveness_seconds
        self._shutdown: asyncio.Task[None] | None = None

    @property
    def channels(self) -> GatewayConnection:
        return self._channels

    @property
    def connection_info(self) -> dict[str, Any]:
        return {"gateway": self._launcher.gateway.url, "kernel_id": self.kernel_id,
                "protocol": self._channels.protocol}

    @property
    def root_pid(self) -> int | None:
        return None  # no local process tree: no compute budget, no tree to reap

    async def is_alive(self) -> bool:
        """Cheap (called every 50 ms): the websocket's news, plus a REST check started
        in the background every ``liveness_seconds``."""
        if self._killed:
            return False
        if self._gone is None:
            self._gone = self._channels.gone
        if self._gone is None:
            self._maybe_probe()
        return self._gone is None

    def _maybe_probe(self) -> None:
        loop = asyncio.get_running_loop()
        if (self._probe is None or self._probe.done()) and loop.time() >= self._next_probe:
            self._next_probe = loop.time() + self._launcher.gateway.liveness_seconds
            self._probe = self._launcher.background(self._check())

    async def _check(self) -> None:
        gone = await self._launcher.exists(self.kernel_id)
        if gone is not None and self._gone is None:
            self._gone = gone

    def exit_reason(self) -> str:
        return self._gone or "the remote kernel is gone"

    async def interrupt(self) -> None:
        if not self._killed:
            await self._launcher.interrupt(self.kernel_id)

    async def kill(self) -> None:
        """Cut the kernel off at once (the websocket is closed: nothing it sends reaches the
        host any more) and delete it on the gateway in the background; :meth:`wait_gone`
        waits for the deletion. Until the gateway has shut it down (its graceful shutdown:
        typically ~0.2 s) the remote process may still run, unseen."""
        if self._killed:
            return
        self._killed = True
        self._channels.close()
        probe, self._probe = self._probe, None
        if probe is not None:
            probe.cancel()
        self._shutdown = self._launcher.background(self._stop(probe))

    async def _stop(self, probe: asyncio.Task[None] | None) -> None:
        if probe is not None:
            await asyncio.wait({probe})  # cancelled by kill; it used the same HTTP client
        deleting = asyncio.ensure_future(self._launcher.delete(self.kernel_id))
        with contextlib.suppress(Exception):
            await self._channels.aclose()
        await deleting

    async def wait_gone(self) -> None:
        if self._shutdown is not None:
            await asyncio.shield(self._shutdown)


def describe_refusal(url: str, doing: str, status: int, reason: str, body: str) -> str:
    """A gateway's non-2xx answer in words (the token is the usual suspect for 401/403)."""
    detail = _error_detail(body)
    if detail and reason.strip() == detail:
        # Enterprise Gateway sends its message as the reason phrase and again in the body:
        # say it once, after the status's own phrase.
        reason = _standard_phrase(status)
    status_line = f"{status} {reason}".strip()
    head = f"the gateway at {url} refused to {doing} (HTTP {status_line})"
    if status == 401:
        return f"{head}: the token was rejected; set GatewayConfig.token to the gateway's token"
    if status == 403:
        return f"{head}: {detail or 'forbidden'} (a wrong token, or a limit such as max_kernels)"
    return f"{head}: {detail}" if detail else head


def _standard_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _error_detail(body: str) -> str:
    """The useful line of a Jupyter server's JSON error body (``message``, ``reason`` or the
    traceback's last line), at most 300 characters."""
    try:
        error = json.loads(body)
    except ValueError:
        return body.strip()[:300]
    if not isinstance(error, dict):
        return ""
    lines = [line for line in str(error.get("traceback") or "").splitlines() if line.strip()]
    for candidate in (lines[-1] if lines else None, error.get("message"), error.get("reason")):
        if isinstance(candidate, str) and candidate.strip() and \
                candidate != "Unknown server error":
            return candidate.strip()[:300]
    return ""
