"""``dsh-jupyter serve-mcp --http`` driven by the official MCP client over streamable HTTP:
the bearer token off loopback (401 without it), and calls, elicitation, cancellation and
progress in both protocol eras."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to this tests/mcp folder

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitResult, TextContent
from mcp_support import eventually
from serve_support import HttpServe, http_serve, serve_env, served_facts

from dsh_jupyter.kernel import removal

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


def text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_bound_beyond_loopback_it_requires_the_bearer_token(tmp_path: Path) -> None:
    with http_serve(tmp_path / "facts", "--http", "0.0.0.0:0") as server:
        assert server.url.startswith("http://0.0.0.0:")
        assert server.token  # generated and printed
        url = server.url.replace("0.0.0.0", "127.0.0.1")
        async with httpx2.AsyncClient() as http:
            anonymous = await http.post(url, json=LIST, headers=ACCEPT)
            wrong = await http.post(url, json=LIST,
                                    headers={**ACCEPT, "Authorization": "Bearer nope"})
        async with connected(url, server.token) as client:
            names = [tool.name for tool in (await client.list_tools()).tools]
            added = await client.call_tool("add", {"a": 2, "b": 5})
    assert server.process.returncode == 0  # SIGTERM stops it cleanly
    assert anonymous.status_code == 401 and wrong.status_code == 401
    assert anonymous.headers["www-authenticate"] == "Bearer"
    assert "add" in names and text(added) == "7"


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
