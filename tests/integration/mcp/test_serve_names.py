"""A ``run_code`` program's hostile names and text, served by ``dsh-jupyter serve-mcp`` and read
by the official MCP client over stdio and streamable HTTP.

The program (on a real, confined kernel) writes files whose names hold bytes that are not
UTF-8, ESC, a newline, a C1 control, U+202E and a backslash, prints text with terminal
escapes, C1 and bidi controls, a name that is not UTF-8 and what each file holds, and
returns a value with an ESC in a key and U+202E in a string. The client must get a result
whose names are escaped one to one, whose text holds no raw control character, and which
still carries what the files hold. Before, a lone surrogate of a name failed the reply:
over stdio the server could not serialize it and the client never heard back; over HTTP
the client got a body it could not parse.

The files' bytes stay with the server's host (``result.attachments``): an MCP client reads
names, sizes and types, as a model does, and what the program printed.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/integration/mcp folder

import httpx2
from mcp import Client, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent
from serve_support import http_serve, stdio_params

pytestmark = [pytest.mark.timeout(120), pytest.mark.kernel]

PROGRAM = r"""
import os
names = [b"bad\xff\xfe.bin", b"esc\x1b[31mred.txt", b"new\nline.txt", "c1\x85next.txt".encode(),
         "bidi\u202egnp.exe".encode(), b"back\\slash.txt"]
for index, name in enumerate(names):
    with open(b"outputs/" + name, "wb") as file:
        file.write(b"content %d" % index)
print("esc \x1b[2J\x1b]0;title\x07 | c1 \x85 | bidi \u202eevil | tab\there | cr 10%\r100%")
print(os.fsdecode(b"bad\xff\xfe.bin"))
listed = sorted(os.listdir("outputs"))
for name in listed:
    with open(os.path.join("outputs", name), "rb") as file:
        print(file.read().decode())
return {"files": len(listed), "note \x1b[1m": "\u202eevil"}
"""

ESCAPED_NAMES = ["back\\\\slash.txt", "bad\\xff\\xfe.bin", "bidi\\u202egnp.exe",
                 "c1\\u0085next.txt", "esc\\x1b[31mred.txt", "new\\nline.txt"]
"""The files' names as served, in the order the run lists them (the raw names' order)."""
RETURNED = {"files": 6, "note \\x1b[1m": "\\u202eevil"}
LOGS = ["esc \\x1b[2J\\x1b]0;title\\x07 | c1 \\u0085 | bidi \\u202eevil | tab\there | "
        "cr 10%\\r100%",
        "bad\\xff\\xfe.bin",
        # What each file holds, in the listing's order (the program wrote content <index>).
        "content 5", "content 0", "content 4", "content 3", "content 1", "content 2"]
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
                 "\ud800-\udfff]")
"""What no text a client receives may hold (a tab and a newline are text)."""


def check(result: Any) -> None:
    assert not result.is_error, result
    value = result.structured_content
    assert value is not None
    assert [entry["name"] for entry in value["files"]] == ESCAPED_NAMES
    assert [entry["size"] for entry in value["files"]] == [len("content 0")] * 6
    assert value["result"] == RETURNED
    assert value["logs"] == LOGS
    [block] = result.content
    assert isinstance(block, TextContent)
    assert RAW.search(block.text) is None, ascii(block.text)
    for name in ESCAPED_NAMES:
        assert f"\n- {name} (9 bytes, " in block.text
    assert block.text.startswith("\n".join(LOGS) + "\n")


@asynccontextmanager
async def over_http(url: str) -> AsyncIterator[Client]:
    timeout = httpx2.Timeout(30.0, read=120.0)
    async with (httpx2.AsyncClient(timeout=timeout) as http,
                Client(streamable_http_client(url, http_client=http)) as client):
        yield client


async def run_program(client: Client) -> Any:
    """The program's result; a reply that never comes fails the test in bounded time."""
    async with asyncio.timeout(60):
        return await client.call_tool("run_code", {"description": "hostile names",
                                                   "code": PROGRAM})


async def test_hostile_names_and_text_arrive_escaped_over_stdio(tmp_path: Path) -> None:
    params = stdio_params(tmp_path / "facts", "--mode", "code")
    async with Client(stdio_client(params)) as client:
        result = await run_program(client)
    check(result)


async def test_hostile_names_and_text_arrive_escaped_over_http(tmp_path: Path) -> None:
    with http_serve(tmp_path / "facts", "--http", "127.0.0.1:0", "--mode", "code") as server:
        async with over_http(server.url) as client:
            result = await run_program(client)
    check(result)
