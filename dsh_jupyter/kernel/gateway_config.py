"""Where remote kernels come from: :class:`GatewayConfig` (standard library only).

Set ``KernelRuntimeConfig(gateway=GatewayConfig(url=..., token=...))`` and every
run's kernel is started on a Jupyter Kernel Gateway or Enterprise Gateway
instead of this machine (see ``docs/remote-kernels.md``)::

    config = KernelRuntimeConfig(
        gateway=GatewayConfig(url="https://gateway.example:8888", token=token),
        kernel_name="python3",        # a kernelspec on the gateway; None: its default
        extra_env={"KERNEL_USERNAME": "evaluator"},   # sent with every start
        wall_seconds=120,
    )
"""

from __future__ import annotations

import math
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayConfig:
    """A kernel gateway reached over HTTP(S) and WebSocket.

    - ``url``: the gateway's base URL, ``http(s)://host:port[/base_url]``.
    - ``token``: sent as ``Authorization: token <token>`` on every request and on
      the websocket handshake (the gateway's ``KG_AUTH_TOKEN`` / ``EG_AUTH_TOKEN``).
      Never shown by ``repr``.
    - ``headers``: more HTTP headers (an authenticating proxy's, say); hidden from
      ``repr`` too.
    - ``verify``: TLS verification for ``https``/``wss``: ``True``, ``False`` or the
      path of a CA bundle.
    - ``request_seconds``: timeout of each REST call except the kernel start (that
      one gets the runtime's ``startup_seconds``).
    - ``ping_seconds``: websocket keepalive; a gateway that does not answer a ping
      within this long counts as gone.
    - ``liveness_seconds``: how often a running kernel's existence is checked over
      REST (it catches kernels deleted or culled on the gateway).
    - ``shutdown_seconds``: how long deleting a kernel may keep retrying.
    """

    url: str
    token: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    verify: bool | str = True
    request_seconds: float = 30.0
    ping_seconds: float = 10.0
    liveness_seconds: float = 2.0
    shutdown_seconds: float = 10.0

    def __post_init__(self) -> None:
        if not isinstance(self.url, str):
            raise ValueError("gateway url must be a string")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"gateway url must be http(s)://host[:port][/base], not {self.url!r}")
        if parts.username is not None or parts.password is not None:
            raise ValueError("gateway url must not carry credentials (they would show up in "
                             "messages): pass token=... or headers=...")
        if parts.query or parts.fragment:
            raise ValueError("gateway url must not have a query or fragment (pass the token "
                             "as token=...)")
        if self.token is not None and (not isinstance(self.token, str) or not self.token
                                       or not self.token.isprintable()):
            raise ValueError("token must be a non-empty printable string or None")
        headers = dict(self.headers)
        if not all(isinstance(k, str) and k and isinstance(v, str)
                   and not any(c in "\r\n" for c in k + v) for k, v in headers.items()):
            raise ValueError("headers must map header names to single-line strings")
        if not isinstance(self.verify, bool | str):
            raise ValueError("verify must be True, False or the path of a CA bundle")
        for name in ("request_seconds", "ping_seconds", "liveness_seconds", "shutdown_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, not {value!r}")
        object.__setattr__(self, "url", self.url.rstrip("/"))
        object.__setattr__(self, "headers", MappingProxyType(headers))

    @property
    def auth_headers(self) -> dict[str, str]:
        """The headers every request and handshake carries."""
        headers = dict(self.headers)
        if self.token is not None:
            headers["Authorization"] = f"token {self.token}"
        return headers

    @property
    def websocket_url(self) -> str:
        """``url`` with ``ws``/``wss`` for ``http``/``https``."""
        scheme, rest = self.url.split(":", 1)
        return ("wss:" if scheme == "https" else "ws:") + rest

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context for ``https``/``wss`` that ``verify`` asks for."""
        if isinstance(self.verify, str):
            return ssl.create_default_context(cafile=self.verify)
        context = ssl.create_default_context()
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context
