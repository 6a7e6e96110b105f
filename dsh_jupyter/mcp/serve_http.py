"""The streamable-HTTP transport of a served registry: the SDK's ASGI app under uvicorn,
in the caller's event loop, behind a bearer token when one is set.

uvicorn's own signal handlers are left out: the ``async with serve_mcp(...)`` block (or the
``serve-mcp`` command) decides when the server stops. Stopping first tells every request
still open that its client went away (:class:`DisconnectOnStop`), so a session's SSE
stream ends on its own instead of being cancelled by uvicorn after its graceful timeout,
which took 5 s and printed a traceback.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

from ..errors import RegistrationError

__all__ = ["BearerTokenApp", "DisconnectOnStop", "HttpTransport", "is_loopback"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
UNAUTHORIZED = b'{"error": "unauthorized: send Authorization: Bearer <token>"}'


class HttpTransport:
    """``app`` served at ``url`` (``http://HOST:PORT/mcp``); the socket is bound on
    construction, so port 0 resolves to a free port at once."""

    def __init__(self, app: Any, host: str, port: int, token: str | None) -> None:
        self._open = DisconnectOnStop(app)
        self._app = BearerTokenApp(self._open, token) if token is not None else self._open
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind((host, port))
        except OSError as exc:
            self._socket.close()
            raise RegistrationError(f"cannot bind {host}:{port}: {exc}") from None
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        self.url = f"http://{shown}:{self._socket.getsockname()[1]}/mcp"
        self._server: Any = None

    async def start(self) -> asyncio.Task[None]:
        """Serve in a new task, returned once uvicorn has started (or raise why it did not)."""
        import uvicorn

        config = uvicorn.Config(self._app, log_level="warning", lifespan="on",
                                timeout_graceful_shutdown=5)
        self._server = _quiet_server(config)
        task = asyncio.create_task(self._serve(), name="mcp http server")
        while not self._server.started:
            if task.done():
                await task  # raises what stopped it
                raise RegistrationError(f"the HTTP server on {self.url} stopped at startup")
            await asyncio.sleep(0.01)
        return task

    def stop(self) -> None:
        """End the open requests' streams, and ask uvicorn to stop (it closes connections,
        waiting at most 5 s for requests)."""
        self._open.stop()
        if self._server is not None:
            self._server.should_exit = True

    async def _serve(self) -> None:
        with self._socket:
            await self._server.serve(sockets=[self._socket])


def _quiet_server(config: Any) -> Any:
    import uvicorn

    class QuietServer(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return QuietServer(config)


class DisconnectOnStop:
    """ASGI middleware: once :meth:`stop` is called, an HTTP request that has read its whole
    body and waits for more from its client is told the client disconnected
    (``http.disconnect``). A long-lived response (the SSE stream a handshake-era session
    keeps open) waits for exactly that and ends cleanly, so uvicorn's shutdown need not
    cancel it; a request still reading its body reads it as sent."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        body_read = told = started = complete = False

        async def receive_until_stopped() -> MutableMapping[str, Any]:
            nonlocal body_read, told
            if not body_read:
                received = await receive()
                body_read = received["type"] != "http.request" or not received.get("more_body")
                return received
            if not self._stopping.is_set():
                message = asyncio.ensure_future(receive())
                stopping = asyncio.ensure_future(self._stopping.wait())
                try:
                    await asyncio.wait({message, stopping}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stopping.cancel()
                    if not message.done():
                        message.cancel()
                if message.done() and not message.cancelled():
                    return message.result()
            told = True
            return {"type": "http.disconnect"}

        async def tracking_send(message: MutableMapping[str, Any]) -> None:
            nonlocal started, complete
            started = started or message["type"] == "http.response.start"
            complete = complete or (message["type"] == "http.response.body"
                                    and not message.get("more_body"))
            await send(message)

        await self._app(scope, receive_until_stopped, tracking_send)
        if told and not complete:
            # The client is still there: end the response the app left open (as it may
            # after a disconnect), or uvicorn logs it as an error.
            if not started:
                await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class BearerTokenApp:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get 401."""

    def __init__(self, app: Any, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer"),
                                        (b"content-length", str(len(UNAUTHORIZED)).encode())]})
                await send({"type": "http.response.body", "body": UNAUTHORIZED})
                return
        await self._app(scope, receive, send)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
