"""Which ``Host`` and ``Origin`` a served registry answers (DNS rebinding), and when it needs a
token: the rule on scripted ASGI requests, then ``serve_mcp`` in process on ::1, on wildcard
binds reached through different addresses, and with ``allow_hosts``."""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/unit/mcp folder

from serve_support import LOG_ENV, browser_posts, served_facts, served_registry

from dsh_jupyter.errors import RegistrationError
from dsh_jupyter.mcp import serve_mcp
from dsh_jupyter.mcp.serve_http import HostCheckApp, allowed_host, needs_token

pytestmark = pytest.mark.timeout(60)


async def status_of(*, bound: str = "127.0.0.1", reached: str = "127.0.0.1", port: int = 8000,
                    hosts: tuple[str, ...] = (), origins: tuple[str, ...] = (),
                    allow: tuple[str, ...] = ()) -> int:
    """The status a request gets from :class:`HostCheckApp` (200: it reached the app)."""
    sent: list[MutableMapping[str, Any]] = []

    async def app(_scope: Any, _receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request", "body": b""}

    headers = [(b"host", h.encode()) for h in hosts] + [(b"origin", o.encode()) for o in origins]
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers,
             "server": (reached, port)}
    await HostCheckApp(app, host=bound, port=port, allow_hosts=allow)(scope, receive, send)
    status = sent[0]["status"]
    assert isinstance(status, int)
    return status


@pytest.mark.parametrize(("request_from", "expected"), [
    ({"hosts": ("127.0.0.1:8000",)}, 200),
    ({"hosts": ("LocalHost:8000",)}, 200),
    ({"hosts": ("127.0.0.1:8000",), "origins": ("HTTP://localhost:8000",)}, 200),
    ({"hosts": ("127.0.0.1:8000",), "origins": ("https://127.0.0.1:8000",)}, 200),  # a TLS proxy
    ({"hosts": ()}, 421),
    ({"hosts": ("127.0.0.1:8000", "127.0.0.1:8000")}, 421),
    ({"hosts": ("127.0.0.1",)}, 421),  # port 80
    ({"hosts": ("127.0.0.1:8000:1",)}, 421),
    ({"hosts": ("127.0.0.1:99999",)}, 421),
    ({"hosts": ("[::1]:8000",)}, 421),  # not the address reached
    ({"hosts": ("[::1:8000",)}, 421),
    ({"hosts": ("localhost.:8000",)}, 421),
    ({"hosts": ("127.0.0.1:8000",), "origins": ("null",)}, 403),
    ({"hosts": ("127.0.0.1:8000",), "origins": ("file://",)}, 403),
    ({"hosts": ("127.0.0.1:8000",), "origins": ("http://localhost:8000/mcp",)}, 403),
    ({"hosts": ("127.0.0.1:8000",), "origins": ("http://u@localhost:8000",)}, 403),
    ({"hosts": ("127.0.0.1:8000",), "origins": ("http://localhost:8000",) * 2}, 403),
    ({"hosts": ("127.0.0.1:8000",), "origins": ("http://localhost:3000",)}, 403),
    # a dual-stack socket sees IPv4 clients as ::ffff:a.b.c.d
    ({"bound": "::", "reached": "::ffff:127.0.0.1", "hosts": ("127.0.0.1:8000",)}, 200),
    ({"bound": "::", "reached": "::ffff:127.0.0.1", "hosts": ("localhost:8000",)}, 200),
    ({"bound": "::", "reached": "::1", "hosts": ("[0:0::1]:8000",)}, 200),
    ({"bound": "0.0.0.0", "reached": "192.0.2.7", "hosts": ("192.0.2.7:8000",)}, 200),
    ({"bound": "0.0.0.0", "reached": "192.0.2.7", "hosts": ("localhost:8000",)}, 421),
    ({"bound": "0.0.0.0", "reached": "192.0.2.7", "hosts": ("mcp.test:8000",)}, 421),
    ({"bound": "0.0.0.0", "reached": "192.0.2.7", "hosts": ("mcp.test",),
      "allow": ("MCP.test",)}, 200),
    ({"bound": "0.0.0.0", "reached": "192.0.2.7", "hosts": ("mcp.test:8443",),
      "origins": ("https://mcp.test:8443",), "allow": ("mcp.test",)}, 200),
])
async def test_the_host_must_name_the_address_reached_and_the_origin_too(
        request_from: dict[str, Any], expected: int) -> None:
    assert await status_of(**request_from) == expected


def test_only_127_0_0_1_ipv6_loopback_and_localhost_go_without_a_token() -> None:
    assert [host for host in ("127.0.0.1", "::1", "0:0::1", "localhost", "LOCALHOST",
                              "127.0.0.2", "127.1.2.3", "0.0.0.0", "::", "192.0.2.7",
                              "myhost.lan") if not needs_token(host)] == [
        "127.0.0.1", "::1", "0:0::1", "localhost", "LOCALHOST"]
    registry = served_registry()
    assert serve_mcp(registry, http="127.0.0.2:0").token  # generated
    assert serve_mcp(registry, http="[::1]:0").token is None
    assert serve_mcp(registry, http="localhost:0").token is None


def test_allowed_hosts_are_names_or_addresses_only() -> None:
    assert allowed_host("MCP.Example.com") == "mcp.example.com"
    assert allowed_host("[FD00::2]") == allowed_host("fd00::2") == "fd00::2"
    assert allowed_host("10.0.0.5") == "10.0.0.5"
    for bad in ("http://mcp.example.com", "mcp.example.com:8443", "mcp.example.com/mcp", "*",
                "*.example.com", "", "a..b", "-a"):
        with pytest.raises(RegistrationError, match="expected a host name or an IP address"):
            allowed_host(bad)
    registry = served_registry()
    with pytest.raises(RegistrationError, match="allow_hosts applies to http"):
        serve_mcp(registry, allow_hosts=["mcp.example.com"])
    with pytest.raises(RegistrationError, match="a list of names"):
        serve_mcp(registry, http="0", allow_hosts="mcp.example.com")


async def test_on_ipv6_loopback_the_host_is_bracketed_and_localhost_counts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOG_ENV, str(tmp_path / "facts"))
    async with serve_mcp(served_registry(), http="[::1]:0") as service:
        assert service.url is not None and service.url.startswith("http://[::1]:")
        port = int(service.url.split("]:")[1].split("/")[0])
        bracketed = await browser_posts(service.url, host=f"[::1]:{port}",
                                        origin=f"http://[::1]:{port}")
        local_name = await browser_posts(service.url, host=f"localhost:{port}")
        ipv4 = await browser_posts(service.url, host=f"127.0.0.1:{port}")
    assert bracketed == local_name == (200, 200)
    assert ipv4 == (421, 421)  # the SDK's list took 127.0.0.1 here too
    assert served_facts(tmp_path / "facts") == [f"forecast [::1]:{port}",
                                                f"forecast localhost:{port}"]


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "[::]"])
async def test_on_a_wildcard_bind_the_host_names_the_address_each_request_reached(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wildcard: str) -> None:
    # 127.0.0.2 stands in for a second interface: the same server, another address.
    monkeypatch.setenv(LOG_ENV, str(tmp_path / "facts"))
    async with serve_mcp(served_registry(), http=f"{wildcard}:0", token="t") as service:
        assert service.url is not None
        port = int(service.url.rsplit(":", 1)[1].split("/")[0])
        asked = [("127.0.0.1", "127.0.0.1"), ("127.0.0.1", "localhost"),
                 ("127.0.0.1", wildcard),  # the printed URL's host
                 ("127.0.0.2", "127.0.0.2"), ("127.0.0.2", "127.0.0.1"),
                 ("127.0.0.2", "localhost"), ("127.0.0.2", "attacker.example")]
        statuses = [(await browser_posts(f"http://{address}:{port}/mcp", host=f"{host}:{port}",
                                         token="t"))[0] for address, host in asked]
    assert statuses == [200, 200, 200, 200, 421, 421, 421]
    assert len(served_facts(tmp_path / "facts")) == 4


async def test_allowed_hosts_are_answered_on_any_port(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOG_ENV, str(tmp_path / "facts"))
    async with serve_mcp(served_registry(), http="127.0.0.2:0",
                         allow_hosts=["MCP.example.com", "[fd00::2]"]) as service:
        assert service.url is not None and service.token is not None
        token = service.token
        proxied = await browser_posts(service.url, host="mcp.example.com",
                                      origin="https://mcp.example.com", token=token)
        other_port = await browser_posts(service.url, host="mcp.example.com:8443",
                                         origin="https://mcp.example.com:8443", token=token)
        address = await browser_posts(service.url, host="[fd00::2]:9000", token=token)
        other_name = await browser_posts(service.url, host="other.example.com", token=token)
        anonymous = await browser_posts(service.url, host="mcp.example.com")
    assert proxied == other_port == address == (200, 200)
    assert other_name == (421, 421)
    assert anonymous == (401, 401)  # an allowed name still needs the token
    assert served_facts(tmp_path / "facts") == [
        "forecast mcp.example.com", "forecast mcp.example.com:8443", "forecast [fd00::2]:9000"]
