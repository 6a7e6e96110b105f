"""The streamable-HTTP transport of a served registry: the SDK's ASGI app under uvicorn,
in the caller's event loop, behind two request checks.

- :class:`HostCheckApp` stops DNS rebinding: a request's ``Host`` must name the address it
  reached, with the port served (``localhost`` too when that address is 127.0.0.1 or
  ::1), or a name the user allowed; else 421. An ``Origin`` must name the same; else 403.
  It replaces the SDK's own check, whose list knows only 127.0.0.1, localhost and ::1 (on
  any port), so another bind (127.0.0.2, 0.0.0.0) would otherwise go unchecked.
- :class:`BearerTokenApp` then requires ``Authorization: Bearer <token>`` when a token is
  set (always, unless bound to 127.0.0.1, ::1 or localhost: :func:`needs_token`); else 401.

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
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

from ..errors import RegistrationError

__all__ = ["BearerTokenApp", "DisconnectOnStop", "HostCheckApp", "HttpTransport",
           "allowed_host", "needs_token"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
UNAUTHORIZED = b'{"error": "unauthorized: send Authorization: Bearer <token>"}'
MISDIRECTED = (b'{"error": "misdirected request: the Host header does not name this server '
               b'(its operator can allow a name with --allow-host)"}')
FORBIDDEN_ORIGIN = b'{"error": "forbidden: the Origin header does not name this server"}'
_LOCAL = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))
_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?")


class HttpTransport:
    """``app`` served at ``url`` (``http://HOST:PORT/mcp``); the socket is bound on
    construction, so port 0 resolves to a free port at once."""

    def __init__(self, app: Any, host: str, port: int, token: str | None,
                 allow_hosts: Iterable[str] = ()) -> None:
        self._open = DisconnectOnStop(app)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind((host, port))
        except OSError as exc:
            self._socket.close()
            raise RegistrationError(f"cannot bind {host}:{port}: {exc}") from None
        bound_port = self._socket.getsockname()[1]
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        self.url = f"http://{shown}:{bound_port}/mcp"
        guarded = BearerTokenApp(self._open, token) if token is not None else self._open
        self._app = HostCheckApp(guarded, host=host, port=bound_port, allow_hosts=allow_hosts)
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
                await _refuse(send, 401, UNAUTHORIZED, (b"www-authenticate", b"Bearer"))
                return
        await self._app(scope, receive, send)


class HostCheckApp:
    """ASGI middleware against DNS rebinding (a web page whose name the attacker points at
    this server, so the victim's browser talks to it as that page's origin).

    A request's ``Host`` must name the address the connection reached (so on a 0.0.0.0 bind
    the interface it came in on), or the bound host as given, in either case with ``port``;
    ``localhost`` counts when that address is 127.0.0.1 or ::1. A name in ``allow_hosts``
    (see :func:`allowed_host`) is accepted on any port, for a reverse proxy that forwards
    its own port. Anything else, a missing or repeated ``Host`` included, gets 421
    Misdirected Request. An ``Origin`` header (browsers send one; other clients need not)
    must be ``http://`` or ``https://`` and name what ``Host`` may name, else 403.
    """

    def __init__(self, app: Any, *, host: str, port: int, allow_hosts: Iterable[str] = ()
                 ) -> None:
        self._app = app
        self._bound = _canonical_host(host)
        self._port = port
        self._allowed = frozenset(allowed_host(name) for name in allow_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            hosts = _header_values(scope, b"host")
            origins = _header_values(scope, b"origin")
            reached = (scope.get("server") or (self._bound, self._port))[0]
            names = self._names(reached)
            if len(hosts) != 1 or not self._allows(_split_authority(hosts[0], 80), names):
                await _refuse(send, 421, MISDIRECTED)
                return
            if origins and (len(origins) > 1 or not self._allows(_split_origin(origins[0]),
                                                                  names)):
                await _refuse(send, 403, FORBIDDEN_ORIGIN)
                return
        await self._app(scope, receive, send)

    def _names(self, reached: str) -> frozenset[str]:
        """What a Host may name, with the served port, on a connection that reached the
        address ``reached``."""
        names = {self._bound, _canonical_host(reached)}
        if _is_local(reached):
            names.add("localhost")
        return frozenset(names)

    def _allows(self, authority: tuple[str, int] | None, names: frozenset[str]) -> bool:
        if authority is None:
            return False
        host, port = authority
        return host in self._allowed or (host in names and port == self._port)


def needs_token(host: str) -> bool:
    """Whether serving HTTP on ``host`` requires a bearer token: on any address but 127.0.0.1,
    ::1 and localhost, the names every client means by "this machine only". Another
    loopback address (127.0.0.2) is not special to browsers or clients, and a wildcard or
    LAN address reaches other machines."""
    return not (host.lower() == "localhost" or _is_local(host))


def allowed_host(name: str) -> str:
    """``name`` as an extra host to answer for (``--allow-host``): a DNS name or an IP
    address, without scheme, port or path; returned in the form :class:`HostCheckApp`
    compares (lower case, IPv6 without brackets). Raises ``RegistrationError`` otherwise."""
    if isinstance(name, str):
        bare = name.strip().lower()
        bare = bare[1:-1] if bare.startswith("[") and bare.endswith("]") else bare
        try:
            return _canonical_host(str(ipaddress.ip_address(bare)))
        except ValueError:
            if _HOST_NAME.fullmatch(bare) and ".." not in bare:
                return bare
    raise RegistrationError(f"allowed host {name!r}: expected a host name or an IP address "
                            f"(no scheme, port or path), such as mcp.example.com")


def _is_local(host: str) -> bool:
    try:
        return _unmapped(ipaddress.ip_address(host.strip("[]"))) in _LOCAL
    except ValueError:
        return False


def _unmapped(address: ipaddress.IPv4Address | ipaddress.IPv6Address
              ) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """``::ffff:127.0.0.1`` (an IPv4 client of a dual-stack socket) as ``127.0.0.1``."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _canonical_host(host: str) -> str:
    """A host name in lower case, or an IP address in its short form (IPv6 unbracketed)."""
    try:
        return str(_unmapped(ipaddress.ip_address(host.strip("[]"))))
    except ValueError:
        return host.lower()


def _split_authority(authority: str, default_port: int) -> tuple[str, int] | None:
    """``HOST[:PORT]`` (IPv6 in brackets) as (canonical host, port), or ``None`` if
    malformed."""
    if authority.startswith("["):
        host, bracket, rest = authority[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return None
    else:
        host, _, port_text = authority.partition(":")
        if ":" in port_text:
            return None
    if not host:
        return None
    if not port_text:
        return _canonical_host(host), default_port
    if not (port_text.isascii() and port_text.isdigit()) or int(port_text) > 65535:
        return None
    return _canonical_host(host), int(port_text)


def _split_origin(origin: str) -> tuple[str, int] | None:
    """An ``Origin`` (``scheme://HOST[:PORT]``) as its host and port; ``None`` for ``null``,
    other schemes and anything malformed."""
    scheme, separator, authority = origin.partition("://")
    default_port = {"http": 80, "https": 443}.get(scheme.lower())
    if not separator or default_port is None or "/" in authority or "@" in authority:
        return None
    return _split_authority(authority, default_port)


def _header_values(scope: Scope, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in scope.get("headers") or ()
            if key.lower() == name]


async def _refuse(send: Send, status: int, body: bytes, *headers: tuple[bytes, bytes]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *headers,
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
