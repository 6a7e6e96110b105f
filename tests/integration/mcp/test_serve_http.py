"""``dsh-jupyter serve-mcp --http`` driven by the official MCP client over streamable HTTP:
the bearer token anywhere but 127.0.0.1, ::1 and localhost (401 without it), DNS rebinding
refused (421, 403), and calls, elicitation, cancellation and progress in both protocol
eras."""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/integration/mcp folder

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitResult, TextContent
from mcp_support import eventually
from serve_support import HttpServe, browser_posts, http_serve, serve_env, served_facts

from dsh_jupyter import ToolRegistry
from dsh_jupyter.kernel.run import removal
from dsh_jupyter.mcp import connect_mcp

pytestmark = pytest.mark.timeout(120)
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
ACCEPT = {"accept": "application/json, text/event-stream"}


@asynccontextmanager
async def connected(url: str, token: str | None = None, **client: Any) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx2.Timeout(30.0, read=120.0)
    async with (httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
                Client(streamable_http_client(url, http_client=http), **client) as session):
        yield session


def authority(url: str) -> tuple[str, int]:
    """``http://HOST:PORT/mcp`` as (``HOST:PORT``, PORT)."""
    here = url.split("/")[2]
    return here, int(here.rsplit(":", 1)[1])


def text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_bound_beyond_loopback_it_requires_the_bearer_token(tmp_path: Path) -> None:
    facts = tmp_path / "facts"
    with http_serve(facts, "--http", "0.0.0.0:0") as server:
        assert server.url.startswith("http://0.0.0.0:")
        assert server.token  # generated and printed
        url = server.url.replace("0.0.0.0", "127.0.0.1")
        _, port = authority(url)
        async with httpx2.AsyncClient() as http:
            anonymous = await http.post(url, json=LIST, headers=ACCEPT)
            wrong = await http.post(url, json=LIST,
                                    headers={**ACCEPT, "Authorization": "Bearer nope"})
        # Even with the token (a page cannot have it), a rebound name is misdirected.
        rebound = await browser_posts(url, host=f"attacker.example:{port}",
                                      origin=f"http://attacker.example:{port}",
                                      token=server.token)
        async with connected(url, server.token) as client:
            names = [tool.name for tool in (await client.list_tools()).tools]
            added = await client.call_tool("add", {"a": 2, "b": 5})
    assert server.process.returncode == 0  # SIGTERM stops it cleanly
    assert anonymous.status_code == 401 and wrong.status_code == 401
    assert anonymous.headers["www-authenticate"] == "Bearer"
    assert rebound == (421, 421) and served_facts(facts) == []
    assert "add" in names and text(added) == "7"


async def test_on_127_0_0_2_a_token_is_required_and_a_rebound_page_is_misdirected(
        tmp_path: Path) -> None:
    # 127.0.0.2 is loopback, but not one of the three local names: a token is generated,
    # and Host must be 127.0.0.2:PORT (the SDK's own check left this bind unchecked).
    facts = tmp_path / "facts"
    with http_serve(facts, "--http", "127.0.0.2:0") as server:
        assert server.url.startswith("http://127.0.0.2:")
        here, port = authority(server.url)
        page = f"attacker.example:{port}"
        rebound = await browser_posts(server.url, host=page, origin=f"http://{page}")
        with_token = await browser_posts(server.url, host=page, origin=f"http://{page}",
                                         token=server.token)
        local_name = await browser_posts(server.url, host=f"localhost:{port}",
                                         token=server.token)
        anonymous = await browser_posts(server.url, host=here)
        async with connected(server.url, server.token) as client:
            forecast = await client.call_tool("forecast", {"city": "Oslo"})
    assert rebound == with_token == (421, 421)  # the Host decides, token or not
    assert server.token  # generated and printed
    assert local_name == (421, 421)  # localhost is 127.0.0.1 or ::1, never 127.0.0.2
    assert anonymous == (401, 401)
    assert forecast.structured_content == {"city": "Oslo", "high_c": 14.5}
    assert served_facts(facts) == ["forecast Oslo"]  # the refused calls never ran


async def test_on_127_0_0_1_host_and_origin_must_name_this_server_and_port(
        tmp_path: Path) -> None:
    facts = tmp_path / "facts"
    with http_serve(facts, "--http", "127.0.0.1:0") as server:
        assert server.token is None  # 127.0.0.1 needs none
        here, port = authority(server.url)
        other = 8888 if port != 8888 else 8889  # another local web app (JupyterLab, say)
        page = f"attacker.example:{port}"
        rebound = await browser_posts(server.url, host=page, origin=f"http://{page}")
        other_port = await browser_posts(server.url, host=f"127.0.0.1:{other}")
        other_app = await browser_posts(server.url, host=here, origin=f"http://localhost:{other}")
        own_page = await browser_posts(server.url, host=f"localhost:{port}",
                                       origin=f"http://localhost:{port}")
        async with connected(server.url) as client:
            forecast = await client.call_tool("forecast", {"city": "Oslo"})
    assert rebound == (421, 421)
    assert other_port == (421, 421)  # the SDK's list took 127.0.0.1 on any port
    assert other_app == (403, 403)  # ... and an Origin of localhost on any port
    assert own_page == (200, 200)  # a page this server served may call it
    assert forecast.structured_content == {"city": "Oslo", "high_c": 14.5}
    assert served_facts(facts) == [f"forecast localhost:{port}", "forecast Oslo"]


async def test_a_given_token_is_required_on_loopback_too(tmp_path: Path) -> None:
    with http_serve(tmp_path / "facts", "--http", "127.0.0.1:0", "--token", "s3cret") as server:
        assert server.token is None  # given, so not printed
        async with httpx2.AsyncClient() as http:
            anonymous = await http.post(server.url, json=LIST, headers=ACCEPT)
        async with connected(server.url, "s3cret") as client:
            added = await client.call_tool("add", {"a": 1, "b": 1})
    assert anonymous.status_code == 401 and text(added) == "2"


@pytest.mark.parametrize("era", ["legacy", "auto"])
async def test_elicitation_cancellation_and_progress_over_http(tmp_path: Path, era: str) -> None:
    facts = tmp_path / "facts"
    actions = ["accept", "decline"]

    async def answer(_context: Any, _params: Any) -> ElicitResult:
        return ElicitResult(action=actions.pop(0))  # type: ignore[arg-type]

    seen: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    with http_serve(facts, "--http", "127.0.0.1:0", "--mode", "both") as server:
        async with connected(server.url, mode=era, elicitation_callback=answer) as client:
            approved = await client.call_tool("delete_file", {"path": "a.txt"})
            declined = await client.call_tool("delete_file", {"path": "b.txt"})
            call = asyncio.create_task(client.call_tool("slow", {"tag": "http"}))
            await eventually(lambda: "start http" in served_facts(facts))
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await eventually(lambda: len(served_facts(facts)) == 3)
            program = await client.call_tool("run_code", {
                "description": "two sums",
                "code": 'return [await tools.add({"a": 1, "b": i}) for i in range(2)]'},
                progress_callback=on_progress)
    assert text(approved) == "deleted a.txt"
    assert declined.is_error and "rejected by user: declined in the MCP client" in text(declined)
    assert served_facts(facts) == ["deleted a.txt", "start http",
                                   "signal http: cancelled by the MCP client"]
    assert program.structured_content == {"logs": [], "result": [1, 2]}
    assert [str(m).split(" (")[0] for m in seen] == ["add started", "add done"] * 2


async def test_sigterm_with_a_listening_client_exits_at_once_and_quietly(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # dsh-jupyter's own client keeps a subscriptions/listen stream open (2026 era): uvicorn
    # used to wait its 5 s graceful timeout for it, then cancel it with a traceback.
    caplog.set_level(logging.DEBUG, logger="dsh_jupyter.mcp.connection")
    server = HttpServe(tmp_path / "facts", "--http", "127.0.0.1:0")
    try:
        async with connect_mcp(ToolRegistry(), url=server.url) as connection:
            # Nothing to wait for: entering waited for the server's ack of the listen stream
            # (the SDK's listen() returns on it); a listen that failed is logged.
            tools = connection.client.server_capabilities.tools
            assert tools is not None and tools.list_changed
            assert "not listening for tool changes" not in caplog.text
            server.process.terminate()
            stopping = time.monotonic()
            await eventually(lambda: server.process.poll() is not None, seconds=30)
            took = time.monotonic() - stopping
    finally:
        returncode = server.stop()
    assert "Traceback" not in server.stderr and "ERROR" not in server.stderr, server.stderr
    assert took < 3.0, f"serve-mcp took {took:.1f} s to stop"
    assert returncode == 0


MESS = """\
import os
fd = os.open(".", os.O_RDONLY)
for _ in range(3_000):
    os.mkdir("d", dir_fd=fd)
    below = os.open("d", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = below
os.mkdir("locked", 0o000, dir_fd=fd)
os.close(fd)
os.chmod(".", 0o555)
return "left a mess"
"""


async def test_a_program_that_leaves_a_deep_locked_tree_does_not_fail_the_server(
        tmp_path: Path) -> None:
    """shutil.rmtree's RecursionError on a 3,000-deep tree used to escape the runtime's
    exit: serve-mcp then exited 1 and left the workspace behind."""
    temp = Path(tempfile.mkdtemp(prefix="dshmcp-"))  # short: kernels' socket paths live there
    env = {**serve_env(tmp_path / "facts"), "TMPDIR": str(temp)}
    server = HttpServe(tmp_path / "facts", "--http", "127.0.0.1:0", "--mode", "code", env=env)
    try:
        async with connected(server.url) as client:
            program = await client.call_tool("run_code", {"description": "a mess",
                                                          "code": MESS})
        assert program.structured_content == {"logs": [], "result": "left a mess"}
        assert server.stop() == 0, server.stderr
        assert "Traceback" not in server.stderr
        assert not list(temp.iterdir())  # noqa: ASYNC240  # a directory listing
    finally:
        server.stop()
        removal.remove_tree(temp)
